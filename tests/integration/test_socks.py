"""Integration tests of SOCKS5 (listen.socks, and the proxy port by its first byte) and of
`protocol: ssh` rules, driven by real clients: curl (--socks5-hostname, --socks5 with
user:password), Debian's python3-socks, ncat --proxy-type socks5, ssh and git over ssh to a
loopback sshd the test starts (its own host key and config, a high port); and by a raw
client for what the real ones never send (BIND, truncated and slow handshakes, HTTP into an
ssh rule).

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_socks   (from tests/integration)

Loopback only. Names resolve through a fake DNS server the test starts; the client of the
`src` job (no credentials, `sources`) connects from 127.0.0.2.
"""

import os
import shutil
import socket
import struct
import subprocess
import time
import unittest
import uuid

import harness as H

DEBIAN_PYTHON = "/usr/bin/python3"  # Debian's, with python3-socks (module `socks`)

HTTP = ECHO = DNS = None


def setUpModule():
    global HTTP, ECHO, DNS
    HTTP = H.HTTPOrigin()
    ECHO = H.EchoOrigin("echo")
    loop = {"A": ["127.0.0.1"]}
    DNS = H.FakeDNS({"web.test": loop, "raw.test": loop, "fake-ssh.test": loop,
                     "ssh.test": loop, "git.test": loop, "cordon.events": loop})


def tearDownModule():
    for o in (HTTP, ECHO, DNS):
        if o is not None:
            o.stop()


def jobs_yaml(ssh_port=None):
    ssh_rule = (f"      - {{ host: ssh.test, ports: [{ssh_port}], protocol: ssh, "
                f"resolves_to: [127.0.0.0/8] }}\n"
                f"      - {{ host: git.test, ports: [{ssh_port}], protocol: ssh, "
                f"resolves_to: [127.0.0.0/8] }}\n") if ssh_port else ""
    return (
        "  web:\n"
        "    task: integration tests of SOCKS5\n"
        "    egress:\n"
        f"      - {{ host: web.test, ports: [{HTTP.port}], protocol: tcp, "
        f"resolves_to: [127.0.0.0/8] }}\n"
        f"      - {{ host: raw.test, ports: [{ECHO.port}], protocol: tcp, "
        f"resolves_to: [127.0.0.0/8] }}\n"
        f"      - {{ cidr: 127.0.0.1/32, ports: [{HTTP.port}], protocol: tcp }}\n"
        f"      - {{ host: fake-ssh.test, ports: [{ECHO.port}], protocol: ssh, "
        f"resolves_to: [127.0.0.0/8] }}\n"
        # cordon's reserved name, allowed as if it were a host: still never dialled.
        f"      - {{ host: cordon.events, ports: [{ECHO.port}], protocol: tcp, "
        f"resolves_to: [127.0.0.0/8] }}\n"
        + ssh_rule +
        "    identity: { ttl: 30m }\n"
        "  src:\n"
        "    task: clients known by their address\n"
        "    egress:\n"
        f"      - {{ host: raw.test, ports: [{ECHO.port}], protocol: tcp, "
        f"resolves_to: [127.0.0.0/8] }}\n"
        "    sources: [127.0.0.2/32]\n"
        "    identity: { ttl: 30m }\n")


def start_cordon(cordon, *also):
    """Starts a class's cordon; if it does not start, removes it and stops `also` (what the
    class started for it: a DNS server, sshd, squid, a temp dir) before the error goes on."""
    try:
        cordon.start()
    except BaseException:
        cordon.cleanup()
        stop_all(also)
        raise


def stop_cordon(cordon, *also):
    """Stops and removes a class's cordon, then stops `also`, even when one of them fails;
    returns cordon's exit status and its stderr."""
    try:
        rc, _ = cordon.stop()
        return rc, cordon.stderr_text()
    finally:
        cordon.cleanup()
        stop_all(also)


def stop_all(things):
    for o in things:
        (getattr(o, "stop", None) or o.cleanup)()


