"""Integration tests of TLS inspection (`protocol: https`, issue 21, DESIGN "Inspection"):
`cordon ca init`, cordon completing the client's TLS with a leaf it mints for the CONNECT
host, its own verified TLS to the upstream, HTTP/1.1 requests decided one by one inside the
tunnel (request rules, smuggling checks, Host), http.request records, the upstream checks
(expired, self-signed, wrong name: 502 upstream_tls), h2-only ALPN and SNI mismatches
refused, report mode, metrics, GET /v1/ca.pem and http://cordon.events/ca.pem.
Real `cordon serve`, real curl, Python's ssl and Debian's python3 with requests and httpx, on
loopback only: the origins are TLS servers here whose certificates chain to a CA this test
makes and gives cordon as `upstream_ca`.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_inspect   (from tests/integration)
"""

import hashlib
import http.server
import json
import os
import socket
import socketserver
import ssl
import stat
import subprocess
import threading
import time
import unittest
import uuid

import harness as H

DNS = None
PKI = None  # the test's upstream CA and the origins' certificates
ORIGINS = {}  # name -> InspectOrigin
CA_DIR = None  # cordon's CA (cordon ca init)
DEBIAN_PYTHON = "/usr/bin/python3"  # Debian's, with python3-requests and python3-httpx


openssl = H.openssl
TestPKI = H.TestPKI


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            out = bytearray()
            for _ in range(1_000_000):
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    for _ in range(100):
                        if self.rfile.readline() in (b"\r\n", b"\n", b""):
                            break
                    break
                out.extend(self.rfile.read(size))
                self.rfile.readline()
            return bytes(out)
        n = int(self.headers.get("Content-Length", "0") or "0")
        return self.rfile.read(n) if n else b""

    def _serve(self):
        body = self._body() if self.command not in ("GET", "HEAD") or \
            self.headers.get("Content-Length") or self.headers.get("Transfer-Encoding") else b""
        rec = {"method": self.command, "path": self.path,
               "headers": {k.lower(): v for k, v in self.headers.items()},
               "body_len": len(body), "sha256": hashlib.sha256(body).hexdigest(),
               "conn": id(self.connection)}
        self.server.origin.record(rec)
        if self.path.startswith("/gzip"):
            # An answer cordon cannot read: gzip'd, whatever the request asked for.
            import gzip
            auth = self.headers.get("Authorization", "")
            out = gzip.compress(b'{"auth": "' + auth.encode() + b'"}\n')
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        if self.path.startswith("/echo"):
            # What the origin got as Authorization, in the body (past a 16 KiB window when
            # asked: the value straddles two reads of the proxy) and in a header.
            auth = self.headers.get("Authorization", "")
            pad = b"p" * (16384 - 7) if self.path.startswith("/echo-big") else b""
            out = pad + b'{"auth": "' + auth.encode() + b'"}\n'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Echo", auth)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        if self.path.startswith("/big/"):
            n = int(self.path.split("/")[2])
            chunk = b"z" * 65536
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            if self.command != "HEAD":
                sent = 0
                while sent < n:
                    part = chunk[:min(len(chunk), n - sent)]
                    self.wfile.write(part)
                    sent += len(part)
            return
        out = json.dumps({"origin": self.server.origin.name, "method": self.command,
                          "path": self.path, "body_len": len(body),
                          "sha256": rec["sha256"]}).encode() + b"\n"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def get_request(self):
        c, addr = self.socket.accept()
        # The handshake runs in the handler's thread (first read), never in the accept loop.
        return self.ctx.wrap_socket(c, server_side=True, do_handshake_on_connect=True,
                                    suppress_ragged_eofs=True), addr

    def handle_error(self, request, client_address):
        pass


class InspectOrigin:
    """A keep-alive HTTPS origin on 127.0.0.1 with the given certificate; records every
    request (method, path, headers, body length and hash)."""

    def __init__(self, name, cert, key):
        self.name = name
        self.lock = threading.Lock()
        self.requests = []
        self.server = _Server((H.LOOPBACK, 0), _Handler, bind_and_activate=True)
        self.server.origin = self
        self.server.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server.ctx.load_cert_chain(cert, key)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def record(self, rec):
        with self.lock:
            self.requests.append(rec)

    def matching(self, marker):
        with self.lock:
            return [r for r in self.requests if marker in r["path"]]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def setUpModule():
    global DNS, PKI, CA_DIR
    PKI = TestPKI()
    certs = {
        "api.test": PKI.leaf("api", "api.test"),
        "expired.test": PKI.leaf("expired", "expired.test", days="-1"),
        "self.test": PKI.leaf("self", "self.test", self_signed=True),
        "wrong.test": PKI.leaf("wrong", "other.test"),  # names another host
        "llm.test": PKI.leaf("llm", "llm.test"),  # the credentialed host
    }
    for name, (cert, key) in certs.items():
        ORIGINS[name] = InspectOrigin(name, cert, key)
    DNS = H.FakeDNS({name: {"A": ["127.0.0.1"]} for name in list(certs) + ["plain.test"]})
    CA_DIR = H.TempDir("cordon-it-ca-")


def tearDownModule():
    for o in list(ORIGINS.values()) + [DNS]:
        if o is not None:
            o.stop()
    for d in (PKI.dir if PKI else None, CA_DIR):
        if d is not None:
            d.cleanup()


