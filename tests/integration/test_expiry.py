"""Integration test of token expiry, end to end: a session created with the shortest ttl
cordon allows (1m) against the real `cordon serve`, on loopback only.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_expiry   (from tests/integration)

The contract (docs/proxy.md): tokens expire by themselves; within a second of expiry their
tunnels are closed (`conn.close` reason `token_expired`); expired credentials get `407`
with `X-Cordon-Deny: token_expired`; a session whose tokens have all expired is ended by the
sweep. This test allows 2 s after `expires_at` (the sweep runs once a second, and the test
polls every 0.2 s). It takes a little over a minute (the 1m ttl), bounded by ~75 s.

Both the idle timeout and the header timeout (which bounds the wait for the next request on
a keep-alive connection) are 10m, so nothing but expiry can close the connections here.
"""

import datetime
import select
import socket
import time
import unittest

import harness as H

ECHO = HTTP = DNS = None


def setUpModule():
    global ECHO, HTTP, DNS
    ECHO = H.CountingOrigin("echo")
    HTTP = H.HTTPOrigin()
    DNS = H.FakeDNS({"raw.test": {"A": ["127.0.0.1"]}})


def tearDownModule():
    for o in (ECHO, HTTP, DNS):
        if o is not None:
            o.stop()


def jobs_yaml():
    return (
        "  agent:\n"
        "    task: integration test of token expiry\n"
        "    egress:\n"
        f"      - {{ host: raw.test, ports: [{ECHO.port}], protocol: tcp, "
        f"resolves_to: [127.0.0.0/8] }}\n"
        f"      - {{ host: localhost, ports: [{HTTP.port}], protocol: http, "
        f"methods: [GET], resolves_to: [127.0.0.0/8, \"::1/128\"] }}\n"
        "    identity: { ttl: 30m }\n")


PROXY_OPTS = {"header_timeout": "10m", "idle_timeout": "10m", "handshake_timeout": "5s",
              "connect_timeout": "5s", "max_header_bytes": "8KiB"}

CLOSE_WINDOW = 2.0   # seconds after expires_at by which cordon must have closed
POLL_FOR = 3.0       # seconds after expires_at the test keeps polling
POLL_EVERY = 0.2


def parse_ts(ts):
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def mono_of(wall):
    """The time.monotonic() value of a wall-clock instant (aware datetime)."""
    now_wall = datetime.datetime.now(datetime.timezone.utc)
    return time.monotonic() + (wall - now_wall).total_seconds()


def peer_closed(c):
    """True if cordon has closed this client connection (EOF or reset), False if it is open
    with nothing to read; never blocks. Bytes already buffered mean open (not expected)."""
    if c.buf:
        return False
    # select first: a Python socket with a timeout waits for readability inside recv() even
    # with MSG_DONTWAIT, which would turn this check into a blocking wait.
    readable, _, _ = select.select([c.sock], [], [], 0)
    if not readable:
        return False
    try:
        d = c.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return False
    except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
        return True
    return d == b""


