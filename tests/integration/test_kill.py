"""Integration tests of the kill switch (issue 4): network kill, session kill and credential
kill, driven through the admin API, the event stream and the CLI against the real
`cordon serve`, with deliberately uncooperative clients, on loopback only.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_kill   (from tests/integration)

Names resolve through a fake DNS server (raw.test -> 127.0.0.1) or /etc/hosts (localhost).
One cordon per test class (the network kill is global, so each class has its own); the
durability tests start a cordon per test because they SIGKILL and restart it.

"The origin receives no byte after the kill returned" is measured at the origin: right after
the kill call returns, the test counts, on the origin's own loop thread, every byte that
reached the origin host (read by the origin plus queued unread in its sockets); one second
later the origin must have read no more than that (bytes already queued may be discarded by
a reset, so the later count may be smaller, never larger).

Ambiguities of the contract and how they are resolved are marked "AMBIGUITY:" below.
"""

import datetime
import json
import os
import select
import signal
import socket
import threading
import time
import unittest
import uuid

import harness as H
from harness import KiB, MiB

HTTP = SINK = SLOW = ECHO = FLOOD = DNS = None


def setUpModule():
    global HTTP, SINK, SLOW, ECHO, FLOOD, DNS
    HTTP = H.HTTPOrigin()
    SINK = H.CountingOrigin("sink")
    # A slow upstream (8 MiB/s per connection): a streaming client outpaces it, so at any
    # moment megabytes it sent wait inside cordon on their way to the origin.
    SLOW = H.CountingOrigin("sink", read_rate=8 * MiB)
    ECHO = H.CountingOrigin("echo")
    FLOOD = H.CountingOrigin("flood")
    DNS = H.FakeDNS({"raw.test": {"A": ["127.0.0.1"]}})


def tearDownModule():
    for o in (HTTP, SINK, SLOW, ECHO, FLOOD, DNS):
        if o is not None:
            o.stop()


def jobs_yaml():
    return (
        "  agent:\n"
        "    task: integration tests of the kill switch\n"
        "    egress:\n"
        f"      - {{ host: raw.test, ports: [{SINK.port}, {SLOW.port}, {ECHO.port}, "
        f"{FLOOD.port}], "
        f"protocol: tcp, resolves_to: [127.0.0.0/8] }}\n"
        f"      - {{ host: localhost, ports: [{HTTP.port}], protocol: http, "
        f"methods: [GET, POST], resolves_to: [127.0.0.0/8, \"::1/128\"] }}\n"
        "    identity: { ttl: 30m }\n")


PROXY_OPTS = {"header_timeout": "5s", "idle_timeout": "60s", "handshake_timeout": "5s",
              "connect_timeout": "5s", "max_header_bytes": "8KiB"}

