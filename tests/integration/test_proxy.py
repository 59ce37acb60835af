"""Integration tests of `cordon serve`: the proxy, the admin API and the audit log, driven
with curl and raw Python sockets on loopback only.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_proxy   (from tests/integration)

Names resolve through a fake DNS server the tests start (a.test, b.test, raw.test,
private.test, down.test, self.test -> 127.0.0.1) or /etc/hosts (localhost); the machine's
resolver is never used. One cordon per test class, a fresh session per test.

Ambiguities of the contract and how they are resolved are marked "AMBIGUITY:" below.
"""

import datetime
import hashlib
import json
import os
import re
import select
import signal
import socket
import ssl
import threading
import time
import unittest
import uuid

import harness as H
from harness import KiB, MiB

# Module fixtures: origins and the fake DNS, shared by every class (started once).
HTTP = TLS = ECHO = EOFR = SINK = DNS = None
DEAD_PORT = None


def setUpModule():
    global HTTP, TLS, ECHO, EOFR, SINK, DNS, DEAD_PORT
    H.test_cert()
    HTTP = H.HTTPOrigin()
    TLS = H.TLSOrigin()
    ECHO = H.EchoOrigin("echo")
    EOFR = H.EchoOrigin("eof_reply")
    SINK = H.EchoOrigin("sink")
    DEAD_PORT = H.free_port()
    loop = {"A": ["127.0.0.1"]}
    DNS = H.FakeDNS({"a.test": loop, "b.test": loop, "raw.test": loop,
                     "private.test": loop, "down.test": loop, "self.test": loop})


def tearDownModule():
    for o in (HTTP, TLS, ECHO, EOFR, SINK, DNS):
        if o is not None:
            o.stop()


def jobs_yaml(include_raw=True, extra_web_rules="", raw_resolves_to="[127.0.0.0/8]",
              localhost_methods="[GET, POST, HEAD]"):
    """The `jobs:` mapping of the test policy."""
    raw = (f"      - {{ host: raw.test, ports: [{ECHO.port}, {EOFR.port}, {SINK.port}], "
           f"protocol: tcp, resolves_to: {raw_resolves_to} }}\n") if include_raw else ""
    return (
        "  web:\n"
        "    task: integration tests of the proxy\n"
        "    egress:\n"
        f"      - {{ host: a.test, ports: [{TLS.port}], resolves_to: [127.0.0.0/8] }}\n"
        f"      - {{ host: b.test, ports: [{TLS.port}], resolves_to: [127.0.0.0/8] }}\n"
        f"      - {{ host: localhost, ports: [{HTTP.port}], protocol: http, "
        f"methods: {localhost_methods}, resolves_to: [127.0.0.0/8, \"::1/128\"] }}\n"
        + raw +
        f"      - {{ host: private.test, ports: [{ECHO.port}], protocol: tcp }}\n"
        f"      - {{ host: down.test, ports: [{DEAD_PORT}], protocol: tcp, "
        f"resolves_to: [127.0.0.0/8] }}\n"
        + extra_web_rules +
        "    identity: { ttl: 30m }\n"
        "  limited:\n"
        "    task: integration tests of per-session limits\n"
        "    egress:\n"
        f"      - {{ host: raw.test, ports: [{ECHO.port}, {SINK.port}], protocol: tcp, "
        f"resolves_to: [127.0.0.0/8] }}\n"
        "    limits: { max_tunnels: 2, max_bytes_up: 64KiB }\n"
        "    identity: { ttl: 30m }\n")


N_JOBS = 2
N_RULES = 7  # web 6 + limited 1 (with include_raw)


def marker(prefix):
    return f"/{prefix}-{uuid.uuid4().hex[:12]}"


def http_req(method, url, auth=None, headers=(), body=b"", host="auto", version="HTTP/1.1"):
    """An absolute-form (or any-form) request as bytes."""
    lines = [f"{method} {url} {version}"]
    if host == "auto":
        netloc = url.split("://", 1)[1].split("/", 1)[0] if "://" in url else ""
        lines.append(f"Host: {netloc}")
    elif host:
        lines.append(f"Host: {host}")
    if auth:
        lines.append(f"Proxy-Authorization: {auth}")
    for k, v in headers:
        lines.append(f"{k}: {v}")
    if body and not any(k.lower() in ("content-length", "transfer-encoding")
                        for k, _ in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def parse_ts(ts):
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))


class CordonTestCase(unittest.TestCase):
    """One cordon per class; a fresh `web` session per test in self.session."""

    proxy_opts = {"header_timeout": "5s", "idle_timeout": "60s", "handshake_timeout": "5s",
                  "connect_timeout": "5s", "max_header_bytes": "8KiB"}
    start_cordon = True
    extra_web_rules = ""  # egress rules added to the web job (a subclass's own origins)

    @classmethod
    def setUpClass(cls):
        if not cls.start_cordon:
            return
        cls.cordon = H.Cordon(jobs_yaml(extra_web_rules=cls.extra_web_rules), DNS.port,
                              cls.proxy_opts)
        try:
            cls.cordon.start()
        except BaseException:
            cls.cordon.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        if not cls.start_cordon:
            return
        rc, dt = cls.cordon.stop()
        err = cls.cordon.stderr_text()
        cls.cordon.cleanup()
        if rc != 0:
            raise AssertionError(f"cordon serve exited {rc} on SIGTERM after {dt:.1f}s; "
                                 f"stderr tail:\n{err}")

    def setUp(self):
        self._conns = []
        if self.start_cordon:
            self.assertTrue(self.cordon.alive(),
                            "cordon is not running:\n" + self.cordon.stderr_text())
            self.session = self.cordon.create_session("web")

    def tearDown(self):
        for c in self._conns:
            c.close()

    # helpers ----------------------------------------------------------------------------

    @property
    def auth(self):
        return H.basic(self.session["id"], self.session["token"])

    def conn(self, timeout=10):
        c = self.cordon.conn(timeout)
        self._conns.append(c)
        return c

    def tunnel(self, host_port, session=None, token=None, timeout=10):
        session = session or self.session
        c = self.conn(timeout)
        c.send(H.connect_request(host_port, H.basic(session["id"], token or session["token"])))
        return c, c.read_response(timeout, method="CONNECT")

    def open_tunnel(self, host_port, session=None, token=None):
        c, r = self.tunnel(host_port, session, token)
        self.assertEqual(r.status, 200, f"CONNECT {host_port}: {r}")
        return c

    def request(self, data, timeout=10, method="GET"):
        c = self.conn(timeout)
        c.send(data)
        return c, c.read_response(timeout, method=method)

    def echo(self, c, payload, timeout=10):
        c.send(payload)
        self.assertEqual(c.recv_exact(len(payload), timeout), payload)

    def assertDenied(self, r, status, reason, target=None, job="web"):
        """A denial: status, X-Cordon-Deny, JSON body {reason, job, target, message}."""
        self.assertEqual(r.status, status, f"{r}")
        self.assertEqual(r.header("X-Cordon-Deny"), reason, f"{r}")
        try:
            body = r.json()
        except ValueError:
            self.fail(f"denial body is not JSON: {r}")
        self.assertEqual(body.get("reason"), reason, body)
        if job is not None:
            self.assertEqual(body.get("job"), job, body)
        if target is not None:
            self.assertEqual(body.get("target"), target, body)
        self.assertIsInstance(body.get("message"), str, body)
        self.assertTrue(body.get("message"), body)
        return body

    def assertClosed(self, c, timeout=3, allow_bytes=False):
        closed, extra = c.wait_closed(timeout)
        self.assertTrue(closed, f"connection still open after {timeout}s")
        if not allow_bytes:
            self.assertEqual(extra, b"", "bytes after the response on a closed connection")
        return extra

    def assertClosedCount(self, status, js, n):
        """A kill/revoke answer: 200 with connections_closed == n. Extra fields (ids, timing)
        are allowed: the contract names only connections_closed."""
        self.assertEqual(status, 200, js)
        self.assertIsInstance(js, dict, js)
        self.assertEqual(js.get("connections_closed"), n, js)

    def assertRSSBelow(self, sampler, mb):
        self.assertGreater(sampler.max_kb, 0, "could not read VmRSS")
        self.assertLess(sampler.max_kb, mb * 1024,
                        f"cordon VmRSS peaked at {sampler.max_kb / 1024:.0f} MB")

    def session_events(self, event, session=None, count=1, timeout=5, **match):
        sid = (session or self.session)["id"]

        def pred(e):
            return (e.get("event") == event and e.get("session") == sid
                    and all(e.get(k) == v for k, v in match.items()))
        return self.cordon.wait_events(pred, count, timeout)


# ======================================================================================
# Admin API
# ======================================================================================