class LoopbackDaemon:
    """A server the test runs on a loopback port in its own temp dir (sshd, squid):
    `proc`, `port` and `tmp` are set by the subclass."""

    def wait_listening(self, what):
        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return True
            except OSError:
                return False
        if not H.wait_until(up, 20, 0.1):
            self.stop()
            raise RuntimeError(f"{what} did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.tmp.cleanup()


class Socks:
    """A raw SOCKS5 client, one message at a time, every read bounded in time."""

    def __init__(self, addr, timeout=10, source=None):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        if source:
            self.s.bind((source, 0))
        self.s.connect(addr)

    def send(self, data):
        self.s.sendall(data)

    def recv_exact(self, n):
        out = b""
        for _ in range(n + 1):
            if len(out) >= n:
                break
            chunk = self.s.recv(n - len(out))
            if not chunk:
                raise EOFError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return out

    def greet(self, methods):
        self.send(bytes([5, len(methods)]) + bytes(methods))
        return self.recv_exact(2)

    def login(self, user, password):
        u, p = user.encode(), password.encode()
        self.send(bytes([1, len(u)]) + u + bytes([len(p)]) + p)
        return self.recv_exact(2)

    def request(self, host, port, cmd=1):
        try:
            packed = socket.inet_aton(host)
            addr = b"\x01" + packed
        except OSError:
            addr = b"\x03" + bytes([len(host)]) + host.encode()
        self.send(bytes([5, cmd, 0]) + addr + struct.pack(">H", port))
        return self.recv_exact(10)

    def connect(self, session, host, port):
        """Greeting, login, CONNECT; returns the request answer's reply code."""
        assert self.greet([0, 2]) == b"\x05\x02"
        assert self.login(session["id"], session["token"]) == b"\x01\x00"
        return self.request(host, port)[1]

    def closed(self, timeout=5):
        """True when cordon closes the connection within `timeout` (EOF or reset)."""
        self.s.settimeout(timeout)
        try:
            for _ in range(1000):
                if not self.s.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


class SocksTestCase(unittest.TestCase):
    """One cordon (with listen.socks) per class; a fresh `web` session per test."""

    ssh_port = None
    proxy_opts = {"header_timeout": "2s", "handshake_timeout": "2s", "connect_timeout": "5s",
                  "idle_timeout": "60s"}

    @classmethod
    def setUpClass(cls):
        cls.cordon = H.Cordon(jobs_yaml(cls.ssh_port), DNS.port, cls.proxy_opts,
                              listen_socks="127.0.0.1:0")
        start_cordon(cls.cordon)

    @classmethod
    def tearDownClass(cls):
        rc, err = stop_cordon(cls.cordon)
        if rc != 0:
            raise AssertionError(f"cordon exited {rc}:\n{err}")

    def setUp(self):
        self.session = self.cordon.create_session("web")
        self.socks_url = self.url(self.cordon.socks_addr)

    def tearDown(self):
        # No secret in the audit log, ever.
        raw = self.cordon.audit_raw()
        for s in self.cordon.secrets:
            if s:
                self.assertNotIn(s.encode(), raw)

    def url(self, addr, scheme="socks5h", session=None):
        s = session or self.session
        return f"{scheme}://{s['id']}:{s['token']}@{addr[0]}:{addr[1]}"

    def events(self, event, pred=lambda e: True, count=1, timeout=5):
        sid = self.session["id"]
        return self.cordon.wait_events(
            lambda e: e["event"] == event and e.get("session") == sid and pred(e), count,
            timeout)

    def marker(self):
        return f"/socks-{uuid.uuid4().hex[:12]}"


class SocksClientTests(SocksTestCase):
    """Real clients through SOCKS5, on listen.socks and on the proxy port."""

    def curl_get(self, proxy_url, url, extra=()):
        return H.run_curl(["-sS", "--max-time", "20", "-x", proxy_url, *extra, url], timeout=30)

    def test_curl_socks5_hostname_on_listen_socks(self):
        m = self.marker()
        r = self.curl_get(self.socks_url, f"http://web.test:{HTTP.port}{m}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(HTTP.requests_matching(m)), 1)
        opened = self.events("conn.open", lambda e: e.get("target") == f"web.test:{HTTP.port}")
        self.assertEqual(len(opened), 1)
        self.assertEqual(opened[0]["via"], "socks5")
        self.assertEqual(opened[0]["method"], "CONNECT")
        self.assertEqual(opened[0]["ip"], "127.0.0.1")
        closed = self.events("conn.close", lambda e: e.get("target") == f"web.test:{HTTP.port}")
        self.assertEqual(len(closed), 1)
        self.assertGreater(closed[0]["bytes_up"], len(m))
        self.assertEqual(closed[0]["via"], "socks5")

    def test_curl_socks5_hostname_on_the_proxy_port(self):
        m = self.marker()
        r = self.curl_get(self.url(self.cordon.proxy_addr), f"http://web.test:{HTTP.port}{m}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(HTTP.requests_matching(m)), 1)
        self.assertEqual(len(self.events("conn.close", lambda e: e.get("via") == "socks5")), 1)

    def test_http_on_the_proxy_port_is_unchanged(self):
        # CONNECT on the same port still works (the first byte is not 5).
        c, r = self.cordon.tunnel(self.session, f"raw.test:{ECHO.port}")
        try:
            self.assertEqual(r.status, 200)
            c.send(b"ping")
            self.assertEqual(c.recv_exact(4), b"ping")
        finally:
            c.close()
        self.assertTrue(self.events("conn.close", lambda e: "via" not in e))

    def test_curl_socks5_with_local_resolution_and_credentials(self):
        # --socks5: curl resolves the name itself and sends the address: decided as an IP
        # literal (the cidr rule), as CONNECT 127.0.0.1:PORT would be.
        m = self.marker()
        r = self.curl_get(self.url(self.cordon.socks_addr, "socks5"),
                          f"http://localhost:{HTTP.port}{m}", ("-4",))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(HTTP.requests_matching(m)), 1)
        self.assertTrue(self.events("conn.open",
                                    lambda e: e.get("target") == f"127.0.0.1:{HTTP.port}"))

    def test_python_socks(self):
        code = (
            "import socks, sys\n"
            "s = socks.socksocket()\n"
            "s.settimeout(10)\n"
            "s.set_proxy(socks.SOCKS5, sys.argv[1], int(sys.argv[2]), rdns=True,\n"
            "            username=sys.argv[3], password=sys.argv[4])\n"
            "s.connect(('raw.test', int(sys.argv[5])))\n"
            "s.sendall(b'hello socks')\n"
            "got = b''\n"
            "while len(got) < 11:\n"
            "    got += s.recv(64)\n"
            "print(got.decode())\n")
        h, p = self.cordon.socks_addr
        r = subprocess.run([DEBIAN_PYTHON, "-c", code, h, str(p), self.session["id"],
                            self.session["token"], str(ECHO.port)],
                           capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), b"hello socks")

    def test_ncat_proxy_type_socks5(self):
        h, p = self.cordon.socks_addr
        r = subprocess.run(
            ["ncat", "--proxy", f"{h}:{p}", "--proxy-type", "socks5", "--proxy-dns", "remote",
             "--proxy-auth", f"{self.session['id']}:{self.session['token']}", "-w", "10",
             "raw.test", str(ECHO.port)],
            input=b"via ncat\n", capture_output=True, timeout=30)
        self.assertEqual(r.stdout, b"via ncat\n", r.stderr)

    def test_session_kill_closes_a_socks_tunnel(self):
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.connect(self.session, "raw.test", ECHO.port), 0)
            c.send(b"x")
            self.assertEqual(c.recv_exact(1), b"x")
            st, _ = self.cordon.admin("POST", f"/v1/sessions/{self.session['id']}/kill",
                                      {"reason": "test"})
            self.assertEqual(st, 200)
            self.assertTrue(c.closed(3))
        finally:
            c.close()
        closed = self.events("conn.close", lambda e: e.get("reason") == "session_killed")
        self.assertEqual(len(closed), 1)
        # A killed session's credentials are refused from then on.
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.greet([2]), b"\x05\x02")
            self.assertEqual(c.login(self.session["id"], self.session["token"])[1], 1)
        finally:
            c.close()
        self.assertTrue(self.events("conn.deny", lambda e: e["reason"] == "session_killed"))