KILL_WINDOW = 1.0   # seconds from the kill call's return to "stopped"
CLOSE_ERRORS = (EOFError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


def parse_ts(ts):
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def marker(prefix):
    return f"/{prefix}-{uuid.uuid4().hex[:12]}"


def http_get(url, auth=None, keep_alive=True):
    netloc = url.split("://", 1)[1].split("/", 1)[0]
    lines = [f"GET {url} HTTP/1.1", f"Host: {netloc}"]
    if auth:
        lines.append(f"Proxy-Authorization: {auth}")
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def stalled_conn(addr, rcvbuf=16 * KiB, timeout=10):
    """A ProxyConn whose socket has a small receive buffer (set before connect)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(addr)
    c = H.ProxyConn.__new__(H.ProxyConn)
    c.sock = s
    c.buf = b""
    return c


def hung_up(sock, timeout):
    """True once the peer's close is visible on `sock` without reading from it (POLLRDHUP,
    POLLHUP or POLLERR) within `timeout` seconds."""
    p = select.poll()
    mask = select.POLLRDHUP | select.POLLHUP | select.POLLERR
    p.register(sock.fileno(), mask)
    deadline = time.monotonic() + timeout
    for _ in range(10_000):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        for _, ev in p.poll(max(1, int(left * 1000))):
            if ev & mask:
                return True
    return False


class KillCase(unittest.TestCase):
    """One cordon per class, a fresh `agent` session per test in self.session; each test
    starts with the network kill lifted and no live connection."""

    @classmethod
    def setUpClass(cls):
        cls.cordon = H.Cordon(jobs_yaml(), DNS.port, PROXY_OPTS)
        try:
            cls.cordon.start()
        except BaseException:
            cls.cordon.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        rc, dt = cls.cordon.stop()
        err = cls.cordon.stderr_text()
        cls.cordon.cleanup()
        if rc != 0:
            raise AssertionError(f"cordon serve exited {rc} on SIGTERM after {dt:.1f}s; "
                                 f"stderr tail:\n{err}")

    def setUp(self):
        self._conns = []
        self.assertTrue(self.cordon.alive(), "cordon is not running:\n" +
                        self.cordon.stderr_text())
        self.lift_kill()
        H.wait_until(lambda: self.cordon.status().get("connections") == 0, 3)
        self.session = self.cordon.create_session("agent")

    def tearDown(self):
        for c in self._conns:
            c.close()
        if self.cordon.alive():
            self.lift_kill()

    def lift_kill(self):
        st = self.cordon.status() or {}
        if (st.get("kill") or {}).get("engaged"):
            self.cordon.admin("POST", "/v1/revive", {"reason": "test cleanup", "by": "tests"})

    # helpers ----------------------------------------------------------------------------

    def auth_of(self, session=None, token=None):
        session = session or self.session
        return H.basic(session["id"], token or session["token"])

    def conn(self, timeout=10):
        c = self.cordon.conn(timeout)
        self._conns.append(c)
        return c

    def tunnel(self, port, session=None, token=None, auth="default", timeout=10):
        c = self.conn(timeout)
        if auth == "default":
            auth = self.auth_of(session, token)
        c.send(H.connect_request(f"raw.test:{port}", auth))
        return c, c.read_response(timeout, method="CONNECT")

    def open_tunnel(self, port, session=None, token=None):
        c, r = self.tunnel(port, session, token)
        self.assertEqual(r.status, 200, f"CONNECT raw.test:{port}: {r}")
        return c

    def echo(self, c, payload, timeout=5):
        c.send(payload)
        self.assertEqual(c.recv_exact(len(payload), timeout), payload)

    def post(self, path, body):
        """POSTs to the admin API; (status, json, t_call, t_ret) with monotonic times."""
        t_call = time.monotonic()
        status, js = self.cordon.admin("POST", path, body)
        return status, js, t_call, time.monotonic()

    def kill_network(self, reason="test: network kill", by="tests"):
        return self.post("/v1/kill", {"reason": reason, "by": by})

    def kill_session(self, sid=None, reason="test: session kill", by="tests"):
        return self.post(f"/v1/sessions/{sid or self.session['id']}/kill",
                         {"reason": reason, "by": by})

    def assertDenied(self, r, status, reason):
        self.assertEqual(r.status, status, f"{r}")
        self.assertEqual(r.header("X-Cordon-Deny"), reason, f"{r}")
        try:
            body = r.json()
        except ValueError:
            self.fail(f"denial body is not JSON: {r}")
        self.assertEqual(body.get("reason"), reason, body)
        return body

    def assertClosed(self, c, timeout=2, what="connection"):
        closed, _ = c.wait_closed(timeout)
        self.assertTrue(closed, f"{what} still open {timeout}s after a denial")

    def assertNoItems(self, items, msg):
        """Fails with msg alone (not the whole list) when items is not empty."""
        if items:
            self.fail(msg)

    def assertNumber(self, v, what):
        self.assertTrue(isinstance(v, (int, float)) and not isinstance(v, bool),
                        f"{what} is not a number: {v!r}")

    def assertConnectionsWithin(self, t_ret, want=0, window=KILL_WINDOW):
        """GET /v1/status connections reaches `want` by t_ret + window."""
        seen = []

        def check():
            n = self.cordon.status().get("connections")
            seen.append((round(time.monotonic() - t_ret, 3), n))
            return n == want
        ok = H.wait_until(check, max(0.05, t_ret + window - time.monotonic()), 0.02)
        self.assertTrue(ok, f"GET /v1/status connections not {want} within {window}s of the "
                            f"kill's return: (seconds after return, connections) "
                            f"{seen[:3]} ... {seen[-3:]}")

    def snapshot_origin(self, origin, n0):
        """Right after a kill returned: (bytes that reached the origin, cordon's sockets to
        the origin with what they still hold unsent) for assertNoBytesAfter."""
        sockets = H.tcp_states_to(origin.port)
        return origin.received(n0), sockets

    def assertNoBytesAfter(self, origin, n0, snapshot, t_ret, what):
        """The origin got no byte after the kill returned: one second after it, what the
        origin has read is at most what had reached it right after the return."""
        snap, sockets = snapshot
        time.sleep(max(0.0, t_ret + 1.0 - time.monotonic()))
        later = origin.received(n0)
        if later > snap:
            late = [(round(r["last_in"] - t_ret, 3), r["bytes_in"])
                    for r in origin.conns_since(n0)
                    if r["last_in"] is not None and r["last_in"] > t_ret]
            queued = [s for s in sockets if s[1] > 0]
            self.fail(f"{what}: the origin had {snap} bytes right after the kill returned and "
                      f"{later} one second later ({later - snap} bytes arrived after the "
                      f"kill); last read per connection (s after return, bytes in): "
                      f"{late[:10]}; cordon's sockets to the origin right after the return "
                      f"(state, unsent bytes, ...): {queued[:10]} "
                      f"(total unsent {sum(s[1] for s in queued)})")

    def assertOriginClosedWithin(self, origin, n0, t_ret, what, window=KILL_WINDOW):
        """Every origin connection since n0 is closed by t_ret + window (upstream socket
        shut)."""
        H.wait_until(lambda: all(r["closed"] for r in origin.conns_since(n0)),
                     max(0.05, t_ret + window - time.monotonic()))
        recs = origin.conns_since(n0)
        bad = [(i, r["closed"], None if r["closed_at"] is None
                else round(r["closed_at"] - t_ret, 3)) for i, r in enumerate(recs)
               if not r["closed"] or r["closed_at"] > t_ret + window]
        self.assertNoItems(bad, f"{what}: {len(bad)} of {len(recs)} upstream connections not "
                              f"closed within {window}s of the kill's return "
                              f"(index, closed, seconds after return): {bad[:10]}")

    def session_events(self, event, sid, count=1, timeout=5, **match):
        def pred(e):
            return (e.get("event") == event and e.get("session") == sid
                    and all(e.get(k) == v for k, v in match.items()))
        return self.cordon.wait_events(pred, count, timeout)

    def metrics(self):
        status, hdrs, raw = self.cordon.admin_raw("GET", "/metrics")
        self.assertEqual(status, 200, raw[:300])
        return H.prometheus_samples(raw.decode("utf-8", "replace"))

    @staticmethod
    def kills_total(samples, scope):
        return samples.get(("cordon_kills_total", frozenset({("scope", scope)})), 0.0)


# ======================================================================================
# Network kill: the API, what new requests get, keep-alive connections, metrics, audit
# ======================================================================================

class NetworkKillAPITests(KillCase):

    def test_kill_requires_reason_400(self):
        # AMBIGUITY: an empty or non-string reason is as missing as no reason.
        for body in [{}, {"by": "tests"}, {"reason": ""}, {"reason": 5}, b"not json"]:
            with self.subTest(body=body):
                status, hdrs, raw = self.cordon.admin_raw("POST", "/v1/kill", body)
                self.assertEqual(status, 400, raw)
                self.assertIn("json", hdrs.get("content-type", ""), hdrs)
                self.assertIsInstance(json.loads(raw).get("error"), str, raw)
        self.assertIs(self.cordon.status()["kill"]["engaged"], False)

    def test_kill_and_revive_need_admin_token_401(self):
        for path in ("/v1/kill", "/v1/revive"):
            for token in (None, "wrong-token-0123456789abcdef"):
                with self.subTest(path=path, token=token):
                    status, _ = self.cordon.admin("POST", path, {"reason": "x"}, token=token)
                    self.assertEqual(status, 401)
        self.assertIs(self.cordon.status()["kill"]["engaged"], False)

    def test_status_kill_not_engaged_at_start(self):
        kill = self.cordon.status().get("kill")
        self.assertIsInstance(kill, dict, self.cordon.status())
        self.assertIs(kill.get("engaged"), False, kill)

    def test_kill_answer_status_twice_revive_409(self):
        t0 = datetime.datetime.now(datetime.timezone.utc)
        status, js, _, _ = self.kill_network("incident 42: agent exfiltrating", "oncall-alice")
        self.assertEqual(status, 200, js)
        self.assertIs(js.get("engaged"), True, js)
        self.assertIs(js.get("already_engaged"), False, js)
        self.assertEqual(js.get("connections_closed"), 0, js)
        self.assertNumber(js.get("elapsed_ms"), "elapsed_ms")
        self.assertEqual(js.get("reason"), "incident 42: agent exfiltrating", js)
        self.assertEqual(js.get("by"), "oncall-alice", js)
        at = parse_ts(js["at"])
        self.assertLess(abs((at - t0).total_seconds()), 60, js)

        kill = self.cordon.status()["kill"]
        self.assertIs(kill.get("engaged"), True, kill)
        self.assertEqual(kill.get("reason"), "incident 42: agent exfiltrating", kill)
        self.assertEqual(kill.get("by"), "oncall-alice", kill)
        self.assertEqual(parse_ts(kill["at"]), at, kill)

        status, js2, _, _ = self.kill_network("again", "oncall-bob")
        self.assertEqual(status, 200, js2)
        self.assertIs(js2.get("engaged"), True, js2)
        self.assertIs(js2.get("already_engaged"), True, js2)
        self.assertIs(self.cordon.status()["kill"]["engaged"], True)

        # AMBIGUITY: revive takes {reason, by} like kill, so a missing reason is a 400 and
        # leaves the kill engaged.
        status, js3, _, _ = self.post("/v1/revive", {})
        self.assertEqual(status, 400, js3)
        self.assertIs(self.cordon.status()["kill"]["engaged"], True)

        status, js4, _, _ = self.post("/v1/revive", {"reason": "contained", "by": "oncall-alice"})
        self.assertEqual(status, 200, js4)
        self.assertIs(js4.get("engaged"), False, js4)
        self.assertIs(self.cordon.status()["kill"]["engaged"], False)

        status, hdrs, raw = self.cordon.admin_raw("POST", "/v1/revive", {"reason": "again"})
        self.assertEqual(status, 409, raw)
        self.assertIn("json", hdrs.get("content-type", ""), hdrs)
        self.assertIsInstance(json.loads(raw).get("error"), str, raw)

    def test_new_requests_refused_403_kill_switch_even_without_credentials(self):
        n_http = len(HTTP.requests)
        n_sink = SINK.snapshot()
        status, js, _, _ = self.kill_network()
        self.assertEqual(status, 200, js)
        path = marker("killed")
        url = f"http://localhost:{HTTP.port}{path}"
        cases = [
            ("CONNECT, valid token", H.connect_request(f"raw.test:{SINK.port}",
                                                        self.auth_of()), "CONNECT"),
            ("CONNECT, no credentials", H.connect_request(f"raw.test:{SINK.port}"), "CONNECT"),
            ("CONNECT, wrong token", H.connect_request(
                f"raw.test:{SINK.port}", H.basic(self.session["id"], "0" * 43)), "CONNECT"),
            ("CONNECT, host without a rule", H.connect_request(
                "nowhere.test:443", self.auth_of()), "CONNECT"),
            ("GET, valid token", http_get(url, self.auth_of()), "GET"),
            ("GET, no credentials", http_get(url), "GET"),
        ]
        for what, req, method in cases:
            with self.subTest(what):
                c = self.conn()
                c.send(req)
                r = c.read_response(5, method=method)
                self.assertDenied(r, 403, "kill_switch")
                self.assertClosed(c)
        # Refused before its target was parsed, a URL's secrets stay out of the table.
        secret = "sk-" + "q" * 32
        c = self.conn()
        c.send(http_get(f"http://user:pw-{secret}@localhost:{HTTP.port}/x?token={secret}"))
        self.assertDenied(c.read_response(5), 403, "kill_switch")
        c.close()
        # The same for an origin-form target and an authority-form one with userinfo, which
        # are refused there too (no "://" to recognise them by).
        for raw_request in (f"GET /y?api_key={secret} HTTP/1.1\r\nHost: localhost\r\n\r\n",
                            f"CONNECT u:{secret}@localhost:443 HTTP/1.1\r\n"
                            f"Host: localhost:443\r\n\r\n"):
            c = self.conn()
            c.send(raw_request.encode())
            method = raw_request.split(" ", 1)[0]
            self.assertEqual(c.read_response(5, method=method).status, 403)
            c.close()
        _, _, raw = self.cordon.admin_raw("GET", "/v1/denials")
        self.assertIn(b"localhost", raw)
        self.assertNotIn(secret.encode(), raw)
        time.sleep(0.2)
        self.assertEqual(len(HTTP.requests_matching(path)), 0, "the HTTP origin was reached")
        self.assertEqual(len(HTTP.requests), n_http)
        self.assertEqual(SINK.snapshot(), n_sink, "the raw origin got a connection")
        # AMBIGUITY: a network kill refuses before looking at credentials, so its conn.deny
        # need not name the session ("where known").
        ev = self.cordon.wait_events(lambda e: e.get("event") == "conn.deny" and
                                     e.get("reason") == "kill_switch" and
                                     e.get("target") == f"raw.test:{SINK.port}", count=3)
        self.assertGreaterEqual(len(ev), 3, "conn.deny kill_switch events")
        # Lifted: the same session works again.
        status, js, _, _ = self.post("/v1/revive", {"reason": "done", "by": "tests"})
        self.assertEqual(status, 200, js)
        self.echo(self.open_tunnel(ECHO.port), b"alive again")

    def test_keepalive_http_connection_closed(self):
        url = f"http://localhost:{HTTP.port}{marker('ka')}"
        c = self.conn()
        c.send(http_get(url, self.auth_of()))
        r = c.read_response(5)
        self.assertEqual(r.status, 200, r)
        self.assertNotEqual((r.header("Connection") or "").lower(), "close", r)
        status, js, _, t_ret = self.kill_network()
        self.assertEqual(status, 200, js)
        self.assertGreaterEqual(js.get("connections_closed", 0), 1, js)
        closed, extra = c.wait_closed(max(0.05, t_ret + KILL_WINDOW - time.monotonic()))
        self.assertTrue(closed, "an idle keep-alive connection is still open 1s after the "
                                "network kill returned")
        self.assertConnectionsWithin(t_ret)

    def test_http_download_in_progress_cut(self):
        c = self.conn()
        c.send(http_get(f"http://localhost:{HTTP.port}/big?n={1024 * MiB}", self.auth_of()))
        c.read_head(5)
        c.recv_exact(256 * KiB, 5)
        status, js, _, t_ret = self.kill_network()
        self.assertEqual(status, 200, js)
        self.assertEqual(js.get("connections_closed"), 1, js)
        closed, got = c.wait_closed(max(0.05, t_ret + KILL_WINDOW - time.monotonic()))
        self.assertTrue(closed, f"a 1 GiB download is still flowing 1s after the network "
                                f"kill returned ({len(got)} more bytes read)")
        self.assertLess(len(got), 64 * MiB)
        self.assertConnectionsWithin(t_ret)

    def test_metrics_engaged_gauge_and_network_kills_total(self):
        status, _, _ = self.cordon.admin_raw("GET", "/metrics", token=None)
        self.assertEqual(status, 401)
        status, hdrs, _ = self.cordon.admin_raw("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn("text/plain", hdrs.get("content-type", ""), hdrs)
        before = self.metrics()
        self.assertEqual(before.get(("cordon_kill_switch_engaged", frozenset())), 0.0,
                         "cordon_kill_switch_engaged (no labels) should be 0")
        n0 = self.kills_total(before, "network")
        self.assertEqual(self.kill_network()[0], 200)
        during = self.metrics()
        self.assertEqual(during.get(("cordon_kill_switch_engaged", frozenset())), 1.0)
        self.assertEqual(self.kills_total(during, "network"), n0 + 1)
        self.assertEqual(self.post("/v1/revive", {"reason": "ok"})[0], 200)
        after = self.metrics()
        self.assertEqual(after.get(("cordon_kill_switch_engaged", frozenset())), 0.0)

    def test_audit_kill_network_and_revive_events(self):
        reason = "audit check " + uuid.uuid4().hex[:8]
        self.assertEqual(self.kill_network(reason, "oncall-carol")[0], 200)
        self.assertEqual(self.post("/v1/revive", {"reason": reason + " lifted",
                                                  "by": "oncall-dave"})[0], 200)
        kills = self.cordon.wait_events(
            lambda e: e.get("event") == "kill.network" and e.get("reason") == reason)
        self.assertEqual(len(kills), 1, "no kill.network audit event with the reason")
        self.assertEqual(kills[0].get("by"), "oncall-carol", kills[0])
        revives = self.cordon.wait_events(
            lambda e: e.get("event") == "revive" and e.get("reason") == reason + " lifted")
        self.assertEqual(len(revives), 1, "no revive audit event with the reason")
        self.assertEqual(revives[0].get("by"), "oncall-dave", revives[0])
        self.assertLessEqual(parse_ts(kills[0]["ts"]), parse_ts(revives[0]["ts"]))


# ======================================================================================
# Uncooperative clients: the same four clients against a network kill and a session kill
# ======================================================================================

class UncooperativeMixin:
    deny_reason = None    # X-Cordon-Deny of a new request after the kill
    close_reason = None   # conn.close reason of a tunnel the kill closed
    scope = None

    def do_kill(self):
        raise NotImplementedError

    def setUp(self):
        super().setUp()
        self.bystander = None
        self.bystander_tunnel = None

    def add_bystander(self):
        """Session kill: another session with a live echo tunnel that must survive."""

    def check_bystander(self):
        pass

    def expected_after(self):
        return 0

    def check_kill_answer(self, status, js, closed=None):
        self.assertEqual(status, 200, js)
        self.assertIsInstance(js, dict, js)
        self.assertNumber(js.get("elapsed_ms"), "elapsed_ms")
        self.assertIsInstance(js.get("connections_closed"), int, js)
        if closed is not None:
            self.assertEqual(js.get("connections_closed"), closed, js)

    def check_kill_audit(self):
        raise NotImplementedError

    def check_tunnel_closes_audited(self, count):
        """count conn.close events of the session with the kill's reason."""
        ev = self.session_events("conn.close", self.session["id"], count=count,
                                 reason=self.close_reason)
        self.assertGreaterEqual(len(ev), count,
                                f"conn.close with reason {self.close_reason} for the session")
        return ev

    # (1) a client that keeps streaming ---------------------------------------------------

    def test_1_streaming_clients_cut(self):
        self.add_bystander()
        n0 = SLOW.snapshot()
        tunnels = []
        for _ in range(4):
            c = self.open_tunnel(SLOW.port)
            c.sock.settimeout(3)
            tunnels.append(c)
        stop = threading.Event()
        results = [None] * len(tunnels)
        block = b"s" * (16 * KiB)

        def pump(i, c):
            sent, err, t_err = 0, None, None
            for _ in range(10_000_000):
                if stop.is_set():
                    break
                try:
                    c.sock.sendall(block)
                    sent += len(block)
                except OSError as e:
                    err, t_err = repr(e), time.monotonic()
                    break
            results[i] = {"sent": sent, "err": err, "t_err": t_err}

        threads = [threading.Thread(target=pump, args=(i, c), daemon=True)
                   for i, c in enumerate(tunnels)]
        for t in threads:
            t.start()
        try:
            self.assertTrue(H.wait_until(lambda: SLOW.bytes_read(n0) >= 4 * MiB, 10),
                            f"streaming did not get going: {SLOW.bytes_read(n0)} bytes")
            status, js, _, t_ret = self.do_kill()
            snap = self.snapshot_origin(SLOW, n0)
            self.check_kill_answer(status, js, closed=4)
            for t in threads:
                t.join(max(0.05, t_ret + KILL_WINDOW - time.monotonic()))
            still = [i for i, t in enumerate(threads) if t.is_alive()]
        finally:
            stop.set()
            for t in threads:
                t.join(5)
        self.assertNoItems(still, f"streaming clients {still} could still send 1s after the "
                                f"kill returned: {results}")
        for i, r in enumerate(results):
            self.assertIsNotNone(r["err"], f"client {i}: {r}")
        self.assertConnectionsWithin(t_ret, self.expected_after())
        self.check_kill_audit()
        ev = self.check_tunnel_closes_audited(4)
        self.assertEqual(len(ev), 4, ev)
        for e in ev:
            self.assertGreater(e.get("bytes_up", 0), 0, e)
        self.check_bystander()
        self.assertNoBytesAfter(SLOW, n0, snap, t_ret, "streaming tunnels")
        self.assertOriginClosedWithin(SLOW, n0, t_ret, "streaming tunnels")

    # (2) a client that stalls without reading while the origin floods it ---------------

    def test_2_stalled_reader_cut(self):
        self.add_bystander()
        n0 = FLOOD.snapshot()
        c = stalled_conn(self.cordon.proxy_addr)
        self._conns.append(c)
        c.send(H.connect_request(f"raw.test:{FLOOD.port}", self.auth_of()))
        r = c.read_response(5, method="CONNECT")
        self.assertEqual(r.status, 200, r)
        c.send(b"hello flood")
        self.assertTrue(H.wait_until(
            lambda: [x for x in FLOOD.conns_since(n0) if x["paused"]], 5),
            f"the flood origin never blocked: {FLOOD.conns_since(n0)}")
        time.sleep(0.3)  # everything between the origin and the stalled client is full
        rec = FLOOD.conns_since(n0)[0]
        self.assertTrue(rec["paused"] and not rec["closed"], rec)
        client_port = c.sock.getsockname()[1]
        status, js, _, t_ret = self.do_kill()
        snap = self.snapshot_origin(FLOOD, n0)
        self.check_kill_answer(status, js, closed=1)
        self.assertConnectionsWithin(t_ret, self.expected_after())
        # The stalled client, without reading a byte, must see the connection end: a close
        # that waits behind megabytes the client never reads is not a close.
        hung = hung_up(c.sock, max(0.05, t_ret + KILL_WINDOW - time.monotonic()))
        cordon_side = H.tcp_states(self.cordon.proxy_addr[1], client_port)
        self.assertNoBytesAfter(FLOOD, n0, snap, t_ret, "stalled tunnel")
        self.assertOriginClosedWithin(FLOOD, n0, t_ret, "the flooding upstream")
        self.check_kill_audit()
        self.assertEqual(len(self.check_tunnel_closes_audited(1)), 1)
        self.check_bystander()
        if not hung:
            self.fail("a client that does not read still has an open connection 1s after "
                      "the kill returned (no RST/FIN visible without reading); cordon-side "
                      f"socket 1s after (state, unsent bytes, rx, ports): {cordon_side}")
        closed, _ = c.wait_closed(3)
        self.assertTrue(closed, "the stalled client's connection did not end when drained")

    # (3) a client that reconnects in a loop with its token after the kill --------------

    def test_3_reconnect_loop_refused(self):
        self.add_bystander()
        n0 = SINK.snapshot()
        after_kill = 50
        shared = {"t_ret": None}
        attempts = []
        auth = self.auth_of()
        req = H.connect_request(f"raw.test:{SINK.port}", auth)
        addr = self.cordon.proxy_addr

        def loop():
            for _ in range(2000):
                t_ret = shared["t_ret"]
                if t_ret is not None and sum(1 for a in attempts
                                             if a["t0"] > t_ret) >= after_kill:
                    return
                a = {"t0": time.monotonic(), "status": None, "deny": None, "body": None,
                     "closed": None, "err": None}
                try:
                    c = H.ProxyConn(addr, timeout=3)
                    try:
                        c.send(req)
                        r = c.read_response(3, method="CONNECT")
                        a["status"], a["deny"] = r.status, r.header("X-Cordon-Deny")
                        if r.status == 200:
                            c.send(b"r" * 4 * KiB)
                            time.sleep(0.005)
                        else:
                            try:
                                a["body"] = r.json().get("reason")
                            except ValueError:
                                a["body"] = r.body[:100]
                            a["closed"] = c.wait_closed(2)[0]
                    finally:
                        c.close()
                except (OSError, EOFError, ValueError) as e:
                    a["err"] = repr(e)
                attempts.append(a)

        th = threading.Thread(target=loop, daemon=True)
        th.start()
        self.assertTrue(H.wait_until(
            lambda: sum(1 for a in attempts if a["status"] == 200) >= 3, 5),
            f"the reconnecting client never got going: {attempts[:3]}")
        status, js, t_call, t_ret = self.do_kill()
        shared["t_ret"] = t_ret
        snap = self.snapshot_origin(SINK, n0)
        self.check_kill_answer(status, js)
        th.join(30)
        self.assertFalse(th.is_alive(), "the reconnect loop did not finish")
        post = [a for a in attempts if a["t0"] > t_ret]
        self.assertGreaterEqual(len(post), after_kill)
        bad = [a for a in post if a["status"] != 403 or a["deny"] != self.deny_reason
               or a["body"] != self.deny_reason or a["closed"] is not True]
        self.assertNoItems(bad, f"{len(bad)} of {len(post)} attempts after the kill were not "
                              f"403 {self.deny_reason} and closed: {bad[:5]}")
        self.assertConnectionsWithin(t_ret, self.expected_after())
        self.assertNoBytesAfter(SINK, n0, snap, t_ret, "reconnecting client")
        late = [round(r["opened"] - t_ret, 3) for r in SINK.conns_since(n0)
                if r["opened"] > t_ret]
        self.assertNoItems(late, f"the origin accepted connections after the kill returned "
                               f"(seconds after): {late}")
        self.check_kill_audit()
        target = f"raw.test:{SINK.port}"
        ev = self.cordon.wait_events(lambda e: e.get("event") == "conn.deny" and
                                     e.get("reason") == self.deny_reason and
                                     e.get("target") == target, count=after_kill)
        self.assertGreaterEqual(len(ev), after_kill, "conn.deny events of the refused retries")
        self.check_bystander()
        self.check_deny_attribution(ev)

    def check_deny_attribution(self, ev):
        pass

    # (4) 200 tunnels opened in parallel during the kill --------------------------------

    def test_4_200_parallel_tunnels_during_kill(self):
        self.add_bystander()
        n0 = ECHO.snapshot()
        N = 200
        results = [None] * N
        go = threading.Event()
        req = H.connect_request(f"raw.test:{ECHO.port}", self.auth_of())
        addr = self.cordon.proxy_addr

        def worker(i):
            rec = {"i": i, "t0": None, "status": None, "deny": None, "t_open": None,
                   "closed": None, "t_closed": None, "outcome": None, "err": None}
            try:
                go.wait(10)
                time.sleep(i * 0.003)  # spread the opens over ~600 ms
                rec["t0"] = time.monotonic()
                c = H.ProxyConn(addr, timeout=5)
                try:
                    try:
                        # A connection accepted just before the kill is reset by it,
                        # possibly before the request is even written.
                        c.send(req)
                        r = c.read_response(5, method="CONNECT")
                    except CLOSE_ERRORS:
                        rec["outcome"] = "closed before an answer"
                        rec["t_closed"] = time.monotonic()
                        return
                    rec["status"], rec["deny"] = r.status, r.header("X-Cordon-Deny")
                    if r.status == 200:
                        rec["t_open"] = time.monotonic()
                        try:
                            c.send(b"x")
                        except OSError:
                            pass
                        closed, _ = c.wait_closed(8)
                        rec["closed"], rec["t_closed"] = closed, time.monotonic()
                        rec["outcome"] = "opened"
                    else:
                        rec["closed"] = c.wait_closed(3)[0]
                        rec["t_closed"] = time.monotonic()
                        rec["outcome"] = "refused"
                finally:
                    c.close()
            except Exception as e:  # recorded, judged below
                rec["err"] = repr(e)
                rec["outcome"] = "error"
            finally:
                results[i] = rec

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(N)]
        for t in threads:
            t.start()
        go.set()
        # Kill while about a third are open and the rest are still on their way.
        self.assertTrue(H.wait_until(lambda: ECHO.snapshot() - n0 >= 60, 10),
                        f"only {ECHO.snapshot() - n0} tunnels reached the origin")
        status, js, t_call, t_ret = self.do_kill()
        snap = self.snapshot_origin(ECHO, n0)
        self.check_kill_answer(status, js)
        deadline = time.monotonic() + 20
        for t in threads:
            t.join(max(0.05, deadline - time.monotonic()))
        self.assertNoItems([t for t in threads if t.is_alive()], "worker threads still running")
        # We can only know the open time as seen by the client, after cordon sent 200.
        opened = [r for r in results if r["outcome"] == "opened"]
        refused = [r for r in results if r["outcome"] == "refused"]
        early_closed = [r for r in results if r["outcome"] == "closed before an answer"]
        other = [r for r in results if r["outcome"] not in
                 ("opened", "refused", "closed before an answer")]
        summary = (f"{len(opened)} opened, {len(refused)} refused, {len(early_closed)} closed "
                   f"before an answer, {len(other)} other")
        if os.environ.get("KILL_TEST_VERBOSE"):
            print(f"\n  {type(self).__name__}: {summary}; kill answer {js}")
        self.assertNoItems(other, f"{summary}; other: {other[:5]}")
        self.assertGreater(len(opened), 0, summary)
        self.assertGreater(len(refused), 0, summary)
        bad_refusals = [r for r in refused if r["status"] != 403 or
                        r["deny"] != self.deny_reason or not r["closed"]]
        self.assertNoItems(bad_refusals, f"{summary}; refusals not 403 {self.deny_reason} + "
                                         f"closed: {bad_refusals[:5]}")
        late_open = [r for r in opened if r["t0"] > t_ret]
        self.assertNoItems(late_open, f"{summary}; tunnels requested after the kill returned "
                                      f"were opened: {late_open[:5]}")
        left_open = [(r["i"], r["closed"], round(r["t_closed"] - t_ret, 3)) for r in opened
                     if not r["closed"] or r["t_closed"] > t_ret + KILL_WINDOW]
        self.assertNoItems(left_open, f"{summary}; tunnels not closed within 1s of the kill's "
                                      f"return (index, closed, s after): {left_open[:10]}")
        self.assertOriginClosedWithin(ECHO, n0, t_ret, "parallel tunnels")
        self.assertConnectionsWithin(t_ret, self.expected_after())
        self.assertNoBytesAfter(ECHO, n0, snap, t_ret, "parallel tunnels")
        live_at_kill = sum(1 for r in opened if r["t_open"] < t_call)
        self.assertGreaterEqual(js.get("connections_closed"), live_at_kill, f"{summary}; {js}")
        self.check_kill_audit()
        self.check_tunnel_closes_audited(live_at_kill)
        sid = self.session["id"]
        time.sleep(0.3)
        opens = self.session_events("conn.open", sid, count=len(opened), timeout=3)
        closes = self.session_events("conn.close", sid, count=len(opens), timeout=3)
        self.assertGreaterEqual(len(opens), len(opened), summary)
        self.assertEqual(len(closes), len(opens),
                         f"{summary}; every conn.open of the session needs its conn.close")
        self.check_bystander()

    # speed ------------------------------------------------------------------------------

    def test_5_kill_of_100_tunnels_elapsed_under_1000ms(self):
        self.add_bystander()
        N = 100
        req = H.connect_request(f"raw.test:{ECHO.port}", self.auth_of())
        conns = []
        for i in range(N):
            c = H.ProxyConn(self.cordon.proxy_addr, timeout=10)
            self._conns.append(c)
            conns.append(c)
            c.send(req)
        for i, c in enumerate(conns):
            r = c.read_response(10, method="CONNECT")
            self.assertEqual(r.status, 200, f"tunnel {i}: {r}")
            c.send(b"ping %d\n" % i)
        for i, c in enumerate(conns):
            msg = b"ping %d\n" % i
            self.assertEqual(c.recv_exact(len(msg), 10), msg)
        status, js, t_call, t_ret = self.do_kill()
        self.check_kill_answer(status, js, closed=N)
        self.assertLess(js["elapsed_ms"], 1000, js)
        still = []
        for i, c in enumerate(conns):
            closed, _ = c.wait_closed(max(0.01, t_ret + KILL_WINDOW - time.monotonic()))
            if not closed:
                still.append(i)
        self.assertNoItems(still, f"tunnels still open 1s after the kill returned: {still[:10]}"
                                f" (call took {(t_ret - t_call) * 1000:.0f} ms, "
                                f"elapsed_ms {js['elapsed_ms']})")
        self.assertConnectionsWithin(t_ret, self.expected_after())
        self.check_bystander()