class AdminAPITests(CordonTestCase):

    def assertJSONError(self, status, hdrs, raw, want):
        self.assertEqual(status, want, raw)
        self.assertIn("json", hdrs.get("content-type", ""), hdrs)
        js = json.loads(raw)
        self.assertIsInstance(js.get("error"), str, js)
        self.assertTrue(js["error"], js)

    def test_malformed_admin_request_is_400_json(self):
        with socket.create_connection(self.cordon.admin_addr, timeout=5) as s:
            s.sendall(b"GET /v1/status HTTP/1.1\r\nBad Header\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"}\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 400 "), data)
        self.assertIn(b"application/json", head, data)
        self.assertEqual(json.loads(body), {"error": "malformed request: bad field"})

    def test_admin_body_framed_two_ways_is_400(self):
        # Transfer-Encoding: xchunked with a Content-Length was read by the length and acted
        # on (issue 18); RFC 9112 6.3: 400, and nothing done.
        before = self.cordon.status()["sessions_active"]
        body = b'{"job": "web"}'
        for te in ("xchunked", "chunked", "identity", "chunked, chunked"):
            with self.subTest(te=te):
                with socket.create_connection(self.cordon.admin_addr, timeout=5) as s:
                    s.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: admin\r\n"
                              b"Authorization: Bearer " + self.cordon.admin_token.encode() +
                              b"\r\nContent-Type: application/json\r\n"
                              b"Transfer-Encoding: " + te.encode() + b"\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(body) + body)
                    data = b""
                    while not data.endswith(b"}\n"):
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                head, _, rest = data.partition(b"\r\n\r\n")
                self.assertTrue(head.startswith(b"HTTP/1.1 400 "), data)
                self.assertIn("malformed request", json.loads(rest)["error"])
        self.assertEqual(self.cordon.status()["sessions_active"], before)

    def test_healthz_needs_no_token(self):
        status, js = self.cordon.admin("GET", "/healthz", token=None)
        self.assertEqual((status, js), (200, {"status": "ok"}))

    def test_missing_or_wrong_bearer_is_401_json(self):
        wrong = "0" * len(self.cordon.admin_token)
        cases = [("GET", "/v1/status", None), ("GET", "/v1/sessions", None),
                 ("POST", "/v1/sessions", {"job": "web"}),
                 ("GET", f"/v1/sessions/{self.session['id']}", None),
                 ("DELETE", f"/v1/sessions/{self.session['id']}", None),
                 ("POST", f"/v1/sessions/{self.session['id']}/tokens", {}),
                 ("POST", "/v1/reload", None)]
        for method, path, body in cases:
            for label, token, headers in [
                    ("none", None, None),
                    ("wrong", wrong, None),
                    ("prefix", self.cordon.admin_token[:-1], None),
                    ("longer", self.cordon.admin_token + "0", None),
                    ("basic scheme", None, {"Authorization": "Basic " + self.cordon.admin_token}),
            ]:
                with self.subTest(method=method, path=path, auth=label):
                    status, hdrs, raw = self.cordon.admin_raw(method, path, body, token=token,
                                                              headers=headers)
                    self.assertJSONError(status, hdrs, raw, 401)
        # None of this may have changed anything: the session still works.
        status, js = self.cordon.admin("GET", f"/v1/sessions/{self.session['id']}")
        self.assertEqual(status, 200, js)
        self.assertFalse(any(t["revoked"] for t in js["tokens"]), js)

    def test_unknown_path_is_404_json(self):
        for path in ["/v1/nope", "/v2/status", "/", "/v1/sessions/x/y/z/w"]:
            with self.subTest(path=path):
                self.assertJSONError(*self.cordon.admin_raw("GET", path), 404)

    def test_status_fields(self):
        status, js = self.cordon.admin("GET", "/v1/status")
        self.assertEqual(status, 200, js)
        self.assertIsInstance(js["sessions_active"], int)
        self.assertGreaterEqual(js["sessions_active"], 1)  # this test's session
        self.assertIsInstance(js["connections"], int)
        self.assertIs(js["audit"]["healthy"], True, js)
        self.assertEqual(js["policy"]["jobs"], N_JOBS, js)
        self.assertEqual(js["policy"]["rules"], N_RULES, js)
        self.assertEqual(os.path.realpath(js["policy"]["source"]),
                         os.path.realpath(self.cordon.config_path), js)

    def test_sessions_active_follows_create_and_delete(self):
        before = self.cordon.status()["sessions_active"]
        s = self.cordon.create_session("web")
        self.assertEqual(self.cordon.status()["sessions_active"], before + 1)
        self.assertEqual(self.cordon.admin("DELETE", f"/v1/sessions/{s['id']}")[0], 200)
        self.assertEqual(self.cordon.status()["sessions_active"], before)

    def test_create_session_fields(self):
        t0 = datetime.datetime.now(datetime.timezone.utc)
        status, js = self.cordon.admin("POST", "/v1/sessions", {"job": "web", "ttl": "10m"})
        self.assertEqual(status, 201, js)
        self.cordon.secrets.append(js.get("token", ""))
        for k in ("id", "token", "token_id", "expires_at", "proxy_url"):
            self.assertIsInstance(js.get(k), str, f"{k} in {js}")
            self.assertTrue(js[k], f"{k} empty in {js}")
        host, port = self.cordon.proxy_addr
        self.assertEqual(js["proxy_url"], f"http://{js['id']}:{js['token']}@{host}:{port}")
        exp = parse_ts(js["expires_at"])
        self.assertIsNotNone(exp.tzinfo, "expires_at must carry a zone (RFC 3339)")
        delta = (exp - t0).total_seconds()
        self.assertTrue(540 <= delta <= 660, f"expires_at {js['expires_at']} is {delta}s away")
        # The token works at once.
        c, r = self.tunnel(f"raw.test:{ECHO.port}", session=js)
        self.assertEqual(r.status, 200, r)

    def test_create_session_default_ttl_is_the_jobs(self):
        t0 = datetime.datetime.now(datetime.timezone.utc)
        s = self.cordon.create_session("web")
        delta = (parse_ts(s["expires_at"]) - t0).total_seconds()
        self.assertTrue(1740 <= delta <= 1860, f"default ttl should be 30m; got {delta}s")

    def test_create_session_unknown_job_404(self):
        self.assertJSONError(*self.cordon.admin_raw("POST", "/v1/sessions",
                                                    {"job": "no-such-job"}), 404)

    def test_create_session_bad_request_400(self):
        # AMBIGUITY: only "longer than identity.ttl" and "unparsable" are specified; a missing
        # job, a non-string job and a body that is not JSON are also required to be 400, and
        # so is a bare number (600): a ttl is a duration string <n><unit>, as in the policy.
        for body in [{"job": "web", "ttl": "2h"}, {"job": "web", "ttl": "31m"},
                     {"job": "web", "ttl": "banana"}, {"job": "web", "ttl": ""},
                     {"job": "web", "ttl": "-5m"}, {"job": "web", "ttl": 600},
                     {}, {"job": 5}, "not json", "[1,2]"]:
            with self.subTest(body=body):
                self.assertJSONError(*self.cordon.admin_raw("POST", "/v1/sessions", body), 400)

    def test_list_sessions_never_shows_secrets(self):
        status, hdrs, raw = self.cordon.admin_raw("GET", "/v1/sessions")
        self.assertEqual(status, 200, raw)
        js = json.loads(raw)
        ids = [s.get("id") for s in js["sessions"]]
        self.assertIn(self.session["id"], ids)
        text = raw.decode()
        for secret in self.cordon.secrets:
            if secret:
                self.assertNotIn(secret, text)
        mine = next(s for s in js["sessions"] if s["id"] == self.session["id"])
        self.assertEqual(mine.get("job"), "web", mine)

    def test_get_session(self):
        status, hdrs, raw = self.cordon.admin_raw("GET", f"/v1/sessions/{self.session['id']}")
        self.assertEqual(status, 200, raw)
        self.assertNotIn(self.session["token"], raw.decode())
        js = json.loads(raw)
        self.assertEqual(js["id"], self.session["id"])
        self.assertEqual(js.get("job"), "web", js)
        self.assertEqual(len(js["tokens"]), 1, js)
        tok = js["tokens"][0]
        self.assertEqual(tok["id"], self.session["token_id"])
        self.assertIs(tok["revoked"], False)
        self.assertEqual(parse_ts(tok["expires_at"]), parse_ts(self.session["expires_at"]))

    def test_get_unknown_session_404(self):
        self.assertJSONError(*self.cordon.admin_raw("GET", "/v1/sessions/s-0000000000000000"),
                             404)

    def test_delete_session_stops_its_tokens(self):
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertEqual(r.status, 200)
        self.echo(c, b"before")
        c.close()
        # Wait until the closed tunnel is gone so connections_closed is exactly 0.
        H.wait_until(lambda: self.cordon.status()["connections"] == 0, 3)
        status, js = self.cordon.admin("DELETE", f"/v1/sessions/{self.session['id']}")
        self.assertClosedCount(status, js, 0)
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertEqual(r.status, 407, r)
        self.assertEqual(r.header("Proxy-Authenticate"), 'Basic realm="cordon"')
        # AMBIGUITY: the X-Cordon-Deny of an ended session's token is not fixed by the
        # contract; accept any of these.
        self.assertIn(r.header("X-Cordon-Deny"), ("auth", "session_ended", "token_revoked"))
        status, js = self.cordon.admin("GET", f"/v1/sessions/{self.session['id']}")
        self.assertEqual(status, 200, js)
        self.assertTrue(all(t["revoked"] for t in js["tokens"]), js)

    def test_delete_unknown_session_404(self):
        self.assertJSONError(*self.cordon.admin_raw("DELETE", "/v1/sessions/s-0000000000000000"),
                             404)

    def test_mint_and_revoke_token(self):
        sid = self.session["id"]
        status, js = self.cordon.admin("POST", f"/v1/sessions/{sid}/tokens", {"ttl": "5m"})
        self.assertEqual(status, 201, js)
        self.cordon.secrets.append(js.get("token", ""))
        for k in ("token", "token_id", "expires_at", "proxy_url"):
            self.assertTrue(js.get(k), f"{k} in {js}")
        self.assertNotEqual(js["token_id"], self.session["token_id"])
        self.assertNotEqual(js["token"], self.session["token"])
        host, port = self.cordon.proxy_addr
        self.assertEqual(js["proxy_url"], f"http://{sid}:{js['token']}@{host}:{port}")
        new = js
        # Both tokens work.
        for tok in (self.session["token"], new["token"]):
            c, r = self.tunnel(f"raw.test:{ECHO.port}", token=tok)
            self.assertEqual(r.status, 200, r)
            c.close()
        H.wait_until(lambda: self.cordon.status()["connections"] == 0, 3)
        status, js = self.cordon.admin("DELETE", f"/v1/sessions/{sid}/tokens/{new['token_id']}")
        self.assertClosedCount(status, js, 0)
        c, r = self.tunnel(f"raw.test:{ECHO.port}", token=new["token"])
        self.assertEqual(r.status, 407, r)
        self.assertIn(r.header("X-Cordon-Deny"), ("auth", "token_revoked"))
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertEqual(r.status, 200, r)
        status, js = self.cordon.admin("GET", f"/v1/sessions/{sid}")
        revoked = {t["id"]: t["revoked"] for t in js["tokens"]}
        self.assertEqual(revoked, {self.session["token_id"]: False, new["token_id"]: True})

    def test_mint_token_bad_ttl_400_unknown_session_404(self):
        sid = self.session["id"]
        self.assertJSONError(*self.cordon.admin_raw("POST", f"/v1/sessions/{sid}/tokens",
                                                    {"ttl": "2h"}), 400)
        self.assertJSONError(*self.cordon.admin_raw("POST", f"/v1/sessions/{sid}/tokens",
                                                    {"ttl": "x"}), 400)
        self.assertJSONError(*self.cordon.admin_raw(
            "POST", "/v1/sessions/s-0000000000000000/tokens", {}), 404)

    def test_revoke_unknown_token_404(self):
        sid = self.session["id"]
        self.assertJSONError(*self.cordon.admin_raw(
            "DELETE", f"/v1/sessions/{sid}/tokens/t-000000000000"), 404)
        self.assertJSONError(*self.cordon.admin_raw(
            "DELETE", f"/v1/sessions/s-0000000000000000/tokens/{self.session['token_id']}"), 404)


# ======================================================================================
# Proxy authentication
# ======================================================================================

class ProxyAuthTests(CordonTestCase):

    def assertAuthRequired(self, r):
        self.assertEqual(r.status, 407, r)
        self.assertEqual(r.header("Proxy-Authenticate"), 'Basic realm="cordon"', r)
        self.assertEqual(r.header("X-Cordon-Deny"), "auth", r)

    def test_connect_without_credentials_407(self):
        c = self.conn()
        c.send(H.connect_request(f"raw.test:{ECHO.port}"))
        r = c.read_response(method="CONNECT")
        self.assertAuthRequired(r)
        self.assertEqual(r.json().get("reason"), "auth")
        self.assertClosed(c)

    def test_plain_http_without_credentials_407_origin_untouched(self):
        m = marker("noauth")
        n_req, n_conn = HTTP.snapshot()
        c, r = self.request(http_req("GET", f"http://localhost:{HTTP.port}{m}"))
        self.assertAuthRequired(r)
        self.assertClosed(c)
        self.assertEqual(HTTP.snapshot(), (n_req, n_conn))

    def test_bad_credentials_407(self):
        other = self.cordon.create_session("web")
        sid, tok = self.session["id"], self.session["token"]
        cases = {
            "wrong token": H.basic(sid, "0" * len(tok)),
            "token of another session": H.basic(sid, other["token"]),
            "unknown session": H.basic("s-0000000000000000", tok),
            "empty password": H.basic(sid, ""),
            "no colon": "Basic " + __import__("base64").b64encode(sid.encode()).decode(),
            "not base64": "Basic !!!not-base64!!!",
            "bearer scheme": f"Bearer {tok}",
            "token as user": H.basic(tok, sid),
        }
        for label, auth in cases.items():
            with self.subTest(label):
                c = self.conn()
                c.send(H.connect_request(f"raw.test:{ECHO.port}", auth))
                self.assertAuthRequired(c.read_response(method="CONNECT"))
                self.assertClosed(c)

    def test_proxy_authorization_never_forwarded(self):
        m = marker("pa")
        p = H.run_curl(["-sS", "-x", self.cordon.proxy_url(self.session),
                        "-H", "Proxy-Connection: keep-alive",
                        f"http://localhost:{HTTP.port}{m}"])
        self.assertEqual(p.returncode, 0, p.stderr)
        c, r = self.request(http_req("GET", f"http://localhost:{HTTP.port}{m}?raw=1",
                                     auth=self.auth))
        self.assertEqual(r.status, 200, r)
        recs = HTTP.requests_matching(m)
        self.assertEqual(len(recs), 2, recs)
        for rec in recs:
            self.assertEqual(H.header_values(rec["headers"], "Proxy-Authorization"), [])
            self.assertEqual(H.header_values(rec["headers"], "Proxy-Connection"), [])
            for k, v in rec["headers"]:
                self.assertNotIn(self.session["token"], v, k)

    @unittest.skip("token expiry: identity.ttl and session ttl are at least 1m, too long for "
                   "this suite; expiry is covered by the session registry's unit tests with "
                   "a fake clock")
    def test_expired_token_407_token_expired(self):
        pass