class SocksRefusalTests(SocksTestCase):
    """What an uncooperative agent tries: each refused with a SOCKS answer and audited."""

    def test_denied_host_is_reply_2_no_rule(self):
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.connect(self.session, "evil.test", 443), 2)
            self.assertTrue(c.closed())
        finally:
            c.close()
        d = self.events("conn.deny", lambda e: e.get("target") == "evil.test:443")
        self.assertEqual(d[0]["reason"], "no_rule")
        self.assertEqual(d[0]["via"], "socks5")
        # curl says the proxy refused.
        r = H.run_curl(["-sS", "--max-time", "10", "-x", self.socks_url, "http://evil.test/"])
        self.assertNotEqual(r.returncode, 0)

    def test_denied_port_is_reply_2_port(self):
        n = ECHO.snapshot()
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.connect(self.session, "raw.test", 1), 2)
        finally:
            c.close()
        d = self.events("conn.deny", lambda e: e.get("target") == "raw.test:1")
        self.assertEqual(d[0]["reason"], "port")
        self.assertEqual(ECHO.snapshot(), n)

    def test_address_outside_the_cidr_rules_is_refused(self):
        c = Socks(self.cordon.socks_addr)
        try:
            # 127.0.0.1 on the echo port: only the HTTP port's cidr rule names the address.
            self.assertEqual(c.connect(self.session, "127.0.0.1", ECHO.port), 2)
        finally:
            c.close()
        self.assertTrue(self.events("conn.deny",
                                    lambda e: e.get("target") == f"127.0.0.1:{ECHO.port}"))

    def test_cordons_own_listeners_are_never_reached(self):
        h, p = self.cordon.admin_addr
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.connect(self.session, "127.0.0.1", p), 2)
        finally:
            c.close()

    def test_wrong_credentials(self):
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.greet([2]), b"\x05\x02")
            self.assertEqual(c.login(self.session["id"], "not-the-token")[1], 1)
            self.assertTrue(c.closed())
        finally:
            c.close()
        d = self.cordon.wait_events(lambda e: e["event"] == "conn.deny" and
                                    e.get("reason") == "auth" and e.get("via") == "socks5")
        self.assertTrue(d)
        # curl with the wrong token: refused.
        bad = dict(self.session, token="wrong")
        r = H.run_curl(["-sS", "--max-time", "10", "-x", self.url(self.cordon.socks_addr,
                                                                   session=bad),
                        f"http://web.test:{HTTP.port}/"])
        self.assertNotEqual(r.returncode, 0)

    def test_no_auth_from_a_client_not_in_sources(self):
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.greet([0]), b"\x05\xff")
            self.assertTrue(c.closed())
        finally:
            c.close()
        # curl without credentials.
        h, p = self.cordon.socks_addr
        r = H.run_curl(["-sS", "--max-time", "10", "-x", f"socks5h://{h}:{p}",
                        f"http://web.test:{HTTP.port}/"])
        self.assertNotEqual(r.returncode, 0)

    def test_no_auth_from_a_sources_client(self):
        c = Socks(self.cordon.socks_addr, source="127.0.0.2")
        try:
            self.assertEqual(c.greet([0]), b"\x05\x00")
            self.assertEqual(c.request("raw.test", ECHO.port)[1], 0)
            c.send(b"src")
            self.assertEqual(c.recv_exact(3), b"src")
        finally:
            c.close()
        self.assertTrue(self.cordon.wait_events(
            lambda e: e["event"] == "conn.open" and e.get("job") == "src" and
            e.get("via") == "socks5"))

    def login_bytes(self, token=None):
        u, p = self.session["id"].encode(), (token or self.session["token"]).encode()
        return bytes([1, len(u)]) + u + bytes([len(p)]) + p

    @staticmethod
    def request_bytes(host, port):
        return b"\x05\x01\x00\x03" + bytes([len(host)]) + host.encode() + struct.pack(">H", port)

    def test_a_pipelined_handshake_gets_every_answer_in_order(self):
        # Greeting, credentials and request in one write (a client that does not wait):
        # cordon may send its answers together, but all of them, in order, and nothing else.
        c = Socks(self.cordon.socks_addr)
        try:
            c.send(b"\x05\x01\x02" + self.login_bytes() + self.request_bytes("raw.test", ECHO.port))
            answers = c.recv_exact(14)
            self.assertEqual(answers[:4], b"\x05\x02\x01\x00")
            self.assertEqual(answers[4:7], b"\x05\x00\x00")
            c.send(b"pipe")
            self.assertEqual(c.recv_exact(4), b"pipe")
        finally:
            c.close()
        # No-auth from a sources client, greeting and request at once.
        c = Socks(self.cordon.socks_addr, source="127.0.0.2")
        try:
            c.send(b"\x05\x01\x00" + self.request_bytes("raw.test", ECHO.port) + b"early")
            self.assertEqual(c.recv_exact(12)[:5], b"\x05\x00\x05\x00\x00")
            self.assertEqual(c.recv_exact(5), b"early")  # bytes behind the request: the tunnel's
        finally:
            c.close()

    def test_a_pipelined_wrong_token_never_reaches_the_request(self):
        n = ECHO.snapshot()
        c = Socks(self.cordon.socks_addr)
        try:
            c.send(b"\x05\x01\x02" + self.login_bytes("not-the-token") +
                   self.request_bytes("raw.test", ECHO.port))
            self.assertEqual(c.recv_exact(4), b"\x05\x02\x01\x01")
            self.assertTrue(c.closed())
        finally:
            c.close()
        self.assertTrue(self.cordon.wait_events(
            lambda e: e["event"] == "conn.deny" and e.get("reason") == "auth" and
            e.get("via") == "socks5"))
        self.assertEqual(ECHO.snapshot(), n)

    def test_a_partly_pipelined_client_is_answered_before_cordon_waits(self):
        # The greeting with the credentials' first byte, then the client waits for the
        # method answer: cordon must not hold it back while it waits for the rest.
        c = Socks(self.cordon.socks_addr, timeout=3)
        try:
            login = self.login_bytes()
            c.send(b"\x05\x01\x02" + login[:1])
            self.assertEqual(c.recv_exact(2), b"\x05\x02")
            # The credentials' rest, then wait for their answer before the request.
            c.send(login[1:])
            self.assertEqual(c.recv_exact(2), b"\x01\x00")
            self.assertEqual(c.request("raw.test", ECHO.port)[1], 0)
            c.send(b"part")
            self.assertEqual(c.recv_exact(4), b"part")
        finally:
            c.close()
        # Greeting and credentials at once, then the client waits before its request.
        c = Socks(self.cordon.socks_addr, timeout=3)
        try:
            c.send(b"\x05\x01\x02" + self.login_bytes())
            self.assertEqual(c.recv_exact(4), b"\x05\x02\x01\x00")
            self.assertEqual(c.request("raw.test", ECHO.port)[1], 0)
        finally:
            c.close()

    def test_cordons_reserved_name_is_never_resolved_or_dialled(self):
        # A rule names cordon.events (and the loopback DNS would answer it): over SOCKS5 it
        # is refused as over HTTP CONNECT (405): no lookup, no connection, one record.
        n = ECHO.snapshot()
        for name in ("cordon.events", "CORDON.EVENTS."):
            c = Socks(self.cordon.socks_addr)
            try:
                self.assertEqual(c.connect(self.session, name, ECHO.port), 2)
                self.assertTrue(c.closed())
            finally:
                c.close()
        d = self.events("conn.deny", lambda e: e.get("target", "").lower().startswith(
            "cordon.events"), count=2)
        self.assertEqual([(e["reason"], e["status"]) for e in d], [("bad_request", 405)] * 2)
        self.assertEqual(DNS.queries_for("cordon.events"), [])
        self.assertEqual(ECHO.snapshot(), n)

    def test_a_handshake_cut_after_a_whole_message_is_recorded(self):
        # Connected and silent is nothing (as HTTP); but once a whole greeting (or greeting
        # and accepted credentials) came, an end without a request is a refused handshake.
        cases = [("greeting, then FIN", False, "fin"), ("greeting, then reset", False, "rst"),
                 ("credentials, then FIN", True, "fin"), ("credentials, then reset", True, "rst"),
                 ("credentials, then silence", True, "wait")]
        for what, login, end in cases:
            c = Socks(self.cordon.socks_addr)
            me = "%s:%d" % c.s.getsockname()
            try:
                self.assertEqual(c.greet([2]), b"\x05\x02", what)
                if login:
                    self.assertEqual(c.login(self.session["id"], self.session["token"]),
                                     b"\x01\x00", what)
                if end == "fin":
                    c.s.shutdown(socket.SHUT_WR)
                elif end == "rst":
                    c.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    self.assertTrue(c.closed(timeout=5), what)  # header_timeout: 2 s
            finally:
                c.close()
            got = self.cordon.wait_events(lambda e, me=me: e.get("client") == me)
            self.assertEqual([(e["event"], e.get("reason"), e.get("via")) for e in got],
                             [("conn.deny", "bad_request", "socks5")], what)
            if login:
                self.assertEqual(got[0].get("session"), self.session["id"], what)

    def test_bind_and_udp_associate_are_command_not_supported(self):
        for cmd, name in ((2, "BIND"), (3, "UDP_ASSOCIATE")):
            c = Socks(self.cordon.socks_addr)
            try:
                self.assertEqual(c.greet([2]), b"\x05\x02")
                self.assertEqual(c.login(self.session["id"], self.session["token"]), b"\x01\x00")
                self.assertEqual(c.request("raw.test", ECHO.port, cmd)[1], 7)
                self.assertTrue(c.closed())
            finally:
                c.close()
            d = self.events("conn.deny", lambda e, n=name: e.get("method") == n)
            self.assertEqual(len(d), 1, name)
            self.assertEqual(d[0]["reason"], "bad_request")

    def test_truncated_handshake(self):
        n = ECHO.snapshot()
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.greet([2]), b"\x05\x02")
            self.assertEqual(c.login(self.session["id"], self.session["token"]), b"\x01\x00")
            c.send(b"\x05\x01\x00\x03\x08raw.")  # the name cut short, then EOF
            c.s.shutdown(socket.SHUT_WR)
            self.assertTrue(c.closed())
        finally:
            c.close()
        self.assertTrue(self.events("conn.deny", lambda e: e.get("reason") == "bad_request"))
        self.assertEqual(ECHO.snapshot(), n)

    def test_slowloris_handshake_is_cut_at_the_deadline(self):
        # One byte every 0.4 s would keep an idle timer alive for ever; the handshake has
        # one total deadline (header_timeout: 2 s here).
        msg = b"\x05\x01\x02\x01\x05abcde\x05token"
        c = Socks(self.cordon.proxy_addr)
        t0 = time.monotonic()
        cut = False
        try:
            for b in msg:
                try:
                    c.send(bytes([b]))
                except (BrokenPipeError, ConnectionResetError):
                    cut = True
                    break
                if c.closed(0.4):
                    cut = True
                    break
            if not cut:
                cut = c.closed(3)
        finally:
            c.close()
        elapsed = time.monotonic() - t0
        self.assertTrue(cut)
        self.assertLess(elapsed, 4.5)
        self.assertGreater(elapsed, 1.5)

    def test_oversized_and_malformed_handshakes(self):
        for data in (b"\x05\x00", b"\x05\x01\x02\x01\x00\x01x",
                     b"\x05\x01\x02\x01\x05abcde\x05token\x05\x01\x00\x09\x03a.test:80\x00\x50"):
            c = Socks(self.cordon.socks_addr)
            try:
                c.send(data)
                self.assertTrue(c.closed(), data)
            finally:
                c.close()

    def test_http_to_the_socks_listener_is_refused(self):
        c = Socks(self.cordon.socks_addr)
        try:
            c.send(b"CONNECT raw.test:%d HTTP/1.1\r\n\r\n" % ECHO.port)
            self.assertTrue(c.closed())
        finally:
            c.close()

    def test_a_greeting_after_an_http_request_is_not_socks(self):
        # Only a connection's first byte selects SOCKS: a kept-alive HTTP connection that
        # then sends a greeting gets 400.
        m = self.marker()
        c = self.cordon.conn()
        try:
            auth = H.basic(self.session["id"], self.session["token"])
            c.send(f"GET http://web.test:{HTTP.port}{m} HTTP/1.1\r\nHost: web.test:{HTTP.port}"
                   f"\r\nProxy-Authorization: {auth}\r\n\r\n".encode())
            r = c.read_response()
            # web.test is a tcp rule: plain HTTP to it is refused (protocol), and closed.
            self.assertEqual(r.status, 403)
        finally:
            c.close()

    def test_network_kill_refuses_socks(self):
        st, _ = self.cordon.admin("POST", "/v1/kill", {"reason": "test"})
        self.assertEqual(st, 200)
        try:
            c = Socks(self.cordon.socks_addr)
            try:
                self.assertEqual(c.greet([2]), b"\x05\xff")
            finally:
                c.close()
            self.assertTrue(self.cordon.wait_events(
                lambda e: e["event"] == "conn.deny" and e.get("reason") == "kill_switch" and
                e.get("via") == "socks5"))
        finally:
            st, _ = self.cordon.admin("POST", "/v1/revive", {"reason": "test"})
            self.assertEqual(st, 200)


    def test_network_kill_during_the_handshake(self):
        n = ECHO.snapshot()
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.greet([2]), b"\x05\x02")
            self.assertEqual(c.login(self.session["id"], self.session["token"]), b"\x01\x00")
            st, _ = self.cordon.admin("POST", "/v1/kill", {"reason": "mid-handshake"})
            self.assertEqual(st, 200)
            try:
                answer = c.request("raw.test", ECHO.port)
                self.assertEqual(answer[1], 2)  # refused, if not already closed by the kill
            except (EOFError, ConnectionResetError, BrokenPipeError):
                pass
        finally:
            c.close()
            st, _ = self.cordon.admin("POST", "/v1/revive", {"reason": "test"})
            self.assertEqual(st, 200)
        self.assertEqual(ECHO.snapshot(), n)
        self.assertTrue(self.events("conn.deny", lambda e: e.get("reason") == "kill_switch"))