class NetworkKillUncooperativeTests(UncooperativeMixin, KillCase):
    deny_reason = close_reason = "kill_switch"
    scope = "network"

    def do_kill(self):
        self.kill_reason = "uncooperative " + uuid.uuid4().hex[:8]
        return self.kill_network(self.kill_reason, "oncall-net")

    def check_kill_answer(self, status, js, closed=None):
        super().check_kill_answer(status, js, closed)
        self.assertIs(js.get("engaged"), True, js)
        self.assertIs(js.get("already_engaged"), False, js)

    def check_kill_audit(self):
        ev = self.cordon.wait_events(lambda e: e.get("event") == "kill.network"
                                     and e.get("reason") == self.kill_reason)
        self.assertEqual(len(ev), 1, "kill.network audit event")
        self.assertEqual(ev[0].get("by"), "oncall-net", ev[0])


class SessionKillUncooperativeTests(UncooperativeMixin, KillCase):
    deny_reason = close_reason = "session_killed"
    scope = "session"

    def do_kill(self):
        self.kill_reason = "uncooperative " + uuid.uuid4().hex[:8]
        return self.kill_session(self.session["id"], self.kill_reason, "oncall-sess")

    def add_bystander(self):
        self.bystander = self.cordon.create_session("agent")
        self.bystander_tunnel = self.open_tunnel(ECHO.port, session=self.bystander)
        self.echo(self.bystander_tunnel, b"bystander before")

    def expected_after(self):
        return 1  # the bystander's tunnel

    def check_bystander(self):
        self.echo(self.bystander_tunnel, b"bystander after the kill")
        self.echo(self.open_tunnel(ECHO.port, session=self.bystander), b"new bystander tunnel")
        self.assertIs(self.cordon.status()["kill"]["engaged"], False)
        closes = self.cordon.audit_events()
        self.assertNoItems([e for e in closes if e.get("session") == self.bystander["id"]
                          and e.get("event") == "conn.close"],
                         "a bystander tunnel was closed")

    def check_deny_attribution(self, ev):
        # To refuse with session_killed cordon has found the session from the token, so the
        # audit log can say whose retries these were (`cordon audit timeline SESSION`).
        bad = [e for e in ev if e.get("session") != self.session["id"]
               or e.get("job") != "agent"]
        self.assertNoItems(bad, f"{len(bad)} of {len(ev)} conn.deny session_killed events do "
                              f"not name the killed session and its job: {bad[:2]}")

    def check_kill_answer(self, status, js, closed=None):
        super().check_kill_answer(status, js, closed)
        self.assertEqual(js.get("id"), self.session["id"], js)
        self.assertIs(js.get("already_killed"), False, js)

    def check_kill_audit(self):
        ev = self.session_events("kill.session", self.session["id"])
        self.assertEqual(len(ev), 1, "kill.session audit event")
        self.assertEqual(ev[0].get("reason"), self.kill_reason, ev[0])
        self.assertEqual(ev[0].get("by"), "oncall-sess", ev[0])