# ======================================================================================
# CONNECT
# ======================================================================================

class ConnectTests(CordonTestCase):

    def test_curl_https_through_proxy(self):
        cert, _ = H.test_cert()
        p = H.run_curl(["-sS", "--proxy", self.cordon.proxy_url(self.session),
                        "--cacert", cert, "-w", "\n%{http_connect} %{http_code}",
                        f"https://a.test:{TLS.port}/hello"])
        self.assertEqual(p.returncode, 0, p.stderr)
        body, _, codes = p.stdout.decode().rpartition("\n")
        self.assertEqual(codes, "200 200")
        self.assertEqual(body, "tls-origin sni=a.test path=/hello\n")

    def test_curl_https_proxy_env_var(self):
        cert, _ = H.test_cert()
        p = H.run_curl(["-sS", "--cacert", cert, f"https://a.test:{TLS.port}/env"],
                       env_extra={"HTTPS_PROXY": self.cordon.proxy_url(self.session)})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, b"tls-origin sni=a.test path=/env\n")

    def test_python_ssl_through_tunnel(self):
        c = self.open_tunnel(f"a.test:{TLS.port}")
        self.assertEqual(c.buf, b"")
        s = H.client_ssl_context().wrap_socket(c.sock, server_hostname="a.test")
        self.addCleanup(s.close)
        s.sendall(b"GET /py HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        data = b""
        for _ in range(100):
            d = s.recv(65536)
            if not d:
                break
            data += d
        self.assertTrue(data.startswith(b"HTTP/1.1 200 OK"), data)
        self.assertTrue(data.endswith(b"tls-origin sni=a.test path=/py\n"), data)
        self.assertIn("a.test", DNS.names_queried(), "cordon did not resolve via the test DNS")

    def test_raw_tcp_relays_1mib_exactly_and_audits_bytes(self):
        c = self.open_tunnel(f"raw.test:{ECHO.port}")
        payload = os.urandom(MiB)
        errors = []

        def sender():
            try:
                for i in range(0, len(payload), 16 * KiB):
                    c.sock.sendall(payload[i:i + 16 * KiB])
            except OSError as e:
                errors.append(e)
        t = threading.Thread(target=sender)
        t.start()
        got = c.recv_exact(len(payload), timeout=20)
        t.join(20)
        self.assertEqual(errors, [])
        self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(payload).hexdigest())
        c.close()
        ev = self.session_events("conn.close")
        self.assertEqual(len(ev), 1, ev)
        self.assertEqual(ev[0].get("bytes_up"), MiB, ev[0])
        self.assertEqual(ev[0].get("bytes_down"), MiB, ev[0])
        self.assertEqual(ev[0].get("job"), "web", ev[0])
        self.assertIsInstance(ev[0].get("duration_ms"), int, ev[0])
        self.assertEqual(ev[0].get("target"), f"raw.test:{ECHO.port}", ev[0])

    def test_half_close_reply_after_eof(self):
        c = self.open_tunnel(f"raw.test:{EOFR.port}")
        c.send(b"x" * 10000)
        c.sock.shutdown(socket.SHUT_WR)
        closed, data = c.wait_closed(5)
        self.assertTrue(closed, "no EOF from the origin after its reply")
        self.assertEqual(data, b"got 10000 bytes\n")

    def test_deny_no_rule(self):
        c, r = self.tunnel("denied.test:443")
        self.assertDenied(r, 403, "no_rule", "denied.test:443")
        self.assertClosed(c)

    def test_deny_port(self):
        c, r = self.tunnel(f"a.test:{DEAD_PORT}")
        self.assertDenied(r, 403, "port", f"a.test:{DEAD_PORT}")
        self.assertClosed(c)

    def test_deny_protocol_connect_to_http_rule(self):
        c, r = self.tunnel(f"localhost:{HTTP.port}")
        self.assertDenied(r, 403, "protocol", f"localhost:{HTTP.port}")
        self.assertClosed(c)

    def test_deny_private_address_of_name(self):
        n = ECHO.snapshot()
        c, r = self.tunnel(f"private.test:{ECHO.port}")
        self.assertDenied(r, 403, "private_address", f"private.test:{ECHO.port}")
        self.assertClosed(c)
        self.assertEqual(ECHO.snapshot(), n, "cordon connected to a refused address")

    def test_deny_ip_literal_private_address(self):
        n = ECHO.snapshot()
        for target in [f"127.0.0.1:{ECHO.port}", f"[::1]:{ECHO.port}",
                       f"[::ffff:127.0.0.1]:{ECHO.port}"]:
            with self.subTest(target=target):
                c, r = self.tunnel(target)
                self.assertEqual(r.status, 403, r)
                self.assertEqual(r.header("X-Cordon-Deny"), "private_address", r)
                self.assertClosed(c)
        self.assertEqual(ECHO.snapshot(), n)

    def test_deny_non_canonical_ip_literal_bad_request(self):
        # AMBIGUITY: the contract allows 400 or 403 here; X-Cordon-Deny must be bad_request.
        for host in ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "127.0.0.1."]:
            with self.subTest(host=host):
                c, r = self.tunnel(f"{host}:{ECHO.port}")
                self.assertIn(r.status, (400, 403), r)
                self.assertEqual(r.header("X-Cordon-Deny"), "bad_request", r)
                self.assertClosed(c)

    def test_denied_connect_closes_and_ignores_pipelined_request(self):
        m = marker("pipelined")
        n_req, _ = HTTP.snapshot()
        c = self.conn()
        c.send(H.connect_request("denied.test:443", self.auth)
               + http_req("GET", f"http://localhost:{HTTP.port}{m}", auth=self.auth))
        r = c.read_response(method="CONNECT")
        self.assertDenied(r, 403, "no_rule", "denied.test:443")
        self.assertClosed(c)  # and no second response
        time.sleep(0.2)
        self.assertEqual(HTTP.requests_matching(m), [])

    def test_sni_mismatch_closes_tunnel_origin_gets_nothing(self):
        n = TLS.snapshot()
        c = self.open_tunnel(f"a.test:{TLS.port}")
        ctx = H.client_ssl_context()
        c.sock.settimeout(5)
        t0 = time.monotonic()
        with self.assertRaises((ssl.SSLError, OSError)):
            s = ctx.wrap_socket(c.sock, server_hostname="b.test")  # b.test is allowed too
            s.sendall(b"GET /sni HTTP/1.1\r\nHost: b.test\r\n\r\n")
            s.recv(100) or (_ for _ in ()).throw(OSError("EOF"))
        self.assertLess(time.monotonic() - t0, 4, "tunnel not closed promptly")
        time.sleep(0.3)
        for rec in TLS.conns_since(n):
            self.assertFalse(rec["got_bytes"], f"TLS origin received bytes: {rec}")
        # AMBIGUITY: the contract lists conn.deny for denials; after a 200 the closure may be
        # logged as conn.deny or conn.close; either must carry reason sni_mismatch.
        ev = self.cordon.wait_events(
            lambda e: e.get("session") == self.session["id"]
            and e.get("event") in ("conn.deny", "conn.close")
            and e.get("reason") == "sni_mismatch")
        self.assertTrue(ev, "no audit event with reason sni_mismatch")

    def test_no_sni_closes_tunnel(self):
        n = TLS.snapshot()
        c = self.open_tunnel(f"a.test:{TLS.port}")
        ctx = H.client_ssl_context()
        ctx.check_hostname = False
        c.sock.settimeout(5)
        with self.assertRaises((ssl.SSLError, OSError)):
            s = ctx.wrap_socket(c.sock, server_hostname=None)  # no SNI extension
            s.sendall(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
            s.recv(100) or (_ for _ in ()).throw(OSError("EOF"))
        time.sleep(0.3)
        for rec in TLS.conns_since(n):
            self.assertFalse(rec["got_bytes"], f"TLS origin received bytes: {rec}")

    def test_non_tls_bytes_on_tls_rule_closed(self):
        n = TLS.snapshot()
        c = self.open_tunnel(f"a.test:{TLS.port}")
        c.send(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        self.assertClosed(c)
        time.sleep(0.2)
        for rec in TLS.conns_since(n):
            self.assertFalse(rec["got_bytes"], f"TLS origin received bytes: {rec}")

    def test_upstream_down_502(self):
        c, r = self.tunnel(f"down.test:{DEAD_PORT}")
        self.assertEqual(r.status, 502, r)
        self.assertIsInstance(r.json().get("error"), str)
        self.assertClosed(c)

    def test_denials_are_audited(self):
        self.tunnel("denied.test:443")
        self.tunnel(f"a.test:{DEAD_PORT}")
        self.tunnel(f"private.test:{ECHO.port}")
        for reason, target in [("no_rule", "denied.test:443"), ("port", f"a.test:{DEAD_PORT}"),
                               ("private_address", f"private.test:{ECHO.port}")]:
            with self.subTest(reason=reason):
                ev = self.session_events("conn.deny", reason=reason)
                self.assertEqual(len(ev), 1, ev)
                self.assertEqual(ev[0].get("target"), target, ev[0])
                self.assertEqual(ev[0].get("job"), "web", ev[0])


# ======================================================================================
# Plain HTTP forwarding
# ======================================================================================

class HTTPForwardTests(CordonTestCase):

    def test_curl_plain_http(self):
        m = marker("curl")
        p = H.run_curl(["-sS", "-x", self.cordon.proxy_url(self.session), "-w", "\n%{http_code}",
                        f"http://localhost:{HTTP.port}{m}?q=1&r=two"])
        self.assertEqual(p.returncode, 0, p.stderr)
        body, _, code = p.stdout.decode().rpartition("\n")
        self.assertEqual(code, "200")
        self.assertEqual(json.loads(body)["path"], f"{m}?q=1&r=two")
        recs = HTTP.requests_matching(m)
        self.assertEqual(len(recs), 1)
        rec = recs[0]
        self.assertEqual(rec["path"], f"{m}?q=1&r=two")  # origin-form
        self.assertEqual(H.header_values(rec["headers"], "Host"), [f"localhost:{HTTP.port}"])
        self.assertEqual(H.header_values(rec["headers"], "Proxy-Authorization"), [])
        self.assertEqual(H.header_values(rec["headers"], "Proxy-Connection"), [])

    def test_hop_by_hop_headers_stripped(self):
        m = marker("hop")
        c, r = self.request(http_req("GET", f"http://localhost:{HTTP.port}{m}", auth=self.auth,
                                     headers=[("Proxy-Connection", "keep-alive"),
                                              ("Connection", "keep-alive, X-Hop-A"),
                                              ("X-Hop-A", "1"),
                                              ("Keep-Alive", "timeout=5"),
                                              ("TE", "trailers"),
                                              ("Trailer", "X-T"),
                                              ("Upgrade", "h2c"),
                                              ("X-End-To-End", "kept")]))
        self.assertEqual(r.status, 200, r)
        rec = HTTP.requests_matching(m)[0]
        hs = rec["headers"]
        self.assertEqual(H.header_values(hs, "X-End-To-End"), ["kept"])
        for name in ["Proxy-Authorization", "Proxy-Connection", "X-Hop-A", "Keep-Alive", "TE",
                     "Trailer", "Upgrade"]:
            self.assertEqual(H.header_values(hs, name), [], f"{name} forwarded: {hs}")
        for v in H.header_values(hs, "Connection"):
            self.assertNotIn("x-hop-a", v.lower(), hs)

    def test_response_relayed(self):
        m = marker("resp")
        c, r = self.request(http_req("GET", f"http://localhost:{HTTP.port}{m}", auth=self.auth))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("Content-Type"), "application/json")
        self.assertEqual(r.json(), {"origin": "http", "method": "GET", "path": m})

    def test_head_request(self):
        m = marker("head")
        c, r = self.request(http_req("HEAD", f"http://localhost:{HTTP.port}{m}", auth=self.auth),
                            method="HEAD")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body, b"")
        self.assertEqual(len(HTTP.requests_matching(m)), 1)

    def test_head_of_a_chunked_resource_keeps_the_connection_in_step(self):
        # A HEAD answer announcing chunked framing has no body: nothing may follow it, or
        # the next response on the kept-alive connection is read from the wrong place.
        c, r = self.request(http_req("HEAD", f"http://localhost:{HTTP.port}/chunked",
                                     auth=self.auth), method="HEAD")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("Transfer-Encoding"), "chunked")
        m = marker("after-head")
        c.send(http_req("GET", f"http://localhost:{HTTP.port}{m}", auth=self.auth))
        r2 = c.read_response(10)
        self.assertEqual(r2.status, 200, r2)
        self.assertEqual(r2.json()["path"], m)

    def test_post_body_exact(self):
        m = marker("post")
        body = os.urandom(12345)
        c, r = self.request(http_req("POST", f"http://localhost:{HTTP.port}{m}", auth=self.auth,
                                     body=body))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["bytes"], len(body))
        rec = HTTP.requests_matching(m)[0]
        self.assertEqual(rec["body_head"], body)

    def test_expect_100_continue(self):
        # curl sends `Expect: 100-continue` for bodies over 1 MiB. The client must get an
        # interim 100 (relayed from the origin or made by cordon) before it sends the body,
        # then exactly one final response.
        m = marker("expect")
        body = os.urandom(5000)
        c = self.conn()
        c.send(http_req("POST", f"http://localhost:{HTTP.port}{m}", auth=self.auth,
                        headers=[("Content-Length", str(len(body))),
                                 ("Expect", "100-continue")]))
        try:
            r = c.read_response(timeout=3)
        except socket.timeout:
            r = None
        if r is None:
            self.fail("no interim 100 Continue within 3s of a request with Expect: 100-continue")
        self.assertEqual(r.status, 100, r)
        c.send(body)
        r = c.read_response(timeout=5)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["bytes"], len(body))
        # Still usable afterwards (keep-alive).
        c.send(http_req("GET", f"http://localhost:{HTTP.port}{m}/after", auth=self.auth))
        self.assertEqual(c.read_response().status, 200)

    def test_chunked_response_relayed(self):
        m = marker("chunked")
        c, r = self.request(http_req("GET", f"http://localhost:{HTTP.port}/chunked?parts=7&"
                                     f"size=3001&m={m[1:]}", auth=self.auth))
        self.assertEqual(r.status, 200, r)
        expect = b"".join(bytes([65 + i]) * 3001 for i in range(7))
        self.assertEqual(r.body, expect)

    def test_interim_1xx_relayed_before_final(self):
        c = self.conn()
        c.send(http_req("GET", f"http://localhost:{HTTP.port}/early-hints", auth=self.auth))
        raw = b""
        deadline = time.monotonic() + 10
        while b"final\n" not in raw and time.monotonic() < deadline:
            chunk = c.sock.recv(65536)
            if not chunk:
                break
            raw += chunk
        # Both 103s pass through, then the 200 with its body; none is taken as final.
        self.assertEqual(raw.count(b"HTTP/1.1 103 Early Hints\r\n"), 2, raw)
        self.assertIn(b"Link: </style.css>; rel=preload", raw)
        self.assertLess(raw.index(b"103 Early Hints"), raw.index(b"HTTP/1.1 200"), raw)
        self.assertTrue(raw.endswith(b"final\n"), raw)

    def test_method_not_allowed_403(self):
        m = marker("delete")
        c, r = self.request(http_req("DELETE", f"http://localhost:{HTTP.port}{m}",
                                     auth=self.auth))
        self.assertDenied(r, 403, "method", f"localhost:{HTTP.port}")
        self.assertClosed(c)
        self.assertEqual(HTTP.requests_matching(m), [])

    def test_plain_http_to_tls_rule_is_protocol(self):
        c, r = self.request(http_req("GET", f"http://a.test:{TLS.port}/", auth=self.auth))
        self.assertDenied(r, 403, "protocol", f"a.test:{TLS.port}")
        self.assertClosed(c)

    def test_plain_http_unlisted_port(self):
        c, r = self.request(http_req("GET", f"http://localhost:{DEAD_PORT}/", auth=self.auth))
        self.assertDenied(r, 403, "port", f"localhost:{DEAD_PORT}")
        self.assertClosed(c)

    def test_plain_http_no_rule(self):
        c, r = self.request(http_req("GET", "http://denied.test/x", auth=self.auth))
        self.assertDenied(r, 403, "no_rule", "denied.test:80")
        self.assertClosed(c)

    def test_origin_form_request_400(self):
        n = HTTP.snapshot()
        c, r = self.request(http_req("GET", "/", auth=self.auth, host=f"localhost:{HTTP.port}"))
        self.assertEqual(r.status, 400, r)
        self.assertClosed(c)
        self.assertEqual(HTTP.snapshot(), n)

    def test_https_absolute_uri_not_forwarded(self):
        # AMBIGUITY: absolute-form https:// through plain forwarding is not in the contract;
        # cordon may only proxy http:// this way, so anything but a 400/403 is wrong.
        c, r = self.request(http_req("GET", f"https://a.test:{TLS.port}/", auth=self.auth))
        self.assertIn(r.status, (400, 403), r)
        self.assertClosed(c)

    def test_host_header_mismatch_400(self):
        m = marker("hostmismatch")
        c, r = self.request(http_req("GET", f"http://localhost:{HTTP.port}{m}", auth=self.auth,
                                     host="evil.test"))
        self.assertEqual(r.status, 400, r)
        self.assertClosed(c)
        self.assertEqual(HTTP.requests_matching(m), [])

    def test_two_requests_on_one_connection(self):
        m = marker("ka")
        c = self.conn()
        for i in range(2):
            c.send(http_req("GET", f"http://localhost:{HTTP.port}{m}/{i}", auth=self.auth))
            r = c.read_response()
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["path"], f"{m}/{i}")
        self.assertEqual(len(HTTP.requests_matching(m)), 2)

    def test_two_pipelined_requests(self):
        m = marker("pipe")
        c = self.conn()
        c.send(http_req("GET", f"http://localhost:{HTTP.port}{m}/0", auth=self.auth)
               + http_req("GET", f"http://localhost:{HTTP.port}{m}/1", auth=self.auth))
        for i in range(2):
            r = c.read_response()
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["path"], f"{m}/{i}")

    def test_keep_alive_then_denied_closes(self):
        m = marker("kadeny")
        c = self.conn()
        c.send(http_req("GET", f"http://localhost:{HTTP.port}{m}", auth=self.auth))
        self.assertEqual(c.read_response().status, 200)
        c.send(http_req("GET", "http://denied.test/", auth=self.auth))
        self.assertDenied(c.read_response(), 403, "no_rule", "denied.test:80")
        self.assertClosed(c)

    def test_websocket_upgrade_relays_both_ways(self):
        c, r = self.request(http_req("GET", f"http://localhost:{HTTP.port}/ws", auth=self.auth,
                                     headers=[("Connection", "Upgrade"),
                                              ("Upgrade", "websocket"),
                                              ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                                              ("Sec-WebSocket-Version", "13")]))
        self.assertEqual(r.status, 101, r)
        self.assertEqual((r.header("Upgrade") or "").lower(), "websocket", r)
        self.echo(c, b"ping-1")
        self.echo(c, os.urandom(200 * KiB))
        rec = [x for x in HTTP.requests_matching("/ws")][-1]
        self.assertEqual([v.lower() for v in H.header_values(rec["headers"], "Upgrade")],
                         ["websocket"])
        self.assertEqual(H.header_values(rec["headers"], "Proxy-Authorization"), [])

    def test_connect_after_forwarded_request_on_one_connection(self):
        # The connection forwards a request (and keeps its upstream), then becomes a tunnel
        # elsewhere: the tunnel relays both ways, and its close names the tunnel's own
        # target and bytes, not the kept-alive upstream's.
        m = marker("thenconnect")
        c = self.conn()
        c.send(http_req("GET", f"http://localhost:{HTTP.port}{m}", auth=self.auth))
        self.assertEqual(c.read_response().status, 200)
        c.send(H.connect_request(f"raw.test:{ECHO.port}", self.auth))
        self.assertEqual(c.read_response(method="CONNECT").status, 200)
        first, bulk = b"after-forward", os.urandom(300 * KiB)
        self.echo(c, first)
        self.echo(c, bulk)
        c.close()
        n = len(first) + len(bulk)
        ev = self.session_events("conn.close", method="CONNECT", target=f"raw.test:{ECHO.port}",
                                 bytes_up=n)
        self.assertEqual(len(ev), 1, "no close of the tunnel with its own target and bytes")
        self.assertEqual(ev[0].get("bytes_down"), n, ev[0])
        self.assertEqual(ev[0].get("reason"), "eof", ev[0])


