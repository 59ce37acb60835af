"""Integration tests of the session limits on HTTP forwarding and upgraded tunnels, and of the
close reasons of a tunnel killed before its ClientHello or a request killed while it
resolves (found by an adversarial review, issue 20's note): the upload budget counts request
heads and refuses a request once spent; a WebSocket upgrade relays within the budget and
takes a tunnel slot; a kill is recorded as the kill, not as an SNI mismatch or a 502.
Real `cordon serve`, raw sockets, loopback only.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_forward_limits   (from tests/integration)
"""

import base64
import os
import threading
import time
import unittest

import harness as H
from harness import KiB

HTTP = TLS = ECHO = DNS = None
loop = {"A": ["127.0.0.1"]}


class SlowDNS(H.FakeDNS):
    """Answers slow.test after 3 s: a lookup in flight to kill."""

    def _answer(self, q, transport="udp"):
        if b"\x04slow\x04test" in q:
            time.sleep(3.0)
        return super()._answer(q, transport)


def setUpModule():
    global HTTP, TLS, ECHO, DNS
    H.test_cert()
    HTTP = H.HTTPOrigin()
    TLS = H.TLSOrigin()
    ECHO = H.EchoOrigin("echo")
    DNS = SlowDNS({"a.test": loop, "raw.test": loop, "slow.test": loop})


def tearDownModule():
    for o in (HTTP, TLS, ECHO, DNS):
        if o is not None:
            o.stop()


def jobs_yaml():
    res = 'resolves_to: [127.0.0.0/8, "::1/128"]'
    return (
        "  lim:\n"
        "    task: limits on forwarding and upgrades\n"
        "    egress:\n"
        f"      - {{ host: localhost, ports: [{HTTP.port}], protocol: http, {res} }}\n"
        f"      - {{ host: raw.test, ports: [{ECHO.port}], protocol: tcp, {res} }}\n"
        "    limits: { max_tunnels: 1, max_bytes_up: 8KiB }\n"
        "    identity: { ttl: 30m }\n"
        "  web:\n"
        "    task: kills before the ClientHello and during a lookup\n"
        "    egress:\n"
        f"      - {{ host: a.test, ports: [{TLS.port}], {res} }}\n"
        f"      - {{ host: slow.test, ports: [{ECHO.port}], protocol: tcp, {res} }}\n"
        "    identity: { ttl: 30m }\n")


class ForwardLimitsTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cordon = H.Cordon(jobs_yaml(), DNS.port).start()

    @classmethod
    def tearDownClass(cls):
        cls.cordon.stop()
        cls.cordon.cleanup()

    def setUp(self):
        self.conns = []

    def tearDown(self):
        for c in self.conns:
            c.close()

    def conn(self):
        c = self.cordon.conn()
        self.conns.append(c)
        return c

    def get(self, c, auth, path, headers=""):
        hp = f"localhost:{HTTP.port}"
        c.send((f"GET http://{hp}{path} HTTP/1.1\r\nHost: {hp}\r\nProxy-Authorization: {auth}\r\n"
                f"{headers}\r\n").encode())
        return c.read_response(10)

    def upgrade(self, auth):
        c = self.conn()
        hp = f"localhost:{HTTP.port}"
        key = base64.b64encode(os.urandom(16)).decode()
        c.send((f"GET http://{hp}/ws HTTP/1.1\r\nHost: {hp}\r\nProxy-Authorization: {auth}\r\n"
                f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
        return c, c.read_response(10)

    def session_events(self, s, event):
        return [e for e in self.cordon.audit_events()
                if e["event"] == event and e.get("session") == s["id"]]

    def test_request_heads_count_against_the_upload_budget(self):
        s = self.cordon.create_session("lim")
        auth = H.basic(s["id"], s["token"])
        c = self.conn()
        pad = "x" * 3000
        statuses = [self.get(c, auth, f"/h{i}", f"X-Pad: {pad}\r\n").status for i in range(2)]
        self.assertEqual(statuses, [200, 200])
        # The third 3 KiB head does not fit in what is left of 8 KiB: refused, not sent.
        r = self.get(c, auth, "/h2", f"X-Pad: {pad}\r\n")
        self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "budget"))
        self.assertEqual(HTTP.requests_matching("/h2"), [])
        # What is left takes smaller heads until one no longer fits: refused the same way.
        for i in range(40):  # 40 x ~1 KiB heads: more than the 2 KiB left
            r = self.get(self.conn(), auth, f"/small{i}", f"X-Pad: {'y' * 900}\r\n")
            if r.header("X-Cordon-Deny") == "budget":
                break
            self.assertEqual(r.status, 200)
        self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "budget"))
        self.assertEqual(HTTP.requests_matching(f"/small{i}"), [])
        total = sum(len(v) for rec in HTTP.requests_matching("/") for k, v in rec["headers"]
                    if k == "X-Pad" and rec["path"].startswith(("/h", "/small")))
        self.assertLessEqual(total, 8 * KiB)

    def test_an_upgraded_tunnel_relays_within_the_budget(self):
        s = self.cordon.create_session("lim")
        c, r = self.upgrade(H.basic(s["id"], s["token"]))
        self.assertEqual(r.status, 101)
        echoed = 0
        try:
            for _ in range(64):  # 64 x 4 KiB = 256 KiB offered against an 8 KiB budget
                c.sock.sendall(b"Z" * (4 * KiB))
                echoed += len(c.recv_exact(4 * KiB, 2))
        except (OSError, EOFError, ValueError):
            pass
        self.assertLessEqual(echoed, 8 * KiB)
        self.assertTrue(H.wait_until(lambda: self.session_events(s, "conn.close"), 5))
        close = self.session_events(s, "conn.close")[-1]
        self.assertEqual(close["reason"], "budget", close)
        self.assertLessEqual(close["bytes_up"], 8 * KiB, close)

    def test_an_upgraded_tunnel_takes_a_tunnel_slot(self):
        s = self.cordon.create_session("lim")
        auth = H.basic(s["id"], s["token"])
        ws, r = self.upgrade(auth)
        self.assertEqual(r.status, 101)
        # max_tunnels: 1, held by the WebSocket: no CONNECT, no second upgrade.
        c, r = self.cordon.tunnel(s, f"raw.test:{ECHO.port}")
        self.conns.append(c)
        self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "limit"))
        _, r = self.upgrade(auth)
        self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "limit"))
        # A plain request is no tunnel: still served.
        self.assertEqual(self.get(self.conn(), auth, "/plain").status, 200)
        # The slot comes back when the WebSocket closes.
        ws.close()

        def retry():
            c, r = self.cordon.tunnel(s, f"raw.test:{ECHO.port}")
            self.conns.append(c)
            return r.status == 200
        self.assertTrue(H.wait_until(retry, 5, 0.1))

    def test_a_refused_upgrade_gives_its_slot_back(self):
        s = self.cordon.create_session("lim")
        auth = H.basic(s["id"], s["token"])
        hp = f"localhost:{HTTP.port}"
        c = self.conn()
        # Upgrade asked of a path the origin answers 200, not 101: no tunnel is made.
        c.send((f"GET http://{hp}/not-ws HTTP/1.1\r\nHost: {hp}\r\nProxy-Authorization: {auth}\r\n"
                f"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n").encode())
        self.assertEqual(c.read_response(10).status, 200)
        t, r = self.cordon.tunnel(s, f"raw.test:{ECHO.port}")
        self.conns.append(t)
        self.assertEqual(r.status, 200)


class KillReasonTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cordon = H.Cordon(jobs_yaml(), DNS.port).start()

    @classmethod
    def tearDownClass(cls):
        cls.cordon.stop()
        cls.cordon.cleanup()

    def closes_of(self, s):
        return [e for e in self.cordon.audit_events()
                if e.get("session") == s["id"] and e["event"] in ("conn.close", "conn.deny",
                                                                  "conn.error")]

    def test_a_kill_before_the_client_hello_is_the_kill(self):
        for kind in ("session", "network"):
            with self.subTest(kind):
                s = self.cordon.create_session("web")
                c, r = self.cordon.tunnel(s, f"a.test:{TLS.port}")
                self.assertEqual(r.status, 200)
                before = self.cordon.admin_raw("GET", "/metrics")[2].decode()
                path = "/v1/kill" if kind == "network" else f"/v1/sessions/{s['id']}/kill"
                st, _ = self.cordon.admin("POST", path, {"reason": "test", "by": "it"})
                self.assertEqual(st, 200)
                self.assertTrue(c.wait_closed(5))
                c.close()
                self.assertTrue(H.wait_until(lambda: self.closes_of(s), 5))
                ev = self.closes_of(s)
                self.assertEqual(len(ev), 1, ev)
                want = "kill_switch" if kind == "network" else "session_killed"
                self.assertEqual((ev[0]["event"], ev[0]["reason"]), ("conn.close", want), ev)
                after = self.cordon.admin_raw("GET", "/metrics")[2].decode()
                sni = 'cordon_denied_total{job="web",reason="sni_mismatch"}'
                self.assertEqual([l for l in before.splitlines() if l.startswith(sni)],
                                 [l for l in after.splitlines() if l.startswith(sni)])
                if kind == "network":
                    self.assertEqual(self.cordon.admin("POST", "/v1/revive",
                                                       {"reason": "test", "by": "it"})[0], 200)

    def test_a_client_gone_before_its_client_hello_is_no_mismatch(self):
        s = self.cordon.create_session("web")
        c, r = self.cordon.tunnel(s, f"a.test:{TLS.port}")
        self.assertEqual(r.status, 200)
        c.close()
        self.assertTrue(H.wait_until(lambda: self.closes_of(s), 5))
        ev = self.closes_of(s)
        self.assertEqual([(e["event"], e["reason"]) for e in ev], [("conn.close", "client_error")])

    def test_a_network_kill_during_a_lookup_is_the_kill_not_a_502(self):
        s = self.cordon.create_session("web")
        c = self.cordon.conn()
        try:
            c.send(H.connect_request(f"slow.test:{ECHO.port}", H.basic(s["id"], s["token"])))
            time.sleep(0.8)  # the lookup is in flight (the DNS answers after 3 s)
            st, _ = self.cordon.admin("POST", "/v1/kill", {"reason": "test", "by": "it"})
            self.assertEqual(st, 200)
            self.assertTrue(c.wait_closed(5))
        finally:
            c.close()
            self.cordon.admin("POST", "/v1/revive", {"reason": "test", "by": "it"})
        # The client is cut at once; the record comes when the lookup ends (the kill may
        # find it queued behind the slow DNS server's answers: up to two of 3 s each).
        self.assertTrue(H.wait_until(lambda: self.closes_of(s), 12))
        ev = self.closes_of(s)
        self.assertEqual(len(ev), 1, ev)
        self.assertEqual((ev[0]["event"], ev[0]["reason"]), ("conn.deny", "kill_switch"), ev)
        self.assertNotIn("status", ev[0])


if __name__ == "__main__":
    unittest.main()