# ======================================================================================
# Session kill: the API and what the killed session's tokens get
# ======================================================================================

class SessionKillAPITests(KillCase):

    def test_kill_session_answer_state_and_already_killed(self):
        sid = self.session["id"]
        self.cordon.mint_token(sid)
        t = self.open_tunnel(ECHO.port)
        self.echo(t, b"x")
        status, js, _, t_ret = self.kill_session(sid, "runaway agent", "oncall-erin")
        self.assertEqual(status, 200, js)
        self.assertEqual(js.get("id"), sid, js)
        self.assertEqual(js.get("connections_closed"), 1, js)
        self.assertNumber(js.get("elapsed_ms"), "elapsed_ms")
        self.assertEqual(js.get("tokens_revoked"), 2, js)
        self.assertIs(js.get("already_killed"), False, js)
        closed, _ = t.wait_closed(max(0.05, t_ret + KILL_WINDOW - time.monotonic()))
        self.assertTrue(closed, "the session's tunnel is open 1s after the kill returned")
        status, s = self.cordon.admin("GET", f"/v1/sessions/{sid}")
        self.assertEqual(status, 200, s)
        self.assertEqual(s.get("state"), "killed", s)
        self.assertTrue(s.get("tokens"), s)
        for tok in s["tokens"]:
            self.assertIs(tok.get("revoked"), True, f"token not revoked after kill: {tok}")
        status, js2, _, _ = self.kill_session(sid, "again", "oncall-erin")
        self.assertEqual(status, 200, js2)
        self.assertIs(js2.get("already_killed"), True, js2)
        self.assertEqual(js2.get("connections_closed"), 0, js2)
        listed = {x["id"]: x for x in self.cordon.admin("GET", "/v1/sessions")[1]["sessions"]}
        self.assertEqual(listed[sid].get("state"), "killed", listed[sid])

    def test_kill_unknown_session_404(self):
        status, hdrs, raw = self.cordon.admin_raw("POST", "/v1/sessions/no-such-session/kill",
                                                  {"reason": "x"})
        self.assertEqual(status, 404, raw)
        self.assertIsInstance(json.loads(raw).get("error"), str, raw)

    def test_kill_session_requires_reason_400(self):
        # AMBIGUITY: every kill call takes {reason, by}; the reason is required as for
        # POST /v1/kill.
        sid = self.session["id"]
        for body in [{}, {"by": "tests"}, {"reason": ""}]:
            with self.subTest(body=body):
                status, js = self.cordon.admin("POST", f"/v1/sessions/{sid}/kill", body)
                self.assertEqual(status, 400, js)
        self.assertEqual(self.cordon.admin("GET", f"/v1/sessions/{sid}")[1].get("state"),
                         "active")

    def test_killed_session_tokens_403_session_killed(self):
        sid = self.session["id"]
        second = self.cordon.mint_token(sid)
        n_http = len(HTTP.requests)
        n_sink = SINK.snapshot()
        self.assertEqual(self.kill_session()[0], 200)
        path = marker("sk")
        for what, req, method in [
                ("CONNECT, first token", H.connect_request(f"raw.test:{SINK.port}",
                                                            self.auth_of()), "CONNECT"),
                ("CONNECT, second token", H.connect_request(
                    f"raw.test:{SINK.port}", self.auth_of(token=second["token"])), "CONNECT"),
                ("GET", http_get(f"http://localhost:{HTTP.port}{path}", self.auth_of()),
                 "GET")]:
            with self.subTest(what):
                c = self.conn()
                c.send(req)
                r = c.read_response(5, method=method)
                self.assertDenied(r, 403, "session_killed")
                self.assertClosed(c)
        time.sleep(0.2)
        self.assertEqual(len(HTTP.requests), n_http, "the HTTP origin was reached")
        self.assertEqual(SINK.snapshot(), n_sink, "the raw origin got a connection")

    def test_mint_token_for_killed_session_409(self):
        sid = self.session["id"]
        self.assertEqual(self.kill_session()[0], 200)
        status, hdrs, raw = self.cordon.admin_raw("POST", f"/v1/sessions/{sid}/tokens", {})
        self.assertEqual(status, 409, raw)
        self.assertIsInstance(json.loads(raw).get("error"), str, raw)

    def test_other_sessions_unaffected(self):
        other = self.cordon.create_session("agent")
        mine = self.open_tunnel(ECHO.port)
        theirs = self.open_tunnel(ECHO.port, session=other)
        status, js, _, t_ret = self.kill_session()
        self.assertEqual(status, 200, js)
        self.assertEqual(js.get("connections_closed"), 1, js)
        closed, _ = mine.wait_closed(max(0.05, t_ret + KILL_WINDOW - time.monotonic()))
        self.assertTrue(closed)
        self.echo(theirs, b"still here")
        self.echo(self.open_tunnel(ECHO.port, session=other), b"new tunnel")
        self.assertEqual(self.cordon.admin("GET", f"/v1/sessions/{other['id']}")[1]
                         .get("state"), "active")
        self.assertIs(self.cordon.status()["kill"]["engaged"], False)

    def test_metrics_and_audit_session_scope(self):
        before = self.kills_total(self.metrics(), "session")
        self.assertEqual(self.kill_session(reason="metrics+audit", by="oncall-fay")[0], 200)
        self.assertEqual(self.kills_total(self.metrics(), "session"), before + 1)
        ev = self.session_events("kill.session", self.session["id"])
        self.assertEqual(len(ev), 1, "kill.session audit event")
        self.assertEqual(ev[0].get("reason"), "metrics+audit", ev[0])
        self.assertEqual(ev[0].get("by"), "oncall-fay", ev[0])