def dns_ask(addr, name, session=None, source="127.0.0.1"):
    """One A query to cordon's resolver over UDP, with the session option (EDNS 65001,
    "id:token", as the shim's relay adds it) when `session` is given; returns the A records'
    addresses."""
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    opt = b""
    if session:
        data = f"{session['id']}:{session['token']}".encode()
        opt = b"\0" + struct.pack(">HHIH", 41, 1232, 0, 4 + len(data)) + \
            struct.pack(">HH", 65001, len(data)) + data
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 1 if opt else 0) + qname + \
        struct.pack(">HH", 1, 1) + opt
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    try:
        s.bind((source, 0))
        s.sendto(q, addr)
        m = s.recv(4096)
    finally:
        s.close()
    ancount = struct.unpack(">H", m[6:8])[0]
    i = 12 + len(qname) + 4
    out = []
    for _ in range(ancount):
        i += 2 if m[i] & 0xC0 == 0xC0 else len(qname)  # cordon names the question by pointer
        rtype, _, _, rdlen = struct.unpack(">HHIH", m[i:i + 10])
        i += 10
        if rtype == 1:
            out.append(socket.inet_ntoa(m[i:i + rdlen]))
        i += rdlen
    return out


class SocksAddressTargetTests(SocksTestCase):
    """An address target (ATYP 1) is an IP literal (cidr rules only), except an address
    cordon's own resolver answered, within its TTL, to this session for a name its job
    allows: decided as that name. What an agent would try around it: an address it looked up
    elsewhere, one whose TTL ran out, one answered to another session or job, and a name
    whose answer is an address its rule does not allow."""

    @classmethod
    def setUpClass(cls):
        cls.dns = H.FakeDNS({"*.addr.test": {"A": ["127.0.0.1"]},
                             "*.pub.test": {"A": ["127.0.0.1"]}})
        jobs = (
            "  web:\n"
            "    task: SOCKS5 address targets\n"
            "    egress:\n"
            f"      - {{ host: \"*.addr.test\", ports: [{ECHO.port}], protocol: tcp, "
            f"resolves_to: [127.0.0.0/8] }}\n"
            f"      - {{ host: \"*.pub.test\", ports: [{ECHO.port}], protocol: tcp }}\n"
            "    identity: { ttl: 30m }\n"
            "  src:\n"
            "    task: clients known by their address\n"
            "    egress:\n"
            f"      - {{ host: \"*.addr.test\", ports: [{ECHO.port}], protocol: tcp, "
            f"resolves_to: [127.0.0.0/8] }}\n"
            "    sources: [127.0.0.2/32]\n"
            "    identity: { ttl: 30m }\n")
        cls.cordon = H.Cordon(jobs, cls.dns.port, cls.proxy_opts, listen_socks="127.0.0.1:0",
                              listen_dns="127.0.0.1:0")
        start_cordon(cls.cordon, cls.dns)

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.dns.stop()

    def fresh(self, zone="addr.test"):
        return f"n{uuid.uuid4().hex[:10]}.{zone}"

    def by_address(self, session=None, source=None, port=None):
        """A SOCKS5 CONNECT to 127.0.0.1 (ATYP 1) on the echo port: the reply code, and
        whether the echo came back through it."""
        c = Socks(self.cordon.socks_addr, source=source)
        try:
            if session is None:
                self.assertEqual(c.greet([0]), b"\x05\x00")
                code = c.request("127.0.0.1", port or ECHO.port)[1]
            else:
                code = c.connect(session, "127.0.0.1", port or ECHO.port)
            if code != 0:
                return code, False
            c.send(b"addr")
            return code, c.recv_exact(4) == b"addr"
        finally:
            c.close()

    def deny_of(self, target):
        return self.events("conn.deny", lambda e: e.get("target") == target)[0]

    def test_an_address_answered_to_this_session_is_decided_as_the_name(self):
        name = self.fresh()
        self.assertEqual(dns_ask(self.cordon.dns_addr, name, self.session), ["127.0.0.1"])
        self.assertEqual(self.by_address(self.session), (0, True))
        o = self.events("conn.open", lambda e: e.get("target") == f"{name}:{ECHO.port}")[0]
        self.assertEqual(o["ip"], "127.0.0.1")
        self.assertEqual(o["via"], "socks5")
        # The name's rule, with its ports: the same address on another port is refused.
        self.assertEqual(self.by_address(self.session, port=HTTP.port)[0], 2)
        self.assertEqual(self.deny_of(f"127.0.0.1:{HTTP.port}")["reason"], "port")

    def test_an_address_cordon_never_answered_is_an_ip_literal(self):
        # The agent resolved the name itself (or guessed the address): an IP literal, which
        # no cidr rule names (a loopback one: private_address).
        self.assertEqual(self.by_address(self.session)[0], 2)
        self.assertEqual(self.deny_of(f"127.0.0.1:{ECHO.port}")["reason"], "private_address")

    def test_an_expired_answer_names_nothing(self):
        name = self.fresh()
        self.dns.ttl = 1
        try:
            self.assertEqual(dns_ask(self.cordon.dns_addr, name, self.session), ["127.0.0.1"])
        finally:
            self.dns.ttl = 30
        time.sleep(2.2)
        self.assertEqual(self.by_address(self.session)[0], 2)
        self.assertEqual(self.deny_of(f"127.0.0.1:{ECHO.port}")["reason"], "private_address")

    def test_an_answer_to_another_session_names_nothing(self):
        other = self.cordon.create_session("web")
        dns_ask(self.cordon.dns_addr, self.fresh(), other)
        self.assertEqual(self.by_address(self.session)[0], 2)
        # ... and it names the address for the session it was answered to.
        self.assertEqual(self.by_address(other), (0, True))

    def test_an_answer_to_another_job_names_nothing(self):
        # Asked from the src job's address (sources): answered to that job, no session.
        self.assertEqual(dns_ask(self.cordon.dns_addr, self.fresh(), source="127.0.0.2"),
                         ["127.0.0.1"])
        self.assertEqual(self.by_address(self.session)[0], 2)
        # The src client (no credentials, known by its address) has it.
        self.assertEqual(self.by_address(source="127.0.0.2"), (0, True))

    def test_the_names_rule_still_classifies_the_address(self):
        # *.pub.test has no resolves_to: its name answered with a loopback address is
        # refused as CONNECT to the name would be.
        name = self.fresh("pub.test")
        dns_ask(self.cordon.dns_addr, name, self.session)
        self.assertEqual(self.by_address(self.session)[0], 2)
        d = self.events("conn.deny", lambda e: e.get("target") == f"{name}:{ECHO.port}")[0]
        self.assertEqual(d["reason"], "private_address")