class TokenExpiryTests(unittest.TestCase):

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
        self.addCleanup(lambda: [c.close() for c in self._conns])

    def conn(self):
        c = self.cordon.conn(10)
        self._conns.append(c)
        return c

    def tunnel(self, session):
        c = self.conn()
        c.send(H.connect_request(f"raw.test:{ECHO.port}",
                                 H.basic(session["id"], session["token"])))
        return c, c.read_response(5, method="CONNECT")

    def echo(self, c, payload, what):
        try:
            c.send(payload)
            got = c.recv_exact(len(payload), 5)
        except (OSError, EOFError) as e:
            self.fail(f"{what}: no echo ({e!r})")
        self.assertEqual(got, payload, what)

    def session_state(self, sid):
        status, js = self.cordon.admin("GET", f"/v1/sessions/{sid}")
        self.assertEqual(status, 200, js)
        return js

    def test_short_token_expires_end_to_end(self):
        short = self.cordon.create_session("agent", ttl="1m")
        long_ = self.cordon.create_session("agent")
        t_created = datetime.datetime.now(datetime.timezone.utc)
        exp = parse_ts(short["expires_at"])
        long_exp = parse_ts(long_["expires_at"])
        ttl = (exp - t_created).total_seconds()
        self.assertTrue(55 <= ttl <= 61, f"ttl 1m gave expires_at {short['expires_at']} "
                                         f"({ttl:.1f}s from now)")
        self.assertGreater((long_exp - t_created).total_seconds(), 25 * 60, long_)
        t_exp = mono_of(exp)

        # Before expiry: both tunnels echo, the keep-alive HTTP connection serves a request.
        n0 = ECHO.snapshot()
        short_t, r = self.tunnel(short)
        self.assertEqual(r.status, 200, f"CONNECT with the 1m token: {r}")
        long_t, r = self.tunnel(long_)
        self.assertEqual(r.status, 200, f"CONNECT with the default-ttl token: {r}")
        self.echo(short_t, b"short before", "1m-token tunnel before expiry")
        self.echo(long_t, b"long before", "default-ttl tunnel before expiry")
        ka = self.conn()
        url = f"http://localhost:{HTTP.port}/expiry-keepalive"
        ka.send((f"GET {url} HTTP/1.1\r\nHost: localhost:{HTTP.port}\r\n"
                 f"Proxy-Authorization: {H.basic(short['id'], short['token'])}\r\n\r\n")
                .encode())
        r = ka.read_response(5)
        self.assertEqual(r.status, 200, f"keep-alive GET with the 1m token: {r}")
        self.assertNotEqual((r.header("Connection") or "").lower(), "close", r)
        self.assertEqual(ka.buf, b"", "bytes after the keep-alive response")

        # Just before expiry everything is still open (so a close later is the expiry's).
        time.sleep(max(0.0, t_exp - 1.5 - time.monotonic()))
        self.assertLess(time.monotonic(), t_exp - 0.5, "setup overran the token's lifetime")
        self.echo(short_t, b"short just before", "1m-token tunnel 1.5s before expiry")
        self.assertFalse(peer_closed(ka), "keep-alive HTTP connection closed before expiry")
        self.assertEqual(self.session_state(short["id"]).get("state"), "active")

        # Poll from just before expires_at to expires_at + 3 s, every 0.2 s.
        closed_at = {"tunnel": None, "http": None}
        conns = {"tunnel": short_t, "http": ka}
        for _ in range(int((1.5 + POLL_FOR) / POLL_EVERY) + 10):
            now = time.monotonic()
            for k, c in conns.items():
                if closed_at[k] is None and peer_closed(c):
                    closed_at[k] = round(now - t_exp, 3)
            if all(v is not None for v in closed_at.values()) or now > t_exp + POLL_FOR:
                break
            time.sleep(POLL_EVERY)
        t_polled = round(time.monotonic() - t_exp, 3)

        # The long session's tunnel is untouched.
        self.echo(long_t, b"long after", "default-ttl tunnel after the 1m token expired")

        # A new CONNECT with the expired token: 407 token_expired.
        c, r = self.tunnel(short)
        self.assertEqual(r.status, 407, f"CONNECT with the expired token: {r}")
        self.assertEqual(r.header("X-Cordon-Deny"), "token_expired", r)
        self.assertIsNotNone(r.header("Proxy-Authenticate"), r)

        # The session is ended by the sweep (runs every second).
        states = []

        def ended():
            st = self.session_state(short["id"]).get("state")
            states.append(st)
            return st == "ended"
        self.assertTrue(H.wait_until(ended, max(0.5, t_exp + POLL_FOR - time.monotonic()),
                                     POLL_EVERY),
                        f"GET /v1/sessions/ID of the expired session: states seen {states}")
        self.assertEqual(self.session_state(long_["id"]).get("state"), "active")

        # The audit log: conn.close token_expired for the short tunnel, none for the long one.
        target = f"raw.test:{ECHO.port}"
        ev = self.cordon.wait_events(
            lambda e: e.get("event") == "conn.close" and e.get("session") == short["id"]
            and e.get("target") == target, 1, 3)
        self.assertTrue(ev, "no conn.close for the 1m-token tunnel in the audit log")
        self.assertEqual([e.get("reason") for e in ev], ["token_expired"], ev)
        bad = [e for e in self.cordon.audit_events()
               if e.get("session") == long_["id"] and e.get("event") == "conn.close"]
        self.assertEqual(bad, [], "the default-ttl tunnel was closed")

        # Timing, checked last so that a late close still reports the rest above.
        self.assertIsNotNone(closed_at["tunnel"],
                             f"the 1m-token tunnel is still open {t_polled}s after expires_at")
        self.assertIsNotNone(closed_at["http"], f"the keep-alive HTTP connection (1m token) "
                                                f"is still open {t_polled}s after expires_at")
        for k, v in closed_at.items():
            self.assertGreaterEqual(v, -0.05, f"{k} closed {-v}s before expires_at")
            self.assertLessEqual(v, CLOSE_WINDOW,
                                 f"{k} closed {v}s after expires_at (> {CLOSE_WINDOW}s)")
        up = ECHO.conns_since(n0)
        self.assertTrue(H.wait_until(lambda: up[0]["closed"], 1),
                        f"cordon's upstream connection of the expired tunnel is open: {up[0]}")
        self.assertFalse(up[1]["closed"], "the default-ttl tunnel's upstream was closed")


if __name__ == "__main__":
    unittest.main()