# ======================================================================================
# Credential kill: revoking one token with a streaming tunnel
# ======================================================================================

class CredentialKillTests(KillCase):

    def test_revoke_token_cuts_its_streaming_tunnel_only(self):
        sid = self.session["id"]
        second = self.cordon.mint_token(sid)
        keep = self.open_tunnel(ECHO.port)
        n0 = SLOW.snapshot()
        cut = self.open_tunnel(SLOW.port, token=second["token"])
        cut.sock.settimeout(3)
        result = {}
        stop = threading.Event()

        def pump():
            for _ in range(10_000_000):
                if stop.is_set():
                    return
                try:
                    cut.sock.sendall(b"c" * (16 * KiB))
                except OSError as e:
                    result["err"] = repr(e)
                    return

        th = threading.Thread(target=pump, daemon=True)
        th.start()
        before = self.kills_total(self.metrics(), "credential")
        try:
            self.assertTrue(H.wait_until(lambda: SLOW.bytes_read(n0) >= 2 * MiB, 10))
            t_call = time.monotonic()
            status, js = self.cordon.admin("DELETE",
                                           f"/v1/sessions/{sid}/tokens/{second['token_id']}")
            t_ret = time.monotonic()
            snap = self.snapshot_origin(SLOW, n0)
            self.assertEqual(status, 200, js)
            self.assertEqual(js.get("connections_closed"), 1, js)
            self.assertNumber(js.get("elapsed_ms"), "elapsed_ms")
            th.join(max(0.05, t_ret + KILL_WINDOW - time.monotonic()))
            alive = th.is_alive()
        finally:
            stop.set()
            th.join(5)
        self.assertFalse(alive, "the revoked token's tunnel still takes bytes 1s later")
        self.assertIn("err", result)
        self.echo(keep, b"the other token's tunnel lives on")
        c, r = self.tunnel(SINK.port, token=second["token"])
        self.assertEqual(r.status, 407, r)
        self.assertEqual(self.kills_total(self.metrics(), "credential"), before + 1)
        closes = self.session_events("conn.close", sid, reason="token_revoked")
        self.assertEqual(len(closes), 1, closes)
        self.assertNoBytesAfter(SLOW, n0, snap, t_ret, "revoked token's tunnel")
        self.assertOriginClosedWithin(SLOW, n0, t_ret, "revoked token's tunnel")
        ev = self.session_events("token.revoke", sid, token_id=second["token_id"])
        self.assertEqual(len(ev), 1, ev)
        for k in ("reason", "by"):
            self.assertIsInstance(ev[0].get(k), str, f"token.revoke without {k}: {ev[0]}")
            self.assertTrue(ev[0][k], ev[0])