class SshRuleTests(SocksTestCase):
    """`protocol: ssh`: the client's first line must be SSH's."""

    def test_ssh_rule_fed_http_over_socks(self):
        n = ECHO.snapshot()
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.connect(self.session, "fake-ssh.test", ECHO.port), 0)
            c.send(b"GET / HTTP/1.1\r\nHost: fake-ssh.test\r\n\r\n")
            self.assertTrue(c.closed())
        finally:
            c.close()
        closed = self.events("conn.close", lambda e: e.get("target", "").startswith("fake-ssh"))
        self.assertEqual(closed[0]["reason"], "protocol")
        self.assertEqual(closed[0]["bytes_up"], 0)
        # Connected (the upstream was dialled) but not one byte reached it.
        time.sleep(0.2)
        self.assertTrue(all(rec["bytes_in"] == 0 for rec in ECHO.conns_since(n)))

    def test_ssh_rule_fed_http_over_connect(self):
        n = ECHO.snapshot()
        c, r = self.cordon.tunnel(self.session, f"fake-ssh.test:{ECHO.port}")
        try:
            self.assertEqual(r.status, 200)
            c.send(b"GET / HTTP/1.1\r\n\r\n")
            self.assertTrue(c.wait_closed())
        finally:
            c.close()
        time.sleep(0.2)
        self.assertTrue(all(rec["bytes_in"] == 0 for rec in ECHO.conns_since(n)))
        self.assertTrue(self.events("conn.close", lambda e: e.get("reason") == "protocol"))

    def test_ssh_identification_passes(self):
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.connect(self.session, "fake-ssh.test", ECHO.port), 0)
            line = b"SSH-2.0-OpenSSH_9.2p1 Debian\r\n"
            c.send(line + b"\x00\x00\x01")
            self.assertEqual(c.recv_exact(len(line) + 3), line + b"\x00\x00\x01")
        finally:
            c.close()

    def test_silent_ssh_client_is_cut_at_the_handshake_timeout(self):
        c = Socks(self.cordon.socks_addr)
        t0 = time.monotonic()
        try:
            self.assertEqual(c.connect(self.session, "fake-ssh.test", ECHO.port), 0)
            self.assertTrue(c.closed(5))
        finally:
            c.close()
        self.assertLess(time.monotonic() - t0, 4.5)
        self.assertTrue(self.events("conn.close", lambda e: e.get("reason") == "idle_timeout"))