# ======================================================================================
# Request smuggling and malformed requests
# ======================================================================================

class ScriptedOrigin:
    """An origin on 127.0.0.1 that answers each request with the bytes scripted for its path
    (then closes when the script says so): for responses no http.server would send. Bounded:
    a daemon accept loop, each connection served on a thread with a timeout."""

    def __init__(self, scripts):
        self.scripts = scripts  # path -> (response bytes, close after?)
        self.heads = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        for _ in range(1000):
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        c.settimeout(10)
        buf = b""
        try:
            for _ in range(100):
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                self.heads.append(head)
                path = head.split(b" ")[1].decode()
                resp, close = self.scripts[path.split("?")[0]]
                c.sendall(resp)
                if close:
                    return
        except (OSError, KeyError, IndexError):
            return
        finally:
            c.close()

    def stop(self):
        self.sock.close()


class ForwardedResponseTests(CordonTestCase):
    """Responses the forward path passes on as bytes: hop-by-hop fields cut, framing
    rewritten where cordon must (close-delimited bodies, chunk extensions, trailers)."""

    @classmethod
    def setUpClass(cls):
        cls.origin = ScriptedOrigin({
            "/eof": (b"HTTP/1.1 200 OK\r\nConnection: X-Hop-B, keep-alive\r\nX-Hop-B: 1\r\n"
                     b"Keep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nTrailer: X-T\r\n"
                     b"X-Kept: yes\r\n\r\nuntil the origin closes", True),
            "/chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                         b"Upgrade: h2c\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n"
                         b"0\r\nX-Trailer: t\r\n\r\n", False),
            "/interim": (b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\nConnection: X-I\r\n"
                         b"X-I: 1\r\n\r\nHTTP/1.1 204 No Content\r\nX-Final: 1\r\n\r\n", False),
        })
        cls.addClassCleanup(cls.origin.stop)  # after tearDownClass, or a failed setUpClass
        cls.extra_web_rules = (f"      - {{ host: localhost, ports: [{cls.origin.port}], "
                               f"protocol: http, resolves_to: [127.0.0.0/8, \"::1/128\"] }}\n")
        super().setUpClass()

    def url(self, path):
        return f"http://localhost:{self.origin.port}{path}"

    def test_close_delimited_body_hop_by_hop_cut(self):
        c, r = self.request(http_req("GET", self.url("/eof"), auth=self.auth))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("X-Kept"), "yes", r)
        for name in ["X-Hop-B", "Keep-Alive", "Proxy-Authenticate", "Trailer"]:
            self.assertIsNone(r.header(name), f"{name} passed: {r}")
        # No length: the body ends when the connection does, and the client is told so.
        self.assertEqual(r.header("Connection"), "close", r)
        self.assertEqual(r.body, b"until the origin closes", r)
        self.assertClosed(c)

    def test_chunked_rechunked_without_extensions_or_trailers(self):
        c = self.conn()
        for i in range(2):  # kept alive: a second request on the same connection
            c.send(http_req("GET", self.url(f"/chunked?i={i}"), auth=self.auth))
            head = c.read_head(10)
            self.assertIn(b"Transfer-Encoding: chunked\r\n", head)
            self.assertNotIn(b"Upgrade", head)
            self.assertNotIn(b"Connection: close", head)
            for _ in range(100):
                while b"0\r\n\r\n" not in c.buf:
                    c._fill()
                if c.buf.endswith(b"0\r\n\r\n"):
                    break
            raw, c.buf = c.buf, b""
            # Chunked again (cordon's own chunk sizes), no extension, no trailer.
            self.assertNotIn(b"ext", raw)
            self.assertNotIn(b"X-Trailer", raw)
            body, rest = b"", raw
            for _ in range(100):
                size_line, rest = rest.split(b"\r\n", 1)
                size = int(size_line, 16)
                if size == 0:
                    break
                body, rest = body + rest[:size], rest[size + 2:]
            self.assertEqual(body, b"hello world")
            self.assertEqual(rest, b"\r\n", raw)

    def test_interim_fields_cut_then_final(self):
        c, r = self.request(http_req("GET", self.url("/interim"), auth=self.auth))
        self.assertEqual(r.status, 103, r)
        self.assertEqual(r.header("Link"), "</a>", r)
        self.assertIsNone(r.header("X-I"), r)
        self.assertIsNone(r.header("Connection"), r)
        r2 = c.read_response(10)
        self.assertEqual(r2.status, 204, r2)
        self.assertEqual(r2.header("X-Final"), "1", r2)