# ======================================================================================
# Event stream: GET /v1/events
# ======================================================================================

class EventStreamTests(KillCase):

    def sse(self, path="/v1/events", last_event_id=None, token="default"):
        if token == "default":
            token = self.cordon.admin_token
        s = H.SSEClient(self.cordon.admin_addr, path, token, last_event_id)
        self.addCleanup(s.close)
        return s

    def assertIdsIncrease(self, events):
        ids = [int(e["id"]) for e in events]
        self.assertEqual(ids, sorted(set(ids)), f"event ids not strictly increasing: {ids}")

    def mentions(self, e, sid):
        return sid in e["data"]

    def test_events_need_admin_token(self):
        s = self.sse(token=None)
        self.assertEqual(s.status, 401)

    def test_stream_carries_every_kind_within_1s(self):
        s = self.sse()
        self.assertEqual(s.status, 200)
        self.assertTrue(s.headers.get("content-type", "").startswith("text/event-stream"),
                        s.headers)
        a = self.session
        b = self.cordon.create_session("agent")
        c = self.cordon.create_session("agent")
        extra = self.cordon.mint_token(c["id"])
        steps = [
            ("kill.session", a["id"], lambda: self.kill_session(a["id"])[0]),
            ("session.end", b["id"], lambda: self.cordon.admin(
                "DELETE", f"/v1/sessions/{b['id']}")[0]),
            ("token.revoke", c["id"], lambda: self.cordon.admin(
                "DELETE", f"/v1/sessions/{c['id']}/tokens/{extra['token_id']}")[0]),
            ("kill.network", None, lambda: self.kill_network("sse check", "oncall-gus")[0]),
            ("revive", None, lambda: self.post("/v1/revive", {"reason": "sse done"})[0]),
        ]
        for kind, sid, call in steps:
            with self.subTest(kind):
                self.assertEqual(call(), 200)
                t_ret = time.monotonic()
                got = s.wait_for(lambda e: e["event"] == kind and
                                 (sid is None or self.mentions(e, sid)), 1.0)
                self.assertTrue(got, f"no {kind} event within 1s of the call; got "
                                     f"{[(e['id'], e['event']) for e in s.snapshot()]}")
                self.assertLess(got[0]["t"] - t_ret, 1.0)
                self.assertIsInstance(got[0]["json"], dict, got[0])
                self.assertIsNotNone(got[0]["id"], got[0])
        net = [e for e in s.snapshot() if e["event"] == "kill.network"]
        self.assertEqual(net[0]["json"].get("reason"), "sse check", net[0])
        self.assertIdsIncrease(s.snapshot())

    def test_session_filter(self):
        a = self.session
        b = self.cordon.create_session("agent")
        a2 = self.cordon.mint_token(a["id"])
        b2 = self.cordon.mint_token(b["id"])
        s = self.sse(f"/v1/events?session={a['id']}")
        self.assertEqual(s.status, 200)
        self.assertEqual(self.cordon.admin(
            "DELETE", f"/v1/sessions/{b['id']}/tokens/{b2['token_id']}")[0], 200)
        self.assertEqual(self.kill_session(b["id"])[0], 200)
        self.assertEqual(self.cordon.admin(
            "DELETE", f"/v1/sessions/{a['id']}/tokens/{a2['token_id']}")[0], 200)
        self.assertEqual(self.kill_network("filter check")[0], 200)
        self.assertEqual(self.post("/v1/revive", {"reason": "filter done"})[0], 200)
        self.assertEqual(self.kill_session(a["id"])[0], 200)
        last = s.wait_for(lambda e: e["event"] == "kill.session" and
                          self.mentions(e, a["id"]), 2)
        self.assertTrue(last, f"no kill.session for A: {s.snapshot()}")
        got = [(e["event"], self.mentions(e, a["id"]), self.mentions(e, b["id"]))
               for e in s.snapshot()]
        self.assertNoItems([g for g in got if g[2]], f"B's events on A's stream: {got}")
        kinds = [e["event"] for e in s.snapshot()]
        for kind in ("token.revoke", "kill.network", "revive", "kill.session"):
            self.assertIn(kind, kinds, got)
        self.assertIdsIncrease(s.snapshot())

    def test_last_event_id_replays_everything_missed(self):
        full = self.sse()   # stays connected: the reference
        first = self.sse()
        sid = self.session["id"]
        toks = [self.cordon.mint_token(sid) for _ in range(5)]

        def revoke(i):
            self.assertEqual(self.cordon.admin(
                "DELETE", f"/v1/sessions/{sid}/tokens/{toks[i]['token_id']}")[0], 200)
        for i in range(3):
            revoke(i)
        got = first.wait_for(lambda e: e["event"] == "token.revoke", 2, count=3)
        self.assertEqual(len(got), 3, first.snapshot())
        resume_from = got[0]["id"]
        first.close()
        revoke(3)
        revoke(4)
        self.assertEqual(self.kill_network("while away")[0], 200)
        self.assertEqual(self.post("/v1/revive", {"reason": "back"})[0], 200)
        ref = full.wait_for(lambda e: e["event"] == "revive", 2)
        self.assertTrue(ref, full.snapshot())
        expected = [(e["id"], e["event"], e["data"]) for e in full.snapshot()
                    if int(e["id"]) > int(resume_from)]
        again = self.sse(last_event_id=resume_from)
        self.assertEqual(again.status, 200)
        again.wait_for(lambda e: e["id"] == expected[-1][0], 3)
        replay = [(e["id"], e["event"], e["data"]) for e in again.snapshot()]
        self.assertEqual(replay[:len(expected)], expected,
                         f"replay after Last-Event-ID: {resume_from} differs from what a "
                         f"connected consumer saw")
        self.assertEqual(len(expected), 6, expected)  # 2 revokes seen + 2 missed + kill/revive

    def test_resume_from_an_id_it_cannot_serve_is_told_and_stays_live(self):
        # Last-Event-ID: -1 wrapped to 2^64 - 1 and an id beyond the last made a stream deaf
        # for good (issue 18). Now it starts from now, with a resume.lost event first.
        last = self.cordon.admin("POST", f"/v1/sessions/{self.session['id']}/kill",
                                 {"reason": "an event to have an id"})[1]
        self.assertIsNotNone(last)
        probe = self.sse()
        cases = {"-1": "malformed", "18446744073709551616": "malformed", "7x": "malformed",
                 "18446744073709551615": "ahead", "999999": "ahead"}
        streams = {}
        for given, why in cases.items():
            s = self.sse(f"/v1/events?session={self.session['id']}", last_event_id=given)
            self.assertEqual(s.status, 200)
            got = s.wait_for(lambda e: e["event"] == "resume.lost", 1.0)
            self.assertTrue(got, f"Last-Event-ID: {given}: no resume.lost: {s.snapshot()}")
            js = got[0]["json"]
            self.assertEqual(js.get("reason"), why, js)
            self.assertEqual(js.get("kill"), {"engaged": False,
                                              "changed_ms_ago": js["kill"]["changed_ms_ago"]})
            self.assertEqual(js.get("session"), {"id": self.session["id"], "state": "killed"})
            self.assertEqual(int(got[0]["id"]), js["last_id"], got[0])
            streams[given] = s
        self.assertEqual(self.kill_network("heard by every stream")[0], 200)
        for given, s in streams.items():
            with self.subTest(last_event_id=given):
                self.assertTrue(s.wait_for(lambda e: e["event"] == "kill.network", 1.0),
                                f"Last-Event-ID: {given}: deaf to the kill: {s.snapshot()}")
        # A good id still replays, with no resume.lost.
        net = probe.wait_for(lambda e: e["event"] == "kill.network", 1.0)
        again = self.sse(last_event_id=str(int(net[0]["id"]) - 1))
        self.assertTrue(again.wait_for(lambda e: e["event"] == "kill.network", 1.0))
        self.assertEqual([e for e in again.snapshot() if e["event"] == "resume.lost"], [])

    def test_closed_streams_release_their_descriptors_at_once(self):
        # A gone client's stream held its fd until the next keepalive (up to 15 s).
        def fds():
            return len(os.listdir(f"/proc/{self.cordon.pid}/fd"))
        base = fds()
        streams = [self.sse() for _ in range(20)]
        self.assertTrue(H.wait_until(lambda: fds() >= base + 15, 2), (base, fds()))
        t0 = time.monotonic()
        for s in streams:
            s.sock.shutdown(socket.SHUT_RDWR)  # the client goes; its reader thread ends later
        released = H.wait_until(lambda: fds() <= base + 2, 3)
        self.assertTrue(released, f"{fds() - base} descriptors still held "
                                  f"{time.monotonic() - t0:.1f}s after the clients closed")
        self.assertLess(time.monotonic() - t0, 1.0)