# --------------------------------------------------------------------------------------
# ssh and git over ssh: a loopback sshd started by the test
# --------------------------------------------------------------------------------------

class SSHD(LoopbackDaemon):
    """Debian's sshd on 127.0.0.1:<free port> with its own host key, config and one
    authorized client key (root, key only), in the foreground."""

    def __init__(self):
        self.tmp = H.TempDir("cordon-it-sshd-")
        self.port = H.free_port()
        t = self.tmp.join
        for name in ("host", "id"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", t(name)],
                           check=True, timeout=30)
        shutil.copy(t("id.pub"), t("authorized_keys"))
        os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
        with open(t("sshd_config"), "w") as f:
            f.write(f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {t('host')}\n"
                    f"PidFile {t('sshd.pid')}\nAuthorizedKeysFile {t('authorized_keys')}\n"
                    "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                    "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
                    "PrintMotd no\nLogLevel ERROR\n")
        with open(t("host.pub")) as f:
            hostkey = f.read().split()[:2]
        with open(t("known_hosts"), "w") as f:
            for name in ("ssh.test", "git.test"):
                f.write(f"[{name}]:{self.port} {' '.join(hostkey)}\n")
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", t("sshd_config")],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.wait_listening("sshd")

    def client_config(self, proxy_command):
        path = self.tmp.join(f"ssh_config-{uuid.uuid4().hex[:8]}")
        with open(path, "w") as f:
            f.write(f"Host ssh.test git.test\n  User root\n  Port {self.port}\n"
                    f"  IdentityFile {self.tmp.join('id')}\n  IdentitiesOnly yes\n"
                    f"  UserKnownHostsFile {self.tmp.join('known_hosts')}\n"
                    "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 10\n"
                    f"  ProxyCommand {proxy_command}\n")
        return path



SSHD_AVAILABLE = (os.geteuid() == 0 and os.path.exists("/usr/sbin/sshd") and
                  shutil.which("ssh") is not None and shutil.which("ncat") is not None)


@unittest.skipUnless(SSHD_AVAILABLE, "needs root, openssh-server, openssh-client and ncat")
class SshGitTests(SocksTestCase):
    """ssh and git clone over ssh through cordon, to a loopback sshd, on an ssh rule."""

    @classmethod
    def setUpClass(cls):
        cls.sshd = SSHD()
        cls.ssh_port = cls.sshd.port
        try:
            super().setUpClass()
        except BaseException:
            cls.sshd.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.sshd.stop()

    def socks_command(self):
        h, p = self.cordon.proxy_addr
        return (f"ncat --proxy {h}:{p} --proxy-type socks5 --proxy-dns remote "
                f"--proxy-auth {self.session['id']}:{self.session['token']} %h %p")

    def test_ssh_through_socks5(self):
        cfg = self.sshd.client_config(self.socks_command())
        r = subprocess.run(["ssh", "-F", cfg, "ssh.test", "echo", "over-cordon"],
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), b"over-cordon")
        opened = self.events("conn.open", lambda e: e.get("target") == f"ssh.test:{self.ssh_port}")
        self.assertEqual(opened[0]["via"], "socks5")
        self.assertTrue(opened[0]["rule"].endswith("/ssh"))

    def test_ssh_through_http_connect(self):
        h, p = self.cordon.proxy_addr
        cfg = self.sshd.client_config(
            f"ncat --proxy {h}:{p} --proxy-type http "
            f"--proxy-auth {self.session['id']}:{self.session['token']} %h %p")
        r = subprocess.run(["ssh", "-F", cfg, "ssh.test", "echo", "via-connect"],
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), b"via-connect")

    def test_git_clone_over_ssh(self):
        self.clone_through(lambda cfg: f"ssh -F {cfg}", {})

    def test_git_clone_with_cordon_runs_git_ssh_command(self):
        # What `cordon run` gives the sandbox: GIT_SSH_COMMAND with `cordon connect` as the
        # ProxyCommand (over CONNECT), the proxy and credentials from HTTPS_PROXY.
        h, p = self.cordon.proxy_addr
        proxy = f"http://{self.session['id']}:{self.session['token']}@{h}:{p}"
        self.clone_through(
            lambda cfg: f"ssh -F {cfg} -o 'ProxyCommand={self.cordon.bin} connect %h %p'",
            {"HTTPS_PROXY": proxy}, via=None)

    def test_cordon_connect_refused_says_why(self):
        h, p = self.cordon.proxy_addr
        r = subprocess.run([self.cordon.bin, "connect", "evil.test", "22", "--proxy",
                            f"http://{self.session['id']}:{self.session['token']}@{h}:{p}"],
                           input=b"", capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"403", r.stderr)
        self.assertIn(b"no_rule", r.stderr)
        self.assertNotIn(self.session["token"].encode(), r.stderr)

    def clone_through(self, ssh_command, extra_env, via="socks5"):
        work = H.TempDir("cordon-it-git-")
        try:
            env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                       GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t", HOME=work.path)
            src = work.join("src")
            subprocess.run(["git", "init", "-q", src], check=True, env=env, timeout=30)
            with open(os.path.join(src, "README"), "w") as f:
                f.write("cloned through cordon\n")
            subprocess.run(["git", "-C", src, "add", "README"], check=True, env=env, timeout=30)
            subprocess.run(["git", "-C", src, "commit", "-q", "-m", "one"], check=True, env=env,
                           timeout=30)
            bare = work.join("repo.git")
            subprocess.run(["git", "clone", "-q", "--bare", src, bare], check=True, env=env,
                           timeout=30)
            cfg = self.sshd.client_config(self.socks_command())
            env["GIT_SSH_COMMAND"] = ssh_command(cfg)
            env.update(extra_env)
            out = work.join("out")
            r = subprocess.run(["git", "clone", "-q", f"ssh://git.test:{self.ssh_port}{bare}",
                                out], capture_output=True, env=env, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "README")) as f:
                self.assertEqual(f.read(), "cloned through cordon\n")
        finally:
            work.cleanup()
        closed = self.events("conn.close", lambda e: e.get("target") == f"git.test:{self.ssh_port}")
        self.assertEqual(closed[0]["reason"], "eof")
        self.assertGreater(closed[0]["bytes_down"], 0)
        self.assertEqual(closed[0].get("via"), via)