class SmugglingTests(CordonTestCase):

    def raw(self, data, timeout=5):
        """Sends raw bytes; returns (conn, response or None if the connection closed)."""
        c = self.conn(timeout)
        try:
            c.send(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            return c, c.read_response(timeout)
        except (EOFError, ConnectionResetError):
            return c, None

    def assert400(self, data, statuses=(400,)):
        n = HTTP.snapshot()
        c, r = self.raw(data)
        self.assertIsNotNone(r, "connection closed without a response")
        self.assertIn(r.status, statuses, r)
        self.assertClosed(c, allow_bytes=False)
        time.sleep(0.1)
        self.assertEqual(HTTP.snapshot(), n, "the origin saw a request or a connection")

    def head(self, m, extra):
        return (f"POST http://localhost:{HTTP.port}{m} HTTP/1.1\r\n"
                f"Host: localhost:{HTTP.port}\r\nProxy-Authorization: {self.auth}\r\n"
                + extra).encode()

    def test_content_length_and_transfer_encoding_400(self):
        m = marker("clte")
        smuggled = http_req("GET", f"http://localhost:{HTTP.port}{m}-2", auth=self.auth)
        self.assert400(self.head(m, "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n")
                       + b"0\r\n\r\n" + smuggled)
        self.assert400(self.head(m, "Transfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n")
                       + b"0\r\n\r\n" + smuggled)

    def test_two_content_lengths_400(self):
        m = marker("clcl")
        self.assert400(self.head(m, "Content-Length: 5\r\nContent-Length: 6\r\n\r\n")
                       + b"hello!")
        self.assert400(self.head(m, "Content-Length: 5, 6\r\n\r\n") + b"hello!")

    def test_invalid_content_length_400(self):
        for v in ["+5", "-1", "5x", "0x5", " ", "99999999999999999999999"]:
            with self.subTest(cl=v):
                self.assert400(self.head(marker("badcl"), f"Content-Length: {v}\r\n\r\nhello"))

    def test_bad_transfer_encodings_400(self):
        # Beyond the contract (RFC 9112 6.1/5.1): a request TE whose final coding is not
        # chunked, or a header name with whitespace before the colon, must be refused.
        m = marker("te")
        for extra in ["Transfer-Encoding: xchunked\r\n", "Transfer-Encoding: chunked, gzip\r\n",
                      "Transfer-Encoding : chunked\r\n", "Transfer-Encoding:\tchunked\x0b\r\n",
                      "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n"]:
            with self.subTest(extra=extra):
                self.assert400(self.head(m, extra + "\r\n") + b"0\r\n\r\n",
                               statuses=(400, 501))

    def test_bad_chunk_size_no_second_request(self):
        m = marker("badchunk")
        smuggled = http_req("GET", f"http://localhost:{HTTP.port}{m}-smuggled", auth=self.auth)
        for bad in [b"zz\r\nhello\r\n0\r\n\r\n", b"-5\r\nhello\r\n0\r\n\r\n",
                    b"5 5\r\nhello\r\n0\r\n\r\n",
                    b"ffffffffffffffffffffff\r\nhello\r\n0\r\n\r\n"]:
            with self.subTest(chunk=bad):
                c, r = self.raw(self.head(m, "Transfer-Encoding: chunked\r\n\r\n") + bad
                                + smuggled)
                if r is not None:
                    # AMBIGUITY: "400 (or connection closed)": a response, if any, is 400.
                    self.assertEqual(r.status, 400, r)
                self.assertClosed(c, allow_bytes=False)
                time.sleep(0.2)
                self.assertEqual(HTTP.requests_matching(f"{m}-smuggled"), [])

    def test_obs_fold_400(self):
        m = marker("fold")
        self.assert400(self.head(m, "X-A: b\r\n c\r\nContent-Length: 0\r\n\r\n"))
        self.assert400(self.head(m, "Content-Length: 0\r\nX-A: b\r\n\tc\r\n\r\n"))

    def test_oversized_header_section_431(self):
        # max_header_bytes is 8KiB in the test policy; send 20 KiB of headers.
        m = marker("big")
        pad = "".join(f"X-Pad-{i}: {'p' * 1000}\r\n" for i in range(20))
        self.assert400(self.head(m, pad + "Content-Length: 0\r\n\r\n"), statuses=(400, 431))

    def test_one_huge_header_line_431(self):
        m = marker("bigline")
        self.assert400(self.head(m, f"X-Big: {'q' * 20000}\r\nContent-Length: 0\r\n\r\n"),
                       statuses=(400, 431))

    def test_nul_and_bare_cr_in_headers_400(self):
        m = marker("ctl")
        self.assert400(self.head(m, "X-A: a\x00b\r\nContent-Length: 0\r\n\r\n"))
        self.assert400(self.head(m, "X-A: a\rb\r\nContent-Length: 0\r\n\r\n"))

    def test_two_host_fields_400(self):
        # RFC 9112 3.2: more than one Host is a 400. cordon forwarded such a request with
        # the first kept (issue 17), even with two different names behind one proxy.
        m = marker("twohost")
        host = f"localhost:{HTTP.port}"
        for second in (host, "evil.test"):
            with self.subTest(second=second):
                self.assert400(http_req("GET", f"http://{host}{m}", auth=self.auth,
                                        headers=[("Host", second)]))
        self.assertEqual(HTTP.requests_matching(m), [])

    def test_heads_that_are_not_http_answered_at_once(self):
        # An LF-only head, NUL bytes, a ClientHello sent to the proxy port: 400 at once, not
        # silence until the header timeout (5 s here).
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ssl.create_default_context().wrap_bio(inc, out, server_hostname="a.test")
        with self.assertRaises(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = out.read()
        self.assertEqual(hello[0], 0x16)
        m = marker("lf")
        for name, data in [
                ("LF-only lines", f"GET http://localhost:{HTTP.port}{m} HTTP/1.1\n"
                                  f"Host: localhost:{HTTP.port}\n"
                                  f"Proxy-Authorization: {self.auth}\n\n".encode()),
                ("NUL bytes", b"\x00" * 16),
                ("a TLS ClientHello", hello),
                ("SSH banner", b"SSH-2.0-OpenSSH_9.2\r\n")]:
            with self.subTest(name):
                c = self.conn()
                t0 = time.monotonic()
                c.send(data)
                try:
                    r = c.read_response(timeout=4)
                except (EOFError, ConnectionResetError, socket.timeout, TimeoutError) as e:
                    self.fail(f"{name}: no answer within 4 s ({e!r})")
                dt = time.monotonic() - t0
                self.assertEqual(r.status, 400, r)
                self.assertEqual(r.header("X-Cordon-Deny"), "bad_request", r)
                self.assertLess(dt, 1.0, f"{name}: answered only after {dt:.2f}s")
                self.assertClosed(c)
        self.assertEqual(HTTP.requests_matching(m), [])


# ======================================================================================
# Streaming bodies (and memory)
# ======================================================================================

class StreamingTests(CordonTestCase):
    RSS_LIMIT_MB = 200

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = H.TempDir()
        cls.blob = cls.tmp.join("blob")
        block = os.urandom(MiB)
        h = hashlib.sha256()
        with open(cls.blob, "wb") as f:
            for i in range(50):
                b = block[i:] + block[:i]
                f.write(b)
                h.update(b)
        cls.blob_sha = h.hexdigest()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
        super().tearDownClass()

    def upload(self, extra_headers):
        m = marker("up")
        args = ["-sS", "-x", self.cordon.proxy_url(self.session), "--data-binary",
                f"@{self.blob}", "-H", "Content-Type: application/octet-stream"]
        for h in extra_headers:
            args += ["-H", h]
        with H.RssSampler(self.cordon) as rss:
            p = H.run_curl(args + [f"http://localhost:{HTTP.port}{m}"], timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout), {"bytes": 50 * MiB, "sha256": self.blob_sha})
        rec = HTTP.requests_matching(m)
        self.assertEqual(len(rec), 1)
        self.assertEqual(rec[0]["body_len"], 50 * MiB)
        self.assertRSSBelow(rss, self.RSS_LIMIT_MB)
        return rec[0]

    def test_upload_50mib_content_length(self):
        rec = self.upload([])
        self.assertEqual(H.header_values(rec["headers"], "Content-Length"), [str(50 * MiB)])

    def test_upload_50mib_chunked(self):
        rec = self.upload(["Transfer-Encoding: chunked"])
        # AMBIGUITY: cordon may re-chunk but must not buffer to add a Content-Length.
        self.assertEqual(H.header_values(rec["headers"], "Content-Length"), [])

    def test_download_100mib(self):
        with H.RssSampler(self.cordon) as rss:
            p = H.run_curl(["-sS", "-x", self.cordon.proxy_url(self.session), "-o", "/dev/null",
                            "-w", "%{http_code} %{size_download}",
                            f"http://localhost:{HTTP.port}/big?n={100 * MiB}"], timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.decode(), f"200 {100 * MiB}")
        self.assertRSSBelow(rss, self.RSS_LIMIT_MB)

    def test_tunnel_64mib_both_ways(self):
        c = self.open_tunnel(f"raw.test:{ECHO.port}")
        block = os.urandom(MiB)
        total = 64 * MiB
        errors = []

        def sender():
            try:
                for _ in range(64):
                    c.sock.sendall(block)
            except OSError as e:
                errors.append(e)
        with H.RssSampler(self.cordon) as rss:
            t = threading.Thread(target=sender)
            t.start()
            got = 0
            c.sock.settimeout(20)
            while got < total:
                d = c.sock.recv(256 * KiB)
                if not d:
                    break
                got += len(d)
            t.join(20)
        self.assertEqual(errors, [])
        self.assertEqual(got, total)
        self.assertRSSBelow(rss, self.RSS_LIMIT_MB)


# ======================================================================================
# Slow clients and timeouts
# ======================================================================================

class SlowClientTests(CordonTestCase):
    proxy_opts = {"header_timeout": "1s", "idle_timeout": "2s", "handshake_timeout": "2s",
                  "connect_timeout": "2s", "max_header_bytes": "8KiB"}

    def assertTimeoutClose(self, c, t0, lo, hi):
        closed, data = c.wait_closed(hi + 2)
        dt = time.monotonic() - t0
        self.assertTrue(closed, f"not closed within {hi + 2}s")
        self.assertGreaterEqual(dt, lo, f"closed after {dt:.2f}s: before the timeout")
        self.assertLessEqual(dt, hi, f"closed only after {dt:.2f}s")
        return data

    def test_partial_head_disconnected(self):
        c = self.conn()
        c.send(f"CONNECT raw.test:{ECHO.port} HTTP/1.1\r\nHost: raw.test\r\n".encode())
        t0 = time.monotonic()
        data = self.assertTimeoutClose(c, t0, 0.8, 2.0)
        # AMBIGUITY: a 408 may be sent before closing, or nothing.
        self.assertTrue(data == b"" or data.startswith(b"HTTP/1.1 408"), data)

    def test_slowloris_drip_disconnected(self):
        # header_timeout bounds the whole head, not each byte.
        c = self.conn()
        c.send(b"GET http://localhost:%d/ HTTP/1.1\r\nX-Slow: " % HTTP.port)
        t0 = time.monotonic()
        closed_at = None
        for _ in range(40):
            r, _, _ = select.select([c.sock], [], [], 0.2)
            if r:
                try:
                    d = c.sock.recv(4096)
                except OSError:
                    d = b""
                if not d:
                    closed_at = time.monotonic() - t0
                    break
                continue
            try:
                c.sock.send(b"a")
            except OSError:
                closed_at = time.monotonic() - t0
                break
        self.assertIsNotNone(closed_at, "a client dripping its head was never disconnected")
        self.assertLessEqual(closed_at, 2.0)

    def test_idle_tunnel_closed(self):
        c = self.open_tunnel(f"raw.test:{ECHO.port}")
        self.echo(c, b"x")
        t0 = time.monotonic()
        self.assertTimeoutClose(c, t0, 1.5, 3.5)
        ev = self.session_events("conn.close")
        self.assertEqual(len(ev), 1)
        self.assertEqual((ev[0]["bytes_up"], ev[0]["bytes_down"]), (1, 1))

    def test_busy_tunnel_outlives_idle_timeout(self):
        c = self.open_tunnel(f"raw.test:{ECHO.port}")
        t0 = time.monotonic()
        for i in range(9):  # 4.5 s > 2 x idle_timeout, a byte every 0.5 s
            self.echo(c, b"%d" % i)
            time.sleep(0.5)
        self.assertGreater(time.monotonic() - t0, 4)
        self.echo(c, b"still here")

    def test_tls_tunnel_without_client_hello_closed(self):
        n = TLS.snapshot()
        c = self.open_tunnel(f"a.test:{TLS.port}")
        t0 = time.monotonic()
        self.assertTimeoutClose(c, t0, 1.5, 3.5)
        for rec in TLS.conns_since(n):
            self.assertFalse(rec["got_bytes"], rec)


# ======================================================================================
# Many concurrent tunnels
# ======================================================================================

class ConcurrencyTests(CordonTestCase):
    N = 1000
    BATCH = 100

    def test_1000_concurrent_tunnels(self):
        t_start = time.monotonic()
        deadline = t_start + 30
        auth = self.auth
        req = H.connect_request(f"raw.test:{ECHO.port}", auth)
        n_origin = ECHO.snapshot()
        conns = []
        try:
            for start in range(0, self.N, self.BATCH):
                self.assertLess(time.monotonic(), deadline, f"only {len(conns)} open after 30s")
                batch = []
                for i in range(start, start + self.BATCH):
                    c = H.ProxyConn(self.cordon.proxy_addr, timeout=10)
                    conns.append(c)
                    batch.append((i, c))
                    c.send(req)
                for i, c in batch:
                    r = c.read_response(10, method="CONNECT")
                    self.assertEqual(r.status, 200, f"tunnel {i}: {r}")
                    c.send(b"hello %d\n" % i)
                for i, c in batch:
                    msg = b"hello %d\n" % i
                    self.assertEqual(c.recv_exact(len(msg), 10), msg, f"tunnel {i}")
            # All open at once: cordon must see them.
            st = self.cordon.status()
            self.assertGreaterEqual(st["connections"], self.N, st)
            self.assertEqual(ECHO.snapshot() - n_origin, self.N)
            # A second round on every tunnel, all still open.
            for i, c in enumerate(conns):
                c.send(b"bye %d\n" % i)
            for i, c in enumerate(conns):
                msg = b"bye %d\n" % i
                self.assertEqual(c.recv_exact(len(msg), 10), msg, f"tunnel {i}")
        finally:
            for c in conns:
                c.close()
        self.assertTrue(H.wait_until(lambda: self.cordon.status()["connections"] == 0,
                                     max(1, deadline - time.monotonic())),
                        f"connections still open: {self.cordon.status()}")
        self.assertLess(time.monotonic() - t_start, 30)
        ev = self.session_events("conn.close", count=self.N, timeout=5)
        self.assertEqual(len(ev), self.N)


# ======================================================================================
# Per-session limits
# ======================================================================================

class LimitsTests(CordonTestCase):

    def setUp(self):
        super().setUp()
        self.session = self.cordon.create_session("limited")

    def test_third_tunnel_denied_limit(self):
        t1 = self.open_tunnel(f"raw.test:{ECHO.port}")
        t2 = self.open_tunnel(f"raw.test:{ECHO.port}")
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertDenied(r, 403, "limit", f"raw.test:{ECHO.port}", job="limited")
        self.assertClosed(c)
        self.echo(t1, b"one")
        self.echo(t2, b"two")
        ev = self.session_events("conn.deny", reason="limit")
        self.assertEqual(len(ev), 1, ev)
        # A freed slot can be used again (retried: cordon notices the close asynchronously,
        # so the first retries may still be refused).
        t1.close()

        def retry():
            c, r = self.tunnel(f"raw.test:{ECHO.port}")
            return r.status == 200
        self.assertTrue(H.wait_until(retry, 3, 0.1), "slot not freed after a tunnel closed")

    def send_until_closed(self, c, total, piece=4 * KiB):
        sent = 0
        try:
            for _ in range(total // piece):
                c.sock.sendall(b"u" * piece)
                sent += piece
                time.sleep(0.001)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return sent

    def test_upload_budget_closes_tunnel(self):
        n = SINK.snapshot()
        c = self.open_tunnel(f"raw.test:{SINK.port}")
        self.send_until_closed(c, 100 * KiB)
        self.assertClosed(c, timeout=3)
        time.sleep(0.2)
        recs = SINK.conns_since(n)
        self.assertEqual(len(recs), 1)
        self.assertLess(recs[0]["bytes_in"], 200 * KiB, recs)
        self.assertLessEqual(recs[0]["bytes_in"], 64 * KiB + 64 * KiB, recs)
        ev = self.session_events("conn.close")
        self.assertEqual(len(ev), 1, ev)
        self.assertEqual(ev[0].get("reason"), "budget", ev[0])
        self.assertLessEqual(ev[0].get("bytes_up"), 128 * KiB, ev[0])
        # AMBIGUITY: once the session's budget is spent, a new tunnel is refused with 403
        # budget (a session-level limit, like max_tunnels), rather than opened and closed.
        c, r = self.tunnel(f"raw.test:{SINK.port}")
        self.assertDenied(r, 403, "budget", f"raw.test:{SINK.port}", job="limited")

    def test_budget_is_per_session(self):
        n = SINK.snapshot()
        a = self.open_tunnel(f"raw.test:{SINK.port}")
        a.send(b"a" * 40 * KiB)
        self.assertTrue(H.wait_until(
            lambda: sum(r["bytes_in"] for r in SINK.conns_since(n)) >= 40 * KiB, 3))
        b = self.open_tunnel(f"raw.test:{SINK.port}")
        self.send_until_closed(b, 40 * KiB)
        self.assertClosed(b, timeout=3)
        time.sleep(0.2)
        total = sum(r["bytes_in"] for r in SINK.conns_since(n))
        self.assertLessEqual(total, 64 * KiB + 64 * KiB)
        # Another session of the same job has its own budget.
        other = self.cordon.create_session("limited")
        c = self.open_tunnel(f"raw.test:{ECHO.port}", session=other)
        self.echo(c, b"z" * 1000)


# ======================================================================================
# Session end and token revocation with live tunnels
# ======================================================================================

class KillTests(CordonTestCase):

    def test_session_delete_closes_live_tunnels_within_1s(self):
        t1 = self.open_tunnel(f"raw.test:{ECHO.port}")
        t2 = self.open_tunnel(f"a.test:{TLS.port}")
        self.echo(t1, b"ping")
        t0 = time.monotonic()
        status, js = self.cordon.admin("DELETE", f"/v1/sessions/{self.session['id']}")
        self.assertClosedCount(status, js, 2)
        for t in (t1, t2):
            closed, _ = t.wait_closed(max(0.01, t0 + 1.0 - time.monotonic()))
            self.assertTrue(closed, "tunnel still open 1s after DELETE /v1/sessions/ID")
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertEqual(r.status, 407, r)
        self.assertEqual(len(self.session_events("conn.close", count=2)), 2)

    def test_token_revoke_closes_only_its_tunnels_within_1s(self):
        sid = self.session["id"]
        other = self.cordon.mint_token(sid)
        ta = self.open_tunnel(f"raw.test:{ECHO.port}")
        tb1 = self.open_tunnel(f"raw.test:{ECHO.port}", token=other["token"])
        tb2 = self.open_tunnel(f"raw.test:{ECHO.port}", token=other["token"])
        self.echo(tb1, b"b")
        t0 = time.monotonic()
        status, js = self.cordon.admin("DELETE", f"/v1/sessions/{sid}/tokens/{other['token_id']}")
        self.assertClosedCount(status, js, 2)
        for t in (tb1, tb2):
            closed, _ = t.wait_closed(max(0.01, t0 + 1.0 - time.monotonic()))
            self.assertTrue(closed, "tunnel still open 1s after its token was revoked")
        self.echo(ta, b"the other token's tunnel lives on")
        c, r = self.tunnel(f"raw.test:{ECHO.port}", token=other["token"])
        self.assertEqual(r.status, 407, r)
        self.open_tunnel(f"raw.test:{ECHO.port}")
        ev = self.session_events("token.revoke", token_id=other["token_id"])
        self.assertEqual(len(ev), 1, ev)


# ======================================================================================
# Audit log
# ======================================================================================

class AuditTests(CordonTestCase):

    def test_conn_open_and_close_per_tunnel_with_bytes(self):
        sizes = [100, 2000, 30000]
        for n in sizes:
            c = self.open_tunnel(f"raw.test:{ECHO.port}")
            self.echo(c, os.urandom(n))
            c.close()
        closes = self.session_events("conn.close", count=3)
        self.assertEqual(len(closes), 3, closes)
        self.assertEqual(sorted(e["bytes_up"] for e in closes), sizes)
        self.assertEqual(sorted(e["bytes_down"] for e in closes), sizes)
        opens = self.session_events("conn.open", count=3)
        self.assertEqual(len(opens), 3, opens)
        for e in opens + closes:
            self.assertEqual(e.get("job"), "web", e)
            self.assertEqual(e.get("target"), f"raw.test:{ECHO.port}", e)
            self.assertIsInstance(e.get("client"), str, e)

    def test_every_line_is_json_with_rfc3339_ts(self):
        c = self.open_tunnel(f"raw.test:{ECHO.port}")
        self.echo(c, b"x")
        c.close()
        self.tunnel("denied.test:443")
        self.session_events("conn.close")
        events = self.cordon.audit_events()  # raises on a line that is not JSON with ts/event
        self.assertTrue(self.cordon.audit_files(), "no cordon-*.jsonl file")
        self.assertTrue(events)
        for e in events:
            self.assertRegex(e["ts"], H.RFC3339_MS, e)
            self.assertIsInstance(e["event"], str)
        # Every line ends with a newline: no partial lines once quiet.
        raw = self.cordon.audit_raw()
        self.assertTrue(raw.endswith(b"\n"))

    def test_session_and_token_events(self):
        sid = self.session["id"]
        ev = self.session_events("session.create")
        self.assertEqual(len(ev), 1, ev)
        self.assertEqual(ev[0].get("job"), "web")
        new = self.cordon.mint_token(sid)
        ev = self.session_events("token.mint", token_id=new["token_id"])
        self.assertEqual(len(ev), 1, ev)
        self.assertEqual(self.cordon.admin(
            "DELETE", f"/v1/sessions/{sid}/tokens/{new['token_id']}")[0], 200)
        ev = self.session_events("token.revoke", token_id=new["token_id"])
        self.assertEqual(len(ev), 1, ev)

    def test_z_no_secret_in_audit_files(self):
        # Runs last in this class (name order): after the other tests' traffic.
        sid = self.session["id"]
        wrong = "f" * 64
        bearer = "sk-live-" + os.urandom(16).hex()
        query_secret = os.urandom(16).hex()
        self.tunnel(f"raw.test:{ECHO.port}", token=wrong)
        self.tunnel(f"raw.test:{ECHO.port}", session={"id": "s-0000000000000000",
                                                      "token": wrong})
        c, r = self.request(http_req(
            "GET", f"http://localhost:{HTTP.port}/q?access_token={query_secret}&x=1",
            auth=self.auth, headers=[("Authorization", f"Bearer {bearer}")]))
        self.assertEqual(r.status, 200)
        c, r = self.request(http_req(
            "GET", f"http://denied.test/q?api_key={query_secret}", auth=self.auth,
            headers=[("Authorization", f"Bearer {bearer}")]))
        self.assertEqual(r.status, 403)
        self.cordon.mint_token(sid)
        self.session_events("conn.deny", reason="no_rule")
        raw = self.cordon.audit_raw()
        self.assertTrue(raw)
        secrets = [s for s in self.cordon.secrets if s] + [wrong, bearer, query_secret]
        for s in secrets:
            self.assertNotIn(s.encode(), raw, f"secret {s[:6]}... in the audit log")
            b64 = H.basic(sid, s).split(" ", 1)[1].encode()
            self.assertNotIn(b64, raw)


# ======================================================================================
# Reload (admin API and SIGHUP)
# ======================================================================================

class ReloadTests(CordonTestCase):

    def setUp(self):
        # Every test starts from the base policy.
        self.cordon.write_policy(jobs_yaml())
        status, js = self.cordon.admin("POST", "/v1/reload")
        self.assertEqual(status, 200, js)
        self.assertEqual(js.get("result"), "ok", js)
        super().setUp()

    def test_reload_removing_rule_closes_tunnel(self):
        t_raw = self.open_tunnel(f"raw.test:{ECHO.port}")
        self.echo(t_raw, b"before")
        self.cordon.write_policy(jobs_yaml(include_raw=False))
        status, js = self.cordon.admin("POST", "/v1/reload")
        self.assertEqual(status, 200, js)
        self.assertEqual(js.get("result"), "ok", js)
        self.assertTrue(t_raw.wait_closed(2)[0], "tunnel no longer allowed is still open")
        ev = self.session_events("conn.close")
        self.assertEqual(len(ev), 1, ev)
        self.assertEqual(ev[0].get("reason"), "policy_changed", ev[0])
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertDenied(r, 403, "no_rule", f"raw.test:{ECHO.port}")
        # The session itself survives a reload.
        self.open_tunnel(f"a.test:{TLS.port}")
        self.assertEqual(self.cordon.status()["policy"]["rules"], N_RULES - 1)
        self.assertTrue(self.cordon.wait_events(lambda e: e["event"] == "config.reload"))

    def test_reload_narrowing_resolves_to_closes_tunnel(self):
        # The rule stays, but no longer lets raw.test reach loopback: the tunnel already
        # connected there is cut, as a new one is refused.
        t_raw = self.open_tunnel(f"raw.test:{ECHO.port}")
        self.echo(t_raw, b"before")
        self.cordon.write_policy(jobs_yaml(raw_resolves_to="[10.0.0.0/8]"))
        status, js = self.cordon.admin("POST", "/v1/reload")
        self.assertEqual(status, 200, js)
        self.assertTrue(t_raw.wait_closed(2)[0], "tunnel to a no longer allowed address is open")
        ev = self.session_events("conn.close", reason="policy_changed")
        self.assertEqual(len(ev), 1, ev)
        self.assertEqual(ev[0].get("target"), f"raw.test:{ECHO.port}", ev[0])
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertDenied(r, 403, "private_address", f"raw.test:{ECHO.port}")

    def test_kept_upstream_checked_against_each_requests_rule(self):
        # GET may reach loopback (resolves_to), POST's own rule names no resolves_to: a POST
        # on the connection a GET opened must not ride the GET's loopback upstream.
        self.cordon.write_policy(jobs_yaml(
            localhost_methods="[GET, HEAD]",
            extra_web_rules=(f"      - {{ host: localhost, ports: [{HTTP.port}], "
                             f"protocol: http, methods: [POST] }}\n")))
        self.assertEqual(self.cordon.admin("POST", "/v1/reload")[0], 200)
        m = marker("postrule")
        c = self.conn()
        c.send(http_req("GET", f"http://localhost:{HTTP.port}{m}/get", auth=self.auth))
        self.assertEqual(c.read_response().status, 200)
        c.send(http_req("POST", f"http://localhost:{HTTP.port}{m}/post", auth=self.auth,
                        body=b"x"))
        self.assertDenied(c.read_response(), 403, "private_address",
                          f"localhost:{HTTP.port}")
        self.assertEqual(list(HTTP.requests_matching(f"{m}/post")), [],
                         "the POST reached the origin")
        # A fresh connection's POST is refused the same way (its resolution is checked).
        c2, r = self.request(http_req("POST", f"http://localhost:{HTTP.port}{m}/post2",
                                      auth=self.auth, body=b"x"), method="POST")
        self.assertDenied(r, 403, "private_address", f"localhost:{HTTP.port}")

    def test_reload_keeping_rule_keeps_tunnel(self):
        # AMBIGUITY: only tunnels the new policy no longer allows are closed.
        t_raw = self.open_tunnel(f"raw.test:{ECHO.port}")
        self.cordon.write_policy(jobs_yaml(extra_web_rules=(
            "      - { host: extra.test, ports: [443] }\n")))
        self.assertEqual(self.cordon.admin("POST", "/v1/reload")[0], 200)
        time.sleep(0.5)
        self.echo(t_raw, b"still allowed")

    def test_invalid_reload_400_keeps_old_policy(self):
        text = self.cordon.policy_text(jobs_yaml(include_raw=False))
        text += "bogus_key: 1\n"
        line = text.count("\n")  # bogus_key is on the last line
        self.cordon.write_policy(raw_text=text)
        status, js = self.cordon.admin("POST", "/v1/reload")
        self.assertEqual(status, 400, js)
        self.assertIsInstance(js.get("error"), str, js)
        self.assertRegex(js["error"], re.escape(self.cordon.config_path) + rf":{line}:\d+")
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertEqual(r.status, 200, "the old policy should still be in force")
        self.assertEqual(self.cordon.status()["policy"]["rules"], N_RULES)

    def test_sighup_reloads(self):
        t_raw = self.open_tunnel(f"raw.test:{ECHO.port}")
        self.cordon.write_policy(jobs_yaml(include_raw=False))
        self.cordon.signal(signal.SIGHUP)

        def denied():
            # A tunnel allowed an instant before the reload landed is cut by it with a reset
            # (reason policy_changed); that is "not yet denied", so try again.
            try:
                c, r = self.tunnel(f"raw.test:{ECHO.port}")
            except (ConnectionError, EOFError):
                return False
            c.close()
            return r.status == 403 and r.header("X-Cordon-Deny") == "no_rule"
        self.assertTrue(H.wait_until(denied, 5, 0.1), "SIGHUP did not apply the new policy")
        self.assertTrue(t_raw.wait_closed(2)[0])
        self.assertTrue(self.cordon.alive())

    def test_sighup_invalid_policy_keeps_running_and_old_policy(self):
        self.cordon.write_policy(raw_text="listen: [this is not, a policy\n")
        self.cordon.signal(signal.SIGHUP)
        time.sleep(1)
        self.assertTrue(self.cordon.alive(), "cordon died on SIGHUP with a bad policy")
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertEqual(r.status, 200, r)

    def test_rules_opening_the_unspecified_range_are_refused(self):
        # Linux connects 0.0.0.0 (and ::) to this host: a rule opening 0.0.0.0/32 made
        # CONNECT 0.0.0.0:ADMIN_PORT cordon's own admin API (issue 17). Such a policy never
        # loads, and the attempts stay refused whatever form the address takes.
        aport = self.cordon.admin_addr[1]
        for rule in [f"{{ cidr: 0.0.0.0/32, ports: [{aport}], protocol: tcp }}",
                     f"{{ cidr: 0.0.0.0/8, ports: [{aport}], protocol: http }}",
                     f'{{ cidr: "::/128", ports: [{aport}], protocol: tcp }}',
                     f'{{ cidr: "64:ff9b::/128", ports: [{aport}], protocol: tcp }}',
                     f"{{ host: self.test, ports: [{aport}], protocol: tcp, "
                     f"resolves_to: [0.0.0.0/32] }}"]:
            with self.subTest(rule=rule):
                self.cordon.write_policy(jobs_yaml(extra_web_rules=f"      - {rule}\n"))
                status, js = self.cordon.admin("POST", "/v1/reload")
                self.assertEqual(status, 400, js)
                self.assertRegex(js.get("error", ""), re.escape(self.cordon.config_path) +
                                 r":\d+:\d+: jobs\.web\.egress\[\d+\]\.\w+.*: .* opens the "
                                 r"unspecified range")
        self.assertEqual(self.cordon.status()["policy"]["rules"], N_RULES)
        for target in [f"0.0.0.0:{aport}", f"[::ffff:0.0.0.0]:{aport}", f"[::]:{aport}",
                       f"0.0.0.1:{aport}"]:
            with self.subTest(target=target):
                c, r = self.tunnel(target)
                self.assertEqual(r.status, 403, r)
                self.assertClosed(c)
        c, r = self.request(http_req("GET", f"http://0.0.0.0:{aport}/v1/status",
                                     auth=self.auth))
        self.assertEqual(r.status, 403, r)

    def test_fifo_at_the_policy_path_never_blocks_the_control_thread(self):
        # open() of a FIFO blocks until a writer comes: on SIGHUP that was the control thread,
        # and with it the admin API and the kill switch (issue 18).
        fifo = self.cordon.config_path + ".fifo"
        os.mkfifo(fifo)
        os.replace(fifo, self.cordon.config_path)

        def unblock():  # a reader stuck in open() is let go by a writer's open
            try:
                os.close(os.open(self.cordon.config_path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        self.addCleanup(self.cordon.write_policy, jobs_yaml())
        self.addCleanup(unblock)
        self.cordon.signal(signal.SIGHUP)
        time.sleep(0.3)
        t0 = time.monotonic()
        try:
            status, js = self.cordon.admin("GET", "/v1/status")
        except (TimeoutError, socket.timeout) as e:
            self.fail(f"the admin API did not answer after SIGHUP with a FIFO policy: {e!r}")
        self.assertEqual(status, 200, js)
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertGreaterEqual(js["reloads"]["failed"], 1, js)
        status, js = self.cordon.admin("POST", "/v1/reload")
        self.assertEqual(status, 400, js)
        self.assertIn("is not a regular file (a FIFO)", js.get("error", ""))
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertEqual(r.status, 200, "the old policy should still be in force")

    def test_reload_never_claims_restart_only_settings(self):
        # Reload kept the listeners and the audit log but /v1/status showed the file's new
        # values (and `cordon run` reads listen.dns from it): now they stay, and the answer
        # says which changes need a restart.
        before = self.cordon.status()
        new_audit = self.cordon.tmp.join("audit-elsewhere")
        text = self.cordon.policy_text(jobs_yaml())
        text = text.replace("  proxy: 127.0.0.1:0\n", f"  proxy: 127.0.0.1:{H.free_port()}\n"
                            f"  dns: 127.0.0.1:{H.free_port()}\n")
        text = text.replace(f"  path: {self.cordon.audit_dir}\n", f"  path: {new_audit}\n")
        self.cordon.write_policy(raw_text=text)
        status, js = self.cordon.admin("POST", "/v1/reload")
        self.assertEqual(status, 200, js)
        self.assertEqual(js.get("needs_restart"), ["listen.proxy", "listen.dns", "audit.path"],
                         js)
        after = self.cordon.status()
        self.assertEqual(after["listen"], before["listen"])
        self.assertEqual(after["audit"]["path"], self.cordon.audit_dir)
        self.assertFalse(os.path.exists(new_audit))
        ev = self.cordon.wait_events(lambda e: e["event"] == "config.reload" and
                                     e.get("needs_restart"))
        self.assertEqual(ev[-1]["needs_restart"], "listen.proxy,listen.dns,audit.path", ev)
        # The rest of the file did apply, and the proxy still listens where it did.
        c, r = self.tunnel(f"raw.test:{ECHO.port}")
        self.assertEqual(r.status, 200, r)

    def test_never_connects_to_own_listeners(self):
        # self.test resolves to 127.0.0.1; a rule opening cordon's own ports must not let a
        # client loop through cordon to itself or reach its admin API.
        pport, aport = self.cordon.proxy_addr[1], self.cordon.admin_addr[1]
        self.cordon.write_policy(jobs_yaml(extra_web_rules=(
            f"      - {{ host: self.test, ports: [{pport}, {aport}], protocol: tcp, "
            f"resolves_to: [127.0.0.0/8] }}\n")))
        self.assertEqual(self.cordon.admin("POST", "/v1/reload")[0], 200)
        for port in (pport, aport):
            with self.subTest(port=port):
                c, r = self.tunnel(f"self.test:{port}")
                # AMBIGUITY: the deny reason is not named by the contract.
                self.assertEqual(r.status, 403, r)
                self.assertTrue(r.header("X-Cordon-Deny"), r)
                self.assertClosed(c)


# ======================================================================================
# SIGTERM with open tunnels; fail-closed audit
# ======================================================================================

class ShutdownTests(CordonTestCase):
    start_cordon = False

    def test_sigterm_with_open_tunnels_exits_0_within_5s(self):
        cordon = H.Cordon(jobs_yaml(), DNS.port, self.proxy_opts)
        self.addCleanup(cordon.cleanup)
        cordon.start()
        s = cordon.create_session("web")
        tunnels = []
        for i in range(3):
            c = cordon.conn()
            self._conns.append(c)
            c.send(H.connect_request(f"raw.test:{ECHO.port}", H.basic(s["id"], s["token"])))
            self.assertEqual(c.read_response(method="CONNECT").status, 200)
            self.echo(c, b"t%d" % i)
            tunnels.append(c)
        rc, dt = cordon.stop(timeout=10)
        self.assertEqual(rc, 0, cordon.stderr_text())
        self.assertLess(dt, 5)
        for c in tunnels:
            self.assertTrue(c.wait_closed(1)[0])
        closes = [e for e in cordon.audit_events()
                  if e["event"] == "conn.close" and e.get("session") == s["id"]]
        self.assertEqual(len(closes), 3, closes)
        self.assertEqual(sorted(e["bytes_up"] for e in closes), [2, 2, 2])

    def test_audit_unwritable_fails_closed(self):
        # The audit log is broken under a running cordon by RLIMIT_FSIZE (see harness): once
        # the day's file reaches 256 KiB every write fails with EFBIG. Denied requests fill
        # it. (Large enough for the state store's SQLite file and its WAL, which must work.)
        # AMBIGUITY: the contract says only "fails closed"; required here: /v1/status shows
        # audit.healthy false, and allowed requests are refused (403 or 503, never relayed).
        cordon = H.Cordon(jobs_yaml(), DNS.port, self.proxy_opts, fsize_limit=256 * KiB)
        self.addCleanup(cordon.cleanup)
        cordon.start()
        s = cordon.create_session("web")
        auth = H.basic(s["id"], s["token"])
        c = cordon.conn()
        self._conns.append(c)
        c.send(H.connect_request(f"raw.test:{ECHO.port}", auth))
        self.assertEqual(c.read_response(method="CONNECT").status, 200, "works before")
        c.close()
        self.assertTrue(cordon.fill_audit_with_denials(auth),
                        "audit still healthy after the log file hit RLIMIT_FSIZE")
        n_echo, n_http = ECHO.snapshot(), HTTP.snapshot()
        for attempt in range(3):
            with self.subTest(attempt=attempt):
                c = cordon.conn()
                self._conns.append(c)
                c.send(H.connect_request(f"raw.test:{ECHO.port}", auth))
                try:
                    r = c.read_response(method="CONNECT")
                    self.assertIn(r.status, (403, 503), f"allowed CONNECT with a broken audit "
                                                        f"log: {r}")
                except (EOFError, ConnectionResetError):
                    pass  # closed without an answer: also closed
                c = cordon.conn()
                self._conns.append(c)
                c.send(http_req("GET", f"http://localhost:{HTTP.port}/failclosed", auth=auth))
                try:
                    r = c.read_response()
                    self.assertIn(r.status, (403, 503), r)
                except (EOFError, ConnectionResetError):
                    pass
        time.sleep(0.2)
        self.assertEqual(ECHO.snapshot(), n_echo, "relayed to the origin with no audit log")
        self.assertEqual(HTTP.snapshot(), n_http, "forwarded to the origin with no audit log")
        cordon.stop()


class StartupTests(CordonTestCase):
    """`cordon serve` refusing to start: the message names the listener and its address and
    gives the system's reason, without Boost's source location."""

    start_cordon = False

    def hold(self, kind, port=0):
        """A Python socket holding 127.0.0.1:port (TCP listening, or UDP bound)."""
        s = socket.socket(socket.AF_INET, kind)
        self.addCleanup(s.close)
        s.bind(("127.0.0.1", port))
        if kind == socket.SOCK_STREAM:
            s.listen(1)
        return s.getsockname()[1]

    def refused(self, cordon):
        self.addCleanup(cordon.cleanup)
        with self.assertRaises(H.CordonError):
            cordon.start()
        self.assertEqual(cordon.proc.wait(5), 1)
        err = cordon.stderr_text()
        self.assertNotIn("/usr/include", err)
        self.assertNotIn("system:", err)
        return err

    def test_listener_in_use_is_named_with_its_address(self):
        for listener in ("proxy", "admin"):
            with self.subTest(listener=listener):
                port = self.hold(socket.SOCK_STREAM)
                cordon = H.Cordon(jobs_yaml(), DNS.port, self.proxy_opts)
                text = cordon.policy_text(jobs_yaml()).replace(
                    f"  {listener}: 127.0.0.1:0\n", f"  {listener}: 127.0.0.1:{port}\n")
                self.assertIn(f"127.0.0.1:{port}", text)
                cordon.write_policy(raw_text=text)
                err = self.refused(cordon)
                self.assertIn(f"cordon: refusing to start: cannot listen on 127.0.0.1:{port} "
                              f"({listener}): Address already in use\n", err)
        for transport, kind in (("UDP", socket.SOCK_DGRAM), ("TCP", socket.SOCK_STREAM)):
            with self.subTest(listener="dns", transport=transport):
                port = self.hold(kind)
                cordon = H.Cordon(jobs_yaml(), DNS.port, self.proxy_opts,
                                  listen_dns=f"127.0.0.1:{port}")
                err = self.refused(cordon)
                self.assertIn(f"cordon: refusing to start: cannot listen on 127.0.0.1:{port} "
                              f"(dns, {transport}): Address already in use\n", err)



class CliUnexpectedAnswerTests(unittest.TestCase):
    """An admin API answer of a shape the CLI does not expect (a proxy in the way, another
    version) ends the verb with one line and exit 1: no abort, no Boost source location."""

    def test_session_list_with_a_wrong_shaped_answer(self):
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = b'{"sessions": 5}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.addCleanup(server.server_close)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.shutdown)
        token = os.path.join(H.tempfile.mkdtemp(), "token")
        with open(token, "w") as f:
            f.write("t" * 32)
        env = dict(os.environ, CORDON_ADMIN=f"http://127.0.0.1:{server.server_address[1]}",
                   CORDON_ADMIN_TOKEN_FILE=token)
        r = H.subprocess.run([H.CORDON_BIN, "session", "list"], env=env, text=True,
                             stdin=H.subprocess.DEVNULL, capture_output=True, timeout=20)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertTrue(r.stderr.startswith("cordon session: unexpected error: "), r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertNotIn("/usr/include", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