class StatusCliTests(KillCase):

    def test_status_prints_reason_and_by_without_control_bytes(self):
        # `cordon status` printed a kill's reason and by raw: ESC [2J cleared the screen and
        # the line said "ALL CLEAR" while the kill was engaged (issue 18).
        evil = "x\x1b[2J\x1b[H kill switch  off  ALL CLEAR\x00\x07\u009b\r"
        st, js, _, _ = self.kill_network(evil, by="ops\x1b]0;pwned\x07")
        self.assertEqual(st, 200, js)
        r = H.cordon_cli(self.cordon, ["status"])
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        bad = sorted({hex(ord(ch)) for ch in out if (ord(ch) < 0x20 and ch != "\n")
                      or ord(ch) >= 0x7f})
        self.assertEqual(bad, [], f"control or non-ASCII characters in `cordon status`: {out!r}")
        line = [l for l in out.splitlines() if l.startswith("kill switch")]
        self.assertEqual(len(line), 1, out)
        self.assertIn("ENGAGED: x?[2J?[H kill switch  off  ALL CLEAR", line[0])
        self.assertIn("(by ops?]0;pwned?", line[0])


# ======================================================================================
# Durability: kill -9 and restart; a corrupt store
# ======================================================================================

class DurabilityTests(unittest.TestCase):

    def setUp(self):
        self.cordon = H.Cordon(jobs_yaml(), DNS.port, PROXY_OPTS)
        self.addCleanup(self.cordon.cleanup)
        self.cordon.start()
        self._conns = []
        self.addCleanup(lambda: [c.close() for c in self._conns])

    def test_follower_resuming_after_a_store_reset_learns_of_the_kill(self):
        # The state store was reset (a new volume): ids start again, a follower's id is now
        # beyond the last, and it missed the kill.network made before it reconnected.
        sid = self.cordon.create_session("agent")["id"]
        for _ in range(5):
            tok = self.cordon.mint_token(sid)
            self.assertEqual(self.cordon.admin(
                "DELETE", f"/v1/sessions/{sid}/tokens/{tok['token_id']}")[0], 200)
        s = H.SSEClient(self.cordon.admin_addr, "/v1/events", self.cordon.admin_token, "0")
        self.addCleanup(s.close)
        got = s.wait_for(lambda e: e["event"] == "token.revoke", 2, count=5)
        self.assertEqual(len(got), 5, s.snapshot())
        resume_from = got[-1]["id"]
        s.close()
        self.cordon.proc.send_signal(signal.SIGTERM)
        self.cordon.proc.wait(10)
        for name in os.listdir(self.cordon.state_dir):
            os.unlink(os.path.join(self.cordon.state_dir, name))
        H.cordon_restart(self.cordon)
        st, js = self.cordon.admin("POST", "/v1/kill", {"reason": "after the reset"})
        self.assertEqual(st, 200, js)
        again = H.SSEClient(self.cordon.admin_addr, "/v1/events", self.cordon.admin_token,
                            resume_from)
        self.addCleanup(again.close)
        lost = again.wait_for(lambda e: e["event"] == "resume.lost", 1.0)
        self.assertTrue(lost, f"resumed from {resume_from} after a reset: {again.snapshot()}")
        self.assertEqual(lost[0]["json"]["reason"], "ahead", lost[0])
        self.assertIs(lost[0]["json"]["kill"]["engaged"], True, lost[0])
        self.assertLess(lost[0]["json"]["kill"]["changed_ms_ago"], 10_000, lost[0])

    def tunnel(self, session, token=None):
        c = self.cordon.conn(5)
        self._conns.append(c)
        c.send(H.connect_request(f"raw.test:{ECHO.port}",
                                 H.basic(session["id"], token or session["token"])))
        return c, c.read_response(5, method="CONNECT")

    def assertWorks(self, session, token=None):
        c, r = self.tunnel(session, token)
        self.assertEqual(r.status, 200, r)
        c.send(b"alive")
        self.assertEqual(c.recv_exact(5, 5), b"alive")

    def assertRefused(self, session, status, reason, token=None):
        c, r = self.tunnel(session, token)
        self.assertEqual(r.status, status, r)
        self.assertEqual(r.header("X-Cordon-Deny"), reason, r)

    def restart(self):
        rc = H.cordon_restart(self.cordon, signal.SIGKILL)
        self.assertEqual(rc, -signal.SIGKILL)

    def test_network_kill_survives_sigkill(self):
        s = self.cordon.create_session("agent")
        self.assertWorks(s)
        status, js = self.cordon.admin("POST", "/v1/kill",
                                       {"reason": "durable kill", "by": "oncall-hal"})
        self.assertEqual(status, 200, js)
        self.restart()   # at once: the kill must be on disk before the call returned
        kill = self.cordon.status()["kill"]
        self.assertIs(kill.get("engaged"), True, kill)
        self.assertEqual(kill.get("reason"), "durable kill", kill)
        self.assertEqual(kill.get("by"), "oncall-hal", kill)
        self.assertRefused(s, 403, "kill_switch")
        status, js = self.cordon.admin("POST", "/v1/revive", {"reason": "after restart"})
        self.assertEqual(status, 200, js)
        self.assertWorks(s)   # the session survived the restart too

    def test_session_and_token_kills_survive_sigkill(self):
        killed = self.cordon.create_session("agent")
        partly = self.cordon.create_session("agent")
        partly2 = self.cordon.mint_token(partly["id"])
        active = self.cordon.create_session("agent")
        status, js = self.cordon.admin("POST", f"/v1/sessions/{killed['id']}/kill",
                                       {"reason": "durable session kill"})
        self.assertEqual(status, 200, js)
        status, js = self.cordon.admin(
            "DELETE", f"/v1/sessions/{partly['id']}/tokens/{partly2['token_id']}")
        self.assertEqual(status, 200, js)
        self.restart()
        self.assertIs(self.cordon.status()["kill"].get("engaged"), False)
        self.assertRefused(killed, 403, "session_killed")
        self.assertEqual(self.cordon.admin("GET", f"/v1/sessions/{killed['id']}")[1]
                         .get("state"), "killed")
        self.assertRefused(partly, 407, "token_revoked", token=partly2["token"])
        self.assertWorks(partly)
        self.assertWorks(active)

    def test_corrupt_state_store_starts_with_network_kill(self):
        sessions = [self.cordon.create_session("agent") for _ in range(150)]
        rc, _ = self.cordon.stop()
        self.assertEqual(rc, 0, self.cordon.stderr_text())
        db = os.path.join(self.cordon.state_dir, "cordon.db")
        self.assertTrue(os.path.isfile(db), f"no {db}: {os.listdir(self.cordon.state_dir)}")
        size = os.path.getsize(db)
        page = 4096
        self.assertGreaterEqual(size, 2 * page, f"{db} is only {size} bytes")
        off = max(page, (size // 2) // page * page)
        junk = bytes((0xA5 ^ i) & 0xFF for i in range(page))
        with open(db, "r+b") as f:
            f.seek(off)
            f.write(junk)
            f.flush()
            os.fsync(f.fileno())
        inode = os.stat(db).st_ino
        H.cordon_restart(self.cordon)   # must start, fail closed
        kill = self.cordon.status()["kill"]
        self.assertIs(kill.get("engaged"), True, f"corrupt store ({size} bytes, page at {off} "
                                                 f"overwritten) but status: {kill}")
        self.assertIn("state", (kill.get("reason") or "").lower(), kill)
        self.assertRefused(sessions[0], 403, "kill_switch")
        self.assertTrue(os.path.isfile(db), "the corrupt store was deleted")
        self.assertEqual(os.stat(db).st_ino, inode, "the corrupt store was replaced")
        with open(db, "rb") as f:
            f.seek(off)
            self.assertEqual(f.read(page), junk, "the corrupt store was rewritten")


# ======================================================================================
# CLI: cordon kill / revive / token revoke
# ======================================================================================

class CLITests(KillCase):

    def cli(self, *args):
        return H.cordon_cli(self.cordon, list(args))

    def assertSummary(self, p, count):
        self.assertEqual(p.returncode, 0, f"stdout={p.stdout!r} stderr={p.stderr!r}")
        lines = p.stdout.strip().splitlines()
        self.assertEqual(len(lines), 1, f"want a one-line summary, got {p.stdout!r}")
        self.assertRegex(lines[0], rf"(?<![\d.]){count}(?![\d.])",
                         f"the summary does not give {count} closed connections")

    def assertError(self, p, code=None):
        if code is None:
            self.assertNotEqual(p.returncode, 0, f"stdout={p.stdout!r}")
        else:
            self.assertEqual(p.returncode, code, f"stdout={p.stdout!r} stderr={p.stderr!r}")
        self.assertTrue(p.stderr.strip(), "an error without a message on stderr")

    def test_help(self):
        for args in (["kill", "--help"], ["revive", "--help"], ["token", "--help"]):
            with self.subTest(args=args):
                p = self.cli(*args)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("usage", p.stdout.lower())

    def test_kill_all_and_revive(self):
        ts = [self.open_tunnel(ECHO.port) for _ in range(3)]
        p = self.cli("kill", "--all", "--reason", "cli network kill")
        self.assertSummary(p, 3)
        kill = self.cordon.status()["kill"]
        self.assertIs(kill.get("engaged"), True, kill)
        self.assertEqual(kill.get("reason"), "cli network kill", kill)
        for t in ts:
            self.assertTrue(t.wait_closed(1)[0])
        c, r = self.tunnel(ECHO.port)
        self.assertDenied(r, 403, "kill_switch")
        p = self.cli("kill", "--all", "--reason", "twice")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.cli("revive", "--reason", "cli revive")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.strip().splitlines()), 1, p.stdout)
        self.assertIs(self.cordon.status()["kill"].get("engaged"), False)
        self.assertError(self.cli("revive", "--reason", "not engaged"))

    def test_kill_session(self):
        ts = [self.open_tunnel(ECHO.port) for _ in range(4)]
        p = self.cli("kill", self.session["id"], "--reason", "cli session kill")
        self.assertSummary(p, 4)
        for t in ts:
            self.assertTrue(t.wait_closed(1)[0])
        self.assertEqual(self.cordon.admin("GET", f"/v1/sessions/{self.session['id']}")[1]
                         .get("state"), "killed")
        self.assertIs(self.cordon.status()["kill"].get("engaged"), False)

    def test_token_revoke_one_then_all(self):
        sid = self.session["id"]
        t2 = self.cordon.mint_token(sid)
        t3 = self.cordon.mint_token(sid)
        on2 = self.open_tunnel(ECHO.port, token=t2["token"])
        p = self.cli("token", "revoke", sid, t2["token_id"])
        self.assertSummary(p, 1)
        self.assertTrue(on2.wait_closed(1)[0])
        c, r = self.tunnel(ECHO.port, token=t2["token"])
        self.assertEqual(r.status, 407, r)
        self.echo(self.open_tunnel(ECHO.port), b"first token works")
        on3 = self.open_tunnel(ECHO.port, token=t3["token"])
        p = self.cli("token", "revoke", sid)
        self.assertSummary(p, 2)  # the first token's tunnel above and on3
        self.assertTrue(on3.wait_closed(1)[0])
        for tok in (self.session["token"], t3["token"]):
            c, r = self.tunnel(ECHO.port, token=tok)
            self.assertEqual(r.status, 407, r)

    def test_errors(self):
        sid = self.session["id"]
        self.assertError(self.cli("kill", "--all"), 2)
        self.assertError(self.cli("kill", sid), 2)
        self.assertError(self.cli("kill"), 2)
        self.assertError(self.cli("revive"))
        self.assertError(self.cli("kill", "no-such-session", "--reason", "x"), 1)
        self.assertError(self.cli("token", "revoke", "no-such-session"), 1)
        self.assertError(self.cli("token", "revoke", sid, "no-such-token"), 1)
        self.assertIs(self.cordon.status()["kill"].get("engaged"), False)
        self.assertEqual(self.cordon.admin("GET", f"/v1/sessions/{sid}")[1].get("state"),
                         "active")


if __name__ == "__main__":
    unittest.main()