def cordon_ca_dir():
    """cordon's CA, made once by `cordon ca init`."""
    d = CA_DIR.join("ca")
    if not os.path.exists(os.path.join(d, "ca.pem")):
        p = subprocess.run([H.CORDON_BIN, "ca", "init", d], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        assert p.returncode == 0, p.stderr
    return d


# What only cordon and llm.test may see. No known token shape (the audit log's shape-based
# redaction would hide an "sk-..." value whatever cordon does) and a '+' a path may encode.
REAL_SECRET = "rK7+" + uuid.uuid4().hex + "~x"


def secret_file():
    path = CA_DIR.join("openai.secret")
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(REAL_SECRET + "\n")
    return path


def inspect_yaml(ca_dir, upstream_ca=None):
    return ("inspect:\n"
            f"  ca: {{ cert: {ca_dir}/ca.pem, key: {ca_dir}/ca.key }}\n"
            f"  upstream_ca: {upstream_ca or PKI.ca_cert}\n"
            "  leaf_ttl: 24h\n"
            "secrets:\n"
            f"  openai: {{ file: {secret_file()} }}\n")


def jobs_yaml():
    res = 'resolves_to: [127.0.0.0/8]'
    api = ORIGINS["api.test"].port
    return (
        "  coder:\n"
        "    task: call one API over HTTPS, a few endpoints only\n"
        "    egress:\n"
        "      - host: api.test\n"
        f"        ports: [{api}]\n"
        "        protocol: https\n"
        f"        {res}\n"
        "        http:\n"
        "          - { methods: [POST], paths: [/v1/chat/completions, /v1/upload] }\n"
        "          - { methods: [GET, HEAD], paths: [\"/v1/models/**\", \"/big/*\"] }\n"
        + "".join(f"      - {{ host: {n}, ports: [{ORIGINS[n].port}], protocol: https, {res} }}\n"
                  for n in ("expired.test", "self.test", "wrong.test")) +
        "      - host: llm.test\n"
        f"        ports: [{ORIGINS['llm.test'].port}]\n"
        "        protocol: https\n"
        f"        {res}\n"
        "        credential: { secret: openai, header: Authorization, format: \"Bearer {}\" }\n"
        "        http: [{ paths: [\"/**\"] }]\n"
        "    credentials: { OPENAI_API_KEY: openai }\n"
        "    identity: { ttl: 30m }\n"
        "  watcher:\n"
        "    task: the same API, reported\n"
        "    mode: report\n"
        "    egress:\n"
        f"      - {{ host: api.test, ports: [{api}], protocol: https, {res},\n"
        "          http: [{ methods: [GET], paths: [\"/v1/**\"] }] }\n"
        "    identity: { ttl: 30m }\n")


class _InspectClient:
    """What the test classes share: inspected tunnels through `cls.cordon` for session
    `cls.s`, requests inside them, the audit log."""

    def setUp(self):
        self.conns = []

    def tearDown(self):
        for c in self.conns:
            c.close()

    # helpers --------------------------------------------------------------------------

    def client_ctx(self, alpn=None):
        ctx = ssl.create_default_context(cafile=os.path.join(self.ca, "ca.pem"))
        if alpn:
            ctx.set_alpn_protocols(alpn)
        return ctx

    def tls(self, host, session=None, sni=None, alpn=None):
        """CONNECT host:port, then TLS with cordon's leaf (trusting only cordon's CA);
        returns the ProxyConn whose socket is now the TLS one."""
        port = ORIGINS[host].port if host in ORIGINS else 443
        c, r = self.cordon.tunnel(session or self.s, f"{host}:{port}")
        self.conns.append(c)
        self.assertEqual(r.status, 200, r.raw_head)
        c.sock = self.client_ctx(alpn).wrap_socket(c.sock, server_hostname=sni or host)
        return c

    def request(self, c, method, path, host="api.test", body=b"", headers=()):
        port = ORIGINS[host].port
        head = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        for k, v in headers:
            head += f"{k}: {v}\r\n"
        if body or method in ("POST", "PUT"):
            head += f"Content-Length: {len(body)}\r\n"
        c.send(head.encode() + b"\r\n" + body)
        return c.read_response(10, method=method)

    def events(self, kind, pred=lambda e: True, want=1, timeout=5):
        got = []

        def ready():
            got[:] = [e for e in self.cordon.audit_events() if e["event"] == kind and pred(e)]
            return len(got) >= want
        H.wait_until(ready, timeout)
        return got

    def curl(self, url, *extra, session=None):
        return H.run_curl(["-sS", "--cacert", os.path.join(self.ca, "ca.pem"),
                           "-x", self.cordon.proxy_url(session or self.s),
                           "--resolve", f"{url.split('/')[2]}:127.0.0.1", *extra, url])


class InspectTests(_InspectClient, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ca = cordon_ca_dir()
        cls.cordon = H.Cordon(jobs_yaml(), DNS.port, extra_yaml=inspect_yaml(cls.ca)).start()
        cls.s = cls.cordon.create_session("coder")
        cls.w = cls.cordon.create_session("watcher")
        cls.api = ORIGINS["api.test"]

    @classmethod
    def tearDownClass(cls):
        cls.cordon.stop()
        cls.cordon.cleanup()

    # the allowed path ---------------------------------------------------------------

    def test_curl_gets_through_with_cordons_ca_and_the_origin_sees_the_request(self):
        m = uuid.uuid4().hex[:8]
        url = f"https://api.test:{self.api.port}/v1/models/{m}?key=hunter2&x=1"
        p = self.curl(url, "-w", "\n%{http_code} %{http_version}")
        out = p.stdout.decode()
        self.assertTrue(out.endswith("200 1.1"), (out, p.stderr))
        self.assertEqual(json.loads(out.split("\n")[0])["path"], f"/v1/models/{m}?key=hunter2&x=1")
        self.assertEqual(len(self.api.matching(m)), 1)
        # The record: method, path with every query value hidden, status, bytes, rule's job.
        ev = self.events("http.request", lambda e: m in e.get("path", ""))[0]
        self.assertEqual(ev["method"], "GET")
        self.assertEqual(ev["path"], f"/v1/models/{m}?key=REDACTED&x=REDACTED")
        self.assertEqual(ev["status"], 200)
        self.assertEqual(ev["job"], "coder")
        self.assertEqual(ev["session"], self.s["id"])
        self.assertGreater(ev["bytes_down"], 0)
        self.assertNotIn("hunter2", self.cordon.audit_raw().decode())

    def test_the_leaf_is_minted_for_the_name_and_chains_to_cordons_ca(self):
        c = self.tls("api.test")
        cert = c.sock.getpeercert()
        self.assertIn(("DNS", "api.test"), cert["subjectAltName"])
        self.assertEqual(c.sock.selected_alpn_protocol(), None)  # none was offered
        c2 = self.tls("api.test", alpn=["h2", "http/1.1"])
        self.assertEqual(c2.sock.selected_alpn_protocol(), "http/1.1")

    def test_keep_alive_requests_each_decided_and_recorded(self):
        m = uuid.uuid4().hex[:8]
        c = self.tls("api.test")
        for i in range(5):
            r = self.request(c, "GET", f"/v1/models/{m}/{i}")
            self.assertEqual(r.status, 200, r.body)
        self.assertEqual(len(self.api.matching(m)), 5)
        # One upstream connection carried them all.
        self.assertEqual(len({rec["conn"] for rec in self.api.matching(m)}), 1)
        self.assertEqual(len(self.events("http.request", lambda e: m in e.get("path", ""),
                                         want=5)), 5)
        r = self.request(c, "HEAD", f"/v1/models/{m}/head")
        self.assertEqual(r.status, 200)

    def test_bodies_stream_both_ways_content_length_and_chunked(self):
        m = uuid.uuid4().hex[:8]
        body = os.urandom(3 * 1024 * 1024 + 17)
        c = self.tls("api.test")
        r = self.request(c, "POST", f"/v1/upload?m={m}", body=body)
        self.assertEqual(r.status, 200, r.body[:200])
        self.assertEqual(r.json()["sha256"], hashlib.sha256(body).hexdigest())
        # chunked, from curl reading stdin
        p = subprocess.run(
            ["curl", "-q", "--noproxy", "", "-sS", "--cacert", os.path.join(self.ca, "ca.pem"),
             "-x", self.cordon.proxy_url(self.s), "-H", "Transfer-Encoding: chunked",
             "--data-binary", "@-", f"https://api.test:{self.api.port}/v1/upload?c={m}"],
            input=body, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(json.loads(p.stdout)["sha256"], hashlib.sha256(body).hexdigest(),
                         p.stderr)
        # a large response
        r = self.request(c, "GET", f"/big/{8 * 1024 * 1024}")
        self.assertEqual(len(r.body), 8 * 1024 * 1024)

    def test_debian_python_requests_and_httpx_work_unmodified(self):
        m = uuid.uuid4().hex[:8]
        url = f"https://api.test:{self.api.port}/v1/models/{m}"
        script = (
            "import inspect, sys, requests, httpx\n"
            "proxy, url, ca = sys.argv[1:4]\n"
            "r = requests.get(url + '/requests', proxies={'https': proxy}, verify=ca, timeout=20)\n"
            "print(r.status_code)\n"
            "# httpx 0.23 (Debian 12) takes proxies=, later versions proxy=\n"
            "kw = {'proxy': proxy} if 'proxy' in inspect.signature(httpx.Client).parameters \\\n"
            "    else {'proxies': proxy}\n"
            "with httpx.Client(verify=ca, timeout=20, **kw) as c:\n"
            "    print(c.get(url + '/httpx').status_code)\n")
        p = subprocess.run([DEBIAN_PYTHON, "-c", script, self.cordon.proxy_url(self.s), url,
                            os.path.join(self.ca, "ca.pem")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "NO_PROXY": ""})
        self.assertEqual(p.stdout.decode().split(), ["200", "200"], p.stderr.decode()[-2000:])
        self.assertEqual(sorted(r["path"].rsplit("/", 1)[1] for r in self.api.matching(m)),
                         ["httpx", "requests"])

    # what is refused inside the tunnel ---------------------------------------------

    def test_a_request_no_rule_allows_is_denied_inside_tls_and_never_forwarded(self):
        m = uuid.uuid4().hex[:8]
        for method, path in (("DELETE", f"/v1/models/{m}"), ("GET", f"/admin/{m}"),
                             ("POST", f"/v1/models/{m}")):
            c = self.tls("api.test")
            r = self.request(c, method, path, body=b"{}" if method == "POST" else b"")
            self.assertEqual(r.status, 403, (method, path, r.body))
            self.assertEqual(r.header("X-Cordon-Deny"), "http_rule")
            self.assertEqual(r.json()["reason"], "http_rule")
            self.assertTrue(c.wait_closed(5)[0])
        self.assertEqual(self.api.matching(m), [])
        evs = self.events("http.request", lambda e: m in e.get("path", ""), want=3)
        self.assertEqual({e["reason"] for e in evs}, {"http_rule"})
        self.assertEqual({e["status"] for e in evs}, {403})

    def test_path_tricks_are_refused_before_any_rule_sees_them(self):
        m = uuid.uuid4().hex[:8]
        for path in (f"/v1/models/../../admin/{m}", f"/v1/models%2f..%2fadmin/{m}",
                     f"/v1/models/%2e%2e/%2e%2e/admin/{m}", f"/v1/models/x/..;/{m}"):
            c = self.tls("api.test")
            r = self.request(c, "GET", path)
            self.assertIn(r.status, (400, 403), (path, r.body))
        self.assertEqual(self.api.matching(m), [])
        # '//' collapses: what is matched is what the origin reads.
        c = self.tls("api.test")
        r = self.request(c, "GET", f"//v1//models/{m}")
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual([x["path"] for x in self.api.matching(m)], [f"/v1/models/{m}"])

    def test_smuggling_and_host_tricks_are_refused(self):
        m = uuid.uuid4().hex[:8]
        cases = [
            f"POST /v1/upload?{m} HTTP/1.1\r\nHost: api.test:{self.api.port}\r\n"
            "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            f"POST /v1/upload?{m} HTTP/1.1\r\nHost: api.test:{self.api.port}\r\n"
            "Content-Length: 4\r\nContent-Length: 5\r\n\r\nabcd",
            f"GET /v1/models/{m} HTTP/1.1\r\nHost: evil.test\r\n\r\n",
            f"GET /v1/models/{m} HTTP/1.1\r\n\r\n",
            f"GET https://evil.test/v1/models/{m} HTTP/1.1\r\nHost: api.test:{self.api.port}\r\n\r\n",
            f"GET /v1/models/{m} HTTP/1.1\r\nHost: api.test:{self.api.port}\r\n folded: x\r\n\r\n",
            f"GET /v1/models/{m} HTTP/1.1\r\nHost: api.test:{self.api.port}\r\n"
            "Content-Length: 5\r\n\r\nGET /",  # a body on GET where rules restrict paths
        ]
        for raw in cases:
            c = self.tls("api.test")
            c.send(raw.encode())
            r = c.read_response(10)
            self.assertEqual(r.status, 400, (raw, r.body))
            self.assertEqual(r.header("X-Cordon-Deny"), "bad_request")
        self.assertEqual(self.api.matching(m), [])

    def test_report_mode_lets_through_with_would_deny(self):
        m = uuid.uuid4().hex[:8]
        c = self.tls("api.test", session=self.w)
        r = self.request(c, "GET", f"/other/{m}")
        self.assertEqual(r.status, 200, r.body)
        ev = self.events("http.request", lambda e: m in e.get("path", ""))[0]
        self.assertEqual(ev["would_deny"], "http_rule")
        # never a refused path
        c = self.tls("api.test", session=self.w)
        r = self.request(c, "GET", f"/v1/%2e%2e/{m}")
        self.assertEqual(r.status, 400)

    # the TLS on each side ------------------------------------------------------------

    def test_an_upstream_that_does_not_verify_is_refused_with_upstream_tls(self):
        for host, why in (("expired.test", "expired"), ("self.test", "self-signed"),
                          ("wrong.test", "mismatch")):
            before = len(ORIGINS[host].requests)
            c = self.tls(host)
            r = c.read_response(10)
            self.assertEqual(r.status, 502, (host, r.body))
            self.assertEqual(r.header("X-Cordon-Deny"), "upstream_tls")
            self.assertIn(why, r.json()["message"].lower(), host)
            self.assertEqual(len(ORIGINS[host].requests), before, host)
        evs = self.events("http.request", lambda e: e.get("reason") == "upstream_tls", want=3)
        self.assertGreaterEqual(len(evs), 3)

    def test_h2_only_alpn_fails_the_handshake_with_a_clear_reason(self):
        port = self.api.port
        c, r = self.cordon.tunnel(self.s, f"api.test:{port}")
        self.conns.append(c)
        self.assertEqual(r.status, 200)
        with self.assertRaises(ssl.SSLError) as cm:
            self.client_ctx(["h2"]).wrap_socket(c.sock, server_hostname="api.test")
        self.assertIn("ALERT", str(cm.exception).upper())
        ev = self.events("conn.close", lambda e: e.get("reason") == "alpn")
        self.assertTrue(ev)

    def test_a_client_hello_for_another_name_is_refused(self):
        c, r = self.cordon.tunnel(self.s, f"api.test:{self.api.port}")
        self.conns.append(c)
        self.assertEqual(r.status, 200)
        ctx = ssl.create_default_context(cafile=os.path.join(self.ca, "ca.pem"))
        ctx.check_hostname = False
        with self.assertRaises((ssl.SSLError, OSError)):
            ctx.wrap_socket(c.sock, server_hostname="evil.test")
        self.assertTrue(self.events("conn.close", lambda e: e.get("reason") == "sni_mismatch"))

    # trust and operations ------------------------------------------------------------

    def test_the_ca_certificate_is_served_to_sandboxes(self):
        with open(os.path.join(self.ca, "ca.pem")) as f:
            pem = f.read()
        status, hdrs, body = self.cordon.admin_raw("GET", "/v1/ca.pem")
        self.assertEqual(status, 200)
        self.assertEqual(body.decode(), pem)
        self.assertIn("pem", hdrs["content-type"])
        # and on the reserved name, through the proxy, to a session
        c = self.cordon.conn()
        self.conns.append(c)
        c.send(("GET http://cordon.events/ca.pem HTTP/1.1\r\nHost: cordon.events\r\n"
                f"Proxy-Authorization: {H.basic(self.s['id'], self.s['token'])}\r\n\r\n").encode())
        r = c.read_response(10)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.body.decode(), pem)
        self.assertNotIn("PRIVATE", r.body.decode())

    def test_metrics_count_inspected_requests(self):
        m = uuid.uuid4().hex[:8]
        c = self.tls("api.test")
        self.assertEqual(self.request(c, "GET", f"/v1/models/{m}").status, 200)
        status, _, body = self.cordon.admin_raw("GET", "/metrics")
        text = body.decode()
        line = [x for x in text.splitlines()
                if x.startswith('cordon_http_requests_total{') and 'job="coder"' in x
                and 'decision="allowed"' in x]
        self.assertTrue(line and float(line[0].split()[-1]) >= 1, text[-3000:])
        self.assertIn('reason="upstream_tls"', text)

    def test_network_kill_cuts_inspected_tunnels(self):
        c = self.tls("api.test")
        self.assertEqual(self.request(c, "GET", "/v1/models/before-kill").status, 200)
        status, js = self.cordon.admin("POST", "/v1/kill", {"reason": "test"})
        try:
            self.assertIn(status, (200, 202), js)
            closed, _ = c.wait_closed(5)
            self.assertTrue(closed)
        finally:
            self.cordon.admin("POST", "/v1/revive", {"reason": "test"})


class InspectedStreamTests(_InspectClient, unittest.TestCase):
    """The TLS under both sides of an inspected tunnel (proxy/data/tls_stream): clients that
    stop or go away mid-handshake, a kill of an idle tunnel, large bodies both ways to a slow
    reader, a client's half-close. Its own cordon, with a short handshake timeout."""

    @classmethod
    def setUpClass(cls):
        cls.ca = cordon_ca_dir()
        cls.cordon = H.Cordon(jobs_yaml(), DNS.port, extra_yaml=inspect_yaml(cls.ca),
                              proxy_opts={"handshake_timeout": "1s"}).start()
        cls.s = cls.cordon.create_session("coder")
        cls.api = ORIGINS["api.test"]

    @classmethod
    def tearDownClass(cls):
        cls.cordon.stop()
        cls.cordon.cleanup()

    def started_handshake(self):
        """A tunnel to api.test with a real ClientHello sent on it (Python's, trusting
        cordon's CA) and nothing after: the ProxyConn and the TLS object that made it."""
        c, r = self.cordon.tunnel(self.s, f"api.test:{self.api.port}")
        self.conns.append(c)
        self.assertEqual(r.status, 200, r.raw_head)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = self.client_ctx().wrap_bio(incoming, outgoing, server_hostname="api.test")
        with self.assertRaises(ssl.SSLWantReadError):
            obj.do_handshake()
        c.send(outgoing.read())
        return c

    def closes(self, reason, want):
        return self.events("conn.close", lambda e: e.get("reason") == reason
                           and e.get("target", "").startswith("api.test:"), want=want)

    def test_a_client_that_stops_mid_handshake_is_cut_by_the_handshake_timeout(self):
        before = len(self.closes("idle_timeout", 0))
        c = self.started_handshake()
        t0 = time.monotonic()
        closed, got = c.wait_closed(5)  # cordon's ServerHello..Finished, then the close
        self.assertTrue(closed)
        self.assertTrue(got)
        self.assertLess(time.monotonic() - t0, 3)
        self.assertEqual(len(self.closes("idle_timeout", before + 1)), before + 1)
        # One that goes away mid-handshake: client_tls, not the timeout.
        before = len(self.closes("client_tls", 0))
        c = self.started_handshake()
        c.sock.settimeout(5)
        self.assertTrue(c.sock.recv(65536))
        c.close()
        self.assertEqual(len(self.closes("client_tls", before + 1)), before + 1)
        # and the next client is served as ever
        c = self.tls("api.test")
        self.assertEqual(self.request(c, "GET", "/v1/models/after-stops").status, 200)

    def test_a_kill_closes_an_idle_inspected_tunnel_in_milliseconds(self):
        s = self.cordon.create_session("coder")
        c = self.tls("api.test", session=s)
        self.assertEqual(self.request(c, "GET", "/v1/models/idle-then-killed").status, 200)
        time.sleep(0.3)  # idle: cordon waits for the next request head
        t0 = time.monotonic()
        status, js = self.cordon.admin("POST", f"/v1/sessions/{s['id']}/kill", {"reason": "t"})
        self.assertIn(status, (200, 202), js)
        closed, _ = c.wait_closed(5)
        elapsed = time.monotonic() - t0
        self.assertTrue(closed)
        self.assertLess(elapsed, 0.5)
        self.assertTrue(self.events("conn.close", lambda e: e.get("session") == s["id"]
                                    and e.get("reason") == "session_killed"))

    def test_large_bodies_both_ways_to_a_slow_reader(self):
        m = uuid.uuid4().hex[:8]
        c = self.tls("api.test")
        body = os.urandom(6 * 1024 * 1024 + 5)
        r = self.request(c, "POST", f"/v1/upload?m={m}", body=body)
        self.assertEqual(r.status, 200, r.body[:200])
        self.assertEqual(r.json()["sha256"], hashlib.sha256(body).hexdigest())
        # 9 MiB back to a client that reads nothing for a while, then small pieces: cordon's
        # writes to it wait for the socket while the upstream's bytes wait for cordon.
        n = 9 * 1024 * 1024 + 3
        c.send(f"GET /big/{n} HTTP/1.1\r\nHost: api.test:{self.api.port}\r\n\r\n".encode())
        time.sleep(1)
        head = c.read_head(10)
        self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
        got = bytearray()
        while len(got) < n:
            d = c.recv(min(5000, n - len(got)))
            self.assertTrue(d, f"EOF after {len(got)} bytes")
            got.extend(d)
        self.assertEqual(got.count(b"z"), n)
        # the connection goes on
        self.assertEqual(self.request(c, "GET", f"/v1/models/{m}/after").status, 200)

    def test_a_client_half_close_after_its_request_still_gets_the_answer(self):
        c = self.tls("api.test")
        c.send(f"GET /v1/models/half-close HTTP/1.1\r\nHost: api.test:{self.api.port}\r\n\r\n"
               .encode())
        # A TCP FIN under the TLS (no close_notify): the SSLSocket's own shutdown would drop
        # its TLS state.
        socket.socket.shutdown(c.sock, socket.SHUT_WR)
        r = c.read_response(10)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["path"], "/v1/models/half-close")
        closed, _ = c.wait_closed(5)  # then cordon's close_notify and close
        self.assertTrue(closed)


class CredentialBrokerTests(unittest.TestCase):
    """The sandbox holds a placeholder; cordon swaps in the real key on the way to the one
    host whose rule names it, and nowhere else."""

    @classmethod
    def setUpClass(cls):
        cls.ca = cordon_ca_dir()
        cls.cordon = H.Cordon(jobs_yaml(), DNS.port, extra_yaml=inspect_yaml(cls.ca)).start()
        cls.s = cls.cordon.create_session("coder")
        cls.ph = cls.s["credentials"]["OPENAI_API_KEY"]
        cls.llm = ORIGINS["llm.test"]
        cls.api = ORIGINS["api.test"]

    @classmethod
    def tearDownClass(cls):
        try:
            raw = cls.cordon.audit_raw().decode()
            assert REAL_SECRET not in raw, "the real secret is in the audit log"
            assert cls.ph not in raw, "a placeholder is in the audit log"
        finally:
            cls.cordon.stop()
            cls.cordon.cleanup()

    def curl(self, host, path, *extra, session=None):
        port = ORIGINS[host].port
        return H.run_curl(["-sS", "--cacert", os.path.join(self.ca, "ca.pem"),
                           "-x", self.cordon.proxy_url(session or self.s), "-D", "-", *extra,
                           f"https://{host}:{port}{path}"])

    def status_and_reason(self, p):
        out = p.stdout.decode("latin-1")
        # curl -D - prints the proxy's "200 Connection established" first: the last answer
        last = out.rfind("\r\n\r\nHTTP/")
        out = out[last + 4:] if last >= 0 else out
        status = int(out.split(" ", 2)[1]) if out.startswith("HTTP/") else 0
        reason = ""
        for line in out.split("\r\n"):
            if line.lower().startswith("x-cordon-deny:"):
                reason = line.split(":", 1)[1].strip()
        return status, reason, out

    def test_the_session_gets_a_placeholder_never_the_secret(self):
        self.assertTrue(self.ph.startswith("cordon-ph-"), self.s)
        self.assertNotIn(REAL_SECRET, json.dumps(self.s))
        other = self.cordon.create_session("coder")
        self.assertNotEqual(other["credentials"]["OPENAI_API_KEY"], self.ph)
        # the job card without credentials gets none
        self.assertNotIn("credentials", self.cordon.create_session("watcher"))

    def test_the_placeholder_becomes_the_real_key_on_the_credentialed_host_only(self):
        m = uuid.uuid4().hex[:8]
        p = self.curl("llm.test", f"/echo?{m}", "-H", f"Authorization: Bearer {self.ph}")
        status, _, out = self.status_and_reason(p)
        self.assertEqual(status, 200, out)
        seen = self.llm.matching(m)
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0]["headers"]["authorization"], f"Bearer {REAL_SECRET}")
        # The echo comes back with the placeholder, in the body and the header.
        self.assertNotIn(REAL_SECRET, out)
        self.assertIn(f'"auth": "Bearer {self.ph}"', out)
        self.assertIn(f"X-Echo: Bearer {self.ph}", out)
        ev = [e for e in self.cordon.audit_events()
              if e["event"] == "http.request" and m in e.get("path", "")]
        H.wait_until(lambda: any(e["event"] == "http.request" and m in e.get("path", "")
                                 for e in self.cordon.audit_events()), 5)
        ev = [e for e in self.cordon.audit_events()
              if e["event"] == "http.request" and m in e.get("path", "")]
        self.assertEqual(ev[0]["credential"], "openai")

    def test_a_secret_echoed_across_a_read_boundary_is_still_replaced(self):
        m = uuid.uuid4().hex[:8]
        p = self.curl("llm.test", f"/echo-big?{m}", "-H", f"Authorization: Bearer {self.ph}")
        status, _, out = self.status_and_reason(p)
        self.assertEqual(status, 200, out[:300])
        self.assertNotIn(REAL_SECRET, out)
        self.assertIn(f'"auth": "Bearer {self.ph}"', out)

    def test_every_misuse_is_refused_and_nothing_reaches_the_origin(self):
        m = uuid.uuid4().hex[:8]
        theirs = self.cordon.create_session("coder")["credentials"]["OPENAI_API_KEY"]
        cases = [
            # the placeholder to another allowed host
            ("api.test", f"/v1/models/{m}/1", ["-H", f"Authorization: Bearer {self.ph}"],
             "credential_misuse"),
            # in another header, on the right host
            ("llm.test", f"/echo?{m}-2", ["-H", f"Authorization: Bearer {self.ph}",
                                          "-H", f"X-Api-Key: {self.ph}"], "credential_misuse"),
            # in the query
            ("llm.test", f"/echo?{m}-3&key={self.ph}",
             ["-H", f"Authorization: Bearer {self.ph}"], "credential_misuse"),
            # in the body
            ("llm.test", f"/echo?{m}-4", ["-H", f"Authorization: Bearer {self.ph}",
                                          "--data-binary", f'{{"k": "{self.ph}"}}'],
             "credential_misuse"),
            # another session's placeholder
            ("llm.test", f"/echo?{m}-5", ["-H", f"Authorization: Bearer {theirs}"],
             "credential_misuse"),
            # the client's own key on the credentialed host
            ("llm.test", f"/echo?{m}-6", ["-H", "Authorization: Bearer sk-agent-own-key-1234"],
             "credential_required"),
            # no credential at all
            ("llm.test", f"/echo?{m}-7", [], "credential_required"),
            # the real secret itself, in a body to another host
            ("api.test", f"/v1/upload?{m}-8", ["--data-binary", f"leak={REAL_SECRET}"],
             "secret_leak"),
        ]
        for host, path, extra, want in cases:
            p = self.curl(host, path, *extra)
            status, reason, out = self.status_and_reason(p)
            self.assertEqual((status, reason), (403, want), (host, path, out[:400]))
        self.assertEqual(self.llm.matching(m), [])
        self.assertEqual(self.api.matching(m), [])
        counts = {}
        H.wait_until(lambda: len([e for e in self.cordon.audit_events()
                                  if e["event"] == "http.request" and m in e.get("path", "")])
                     >= len(cases), 5)
        for e in self.cordon.audit_events():
            if e["event"] == "http.request" and m in e.get("path", ""):
                counts[e["reason"]] = counts.get(e["reason"], 0) + 1
        self.assertEqual(counts, {"credential_misuse": 5, "credential_required": 2,
                                  "secret_leak": 1})

    def raw_tls(self, host):
        c, r = self.cordon.tunnel(self.s, f"{host}:{ORIGINS[host].port}")
        self.assertEqual(r.status, 200)
        ctx = ssl.create_default_context(cafile=os.path.join(self.ca, "ca.pem"))
        c.sock = ctx.wrap_socket(c.sock, server_hostname=host)
        return c

    def test_the_placeholder_where_the_sent_bytes_would_carry_the_secret_is_refused(self):
        # Judged on the bytes sent, not only those received: an encoded placeholder the
        # path's normal form decodes, the placeholder as the method, the credentialed field
        # removed by the client's own Connection field.
        m = uuid.uuid4().hex[:8]
        enc = "%63" + self.ph[1:]
        port = self.llm.port
        auth = f"Authorization: Bearer {self.ph}\r\n"
        heads = [
            f"GET /echo/{m}/{enc} HTTP/1.1\r\nHost: llm.test:{port}\r\n{auth}\r\n",
            f"{self.ph} /echo/{m} HTTP/1.1\r\nHost: llm.test:{port}\r\n{auth}\r\n",
            f"GET /echo/{m}/{enc} HTTP/1.1\r\nHost: llm.test:{port}\r\n"
            f"Connection: Authorization\r\n{auth}\r\n",
        ]
        for head in heads:
            c = self.raw_tls("llm.test")
            c.send(head.encode())
            try:
                r = c.read_response(10)
            finally:
                c.close()
            self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "credential_misuse"),
                             (head, r.body))
        self.assertEqual(self.llm.matching(m), [])

    def test_a_secret_the_sandbox_sends_is_refused_and_never_written_to_the_audit_log(self):
        # The review's F1: a refused request's path and method went to the http.request
        # record as sent. Every form: as is, as the method, percent-encoded ('+' as %2B, the
        # rest mixed), to a host with and without the credential.
        m = uuid.uuid4().hex[:8]
        enc = "".join(f"%{ord(ch):02x}" if i % 2 else ch for i, ch in enumerate(REAL_SECRET))
        api, llm = self.api.port, self.llm.port
        auth = f"Authorization: Bearer {self.ph}\r\n"
        heads = [
            ("api.test", f"GET /v1/models/{m}/{REAL_SECRET} HTTP/1.1\r\nHost: api.test:{api}"
                         "\r\n\r\n"),
            ("api.test", f"{REAL_SECRET} /v1/models/{m} HTTP/1.1\r\nHost: api.test:{api}\r\n\r\n"),
            ("api.test", f"GET /v1/models/{m}/{enc} HTTP/1.1\r\nHost: api.test:{api}\r\n\r\n"),
            ("api.test", f"GET /v1/models/{m}?k={enc} HTTP/1.1\r\nHost: api.test:{api}\r\n\r\n"),
            ("llm.test", f"GET /echo/{m}/{REAL_SECRET} HTTP/1.1\r\nHost: llm.test:{llm}\r\n"
                         f"{auth}\r\n"),
        ]
        for host, head in heads:
            c = self.raw_tls(host)
            c.send(head.encode())
            try:
                r = c.read_response(10)
            finally:
                c.close()
            # the method: refused by the request rules first; the rest: secret_leak
            self.assertIn((r.status, r.header("X-Cordon-Deny")),
                          ((403, "secret_leak"), (403, "http_rule"), (400, "bad_request")),
                          (head, r.body))
        self.assertEqual(self.api.matching(m), [])
        self.assertEqual(self.llm.matching(m), [])
        H.wait_until(lambda: len([e for e in self.cordon.audit_events()
                                  if e["event"] == "http.request" and m in e.get("path", "")])
                     >= len(heads) - 1, 5)  # the method case has m in its path too
        raw = self.cordon.audit_raw().decode()
        self.assertNotIn(REAL_SECRET, raw)
        self.assertNotIn(REAL_SECRET.replace("+", "%2B"), raw)
        self.assertNotIn(REAL_SECRET[4:-2], raw)  # not even its random middle
        recs = [e for e in self.cordon.audit_events()
                if e["event"] == "http.request" and m in e.get("path", "")]
        self.assertTrue(any("REDACTED" in e.get("path", "") for e in recs), recs)
        self.assertTrue(any(e.get("method") == "REDACTED" for e in recs), recs)

    def test_a_credentialed_request_asks_for_an_answer_cordon_can_read(self):
        m = uuid.uuid4().hex[:8]
        p = self.curl("llm.test", f"/echo?{m}", "-H", f"Authorization: Bearer {self.ph}",
                      "-H", "Accept-Encoding: gzip, br")
        self.assertEqual(self.status_and_reason(p)[0], 200)
        self.assertEqual(self.llm.matching(m)[0]["headers"]["accept-encoding"], "identity")

    def test_an_encoded_answer_to_a_credentialed_request_is_not_passed_on(self):
        # Compression would hide an echoed key from the redaction: such an answer is a 502.
        m = uuid.uuid4().hex[:8]
        p = self.curl("llm.test", f"/gzip?{m}", "-H", f"Authorization: Bearer {self.ph}")
        status, _, out = self.status_and_reason(p)
        self.assertEqual(status, 502, out)
        self.assertIn("cannot redact", out)
        self.assertEqual(len(self.llm.matching(m)), 1)  # it was asked; its answer withheld

    def test_a_placeholder_late_in_a_large_body_is_caught_before_it_goes_upstream(self):
        m = uuid.uuid4().hex[:8]
        body = b"x" * (200 * 1024) + self.ph.encode() + b"y" * 1000
        c, r = self.cordon.tunnel(self.s, f"api.test:{self.api.port}")
        self.assertEqual(r.status, 200)
        ctx = ssl.create_default_context(cafile=os.path.join(self.ca, "ca.pem"))
        c.sock = ctx.wrap_socket(c.sock, server_hostname="api.test")
        c.send((f"POST /v1/upload?{m} HTTP/1.1\r\nHost: api.test:{self.api.port}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        resp = c.read_response(10)
        c.close()
        self.assertEqual(resp.status, 403)
        self.assertEqual(resp.header("X-Cordon-Deny"), "credential_misuse")
        time.sleep(0.3)
        # The origin never got a whole request, nor the placeholder: its connection was cut
        # before the chunk that carries it.
        for rec in self.api.matching(m):
            self.assertLess(rec["body_len"], 200 * 1024 + len(self.ph))

    def test_node_https_through_a_connect_agent(self):
        # Node's own https client over a CONNECT tunnel, trusting cordon's CA through
        # NODE_EXTRA_CA_CERTS (what `cordon run` sets), with the placeholder as its key.
        m = uuid.uuid4().hex[:8]
        script = r"""
const http = require('http'), https = require('https'), tls = require('tls');
const [proxyPort, auth, host, port, path, key] = process.argv.slice(1);
const c = http.request({host: '127.0.0.1', port: +proxyPort, method: 'CONNECT',
                        path: host + ':' + port, headers: {'Proxy-Authorization': auth}});
c.on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.log('CONNECT ' + res.statusCode); process.exit(1); }
  const r = https.request({host, port: +port, path, headers: {Authorization: 'Bearer ' + key},
                           createConnection: () => tls.connect({socket, servername: host})},
    (resp) => { let b = ''; resp.on('data', (d) => b += d);
                resp.on('end', () => { console.log(resp.statusCode); console.log(b); }); });
  r.on('error', (e) => { console.log('error ' + e.message); process.exit(1); });
  r.end();
});
c.end();
"""
        env = dict(os.environ, NODE_EXTRA_CA_CERTS=os.path.join(self.ca, "ca.pem"))
        p = subprocess.run(["node", "-e", script, str(self.cordon.proxy_addr[1]),
                            H.basic(self.s["id"], self.s["token"]), "llm.test",
                            str(self.llm.port), f"/echo?{m}", self.ph],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
                           env=env)
        self.assertEqual(p.stdout.split("\n")[0], "200", (p.stdout, p.stderr))
        self.assertIn(f'"auth": "Bearer {self.ph}"', p.stdout)
        self.assertNotIn(REAL_SECRET, p.stdout)
        self.assertEqual(self.llm.matching(m)[0]["headers"]["authorization"],
                         f"Bearer {REAL_SECRET}")

    def test_a_killed_session_makes_its_placeholder_worthless(self):
        s = self.cordon.create_session("coder")
        ph = s["credentials"]["OPENAI_API_KEY"]
        p = self.curl("llm.test", "/echo?before-kill", "-H", f"Authorization: Bearer {ph}",
                      session=s)
        self.assertEqual(self.status_and_reason(p)[0], 200)
        status, _ = self.cordon.admin("POST", f"/v1/sessions/{s['id']}/kill", {"reason": "test"})
        self.assertEqual(status, 200)
        p = self.curl("llm.test", "/echo?after-kill", "-H", f"Authorization: Bearer {ph}",
                      session=s)
        self.assertNotEqual(self.status_and_reason(p)[0], 200)
        self.assertEqual(self.llm.matching("after-kill"), [])
        # and with another session's credentials, the placeholder is another session's
        p = self.curl("llm.test", "/echo?cross", "-H", f"Authorization: Bearer {ph}")
        self.assertEqual(self.status_and_reason(p)[1], "credential_misuse")


class _GitHandler(http.server.BaseHTTPRequestHandler):
    """Git's smart HTTP: every request handed to the real `git http-backend` (CGI) on the
    origin's repositories; with `origin.auth` set, a request without exactly that
    Authorization is answered 401 and never reaches the backend."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _serve(self):
        origin = self.server.origin
        body = _Handler._body(self)
        path, _, query = self.path.partition("?")
        origin.record({"method": self.command, "path": self.path,
                       "headers": {k.lower(): v for k, v in self.headers.items()}})
        if origin.auth and self.headers.get("Authorization") != origin.auth:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Bearer realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": origin.root,
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_PROJECT_ROOT": origin.root,
               "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": self.command, "PATH_INFO": path,
               "QUERY_STRING": query, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1",
               "REMOTE_USER": "tester"}  # with a user, http-backend takes pushes too
        for name in ("Git-Protocol", "Content-Encoding"):
            if self.headers.get(name):
                env["HTTP_" + name.upper().replace("-", "_")] = self.headers[name]
        p = subprocess.run(["git", "http-backend"], input=body, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        head, _, out = p.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.split(b"\r\n"):
            k, _, v = line.decode("latin-1").partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _serve


def git_env(home, ca, proxy=None):
    """git reading no configuration but the test's: HOME is a temp dir, no system file,
    never a prompt; cordon's CA trusted as `cordon run` gives it."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
           "XDG_CONFIG_HOME": os.path.join(home, ".config"), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_TERMINAL_PROMPT": "0", "GIT_SSL_CAINFO": ca, "LC_ALL": "C",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.test",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.test",
           "NO_PROXY": "", "no_proxy": ""}
    if proxy:
        env["https_proxy"] = env["HTTPS_PROXY"] = proxy
    return env


class GitOverInspectionTests(unittest.TestCase):
    """Issue 21: git's smart HTTP through an inspected tunnel, to the real `git
    http-backend` behind a loopback TLS origin. Request rules allow reading the repository
    (GET info/refs, POST git-upload-pack) and nothing else: ls-remote and clone work, a push
    is refused at its git-receive-pack POST with 403 http_rule and never reaches the origin.
    A second origin takes only the real secret, which git never holds: it sends the
    session's placeholder (http.extraHeader) and cordon swaps it in. Then `policy suggest`
    learns those request rules back from the audit log."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = H.TempDir("cordon-it-git-")
        cls.home = cls.tmp.join("home")
        os.makedirs(cls.home)
        env = git_env(cls.home, "/dev/null")
        # A bare repository with one commit, made without any network.
        cls.root = cls.tmp.join("srv")
        os.makedirs(cls.root)
        work = cls.tmp.join("seed")
        for args in (["init", "-q", "--bare", "-b", "main", os.path.join(cls.root, "repo.git")],
                     ["init", "-q", "-b", "main", work]):
            subprocess.run(["git", *args], check=True, env=env, timeout=60)
        with open(os.path.join(work, "README"), "w") as f:
            f.write("hello through cordon\n")
        for args in (["add", "README"], ["commit", "-q", "-m", "first"],
                     ["push", "-q", os.path.join(cls.root, "repo.git"), "main"]):
            subprocess.run(["git", "-C", work, *args], check=True, env=env, timeout=60)
        cls.head = subprocess.run(["git", "-C", work, "rev-parse", "HEAD"], check=True,
                                  env=env, stdout=subprocess.PIPE, text=True,
                                  timeout=60).stdout.strip()
        cls.origins = {}
        for name, auth in (("git.test", None), ("gitauth.test", f"Bearer {REAL_SECRET}")):
            cert, key = PKI.leaf(name.split(".")[0], name)
            o = InspectOrigin(name, cert, key)
            o.server.RequestHandlerClass = _GitHandler
            o.root, o.auth = cls.root, auth
            cls.origins[name] = o
        cls.dns = H.FakeDNS({n: {"A": ["127.0.0.1"]} for n in cls.origins})
        read_only = ("        http:\n"
                     "          - { methods: [GET], paths: [/repo.git/info/refs] }\n"
                     "          - { methods: [POST], paths: [/repo.git/git-upload-pack] }\n")
        jobs = ("  gitter:\n"
                "    task: read one repository over HTTPS, never push\n"
                "    egress:\n"
                "      - host: git.test\n"
                f"        ports: [{cls.origins['git.test'].port}]\n"
                "        protocol: https\n"
                "        resolves_to: [127.0.0.0/8]\n" + read_only +
                "      - host: gitauth.test\n"
                f"        ports: [{cls.origins['gitauth.test'].port}]\n"
                "        protocol: https\n"
                "        resolves_to: [127.0.0.0/8]\n"
                "        credential: { secret: openai, header: Authorization, "
                "format: \"Bearer {}\" }\n" + read_only +
                "    credentials: { GIT_TOKEN: openai }\n"
                "    identity: { ttl: 30m }\n")
        cls.ca = cordon_ca_dir()
        cls.cordon = H.Cordon(jobs, cls.dns.port, extra_yaml=inspect_yaml(cls.ca)).start()
        cls.s = cls.cordon.create_session("gitter")

    @classmethod
    def tearDownClass(cls):
        try:
            raw = cls.cordon.audit_raw().decode()
            assert REAL_SECRET not in raw, "the real secret is in the audit log"
        finally:
            cls.cordon.stop()
            cls.cordon.cleanup()
            for o in cls.origins.values():
                o.stop()
            cls.dns.stop()
            cls.tmp.cleanup()

    def git(self, *args, cwd=None, extra=()):
        env = git_env(self.home, os.path.join(self.ca, "ca.pem"),
                      self.cordon.proxy_url(self.s))
        cmd = ["git", *extra, *args]
        return subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=120)

    def url(self, host):
        return f"https://{host}:{self.origins[host].port}/repo.git"

    def auth_header(self):
        return ["-c", f"http.extraHeader=Authorization: Bearer {self.s['credentials']['GIT_TOKEN']}"]

    def test_1_ls_remote_and_clone_through_the_request_rules(self):
        p = self.git("ls-remote", self.url("git.test"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"{self.head}\trefs/heads/main", p.stdout)
        dest = self.tmp.join("clone-plain")
        p = self.git("clone", "-q", self.url("git.test"), dest)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(dest, "README")) as f:
            self.assertEqual(f.read(), "hello through cordon\n")
        seen = {(r["method"], r["path"].split("?")[0])
                for r in self.origins["git.test"].requests}
        self.assertEqual(seen, {("GET", "/repo.git/info/refs"),
                                ("POST", "/repo.git/git-upload-pack")})
        evs = [e for e in self.cordon.audit_events() if e["event"] == "http.request"
               and e["target"].startswith("git.test:")]
        self.assertTrue(evs)
        self.assertEqual({e["status"] for e in evs}, {200})

    def test_2_a_push_is_refused_at_git_receive_pack(self):
        dest = self.tmp.join("clone-push")
        p = self.git("clone", "-q", self.url("git.test"), dest)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(dest, "NEW"), "w") as f:
            f.write("must not arrive\n")
        env = git_env(self.home, "/dev/null")
        for args in (["add", "NEW"], ["commit", "-q", "-m", "second"]):
            subprocess.run(["git", "-C", dest, *args], check=True, env=env, timeout=60)
        p = self.git("push", "origin", "main", cwd=dest)
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("403", p.stderr)
        # The origin saw the advertisement (GET info/refs is allowed whatever the query),
        # never the pack: cordon refused the POST before it left.
        self.assertNotIn("POST", {r["method"] for r in self.origins["git.test"].requests
                                  if "receive-pack" in r["path"]})
        ev = self.events(lambda e: e.get("path") == "/repo.git/git-receive-pack")
        self.assertEqual((ev["method"], ev["status"], ev["reason"]), ("POST", 403, "http_rule"))
        # and the bare repository still has one commit
        out = subprocess.run(["git", "--git-dir", os.path.join(self.root, "repo.git"), "log",
                              "--oneline", "main"], env=git_env(self.home, "/dev/null"),
                             stdout=subprocess.PIPE, text=True, timeout=60).stdout
        self.assertEqual(len(out.splitlines()), 1, out)

    def test_3_the_credentialed_origin_gets_the_real_secret_git_never_holds(self):
        o = self.origins["gitauth.test"]
        # Without the placeholder: refused by cordon (credential_required), never asked.
        before = len(o.requests)
        p = self.git("ls-remote", self.url("gitauth.test"))
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(len(o.requests), before)
        ev = self.events(lambda e: e["target"].startswith("gitauth.test:")
                         and e.get("reason") == "credential_required")
        self.assertEqual(ev["status"], 403)
        # With it: the origin sees the real secret on every request, git sees none.
        p = self.git("ls-remote", self.url("gitauth.test"), extra=self.auth_header())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"{self.head}\trefs/heads/main", p.stdout)
        dest = self.tmp.join("clone-auth")
        p = self.git("clone", "-q", self.url("gitauth.test"), dest, extra=self.auth_header())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(os.path.join(dest, "README")))
        auths = {r["headers"].get("authorization") for r in o.requests[before:]}
        self.assertEqual(auths, {f"Bearer {REAL_SECRET}"})
        self.assertNotIn(REAL_SECRET, p.stdout + p.stderr)
        ev = self.events(lambda e: e["target"].startswith("gitauth.test:")
                         and e.get("status") == 200)
        self.assertEqual(ev["credential"], "openai")

    def test_4_policy_suggest_learns_the_request_rules_back(self):
        # The traffic of tests 1-3 (unittest runs them in name order), or made here when
        # this test runs alone: reads of both origins and a refused push.
        if not self.events_now(lambda e: e.get("path") == "/repo.git/git-receive-pack"):
            self.test_2_a_push_is_refused_at_git_receive_pack()
        if not self.events_now(lambda e: e.get("path") == "/repo.git/git-upload-pack"
                               and e["target"].startswith("gitauth.test:")):
            p = self.git("clone", "-q", self.url("gitauth.test"), self.tmp.join("clone-4"),
                         extra=self.auth_header())
            self.assertEqual(p.returncode, 0, p.stderr)
        self.events(lambda e: e.get("path") == "/repo.git/git-upload-pack"
                    and e["target"].startswith("gitauth.test:"))  # written out
        p = subprocess.run([H.CORDON_BIN, "policy", "suggest", "--job", "gitter", "--config",
                            self.cordon.config_path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        for host in ("git.test", "gitauth.test"):
            port = self.origins[host].port
            rule = (f"  - host: {host}\n    ports: [{port}]\n    protocol: https\n"
                    '    resolves_to: ["127.0.0.1/32"]\n    http:\n')
            self.assertIn(rule, out)
            block = out.split(rule, 1)[1].split("  - host:", 1)[0].split("\n# ", 1)[0]
            self.assertIn('- { methods: [GET], paths: ["/repo.git/info/refs"] }', block)
            self.assertIn('- { methods: [POST], paths: ["/repo.git/git-upload-pack"] }', block)
            self.assertNotIn("receive-pack", block)
        self.assertIn("refused by the policy's request rules (http_rule), kept out: "
                      "POST /repo.git/git-receive-pack", out)
        self.assertIn("credential: { secret: openai, header: ..., format: \"...\" }", out)
        # It loads (with the inspect section, as the comment says), and replaying the
        # audit log against it changes nothing: the push stays refused.
        path = self.tmp.join("learned.yaml")
        with open(path, "w") as f:
            f.write("listen: { proxy: 127.0.0.1:3128 }\n" + inspect_yaml(self.ca) +
                    f"audit: {{ path: {self.cordon.audit_dir} }}\n"
                    "jobs:\n  gitter:\n    task: learned\n" +
                    "".join("    " + ln + "\n" for ln in out.splitlines()))
        c = subprocess.run([H.CORDON_BIN, "check-config", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
        r = subprocess.run([H.CORDON_BIN, "policy", "replay", "--config", path, "--job",
                            "gitter", "--format", "json"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["newly_denied"], [], r.stdout)
        self.assertEqual(doc["newly_allowed"], [], r.stdout)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def events_now(self, pred):
        return [e for e in self.cordon.audit_events() if e["event"] == "http.request" and pred(e)]

    def events(self, pred):
        got = []

        def ready():
            got[:] = self.events_now(pred)
            return bool(got)
        H.wait_until(ready, 5)
        self.assertTrue(got, "no such http.request record")
        return got[-1]


def namespaces_unavailable():
    """Why `cordon run` cannot run here, or None (as test_run.py decides)."""
    try:
        r = subprocess.run(["unshare", "-mpnui", "--fork", "--mount-proc", "true"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare failed: {e}"
    return None if r.returncode == 0 else "mount/PID/network namespaces unavailable here"


class RunWithInspectionTests(unittest.TestCase):
    """`cordon run` gives the sandbox the placeholders and cordon's CA, so an unmodified
    curl inside reaches the credentialed host with the real key never in the sandbox."""

    @classmethod
    def setUpClass(cls):
        why = namespaces_unavailable()
        if why:
            raise unittest.SkipTest(why)
        cls.ca = cordon_ca_dir()
        cls.cordon = H.Cordon(jobs_yaml(), DNS.port, extra_yaml=inspect_yaml(cls.ca),
                              listen_dns="127.0.0.1:0",
                              dns_yaml="  rate_limit: { qps: 10000, burst: 10000 }\n").start()

    @classmethod
    def tearDownClass(cls):
        cls.cordon.stop()
        cls.cordon.cleanup()

    def test_the_sandbox_holds_a_placeholder_and_trusts_cordons_ca(self):
        port = ORIGINS["llm.test"].port
        m = uuid.uuid4().hex[:8]
        script = (f'printf "%s\\n" "$OPENAI_API_KEY" "$SSL_CERT_FILE" "$NODE_EXTRA_CA_CERTS"; '
                  f'curl -sS "https://llm.test:{port}/echo?{m}" '
                  f'-H "Authorization: Bearer $OPENAI_API_KEY"')
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "CORDON_ADMIN": "http://%s:%d" % self.cordon.admin_addr,
               "CORDON_ADMIN_TOKEN_FILE": self.cordon.token_file,
               "OPENAI_API_KEY": REAL_SECRET}  # the host's own key must not leak in
        r = subprocess.run([self.cordon.bin, "run", "--job", "coder",
                            "--dns", "%s:%d" % self.cordon.dns_addr, "--", "sh", "-c", script],
                           env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith("cordon-ph-"), r.stdout)
        self.assertEqual(lines[1:3], ["/etc/ssl/certs/ca-certificates.crt"] * 2)
        self.assertIn(f'"auth": "Bearer {lines[0]}"', r.stdout)
        self.assertNotIn(REAL_SECRET, r.stdout + r.stderr)
        seen = ORIGINS["llm.test"].matching(m)
        self.assertEqual([x["headers"]["authorization"] for x in seen], [f"Bearer {REAL_SECRET}"])


class CaInitAndPolicyTests(unittest.TestCase):
    def test_ca_init_writes_a_p256_ca_and_a_private_key_and_never_overwrites(self):
        d = CA_DIR.join("fresh-" + uuid.uuid4().hex[:6])
        p = subprocess.run([H.CORDON_BIN, "ca", "init", d], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout.decode()
        self.assertIn("inspect:", out)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(d, "ca.key")).st_mode), 0o600)
        text = subprocess.run(["openssl", "x509", "-in", os.path.join(d, "ca.pem"), "-noout",
                               "-text"], stdout=subprocess.PIPE, check=True).stdout.decode()
        self.assertIn("CA:TRUE", text)
        self.assertIn("prime256v1", text)
        self.assertIn("Certificate Sign", text)
        with open(os.path.join(d, "ca.key")) as f:
            key = f.read()
        self.assertNotIn(key.strip().splitlines()[1], out)  # the key is never printed
        p2 = subprocess.run([H.CORDON_BIN, "ca", "init", d], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(p2.returncode, 1)
        self.assertIn("not overwritten", p2.stderr.decode())
        with open(os.path.join(d, "ca.key")) as f:
            self.assertEqual(f.read(), key)

    def test_ca_usage_errors(self):
        for args, code in ((["ca"], 2), (["ca", "init"], 2), (["ca", "frob"], 2),
                           (["ca", "init", "x", "--days", "0"], 2), (["ca", "--help"], 0)):
            p = subprocess.run([H.CORDON_BIN, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
            self.assertEqual(p.returncode, code, (args, p.stderr))

    def check(self, text):
        tmp = H.TempDir()
        try:
            path = tmp.join("p.yaml")
            with open(path, "w") as f:
                f.write(text)
            return subprocess.run([H.CORDON_BIN, "check-config", path], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=30)
        finally:
            tmp.cleanup()

    def test_an_https_rule_without_inspect_is_refused(self):
        p = self.check("listen: { proxy: 127.0.0.1:0 }\njobs:\n  a:\n    task: t\n    egress:\n"
                       "      - { host: api.test, ports: [443], protocol: https }\n")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("needs the 'inspect' section", p.stderr.decode() + p.stdout.decode())

    def test_serve_refuses_to_start_on_a_ca_it_cannot_load(self):
        d = cordon_ca_dir()
        bad = H.TempDir()
        try:
            with open(bad.join("ca.key"), "w") as f:
                f.write("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
            c = H.Cordon(jobs_yaml(), DNS.port, extra_yaml=(
                "inspect:\n"
                f"  ca: {{ cert: {d}/ca.pem, key: {bad.join('ca.key')} }}\n"
                f"secrets:\n  openai: {{ file: {secret_file()} }}\n"))
            with self.assertRaises(H.CordonError) as cm:
                c.start()
            self.assertIn("inspect.ca", str(cm.exception))
            self.assertNotIn("not a key", str(cm.exception))
            c.cleanup()
        finally:
            bad.cleanup()

    def test_reload_with_an_unreadable_ca_keeps_the_running_policy(self):
        d = CA_DIR.join("reload-" + uuid.uuid4().hex[:6])
        subprocess.run([H.CORDON_BIN, "ca", "init", d], check=True, stdout=subprocess.DEVNULL,
                       timeout=30)
        c = H.Cordon(jobs_yaml(), DNS.port, extra_yaml=inspect_yaml(d)).start()
        try:
            os.rename(os.path.join(d, "ca.key"), os.path.join(d, "ca.key.gone"))
            status, js = c.admin("POST", "/v1/reload", {})
            self.assertNotEqual(status, 200, js)
            os.rename(os.path.join(d, "ca.key.gone"), os.path.join(d, "ca.key"))
            s = c.create_session("coder")
            t, r = c.tunnel(s, f"api.test:{ORIGINS['api.test'].port}")
            self.assertEqual(r.status, 200)
            ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
            t.sock = ctx.wrap_socket(t.sock, server_hostname="api.test")
            t.close()
        finally:
            c.stop()
            c.cleanup()


if __name__ == "__main__":
    unittest.main()