def namespaces_available():
    try:
        r = subprocess.run(["unshare", "-mpnui", "--fork", "--mount-proc", "true"],
                           capture_output=True, timeout=10)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@unittest.skipUnless(SSHD_AVAILABLE and shutil.which("git") and namespaces_available(),
                     "needs root, namespaces, openssh-server, openssh-client and git")
class RunGitOverSshTests(unittest.TestCase):
    """`git clone ssh://...` inside `cordon run`, unmodified: the sandbox's GIT_SSH_COMMAND
    (cordon connect as the ProxyCommand) takes it through cordon to an ssh rule."""

    @classmethod
    def setUpClass(cls):
        cls.sshd = SSHD()
        cls.tmp = H.TempDir("cordon-it-rungit-")
        os.chmod(cls.tmp.path, 0o755)
        cls.scratch = cls.tmp.join("scratch")
        os.makedirs(cls.scratch)
        jobs = ("  git:\n"
                "    task: git over ssh in a sandbox\n"
                "    egress:\n"
                f"      - {{ host: git.test, ports: [{cls.sshd.port}], protocol: ssh, "
                "resolves_to: [127.0.0.0/8] }\n"
                f"    filesystem: {{ scratch: {cls.scratch} }}\n"
                "    identity: { ttl: 30m }\n")
        cls.cordon = H.Cordon(jobs, DNS.port, listen_dns="127.0.0.1:0")
        start_cordon(cls.cordon, cls.sshd, cls.tmp)

    @classmethod
    def tearDownClass(cls):
        stop_cordon(cls.cordon, cls.sshd, cls.tmp)

    def test_git_clone_over_ssh_in_the_sandbox(self):
        env = dict(PATH=os.environ.get("PATH", "/usr/bin:/bin"), GIT_AUTHOR_NAME="t",
                   GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t",
                   HOME=self.tmp.path)
        src, bare = self.tmp.join("src"), self.tmp.join("repo.git")
        subprocess.run(["git", "init", "-q", src], check=True, env=env, timeout=30)
        with open(os.path.join(src, "README"), "w") as f:
            f.write("cloned in a sandbox\n")
        subprocess.run(["git", "-C", src, "add", "README"], check=True, env=env, timeout=30)
        subprocess.run(["git", "-C", src, "commit", "-q", "-m", "one"], check=True, env=env,
                       timeout=30)
        subprocess.run(["git", "clone", "-q", "--bare", src, bare], check=True, env=env,
                       timeout=30)
        # The user's own ssh settings (key, known hosts), no ProxyCommand: that is cordon's.
        user_cfg = self.tmp.join("user_ssh_config")
        with open(user_cfg, "w") as f:
            f.write(f"Host git.test\n  User root\n  Port {self.sshd.port}\n"
                    f"  IdentityFile {self.sshd.tmp.join('id')}\n  IdentitiesOnly yes\n"
                    f"  UserKnownHostsFile {self.sshd.tmp.join('known_hosts')}\n"
                    "  StrictHostKeyChecking yes\n  BatchMode yes\n")
        # ssh reads ~/.ssh from the passwd entry's home (root's, read-only here), not $HOME:
        # the user's settings are added with -F to the command cordon run gave; its
        # ProxyCommand (given with -o) wins over any in the file.
        script = ("echo \"GIT_SSH_COMMAND=$GIT_SSH_COMMAND\" && "
                  "GIT_SSH_COMMAND=\"$GIT_SSH_COMMAND -F %s\" "
                  "git clone -q ssh://git.test:%d%s out && cat out/README") % (
                      user_cfg, self.sshd.port, bare)
        r = subprocess.run(
            [self.cordon.bin, "run", "--job", "git", "--dns", "%s:%d" % self.cordon.dns_addr,
             "--", "sh", "-c", script],
            env={"PATH": env["PATH"],
                 "CORDON_ADMIN": "http://%s:%d" % self.cordon.admin_addr,
                 "CORDON_ADMIN_TOKEN_FILE": self.cordon.token_file},
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cloned in a sandbox", r.stdout)
        self.assertIn("connect %h %p", r.stdout)
        opened = self.cordon.wait_events(
            lambda e: e["event"] == "conn.open" and
            e.get("target") == f"git.test:{self.sshd.port}")
        self.assertEqual(len(opened), 1)
        self.assertTrue(opened[0]["rule"].endswith("/ssh"))


# --------------------------------------------------------------------------------------
# upstream_proxy: squid as the parent, on loopback
# --------------------------------------------------------------------------------------

class Squid(LoopbackDaemon):
    """Debian's squid on 127.0.0.1:<free port>, in the foreground (-N), logging every request.
    mode: "open" (any CONNECT from loopback), "auth" (Basic, user cordon), "deny" (403)."""

    def __init__(self, mode, password="parent-pw"):
        self.tmp = H.TempDir("cordon-it-squid-")
        os.chmod(self.tmp.path, 0o777)  # squid drops to its own user for its logs
        self.port = H.free_port()
        self.access_log = self.tmp.join("access.log")
        rules = {"open": "http_access allow client\n",
                 "deny": "http_access deny all\n",
                 "auth": ("acl users proxy_auth REQUIRED\n"
                          "http_access allow client users\n")}[mode]
        auth = ""
        if mode == "auth":
            pw = subprocess.run(["openssl", "passwd", "-apr1", password], capture_output=True,
                                text=True, check=True, timeout=30).stdout.strip()
            with open(self.tmp.join("passwd"), "w") as f:
                f.write(f"cordon:{pw}\n")
            os.chmod(self.tmp.join("passwd"), 0o644)
            auth = (f"auth_param basic program /usr/lib/squid/basic_ncsa_auth "
                    f"{self.tmp.join('passwd')}\nauth_param basic realm parent\n")
        conf = self.tmp.join("squid.conf")
        with open(conf, "w") as f:
            f.write(f"http_port 127.0.0.1:{self.port}\npid_filename {self.tmp.join('squid.pid')}\n"
                    f"cache_log {self.tmp.join('cache.log')}\n"
                    f"access_log stdio:{self.access_log}\ncoredump_dir {self.tmp.path}\n"
                    "cache deny all\npinger_enable off\nshutdown_lifetime 0 seconds\n"
                    "logfile_rotate 0\nbuffered_logs off\n"
                    + auth + "acl client src 127.0.0.1/32\n" + rules + "http_access deny all\n")
        self.proc = subprocess.Popen(["squid", "-N", "-f", conf], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_listening("squid")

    def log(self):
        try:
            with open(self.access_log) as f:
                return f.read()
        except OSError:
            return ""



def parent_jobs_yaml():
    return (
        "  web:\n"
        "    task: integration tests of the parent proxy\n"
        "    egress:\n"
        f"      - {{ host: raw.test, ports: [{ECHO.port}], protocol: tcp, "
        f"resolves_to: [127.0.0.0/8] }}\n"
        f"      - {{ host: web.test, ports: [{HTTP.port}], protocol: tcp }}\n"
        "    identity: { ttl: 30m }\n")


@unittest.skipUnless(shutil.which("squid"), "squid is not installed (scripts/setup)")
class ParentProxyTestCase(unittest.TestCase):
    squid_mode = "open"
    cred_line = None    # the credentials file's line, or None for no file
    no_proxy = None

    @classmethod
    def setUpClass(cls):
        cls.squid = Squid(cls.squid_mode)
        cls.tmp = H.TempDir("cordon-it-parent-")
        up = f"upstream_proxy:\n  url: \"http://127.0.0.1:{cls.squid.port}\"\n"
        if cls.cred_line is not None:
            path = cls.tmp.join("parent.auth")
            with open(path, "w") as f:
                f.write(cls.cred_line + "\n")
            os.chmod(path, 0o600)
            up += f"  credentials_file: {path}\n"
        if cls.no_proxy:
            up += f"  no_proxy: {cls.no_proxy}\n"
        cls.cordon = H.Cordon(parent_jobs_yaml(), DNS.port, {"connect_timeout": "5s"},
                              extra_yaml=up, listen_socks="127.0.0.1:0")
        start_cordon(cls.cordon, cls.squid, cls.tmp)

    @classmethod
    def tearDownClass(cls):
        stop_cordon(cls.cordon, cls.squid, cls.tmp)

    def setUp(self):
        self.session = self.cordon.create_session("web")

    def tearDown(self):
        raw = self.cordon.audit_raw()
        for s in self.cordon.secrets + ["parent-pw"]:
            if s:
                self.assertNotIn(s.encode(), raw)

    def parent_failure(self, *words):
        """A CONNECT the parent fails: cordon's 502, its message naming each of `words`."""
        r = self.echo_through_connect()
        self.assertEqual(r.status, 502)
        for w in words:
            self.assertIn(w, r.json()["message"])

    def echo_through_connect(self):
        c, r = self.cordon.tunnel(self.session, f"raw.test:{ECHO.port}")
        try:
            if r.status != 200:
                return r
            c.send(b"through the parent")
            self.assertEqual(c.recv_exact(18), b"through the parent")
            return r
        finally:
            c.close()


class ParentProxyTests(ParentProxyTestCase):
    def test_connect_goes_through_the_parent_to_the_checked_address(self):
        r = self.echo_through_connect()
        self.assertEqual(r.status, 200)
        # The parent was asked for the address cordon resolved and checked, not the name.
        self.assertTrue(H.wait_until(lambda: f"127.0.0.1:{ECHO.port}" in self.squid.log(), 5))
        self.assertNotIn("raw.test", self.squid.log())

    def test_socks_goes_through_the_parent(self):
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.connect(self.session, "raw.test", ECHO.port), 0)
            c.send(b"socks+parent")
            self.assertEqual(c.recv_exact(12), b"socks+parent")
        finally:
            c.close()

    def test_cordons_decision_comes_first(self):
        before = self.squid.log()
        c, r = self.cordon.tunnel(self.session, "evil.test:443")
        c.close()
        self.assertEqual(r.status, 403)
        self.assertEqual(r.header("X-Cordon-Deny"), "no_rule")
        # web.test resolves to loopback without resolves_to: private_address, before the parent.
        c, r = self.cordon.tunnel(self.session, f"web.test:{HTTP.port}")
        c.close()
        self.assertEqual(r.status, 403)
        self.assertEqual(r.header("X-Cordon-Deny"), "private_address")
        time.sleep(0.3)
        self.assertEqual(self.squid.log(), before)


class ParentProxyCredentialsTests(ParentProxyTestCase):
    squid_mode = "auth"
    cred_line = "cordon:parent-pw"

    def test_credentials_from_the_file(self):
        r = self.echo_through_connect()
        self.assertEqual(r.status, 200)
        self.assertTrue(H.wait_until(lambda: " cordon " in self.squid.log(), 5))


class ParentProxyWrongCredentialsTests(ParentProxyTestCase):
    squid_mode = "auth"
    cred_line = "cordon:wrong"

    def test_407_from_the_parent_is_a_502_that_says_so(self):
        self.parent_failure("407")
        errs = self.cordon.wait_events(lambda e: e["event"] == "conn.error" and
                                       e.get("session") == self.session["id"])
        self.assertIn("credentials", errs[0]["message"])


class ParentProxyWithoutCredentialsTests(ParentProxyTestCase):
    squid_mode = "auth"

    def test_no_credentials_for_a_parent_that_wants_them(self):
        self.parent_failure("407")


class ParentProxyRefusesTests(ParentProxyTestCase):
    squid_mode = "deny"

    def test_a_refusing_parent_is_a_502_with_its_answer(self):
        self.parent_failure("refused", "403", f"127.0.0.1:{self.squid.port}")
        # Over SOCKS: connection refused (5).
        c = Socks(self.cordon.socks_addr)
        try:
            self.assertEqual(c.connect(self.session, "raw.test", ECHO.port), 5)
        finally:
            c.close()


class ParentProxyNoProxyTests(ParentProxyTestCase):
    squid_mode = "deny"
    no_proxy = "[127.0.0.1/32]"

    def test_no_proxy_addresses_are_dialled_directly(self):
        r = self.echo_through_connect()
        self.assertEqual(r.status, 200)


class ParentProxyDownTests(ParentProxyTestCase):
    def test_a_parent_that_is_down_is_a_502(self):
        self.squid.proc.terminate()
        self.squid.proc.wait(10)
        self.parent_failure("upstream proxy")


if __name__ == "__main__":
    unittest.main()
