"""Integration tests of the allowlist-only DNS resolver (issue 5) in `cordon serve`, with the
real `dig` (bind9-dnsutils) over UDP and TCP and raw Python sockets for what dig will not
send (malformed packets, EDNS options byte by byte, floods), on loopback only.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_dns   (from tests/integration)

The upstream is harness.FakeDNS (UDP and TCP, TTL 300), which records every query it gets,
so "never reaches the upstream" is checked against its log. Names (all under .test):

    a.test       A 127.0.0.1, AAAA ::1          allowed (exact name)
    alias.test   CNAME a.test                   allowed (the chain is a.test, also allowed)
    big.test     60 A records (~1 KB answer)    allowed (truncation)
    *.wild.test  A 127.0.0.3, AAAA ::1          allowed below the wildcard: every test that
                                                counts upstream queries uses a fresh name
                                                here, so the cache of other tests never matters
    wild.test    A 127.0.0.4                    the wildcard's apex: denied
    denied.test, *.attacker.test, lab.test      not in job `web`'s names
    localhost    A 127.9.9.9                    allowed, but must come from /etc/hosts

One cordon per class: the main resolver (default_job web, REFUSED), one with deny_rcode
NXDOMAIN, one without default_job (attribution by EDNS session option and by `sources`),
and one with a tight rate limit. Client addresses: 127.0.0.1 for most queries, 127.0.0.2 (job
`lab`'s sources; a second client in the rate test), 127.0.0.3-5 (fresh rate buckets, one per
rate test). Ambiguities of the contract and how they are resolved are
marked "AMBIGUITY:" below.
"""

import json
import os
import random
import re
import socket
import struct
import subprocess
import time
import unittest
import uuid

import harness as H

UP = None  # the upstream FakeDNS
BIG_COUNT = 60
T_A, T_NS, T_CNAME, T_MX, T_TXT, T_AAAA, T_OPT, T_SVCB, T_HTTPS, T_ANY = (
    1, 2, 5, 15, 16, 28, 41, 64, 65, 255)
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
SESSION_OPTION = 65001
PROXY_OPTS = {"header_timeout": "5s", "idle_timeout": "60s", "handshake_timeout": "5s",
              "connect_timeout": "5s"}
DROP_WAIT = 0.5   # seconds a test waits for an answer that should not come


class LyingDNS(H.FakeDNS):
    """harness.FakeDNS, plus upstream misbehaviour chosen by the first label's prefix of a
    name (all under *.wild.test, so job web may ask them; every query is still logged):
      hole-*    never answered (a name whose lookups wait for the upstream timeout);
      once-*    the first query is not answered, the later ones are (c-ares' retry);
      lie-*     A 127.0.0.3 plus records for names never asked: 6.6.6.6 for
                evil.attacker.test in the answer, NS and glue in authority and additional;
      ttlmax-*  A 127.0.0.3 with TTL 0xFFFFFFFF;
      big-*     100 A records (about 1.6 KB: over 1232, truncated over UDP)."""

    def _answer(self, q, transport="udp"):
        resp = super()._answer(q, transport)
        if resp is None or len(q) < 14:
            return resp
        first = q[13:13 + q[12]].decode("ascii", "replace").lower()
        name, qtype = self.log[-1]["name"], self.log[-1]["qtype"]
        if first.startswith("hole-"):
            return None
        if first.startswith("once-"):
            return None if len(self.queries_for(name)) == 1 else resp
        if not first.startswith(("lie-", "ttlmax-", "big-")):
            return resp
        qid, flags = struct.unpack("!HH", q[:4])
        question = q[12:12 + len(enc_name(name)) + 4]
        ttl = 0xFFFFFFFF if first.startswith("ttlmax-") else self.ttl
        count = 100 if first.startswith("big-") else 1
        an = []
        if qtype == T_A:
            an = [b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, ttl, 4)
                  + bytes([127, 0, i // 250, i % 250 + 3]) for i in range(count)]
        ns, ar = [], []
        if first.startswith("lie-") and qtype == T_A:
            an.append(enc_name("evil.attacker.test") + struct.pack("!HHIH", 1, 1, 86400, 4)
                      + bytes([6, 6, 6, 6]))
            target = enc_name("ns.attacker.test")
            ns.append(enc_name("wild.test") + struct.pack("!HHIH", 2, 1, 86400, len(target))
                      + target)
            ar.append(enc_name("ns.attacker.test") + struct.pack("!HHIH", 1, 1, 86400, 4)
                      + bytes([6, 6, 6, 7]))
        rflags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080
        resp = (struct.pack("!HHHHHH", qid, rflags, 1, len(an), len(ns), len(ar)) + question
                + b"".join(an + ns + ar))
        if transport == "udp" and len(resp) > 1232:
            resp = struct.pack("!HHHHHH", qid, rflags | 0x0200, 1, 0, 0, 0) + question
        return resp


def setUpModule():
    global UP
    UP = LyingDNS({
        "a.test": {"A": ["127.0.0.1"], "AAAA": ["::1"]},
        "alias.test": {"CNAME": "a.test"},
        "big.test": {"A": [f"127.0.{i // 250}.{i % 250 + 1}" for i in range(BIG_COUNT)]},
        "*.wild.test": {"A": ["127.0.0.3"], "AAAA": ["::1"]},
        "wild.test": {"A": ["127.0.0.4"]},
        "denied.test": {"A": ["127.0.0.5"]},
        "*.attacker.test": {"A": ["127.0.0.6"]},
        "lab.test": {"A": ["127.0.0.7"]},
        "localhost": {"A": ["127.9.9.9"]},
    }, ttl=300, tcp=True)


def tearDownModule():
    if UP is not None:
        UP.stop()


def jobs_yaml(lab_sources=False):
    """Job `web`: its names on assorted ports and protocols (the resolver ignores both).
    With lab_sources, job `lab` (lab.test) owns the client address 127.0.0.2."""
    text = (
        "  web:\n"
        "    task: integration tests of the DNS resolver\n"
        "    egress:\n"
        "      - { host: a.test, ports: [443], resolves_to: [127.0.0.0/8, \"::1/128\"] }\n"
        "      - { host: alias.test, ports: [80], protocol: http, methods: [GET], "
        "resolves_to: [127.0.0.0/8] }\n"
        "      - { host: big.test, ports: [5000], protocol: tcp, resolves_to: [127.0.0.0/8] }\n"
        "      - { host: \"*.wild.test\", ports: [443], "
        "resolves_to: [127.0.0.0/8, \"::1/128\"] }\n"
        "      - { host: localhost, ports: [8080], protocol: http, "
        "resolves_to: [127.0.0.0/8, \"::1/128\"] }\n"
        "    identity: { ttl: 30m }\n")
    if lab_sources:
        text += (
            "  lab:\n"
            "    task: a job whose clients are known by address\n"
            "    sources: [127.0.0.2/32]\n"
            "    egress:\n"
            "      - { host: lab.test, ports: [443], resolves_to: [127.0.0.0/8] }\n")
    return text


def fresh(prefix="t"):
    """A name below *.wild.test never asked before (allowed for job web)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}.wild.test"


def norm(name):
    return str(name or "").lower().rstrip(".")


# --------------------------------------------------------------------------------------
# dig
# --------------------------------------------------------------------------------------

class DigResult:
    """dig's output, parsed. status is None when dig got no answer (timeout). When dig
    printed several messages (a TC answer retried over TCP), the last one counts."""

    HEADER = re.compile(r";; ->>HEADER<<- opcode: (\w+), status: (\w+), id: (\d+)")
    FLAGS = re.compile(r";; flags:([^;]*);\s*QUERY: (\d+), ANSWER: (\d+), AUTHORITY: (\d+), "
                       r"ADDITIONAL: (\d+)")

    def __init__(self, args, proc):
        self.args = args
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        heads = self.HEADER.findall(self.out)
        flags = self.FLAGS.findall(self.out)
        self.status = heads[-1][1] if heads else None
        self.id = int(heads[-1][2]) if heads else None
        self.flags = set(flags[-1][0].split()) if flags else set()
        self.ancount = int(flags[-1][2]) if flags else 0
        self.answers = []
        last = self.out.rfind(";; ->>HEADER<<-")
        sect = None
        for line in (self.out[last:] if last >= 0 else "").splitlines():
            if line.startswith(";; ") and line.endswith("SECTION:"):
                sect = line[3:-len(" SECTION:")]
                continue
            if not line.strip():
                sect = None
                continue
            if sect == "ANSWER" and not line.startswith(";"):
                p = line.split(None, 4)
                if len(p) == 5:
                    self.answers.append({"name": p[0], "ttl": int(p[1]), "class": p[2],
                                         "type": p[3], "data": p[4].strip()})
        m = re.findall(r";; MSG SIZE\s+rcvd: (\d+)", self.out)
        self.size = int(m[-1]) if m else None

    def data(self, rtype):
        return [a["data"] for a in self.answers if a["type"] == rtype]

    def __repr__(self):
        return (f"<dig {' '.join(self.args[1:])}: rc={self.rc} status={self.status} "
                f"flags={sorted(self.flags)} answers={self.answers}\n{self.out[-1500:]}>")


def dig(addr, name, qtype="A", tcp=False, src=None, opts=()):
    host, port = addr
    args = ["dig", "-r", f"@{host}", "-p", str(port), name, qtype, "+tries=1", "+time=2"]
    if tcp:
        args.append("+tcp")
    if src:
        args += ["-b", src]
    args += list(opts)
    p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=15)
    return DigResult(args, p)


# --------------------------------------------------------------------------------------
# Raw DNS messages
# --------------------------------------------------------------------------------------

def enc_name(name):
    out = b""
    for label in name.rstrip(".").split("."):
        if label:
            b = label.encode("ascii")
            out += bytes([len(b)]) + b
    return out + b"\0"


def opt_rr(udp_size=1232, options=()):
    data = b"".join(struct.pack("!HH", c, len(d)) + d for c, d in options)
    return b"\0" + struct.pack("!HHIH", T_OPT, udp_size, 0, len(data)) + data


def build_query(name, qtype=T_A, qid=0x4242, flags=0x0100, edns=None, options=()):
    """A query (RD set); with edns (a UDP size) an OPT record carrying `options`
    [(code, bytes)]."""
    opt = opt_rr(edns, options) if edns is not None else b""
    return (struct.pack("!HHHHHH", qid, flags, 1, 0, 0, 1 if opt else 0)
            + enc_name(name) + struct.pack("!HH", qtype, 1) + opt)


def read_name(m, i):
    """(name, offset after the name); follows compression pointers (bounded)."""
    labels, end, jumps = [], None, 0
    while True:
        if i >= len(m):
            raise ValueError("name runs past the end")
        n = m[i]
        if n & 0xC0 == 0xC0:
            if end is None:
                end = i + 2
            jumps += 1
            if jumps > 64:
                raise ValueError("compression loop")
            i = ((n & 0x3F) << 8) | m[i + 1]
            continue
        if n == 0:
            return ".".join(labels), (end if end is not None else i + 1)
        labels.append(m[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n


def parse_msg(m):
    """A whole DNS message: header fields, question, answers [{name, type, ttl, data}],
    OPT options [(code, bytes)] (None without OPT). Raises ValueError when malformed."""
    if len(m) < 12:
        raise ValueError(f"{len(m)} bytes: shorter than a header")
    qid, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", m[:12])
    r = {"id": qid, "flags": flags, "qr": bool(flags & 0x8000), "opcode": (flags >> 11) & 15,
         "tc": bool(flags & 0x0200), "rd": bool(flags & 0x0100), "rcode": flags & 15,
         "qdcount": qd, "ancount": an, "arcount": ar, "questions": [], "answers": [],
         "opt": None, "size": len(m)}
    i = 12
    for _ in range(qd):
        name, i = read_name(m, i)
        qtype, qclass = struct.unpack("!HH", m[i:i + 4])
        i += 4
        r["questions"].append((name, qtype, qclass))
    for n in range(an + ns + ar):
        name, i = read_name(m, i)
        rtype, rclass, ttl, rdlen = struct.unpack("!HHIH", m[i:i + 10])
        i += 10
        rdata = m[i:i + rdlen]
        if len(rdata) != rdlen:
            raise ValueError("record runs past the end")
        if rtype == T_A:
            data = socket.inet_ntop(socket.AF_INET, rdata)
        elif rtype == T_AAAA:
            data = socket.inet_ntop(socket.AF_INET6, rdata)
        elif rtype == T_CNAME:
            data = read_name(m, i)[0]
        else:
            data = rdata
        if rtype == T_OPT:
            opts, j = [], 0
            while j + 4 <= len(rdata):
                c, ln = struct.unpack("!HH", rdata[j:j + 4])
                opts.append((c, rdata[j + 4:j + 4 + ln]))
                j += 4 + ln
            r["opt"] = opts
        elif n < an:
            r["answers"].append({"name": name, "type": rtype, "ttl": ttl, "data": data})
        i += rdlen
    if i != len(m):
        raise ValueError(f"{len(m) - i} trailing bytes")
    return r


def udp_ask(addr, packet, timeout=2.0, src="127.0.0.1"):
    """Sends one datagram from a fresh socket; the first reply or None after `timeout`."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((src, 0))
        s.settimeout(timeout)
        s.sendto(packet, addr)
        try:
            return s.recvfrom(65535)[0]
        except socket.timeout:
            return None
    finally:
        s.close()


class TcpReader:
    """Reads length-prefixed DNS messages from a TCP socket, keeping what it over-read."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def message(self, timeout):
        """The next message; None on EOF, reset or timeout."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            for _ in range(10_000):
                if len(self.buf) >= 2:
                    n = struct.unpack("!H", self.buf[:2])[0]
                    if len(self.buf) >= 2 + n:
                        msg, self.buf = self.buf[2:2 + n], self.buf[2 + n:]
                        return msg
                if time.monotonic() > deadline:
                    return None
                d = self.sock.recv(65536)
                if not d:
                    return None
                self.buf += d
        except (socket.timeout, ConnectionError):
            return None
        return None


def tcp_read_message(s, timeout):
    """One length-prefixed message from a fresh TCP socket s (for one-answer exchanges);
    None on EOF/reset/timeout."""
    return TcpReader(s).message(timeout)


def hexdump(b):
    return b.hex() if b is not None else None


# --------------------------------------------------------------------------------------
# Base class
# --------------------------------------------------------------------------------------

class DnsCase(unittest.TestCase):
    """One cordon per class with listen.dns on 127.0.0.1:0; cls.addr is its DNS address."""

    LAB_SOURCES = False

    @classmethod
    def dns_yaml(cls):
        return "  default_job: web\n  rate_limit: { qps: 10000, burst: 10000 }\n"

    @classmethod
    def binary(cls):
        return None  # harness default (CORDON_BIN)

    @classmethod
    def setUpClass(cls):
        cls.cordon = H.Cordon(jobs_yaml(cls.LAB_SOURCES), UP.port, PROXY_OPTS,
                              listen_dns="127.0.0.1:0", dns_yaml=cls.dns_yaml(),
                              binary=cls.binary())
        try:
            cls.cordon.start()
            if cls.cordon.dns_addr is None:
                raise H.CordonError(
                    "listen.dns is 127.0.0.1:0 but the ready file has "
                    f"\"dns\": {cls.cordon.ready.get('dns')!r} (expected \"127.0.0.1:PORT\"): "
                    "the resolver is not listening")
        except BaseException:
            cls.cordon.cleanup()
            raise
        cls.addr = cls.cordon.dns_addr

    @classmethod
    def tearDownClass(cls):
        rc, dt = cls.cordon.stop()
        err = cls.cordon.stderr_text()
        cls.cordon.cleanup()
        if rc != 0:
            raise AssertionError(f"cordon serve exited {rc} on SIGTERM after {dt:.1f}s; "
                                 f"stderr tail:\n{err}")

    def setUp(self):
        self.assertTrue(self.cordon.alive(), "cordon is not running:\n" +
                        self.cordon.stderr_text())
        self.lift_kill()

    def tearDown(self):
        if self.cordon.alive():
            self.lift_kill()

    def lift_kill(self):
        st = self.cordon.status() or {}
        if (st.get("kill") or {}).get("engaged"):
            self.cordon.admin("POST", "/v1/revive", {"reason": "test cleanup", "by": "tests"})

    # helpers ----------------------------------------------------------------------------

    def dig(self, name, qtype="A", **kw):
        return dig(self.addr, name, qtype, **kw)

    def assert_answered(self, r, rtype=None, data=None, msg=""):
        self.assertEqual(r.status, "NOERROR", f"{msg} expected NOERROR: {r!r}")
        self.assertIn("qr", r.flags, repr(r))
        if rtype is not None:
            got = r.data(rtype)
            if data is None:
                self.assertTrue(got, f"{msg} expected {rtype} records: {r!r}")
            else:
                self.assertEqual(sorted(got), sorted(data), f"{msg} {rtype} records: {r!r}")

    def assert_denied(self, r, rcode="REFUSED", msg=""):
        self.assertIsNotNone(r.status, f"{msg} expected {rcode}, got no answer: {r!r}")
        self.assertEqual(r.status, rcode, f"{msg} expected {rcode}: {r!r}")
        self.assertEqual(r.answers, [], f"{msg} a denied query got records: {r!r}")

    def assert_never_upstream(self, names, qtypes=None, settle=0.3):
        """None of `names` (with one of `qtypes`, if given) reached the upstream."""
        time.sleep(settle)
        want = {norm(n) for n in names}
        seen = [(r["name"], r["qtype"], r["transport"]) for r in list(UP.log)
                if r["name"] in want and (qtypes is None or r["qtype"] in qtypes)]
        self.assertEqual(seen, [], "denied queries reached the upstream")

    def upstream_count(self, name, qtype=T_A):
        return len(UP.queries_for(name, qtype))

    def assert_still_serving(self, what):
        self.assertTrue(self.cordon.alive(), f"cordon died after {what}:\n" +
                        self.cordon.stderr_text())
        r = self.dig("a.test")
        self.assert_answered(r, "A", ["127.0.0.1"], f"after {what}:")

    def metrics(self):
        status, _, raw = self.cordon.admin_raw("GET", "/metrics")
        self.assertEqual(status, 200, raw[:300])
        return raw.decode("utf-8", "replace")

    def dns_events(self, kind, name, count=1, timeout=3):
        return self.cordon.wait_events(
            lambda e: e.get("event") == kind and norm(e.get("name")) == norm(name),
            count, timeout)

    @staticmethod
    def type_is(ev, name, number):
        return str(ev.get("type")).upper() in (name, str(number))


# --------------------------------------------------------------------------------------
# The main resolver: default_job web, deny_rcode REFUSED (default), default query types
# --------------------------------------------------------------------------------------

class ResolverTest(DnsCase):

    # allowed names --------------------------------------------------------------------

    def test_allowed_name_over_udp(self):
        r = self.dig("a.test")
        self.assert_answered(r, "A", ["127.0.0.1"])
        self.assertNotIn("tc", r.flags, repr(r))
        r = self.dig("a.test", "AAAA")
        self.assert_answered(r, "AAAA", ["::1"])

    def test_allowed_name_over_tcp(self):
        name = fresh("tcp")
        r = self.dig(name, tcp=True)
        self.assert_answered(r, "A", ["127.0.0.3"])
        self.assertEqual(self.upstream_count(name), 1, UP.queries_for(name))

    def test_answer_has_client_id_and_question(self):
        name = fresh("Id").replace("wild.test", "Wild.TEST")
        q = build_query(name, T_A, qid=0xBEEF)
        resp = udp_ask(self.addr, q)
        self.assertIsNotNone(resp, "no answer to a plain UDP query")
        m = parse_msg(resp)
        self.assertEqual(m["id"], 0xBEEF)
        self.assertTrue(m["qr"])
        self.assertTrue(m["rd"], "RD not copied from the query")
        self.assertEqual(RCODES.get(m["rcode"]), "NOERROR", m)
        self.assertEqual(len(m["questions"]), 1, m)
        qn, qt, qc = m["questions"][0]
        # AMBIGUITY: the question is compared case-insensitively (echoing the client's exact
        # case matters only to 0x20 resolvers; not required by the contract).
        self.assertEqual((norm(qn), qt, qc), (norm(name), T_A, 1), m)
        self.assertEqual([(norm(a["name"]), a["data"]) for a in m["answers"]],
                         [(norm(name), "127.0.0.3")], m)

    def test_cname_chain_returned(self):
        r = self.dig("alias.test")
        self.assert_answered(r)
        got = [(norm(a["name"]), a["type"], norm(a["data"])) for a in r.answers]
        self.assertEqual(got, [("alias.test", "CNAME", "a.test"), ("a.test", "A", "127.0.0.1")],
                         repr(r))

    def ask_on(self, sock, name, qtype=T_A, qid=0x3300):
        """One query over UDP on `sock` (a fixed source port); the parsed answer."""
        sock.sendto(build_query(name, qtype, qid=qid), self.addr)
        for _ in range(10):
            d = sock.recv(65535)
            m = parse_msg(d)
            if m["id"] == qid:
                return m
        self.fail(f"no answer with id {qid:#x}")

    def test_cached_and_ttl_counts_down(self):
        # One client socket (one source port) throughout: this is about the cache and its
        # TTL; test_cache_shared_across_source_ports is about which clients share it.
        name = fresh("cache")
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.settimeout(3)
        try:
            m1 = self.ask_on(s, name, qid=0x3301)
            self.assertEqual([a["data"] for a in m1["answers"]], ["127.0.0.3"], m1)
            t1 = m1["answers"][0]["ttl"]
            self.assertLessEqual(t1, 300, m1)
            self.assertGreaterEqual(t1, 295, f"first answer's TTL {t1}, upstream gave 300")
            self.assertEqual(self.upstream_count(name), 1)
            m2 = self.ask_on(s, name, qid=0x3302)
            self.assertEqual([a["data"] for a in m2["answers"]], ["127.0.0.3"], m2)
            self.assertLessEqual(m2["answers"][0]["ttl"], t1, m2)
            self.assertEqual(self.upstream_count(name), 1,
                             "a second identical query reached the upstream (not cached)")
            time.sleep(2.1)
            m3 = self.ask_on(s, name, qid=0x3303)
            self.assertEqual([a["data"] for a in m3["answers"]], ["127.0.0.3"], m3)
            t3 = m3["answers"][0]["ttl"]
            self.assertLessEqual(t3, t1 - 1, f"TTL did not count down: {t1} then {t3} 2 s later")
            self.assertGreaterEqual(t3, t1 - 5, f"TTL fell too fast: {t1} then {t3} 2 s later")
            self.assertEqual(self.upstream_count(name), 1, "cached answer not used after 2 s")
        finally:
            s.close()

    def test_cache_shared_across_source_ports(self):
        # Stub resolvers use a new source port per query (dig does too): a repeated question
        # from the same client must still come from the cache, over UDP and TCP alike.
        name = fresh("shared")
        self.assert_answered(self.dig(name), "A", ["127.0.0.3"])
        ttls = []
        for i in range(6):
            r = self.dig(name, tcp=(i % 3 == 2))
            self.assert_answered(r, "A", ["127.0.0.3"])
            ttls.append(r.answers[0]["ttl"])
        self.assertEqual(self.upstream_count(name), 1,
                         f"7 identical queries (new source port each, 2 over TCP) made "
                         f"{self.upstream_count(name)} upstream queries (TTLs seen {ttls}): "
                         "the cache is not shared by all of the client's queries")

    def test_names_case_insensitive_with_trailing_dot(self):
        for n in ("A.TEST.", "a.test", "a.test.", "A.Test"):
            self.assert_answered(self.dig(n), "A", ["127.0.0.1"], f"{n}:")
        name = fresh("mixed")
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.settimeout(3)
        try:  # one source port: only the case differs
            m1 = self.ask_on(s, name.upper() + ".", qid=0x3401)
            m2 = self.ask_on(s, name, qid=0x3402)
        finally:
            s.close()
        for m in (m1, m2):
            self.assertEqual(RCODES.get(m["rcode"]), "NOERROR", m)
            self.assertEqual([a["data"] for a in m["answers"]], ["127.0.0.3"], m)
        self.assertEqual(self.upstream_count(name), 1,
                         "the same name in another case was asked upstream again (cache key "
                         "not case-insensitive)")

    def test_localhost_from_hosts_file_never_upstream(self):
        r = self.dig("localhost")
        self.assert_answered(r, "A", ["127.0.0.1"])
        r6 = self.dig("localhost", "AAAA")
        self.assertEqual(r6.status, "NOERROR", repr(r6))
        hosts_v6 = False
        try:
            with open("/etc/hosts") as f:
                hosts_v6 = any(":" in line.split()[0] and "localhost" in line.split()[1:]
                               for line in f if line.split() and not line.startswith("#"))
        except OSError:
            pass
        if hosts_v6:
            self.assert_answered(r6, "AAAA", ["::1"])
        else:
            # AMBIGUITY: this /etc/hosts has no IPv6 line for localhost; ::1 (RFC 6761) or
            # an empty NOERROR are both accepted, never anything else.
            self.assertIn(r6.data("AAAA"), ([], ["::1"]), repr(r6))
        self.assert_never_upstream(["localhost"])

    # denied -----------------------------------------------------------------------------

    def test_denied_names_refused_never_upstream(self):
        tag = uuid.uuid4().hex[:12]
        names = ["denied.test", f"exfil-{tag}.attacker.test", "wild.test", f"sub{tag}.a.test",
                 "DENIED.TEST.", f"a.test.x{tag}.attacker.test", f"evil{tag}wild.test",
                 f"x{tag}a.test"]
        for n in names:
            self.assert_denied(self.dig(n), msg=f"{n} over UDP:")
        for n in names[:3]:
            self.assert_denied(self.dig(n, tcp=True), msg=f"{n} over TCP:")
        self.assert_never_upstream(names)

    def test_refused_query_types_even_for_allowed_names(self):
        name = fresh("types")
        for qtype in ("TXT", "ANY", "MX"):
            for n in (name, "a.test"):
                self.assert_denied(self.dig(n, qtype), msg=f"{n} {qtype}:")
        self.assert_denied(self.dig(name, "TXT", tcp=True), msg="TXT over TCP:")
        self.assert_never_upstream([name, "a.test"], {T_TXT, T_ANY, T_MX})

    def test_default_query_types_pass(self):
        name = fresh("types-ok")
        for qtype, num in (("HTTPS", T_HTTPS), ("SVCB", T_SVCB), ("CNAME", T_CNAME),
                           ("AAAA", T_AAAA)):
            r = self.dig(name, qtype)
            self.assertEqual(r.status, "NOERROR", f"{qtype}: {r!r}")
            self.assertEqual(self.upstream_count(name, num), 1, f"{qtype} not relayed")

    def test_network_kill_refuses_everything_until_revive(self):
        cached, later, later_tcp = fresh("killc"), fresh("killf"), fresh("killt")
        self.assert_answered(self.dig(cached), "A", ["127.0.0.3"])
        status, js = self.cordon.admin("POST", "/v1/kill",
                                       {"reason": "test: dns kill", "by": "tests"})
        self.assertEqual(status, 200, js)
        self.assert_denied(self.dig(cached), msg="cached name during a kill:")
        self.assert_denied(self.dig(later), msg="new name during a kill:")
        self.assert_denied(self.dig(later_tcp, tcp=True), msg="TCP during a kill:")
        self.assert_denied(self.dig("localhost"), msg="hosts-file name during a kill:")
        self.assert_denied(self.dig("a.test", "AAAA"), msg="AAAA during a kill:")
        self.assert_never_upstream([later, later_tcp])
        ev = self.dns_events("dns.deny", later)
        self.assertTrue(ev, "no dns.deny event for a query refused during a kill")
        self.assertTrue(ev[0].get("reason"), ev[0])
        status, js = self.cordon.admin("POST", "/v1/revive",
                                       {"reason": "test: dns revive", "by": "tests"})
        self.assertEqual(status, 200, js)
        self.assert_answered(self.dig(later), "A", ["127.0.0.3"], "after revive:")
        self.assert_answered(self.dig(cached), "A", ["127.0.0.3"], "after revive:")
        self.assert_answered(self.dig(later_tcp, tcp=True), "A", ["127.0.0.3"], "after revive:")

    # truncation -------------------------------------------------------------------------

    def test_udp_without_edns_truncates(self):
        q = build_query("big.test", T_A, qid=0x7C7C)
        resp = udp_ask(self.addr, q)
        self.assertIsNotNone(resp, "no answer for big.test over UDP without EDNS")
        m = parse_msg(resp)
        self.assertEqual(m["id"], 0x7C7C, m)
        self.assertLessEqual(len(resp), 512, f"UDP answer without EDNS is {len(resp)} bytes")
        self.assertTrue(m["tc"], f"{len(resp)}-byte answer to a ~1 KB question without TC: {m}")
        self.assertEqual(RCODES.get(m["rcode"]), "NOERROR", m)
        self.assertEqual([(norm(n), t) for n, t, _ in m["questions"]], [("big.test", T_A)])
        r = self.dig("big.test", opts=["+noedns", "+ignore"])
        self.assertIn("tc", r.flags, repr(r))
        # Without +ignore dig retries over TCP and gets it all.
        r = self.dig("big.test", opts=["+noedns"])
        self.assert_answered(r)
        self.assertEqual(len(r.data("A")), BIG_COUNT, repr(r))

    def test_tcp_gets_full_answer(self):
        for opts in ((), ("+noedns",)):
            r = self.dig("big.test", tcp=True, opts=opts)
            self.assert_answered(r)
            self.assertNotIn("tc", r.flags, repr(r))
            self.assertEqual(len(r.data("A")), BIG_COUNT, repr(r))

    def test_udp_with_large_edns_size_gets_full_answer(self):
        # AMBIGUITY: "over the client's size" implies that a ~1 KB answer fits dig's EDNS
        # size of 1232 and comes whole over UDP.
        r = self.dig("big.test", opts=["+ignore", "+bufsize=1232"])
        self.assert_answered(r)
        self.assertNotIn("tc", r.flags, repr(r))
        self.assertEqual(len(r.data("A")), BIG_COUNT, repr(r))

    # TCP --------------------------------------------------------------------------------

    def test_tcp_two_queries_on_one_connection(self):
        # Beyond the contract (RFC 7766 6.2.1): several queries on one connection.
        names = [fresh("pipe1"), fresh("pipe2")]
        s = socket.create_connection(self.addr, timeout=5)
        try:
            msgs = [build_query(n, T_A, qid=0x1100 + i) for i, n in enumerate(names)]
            s.sendall(b"".join(struct.pack("!H", len(m)) + m for m in msgs))
            got = {}
            reader = TcpReader(s)
            for _ in range(2):
                resp = reader.message(5)
                self.assertIsNotNone(resp, f"answers so far: {got}")
                m = parse_msg(resp)
                got[m["id"]] = m
        finally:
            s.close()
        self.assertEqual(sorted(got), [0x1100, 0x1101])
        for i, n in enumerate(names):
            m = got[0x1100 + i]
            self.assertEqual(RCODES.get(m["rcode"]), "NOERROR", m)
            self.assertEqual([a["data"] for a in m["answers"]], ["127.0.0.3"], m)

    def test_idle_tcp_connection_does_not_block_others(self):
        idle = socket.create_connection(self.addr, timeout=5)
        half = socket.create_connection(self.addr, timeout=5)
        try:
            half.sendall(b"\x00\x40\x12\x34")  # a frame promising 64 bytes, 2 sent
            self.assert_answered(self.dig("a.test", tcp=True), "A", ["127.0.0.1"])
            self.assert_answered(self.dig("a.test"), "A", ["127.0.0.1"])
        finally:
            idle.close()
            half.close()

    # malformed packets ------------------------------------------------------------------

    def check_malformed(self, packet, what, qid=None, names=()):
        """Sends `packet` over UDP: a reply must be FORMERR with the query's id (when given);
        no reply is fine. Then cordon must still serve and `names` never reach upstream."""
        resp = udp_ask(self.addr, packet, timeout=DROP_WAIT)
        if resp is not None:
            self.assertGreaterEqual(len(resp), 12, f"{what}: reply {hexdump(resp)}")
            qid_r, flags = struct.unpack("!HH", resp[:4])
            self.assertTrue(flags & 0x8000, f"{what}: reply without QR: {hexdump(resp)}")
            self.assertEqual(RCODES.get(flags & 15, flags & 15), "FORMERR",
                             f"{what}: reply {hexdump(resp)}")
            if qid is not None:
                self.assertEqual(qid_r, qid, f"{what}: reply {hexdump(resp)}")
        self.assert_still_serving(what)
        if names:
            self.assert_never_upstream(names, settle=0.1)
        return resp

    def test_malformed_garbage(self):
        rnd = random.Random(5)
        for k in range(8):
            body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 200)))
            qid = 0x6A00 + k
            hdr = struct.pack("!HHHHHH", qid, 0x0100, 1, rnd.randrange(1, 65536),
                              rnd.randrange(65536), rnd.randrange(65536))
            self.check_malformed(hdr + body, f"garbage #{k}", qid)
        # Pure garbage, any header bits.
        # Noise: random bytes but opcode QUERY (another opcode may fairly get NOTIMP).
        for k in range(4):
            noise = bytearray(rnd.randrange(256) for _ in range(64))
            noise[2] &= 0x87
            self.check_malformed(bytes(noise), f"noise #{k}")

    def test_malformed_truncated_header(self):
        for pkt in (b"", b"\x12", b"\x12\x34\x01", b"\x12\x34\x01\x00\x00\x01\x00\x00\x00"):
            resp = udp_ask(self.addr, pkt, timeout=DROP_WAIT)
            # No whole header: nothing to answer (at most a FORMERR with the id bytes read).
            if resp is not None and len(pkt) >= 2:
                self.assertEqual(resp[:2], pkt[:2], f"{pkt!r}: reply {hexdump(resp)}")
                self.assertEqual(resp[3] & 15, 1, f"{pkt!r}: reply {hexdump(resp)}")
            else:
                self.assertIsNone(resp, f"{pkt!r}: reply {hexdump(resp)}")
        self.assert_still_serving("truncated headers")

    def test_malformed_compression_loop(self):
        q = lambda qid, name: (struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + name
                               + struct.pack("!HH", T_A, 1))
        # A pointer to itself; a label then a pointer back to the label; a pointer chain
        # a -> b -> a (both in the question, the first pointing forward).
        self.check_malformed(q(0x0C01, b"\xc0\x0c"), "pointer to itself", 0x0C01)
        self.check_malformed(q(0x0C02, b"\x04wild\xc0\x0c"), "label then loop", 0x0C02)
        self.check_malformed(q(0x0C03, b"\xc0\x0e\xc0\x0c"), "two-pointer loop", 0x0C03)
        self.check_malformed(q(0x0C04, b"\x01a\xc0\xff"), "pointer past the end", 0x0C04)
        self.check_malformed(q(0x0C05, b"\xc0\x02"), "pointer into the header", 0x0C05)

    def test_malformed_labels(self):
        q = lambda qid, name: (struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + name
                               + struct.pack("!HH", T_A, 1))
        tag = uuid.uuid4().hex[:8]
        self.check_malformed(q(0x1A01, b"\x40" + b"x" * 64 + b"\x04wild\x04test\x00"),
                             "label type 0x40", 0x1A01)
        self.check_malformed(q(0x1A02, b"\x80" + b"x" * 10 + b"\x00"), "label type 0x80",
                             0x1A02)
        long_name = b"".join(b"\x3f" + b"a" * 63 for _ in range(4)) + b"\x04wild\x04test\x00"
        self.check_malformed(q(0x1A03, long_name), "name over 255 octets", 0x1A03)
        self.check_malformed(q(0x1A04, b"\x05ab"), "name runs past the end", 0x1A04)
        self.check_malformed(q(0x1A05, enc_name(f"m{tag}.wild.test"))[:-3],
                             "question cut in its type", 0x1A05, [f"m{tag}.wild.test"])

    def test_malformed_counts(self):
        n1, n2, n3, n4 = fresh("qd2a"), fresh("qd2b"), fresh("qr"), fresh("big")
        two = (struct.pack("!HHHHHH", 0x2D02, 0x0100, 2, 0, 0, 0)
               + enc_name(n1) + struct.pack("!HH", T_A, 1)
               + enc_name(n2) + struct.pack("!HH", T_A, 1))
        self.check_malformed(two, "qdcount 2", 0x2D02, [n1, n2])
        self.check_malformed(struct.pack("!HHHHHH", 0x2D00, 0x0100, 0, 0, 0, 0),
                             "qdcount 0", 0x2D00)
        self.check_malformed(struct.pack("!HHHHHH", 0x2D01, 0x0100, 1, 0, 0, 0),
                             "qdcount 1, no question", 0x2D01)
        lying = build_query(fresh("an"), T_A, qid=0x2D03)
        lying = lying[:6] + b"\x00\x05" + lying[8:]  # ancount 5, no answers
        self.check_malformed(lying, "ancount that lies", 0x2D03)
        # A response (QR set) for an allowed name: FORMERR or dropped, never relayed.
        resp_pkt = build_query(n3, T_A, qid=0x2D04, flags=0x8180)
        self.check_malformed(resp_pkt, "a response (QR set)", 0x2D04, [n3])
        # Oversize: a valid query followed by 8000 bytes.
        over = build_query(n4, T_A, qid=0x2D05) + b"\xff" * 8000
        self.check_malformed(over, "oversize datagram with trailing bytes", 0x2D05, [n4])

    def test_malformed_over_tcp(self):
        # A frame shorter than a header: the connection is closed.
        s = socket.create_connection(self.addr, timeout=5)
        try:
            s.sendall(b"\x00\x05hello")
            resp = tcp_read_message(s, 2)
            self.assertIsNone(resp, f"answer to a 5-byte frame: {hexdump(resp)}")
        finally:
            s.close()
        # A whole frame of garbage with a header: FORMERR or closed.
        s = socket.create_connection(self.addr, timeout=5)
        try:
            junk = struct.pack("!HHHHHH", 0x3C3C, 0x0100, 1, 9, 9, 9) + b"\xc0\x0c" * 20
            s.sendall(struct.pack("!H", len(junk)) + junk)
            resp = tcp_read_message(s, 2)
            if resp is not None:
                m = parse_msg(resp)
                self.assertEqual((m["id"], RCODES.get(m["rcode"])), (0x3C3C, "FORMERR"), m)
        finally:
            s.close()
        # A frame promising 65535 bytes, 10 sent, then EOF.
        s = socket.create_connection(self.addr, timeout=5)
        s.sendall(b"\xff\xff" + b"\x00" * 10)
        s.close()
        self.assert_still_serving("malformed TCP")
        self.assert_answered(self.dig("a.test", tcp=True), "A", ["127.0.0.1"])

    # audit and metrics ------------------------------------------------------------------

    def test_audit_query_and_deny_events(self):
        ok = fresh("audit")
        bad = f"exfil-{uuid.uuid4().hex[:12]}.attacker.test"
        typ = fresh("audit-txt")
        self.assert_answered(self.dig(ok))
        self.assert_denied(self.dig(bad))
        self.assert_denied(self.dig(typ, "TXT"))
        ev = self.dns_events("dns.query", ok)
        self.assertTrue(ev, f"no dns.query event for {ok}")
        self.assertEqual(ev[0].get("job"), "web", ev[0])
        self.assertTrue(self.type_is(ev[0], "A", T_A), ev[0])
        ev = self.dns_events("dns.deny", bad)
        self.assertTrue(ev, f"no dns.deny event for {bad}")
        self.assertTrue(self.type_is(ev[0], "A", T_A), ev[0])
        self.assertTrue(ev[0].get("reason"), ev[0])
        ev_t = self.dns_events("dns.deny", typ)
        self.assertTrue(ev_t, f"no dns.deny event for {typ} TXT")
        self.assertTrue(self.type_is(ev_t[0], "TXT", T_TXT), ev_t[0])
        self.assertTrue(ev_t[0].get("reason"), ev_t[0])
        queried = [e for e in self.cordon.audit_events()
                   if e.get("event") == "dns.query" and norm(e.get("name")) in (bad, typ)]
        self.assertEqual(queried, [], "refused queries logged as dns.query")

    def test_repeated_queries_coalesced_in_audit(self):
        # A client asking the same thing again and again: the first query is written at
        # once, the identical ones of the next second as one line with their count. Every
        # query is still counted in the metrics and answered.
        name = f"flood-{uuid.uuid4().hex[:12]}.attacker.test"
        ok = fresh("repeat")
        before = self.dns_counter("denied")
        for i in range(20):
            r = parse_msg(udp_ask(self.addr, build_query(name, qid=0x5000 + i)))
            self.assertEqual(RCODES.get(r["rcode"]), "REFUSED", r)
            self.assertEqual(r["id"], 0x5000 + i, r)
        for i in range(10):
            r = parse_msg(udp_ask(self.addr, build_query(ok, qid=0x6000 + i)))
            self.assertEqual(RCODES.get(r["rcode"]), "NOERROR", r)
        first = self.dns_events("dns.deny", name)
        self.assertTrue(first, f"no dns.deny line for {name}")
        self.assertNotIn("repeats", first[0], "the first query of a kind is written whole")
        # The window ends within a second; its line carries the count.
        def lines(kind, n):
            return [e for e in self.cordon.audit_events()
                    if e.get("event") == kind and norm(e.get("name")) == n]

        def total(kind, n):  # a line is one query, or says how many repeated it
            return sum(int(e.get("repeats", 1)) for e in lines(kind, n))

        H.wait_until(lambda: total("dns.deny", name) >= 20 and total("dns.query", ok) >= 10,
                     5, 0.1)
        deny = lines("dns.deny", name)
        self.assertEqual(total("dns.deny", name), 20, deny)
        # Each server thread coalesces its own share (the kernel spreads source ports across
        # them): at most a first line and a count per thread.
        self.assertLessEqual(len(deny), 2 * (os.cpu_count() or 2),
                             f"a flood of one name wrote a line per query: {deny}")
        for e in deny:
            self.assertEqual(e.get("reason"), deny[0].get("reason"), deny)
            self.assertEqual(e.get("client"), "127.0.0.1", e)
        allowed = lines("dns.query", ok)
        self.assertEqual(total("dns.query", ok), 10, allowed)
        # first asked (upstream), then cached, per thread
        self.assertLessEqual(len(allowed), 3 * (os.cpu_count() or 2), allowed)
        # Every query is counted: the metric (which other tests' queries may move too) and,
        # exactly for this name, the table of denied targets.
        self.assertGreaterEqual(self.dns_counter("denied") - before, 20)
        _, _, raw = self.cordon.admin_raw("GET", "/v1/denials?job=web")
        top = [t for j in json.loads(raw)["jobs"] for t in j["top"] if t["target"] == name]
        self.assertEqual([t["count"] for t in top], [20], top)

    def dns_counter(self, decision):
        samples = H.prometheus_samples(self.metrics())
        return sum(v for (n, labels), v in samples.items()
                   if n == "cordon_dns_queries_total" and dict(labels).get("job") == "web" and
                   dict(labels).get("decision") == decision)

    def test_metrics_count_queries(self):
        self.assert_answered(self.dig(fresh("metric")))
        self.assert_denied(self.dig("denied.test"))
        text = self.metrics()
        samples = H.prometheus_samples(text)
        web = {dict(labels).get("decision"): v for (n, labels), v in samples.items()
               if n == "cordon_dns_queries_total" and dict(labels).get("job") == "web"}
        self.assertTrue(web, "no cordon_dns_queries_total{job=\"web\",...} sample:\n" +
                        "\n".join(l for l in text.splitlines() if "dns" in l))
        self.assertGreaterEqual(len([v for v in web.values() if v > 0]), 2,
                                f"expected an allowed and a denied decision counted: {web}")


# --------------------------------------------------------------------------------------
# Fail closed: an audit log that cannot be written refuses every query
# --------------------------------------------------------------------------------------

class AuditFailClosedTest(unittest.TestCase):

    def test_audit_unwritable_refuses_queries(self):
        # RLIMIT_FSIZE breaks the audit log under a running cordon (see harness): once the
        # day's file reaches 256 KiB every write fails. Unique denied names fill it (each is
        # a line of its own: coalescing only folds identical queries).
        cordon = H.Cordon(jobs_yaml(), UP.port, PROXY_OPTS, fsize_limit=256 * 1024,
                          listen_dns="127.0.0.1:0",
                          dns_yaml="  default_job: web\n  rate_limit: { qps: 100000, burst: 100000 }\n")
        self.addCleanup(cordon.cleanup)
        cordon.start()
        addr = cordon.dns_addr
        self.assertEqual(dig(addr, "a.test").status, "NOERROR", "works before")
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(sock.close)
        host, port = addr

        def send(i):  # every distinct name gets its own audit line
            sock.sendto(build_query(f"fill-{i}-{uuid.uuid4().hex[:20]}.attacker.test"),
                        (host, int(port)))
            if i % 500 == 499:
                time.sleep(0.05)  # let the writer catch up before asking

        self.assertTrue(cordon.fill_audit_until_unhealthy(send, 20000, 500),
                        "audit still healthy after the log file hit RLIMIT_FSIZE")
        name = fresh("unaudited")
        r = dig(addr, name)
        self.assertEqual(r.status, "REFUSED", f"an allowed name answered unaudited: {r!r}")
        self.assertEqual(len(UP.queries_for(name, T_A)), 0, "an unaudited query went upstream")
        self.assertTrue(cordon.alive(), cordon.stderr_text())


# --------------------------------------------------------------------------------------
# deny_rcode NXDOMAIN; configured query types and cache size
# --------------------------------------------------------------------------------------

class NxdomainTest(DnsCase):

    @classmethod
    def dns_yaml(cls):
        return ("  deny_rcode: NXDOMAIN\n"
                "  default_job: web\n"
                "  cache_entries: 100\n"
                "  query_types: [A, AAAA, CNAME, HTTPS, SVCB, TXT]\n"
                "  rate_limit: { qps: 10000, burst: 10000 }\n")

    def test_denied_names_get_nxdomain_never_upstream(self):
        tag = uuid.uuid4().hex[:12]
        names = ["denied.test", f"exfil-{tag}.attacker.test", "wild.test"]
        for n in names:
            self.assert_denied(self.dig(n), "NXDOMAIN", f"{n}:")
        self.assert_denied(self.dig(names[1], tcp=True), "NXDOMAIN", "over TCP:")
        self.assert_never_upstream(names)

    def test_allowed_name_answered(self):
        self.assert_answered(self.dig(fresh("nx")), "A", ["127.0.0.3"])
        self.assert_answered(self.dig("a.test"), "A", ["127.0.0.1"])

    def test_configured_query_types(self):
        name = fresh("txt")
        r = self.dig(name, "TXT")
        self.assertEqual(r.status, "NOERROR", f"TXT is configured: {r!r}")
        self.assertEqual(self.upstream_count(name, T_TXT), 1)
        # AMBIGUITY: which rcode a refused type gets under deny_rcode NXDOMAIN is not said;
        # either is accepted, but never an answer or an upstream query.
        r = self.dig(name, "MX")
        self.assertIn(r.status, ("REFUSED", "NXDOMAIN"), repr(r))
        self.assertEqual(r.answers, [], repr(r))
        self.assert_never_upstream([name], {T_MX})


# --------------------------------------------------------------------------------------
# Attribution without default_job: EDNS session option, sources
# --------------------------------------------------------------------------------------

def session_opt(session, token=None):
    return f"{session['id']}:{token or session['token']}".encode("ascii")


class AttributionTest(DnsCase):
    LAB_SOURCES = True

    @classmethod
    def dns_yaml(cls):
        return "  default_job: null\n  rate_limit: { qps: 10000, burst: 10000 }\n"

    def setUp(self):
        super().setUp()
        self.session = self.cordon.create_session("web")

    def dig_as(self, name, data, qtype="A", **kw):
        opt = f"+ednsopt={SESSION_OPTION}:{data.hex()}" if data else f"+ednsopt={SESSION_OPTION}"
        return self.dig(name, qtype, opts=[opt], **kw)

    def test_unattributed_client_refused(self):
        name = fresh("anon")
        self.assert_denied(self.dig(name), msg="no session, no default job:")
        self.assert_denied(self.dig("a.test"), msg="no session, no default job:")
        self.assert_denied(self.dig(name, tcp=True), msg="over TCP:")
        self.assert_never_upstream([name])

    def test_session_option_answers(self):
        name = fresh("sess")
        r = self.dig_as(name, session_opt(self.session))
        self.assert_answered(r, "A", ["127.0.0.3"])
        r = self.dig_as(fresh("sess-tcp"), session_opt(self.session), tcp=True)
        self.assert_answered(r, "A", ["127.0.0.3"], "over TCP:")
        ev = self.dns_events("dns.query", name)
        self.assertTrue(ev, f"no dns.query for {name}")
        self.assertEqual(ev[0].get("job"), "web", ev[0])
        if "session" in ev[0]:
            self.assertEqual(ev[0]["session"], self.session["id"], ev[0])
        # Still limited to the job's names.
        self.assert_denied(self.dig_as("denied.test", session_opt(self.session)),
                           msg="session client, name not in the job:")

    def test_session_option_raw_and_stripped(self):
        name = fresh("raw")
        tok = session_opt(self.session)
        q = build_query(name, T_A, qid=0x5E55, edns=1232,
                        options=[(10, b"\x01\x02\x03\x04\x05\x06\x07\x08"),
                                 (SESSION_OPTION, tok)])
        resp = udp_ask(self.addr, q)
        self.assertIsNotNone(resp, "no answer to a query with the session option")
        m = parse_msg(resp)
        self.assertEqual((m["id"], RCODES.get(m["rcode"])), (0x5E55, "NOERROR"), m)
        self.assertEqual([a["data"] for a in m["answers"]], ["127.0.0.3"], m)
        self.assertNotIn(SESSION_OPTION, [c for c, _ in (m["opt"] or [])],
                         "the session option was echoed back")
        ups = UP.queries_for(name)
        self.assertEqual(len(ups), 1, ups)
        self.assertNotIn(self.session["token"].encode(), ups[0]["raw"],
                         "the session token reached the upstream")
        self.assertNotIn(b"\xfd\xe9", ups[0]["raw"][12:], "option 65001 reached the upstream")

    def test_bad_session_option_refused(self):
        names = []
        for what, data in (("wrong token", session_opt(self.session, "0" * 40)),
                           ("unknown session", f"s-{uuid.uuid4().hex}:{self.session['token']}"
                            .encode()),
                           ("no colon", self.session["token"].encode()),
                           ("empty", b"")):
            n = fresh("bad")
            names.append(n)
            self.assert_denied(self.dig_as(n, data), msg=f"{what}:")
        self.assert_never_upstream(names)

    def test_killed_session_refused(self):
        cached, later = fresh("kcached"), fresh("klater")
        tok = session_opt(self.session)
        self.assert_answered(self.dig_as(cached, tok), "A", ["127.0.0.3"])
        status, js = self.cordon.admin("POST", f"/v1/sessions/{self.session['id']}/kill",
                                       {"reason": "test: dns session kill", "by": "tests"})
        self.assertEqual(status, 200, js)
        self.assert_denied(self.dig_as(later, tok), msg="killed session:")
        self.assert_denied(self.dig_as(cached, tok), msg="killed session, cached name:")
        self.assert_never_upstream([later])
        other = self.cordon.create_session("web")
        self.assert_answered(self.dig_as(later, session_opt(other)), "A", ["127.0.0.3"],
                             "another live session:")

    def test_sources_attribute_by_address(self):
        w = fresh("src")
        r = self.dig("lab.test", src="127.0.0.2")
        self.assert_answered(r, "A", ["127.0.0.7"], "client in lab's sources:")
        self.assert_denied(self.dig(w, src="127.0.0.2"), msg="lab client, web's name:")
        self.assert_denied(self.dig("lab.test"), msg="127.0.0.1 is not in lab's sources:")
        # The address decides before the option.
        self.assert_denied(self.dig_as(w, session_opt(self.session), src="127.0.0.2"),
                           msg="lab client with web's session option:")
        self.assert_never_upstream([w])

    def test_tokens_never_logged(self):
        self.assert_answered(self.dig_as(fresh("log"), session_opt(self.session)))
        self.assert_denied(self.dig_as(fresh("log-bad"), session_opt(self.session, "f" * 40)))
        time.sleep(0.3)
        raw = self.cordon.audit_raw()
        for secret in self.cordon.secrets:
            if secret:
                self.assertNotIn(secret.encode(), raw, "a secret is in the audit log")


# --------------------------------------------------------------------------------------
# Rate limit
# --------------------------------------------------------------------------------------

class RateLimitTest(DnsCase):

    @classmethod
    def dns_yaml(cls):
        return "  default_job: web\n  rate_limit: { qps: 5, burst: 5 }\n"

    def test_flood_limited_dropped_and_counted(self):
        names = [fresh(f"rl{i}") for i in range(50)]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        answered = {}
        try:
            s.bind(("127.0.0.1", 0))
            t0 = time.monotonic()
            for i, n in enumerate(names):
                s.sendto(build_query(n, T_A, qid=0x9000 + i), self.addr)
            sent_in = time.monotonic() - t0
            s.settimeout(0.1)
            deadline = time.monotonic() + 1.5
            for _ in range(1000):
                if time.monotonic() > deadline:
                    break
                try:
                    d = s.recv(65535)
                except socket.timeout:
                    continue
                m = parse_msg(d)
                answered[m["id"]] = RCODES.get(m["rcode"], m["rcode"])
        finally:
            s.close()
        self.assertGreaterEqual(len(answered), 1, "nothing answered: the burst should pass")
        self.assertLessEqual(len(answered), 10,
                             f"{len(answered)} of 50 answered in {sent_in:.3f}s "
                             f"(qps 5, burst 5): {answered}")
        relayed = sum(1 for n in names if UP.queries_for(n))
        self.assertLessEqual(relayed, len(answered), "dropped queries reached the upstream")
        # Per client: another address is not limited by this one's flood.
        self.assert_answered(self.dig(fresh("rl-other"), src="127.0.0.2"), "A", ["127.0.0.3"],
                             "another client right after the flood:")
        text = self.metrics()
        samples = H.prometheus_samples(text)
        total = [v for (n, _), v in samples.items() if n == "cordon_dns_queries_total"]
        self.assertTrue(total, "no cordon_dns_queries_total")
        limited = {(n, tuple(sorted(lab))): v for (n, lab), v in samples.items()
                   if n.startswith("cordon_dns") and
                   any(w in (n + " " + " ".join(x for _, x in lab)).lower()
                       for w in ("rate", "limit", "drop"))}
        self.assertTrue(any(v > 0 for v in limited.values()),
                        "no rate-limit counter above 0; dns metrics:\n" +
                        "\n".join(l for l in text.splitlines() if "dns" in l))
        # The bucket refills.
        time.sleep(1.2)
        self.assert_answered(self.dig(fresh("rl-after")), "A", ["127.0.0.3"], "after 1.2 s:")

    def test_burst_passes_whole(self):
        # burst 5: five queries at once from a client with a full bucket are all answered,
        # whether settled locally (hosts file) or relayed upstream. Clients 127.0.0.4 and
        # 127.0.0.5 are used by no other test.
        cases = (("settled locally", "127.0.0.5", ["localhost"] * 5),
                 ("relayed upstream", "127.0.0.4", [fresh(f"bu{i}") for i in range(5)]))
        for what, src, names in cases:
            with self.subTest(what):
                got = self.burst(src, names)
                relayed = sum(1 for n in set(names) if UP.queries_for(n))
                self.assertEqual(len(got), 5,
                                 f"{what}: {len(got)} of 5 queries sent at once answered with "
                                 f"burst 5 ({got}; {relayed} names reached the upstream); "
                                 "rate-limit metrics: " +
                                 str([l for l in self.metrics().splitlines()
                                      if "rate_limited" in l and not l.startswith("#")]))

    def burst(self, src, names, wait=2.0):
        """Sends one query per name at once from one socket on `src`; {id: rcode} of the
        answers that come within `wait` seconds."""
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        got = {}
        try:
            s.bind((src, 0))
            for i, n in enumerate(names):
                s.sendto(build_query(n, T_A, qid=0xB000 + i), self.addr)
            s.settimeout(0.2)
            deadline = time.monotonic() + wait
            for _ in range(1000):
                if len(got) == len(names) or time.monotonic() > deadline:
                    break
                try:
                    m = parse_msg(s.recv(65535))
                except socket.timeout:
                    continue
                got[m["id"]] = RCODES.get(m["rcode"], m["rcode"])
        finally:
            s.close()
        return got

    def test_rate_limit_is_per_client_address(self):
        # The same flood from one address but 50 source ports (a DNS tunnel need not reuse
        # its port): the address's bucket (burst 5, 5/s) bounds it, whatever socket or
        # listener thread each query lands on. Client 127.0.0.3 is used by no other test.
        names = [fresh(f"rp{i}") for i in range(50)]
        socks = []
        try:
            for _ in names:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind(("127.0.0.3", 0))
                socks.append(s)
            t0 = time.monotonic()
            for i, (s, n) in enumerate(zip(socks, names)):
                s.sendto(build_query(n, T_A, qid=0xA000 + i), self.addr)
            sent_in = time.monotonic() - t0
            time.sleep(1.0)
            answered = 0
            for s in socks:
                s.setblocking(False)
                try:
                    s.recv(65535)
                    answered += 1
                except BlockingIOError:
                    pass
        finally:
            for s in socks:
                s.close()
        bound = 5 + int(5 * sent_in) + 1
        self.assertGreaterEqual(answered, 1, "nothing answered: the burst should pass")
        self.assertLessEqual(answered, bound,
                             f"{answered} of 50 queries from 127.0.0.3 (50 source ports, sent "
                             f"in {sent_in * 1000:.0f} ms) answered; burst 5 + 5/s allows "
                             f"{bound}: the limit is not per client address")


# --------------------------------------------------------------------------------------
# Issue 18: budgets that keep one client (or a lying upstream) from taking the resolver
# --------------------------------------------------------------------------------------

def tcp_connect(addr, src, timeout=2.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(addr)
    return s


def closed_by_peer(s, wait):
    """True when the peer closes (EOF or reset) within `wait` seconds."""
    s.settimeout(wait)
    try:
        return s.recv(65536) == b""
    except socket.timeout:
        return False
    except ConnectionError:
        return True


class TcpLimitTest(DnsCase):
    """dns.tcp: at most 6 connections, 2 per client, 1.5 s each whatever flows."""

    @classmethod
    def dns_yaml(cls):
        return ("  default_job: web\n  rate_limit: { qps: 10000, burst: 10000 }\n"
                "  tcp: { max_connections: 6, max_per_client: 2, timeout: 1500ms }\n")

    def tearDown(self):
        time.sleep(0.2)  # this test's connections are gone before the next one counts
        super().tearDown()

    def test_per_client_cap(self):
        socks = [tcp_connect(self.addr, "127.0.0.21") for _ in range(4)]
        try:
            extra = [closed_by_peer(s, 0.5) for s in socks[2:]]
            self.assertEqual(extra, [True, True],
                             "connections over dns.tcp.max_per_client (2) were kept open")
            self.assertFalse(closed_by_peer(socks[0], 0.2), "the first connection was closed")
            q = build_query("a.test", T_A, qid=0x7C01)
            socks[0].sendall(struct.pack("!H", len(q)) + q)
            m = TcpReader(socks[0]).message(2)
            self.assertIsNotNone(m, "a connection within the cap was not answered")
            self.assertEqual(parse_msg(m)["id"], 0x7C01)
            other = tcp_connect(self.addr, "127.0.0.22")
            try:
                self.assertFalse(closed_by_peer(other, 0.2),
                                 "another client was refused: the cap is not per client")
            finally:
                other.close()
        finally:
            for s in socks:
                s.close()
        self.assertIn("cordon_dns_tcp_refused_total", self.metrics())

    def test_listener_cap(self):
        socks = []
        try:
            for src in ("127.0.0.23", "127.0.0.24", "127.0.0.25"):
                socks += [tcp_connect(self.addr, src) for _ in range(2)]
            self.assertFalse(any(closed_by_peer(s, 0.05) for s in socks),
                             "a connection within both caps was closed")
            late = tcp_connect(self.addr, "127.0.0.26")
            try:
                self.assertTrue(closed_by_peer(late, 0.5),
                                "a 7th connection was kept with dns.tcp.max_connections 6")
            finally:
                late.close()
        finally:
            for s in socks:
                s.close()

    def test_relayed_connections_count_per_session(self):
        # The shim's relay connects from 127.0.0.1 for every sandbox: once a connection's
        # query names a session, it counts against that session's cap, not the address's.
        sessions = [self.cordon.create_session("web") for _ in range(3)]

        def ask(s, session, qid):
            q = build_query("a.test", T_A, qid=qid, edns=1232,
                            options=[(SESSION_OPTION, session_opt(session))])
            s.sendall(struct.pack("!H", len(q)) + q)
            return TcpReader(s).message(2)

        socks = []
        try:
            for i, sess in enumerate(sessions):  # 3 sessions, one address, cap 2 each
                s = tcp_connect(self.addr, "127.0.0.29")
                socks.append(s)
                self.assertIsNotNone(ask(s, sess, 0x7E00 + i), f"session {i} not answered")
            self.assertFalse(any(closed_by_peer(s, 0.05) for s in socks),
                             "a session's first connection was closed: counted per address")
            extra = []
            for i in range(2):  # the first session's 2nd and 3rd connections
                s = tcp_connect(self.addr, "127.0.0.29")
                extra.append(s)
                self.assertIsNotNone(ask(s, sessions[0], 0x7E10 + i), "not answered")
            self.assertFalse(closed_by_peer(extra[0], 0.2), "a session's 2nd connection closed")
            self.assertTrue(closed_by_peer(extra[1], 0.5),
                            "a session's 3rd connection kept with max_per_client 2")
            socks += extra
        finally:
            for s in socks:
                s.close()

    def test_drip_fed_connection_closed_at_the_deadline(self):
        # One byte every 0.25 s: each byte used to restart a 10 s idle timer, so a dripping
        # client held its descriptor for as long as it liked.
        q = build_query(fresh("drip"), T_A)
        framed = struct.pack("!H", len(q)) + q
        s = tcp_connect(self.addr, "127.0.0.27")
        t0 = time.monotonic()
        closed_at = None
        try:
            s.settimeout(0.25)
            for b in framed[:-1]:
                try:
                    s.sendall(bytes([b]))
                    if s.recv(1) == b"":
                        closed_at = time.monotonic() - t0
                        break
                except socket.timeout:
                    continue
                except (ConnectionError, BrokenPipeError):
                    closed_at = time.monotonic() - t0
                    break
        finally:
            s.close()
        self.assertIsNotNone(closed_at, "a drip-fed connection was never closed")
        self.assertLess(closed_at, 2.5, f"closed after {closed_at:.1f}s, timeout 1.5s")

    def test_busy_connection_closed_at_the_deadline(self):
        # Whole queries every 0.2 s: traffic does not extend a connection's life either.
        s = tcp_connect(self.addr, "127.0.0.28")
        r = TcpReader(s)
        t0 = time.monotonic()
        closed_at = None
        try:
            for i in range(40):
                q = build_query("a.test", T_A, qid=0x7D00 + i)
                try:
                    s.sendall(struct.pack("!H", len(q)) + q)
                except (ConnectionError, BrokenPipeError):
                    closed_at = time.monotonic() - t0
                    break
                if r.message(1) is None:
                    closed_at = time.monotonic() - t0
                    break
                time.sleep(0.2)
        finally:
            s.close()
        self.assertIsNotNone(closed_at, "a busy connection lived 8 s with a 1.5 s timeout")
        self.assertLess(closed_at, 2.5, f"closed after {closed_at:.1f}s, timeout 1.5s")


class TcpDescriptorLimitTest(DnsCase):
    """cordon under `ulimit -n 256` with the default dns.tcp caps: DNS over TCP takes at most
    a quarter of the descriptors, and the kill is still answered while it is full."""

    @classmethod
    def binary(cls):
        cls.wrapper_dir = H.TempDir("cordon-it-nofile-")
        path = cls.wrapper_dir.join("cordon")
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\nulimit -n 256 || exit 99\nexec {H.CORDON_BIN} \"$@\"\n")
        os.chmod(path, 0o755)
        return path

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.wrapper_dir.cleanup()

    def test_tcp_connections_stay_below_the_descriptor_limit(self):
        socks = []
        try:
            for i in range(10):  # 10 addresses x 15: within the per-client cap of 16
                socks += [tcp_connect(self.addr, f"127.0.1.{i + 1}") for _ in range(15)]
            time.sleep(0.5)
            kept = sum(1 for s in socks if not closed_by_peer(s, 0.01))
            self.assertLessEqual(kept, 64, f"{kept} of 150 DNS-over-TCP connections kept open "
                                           "under ulimit -n 256 (a quarter is 64)")
            self.assertGreaterEqual(kept, 32, f"only {kept} kept")
            t0 = time.monotonic()
            status, js = self.cordon.admin("POST", "/v1/kill",
                                           {"reason": "test: fd limit", "by": "tests"})
            self.assertEqual(status, 200, js)
            self.assertLess(time.monotonic() - t0, 2.0)
        finally:
            for s in socks:
                s.close()


class InflightBudgetTest(DnsCase):
    """Default budgets (64 upstream lookups in flight per session, else per address)."""

    @classmethod
    def dns_yaml(cls):
        return "  default_job: null\n  rate_limit: { qps: 100000, burst: 100000 }\n"

    def test_unanswered_names_of_one_session_do_not_starve_another(self):
        flood = self.cordon.create_session("web")
        other = self.cordon.create_session("web")
        tag = uuid.uuid4().hex[:8]
        names = [f"hole-{tag}-{i}.wild.test" for i in range(4200)]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind(("127.0.0.1", 0))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
            opt = [(SESSION_OPTION, session_opt(flood))]
            for i, n in enumerate(names):
                s.sendto(build_query(n, T_A, qid=i & 0xFFFF, edns=1232, options=opt), self.addr)
                if i % 100 == 99:
                    time.sleep(0.005)  # the listener keeps up; the kernel drops nothing
            time.sleep(0.5)
            r = udp_ask(self.addr, build_query(fresh("starve"), T_A, qid=0x5151, edns=1232,
                                               options=[(SESSION_OPTION, session_opt(other))]))
        finally:
            s.close()
        self.assertIsNotNone(r, "the other session got no answer")
        m = parse_msg(r)
        self.assertEqual((RCODES.get(m["rcode"]), [a["data"] for a in m["answers"]]),
                         ("NOERROR", ["127.0.0.3"]),
                         "one session's 4,200 unanswered lookups starved another session")
        sent = {r["name"] for r in list(UP.log) if r["name"].startswith(f"hole-{tag}-")}
        self.assertLessEqual(len(sent), 64, f"{len(sent)} of one session's lookups in flight "
                                            "at once (budget 64)")


class SessionRateTest(DnsCase):
    """rate_limit 5/s, burst 10: one bucket per session, malformed queries included."""

    @classmethod
    def dns_yaml(cls):
        return "  default_job: web\n  rate_limit: { qps: 5, burst: 10 }\n"

    def flood(self, packets, src="127.0.0.1", wait=1.0, then=None):
        """Sends every packet at once from one socket on `src` (then calls `then`); the
        answers within `wait`."""
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        got = []
        try:
            s.bind((src, 0))
            for p in packets:
                s.sendto(p, self.addr)
            if then is not None:
                then()
            s.settimeout(0.1)
            deadline = time.monotonic() + wait
            for _ in range(10_000):
                if time.monotonic() > deadline:
                    break
                try:
                    got.append(s.recv(65535))
                except socket.timeout:
                    continue
        finally:
            s.close()
        return got

    def test_one_sessions_flood_does_not_spend_anothers_budget(self):
        # `cordon run`'s relay sends every sandbox's queries from 127.0.0.1.
        noisy = self.cordon.create_session("web")
        quiet = self.cordon.create_session("web")
        opt = [(SESSION_OPTION, session_opt(noisy))]
        q = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            q.bind(("127.0.0.1", 0))
            q.settimeout(2)
            # The quiet session's query goes out right behind the flood (not a second later,
            # when the bucket would have refilled).
            got = self.flood([build_query(f"x{i}-{uuid.uuid4().hex[:6]}.attacker.test", T_A,
                                          qid=i, edns=1232, options=opt) for i in range(60)],
                             then=lambda: q.sendto(build_query(
                                 fresh("quiet"), T_A, qid=0x6161, edns=1232,
                                 options=[(SESSION_OPTION, session_opt(quiet))]), self.addr))
            try:
                r = q.recv(65535)
            except socket.timeout:
                r = None
        finally:
            q.close()
        self.assertLessEqual(len(got), 12, f"{len(got)} of 60 answered with burst 10")
        self.assertIsNotNone(r, "another session from the same address got no answer right "
                                "after the flood: the bucket is per address, not per session")
        self.assertEqual(RCODES.get(parse_msg(r)["rcode"]), "NOERROR")

    def test_malformed_queries_take_tokens_and_their_lines_are_bounded(self):
        names = [fresh(f"mal{i}") for i in range(60)]
        got = self.flood([build_query(n, T_A, qid=0x6200 + i) + b"\0"
                          for i, n in enumerate(names)], src="127.0.0.31")
        rcodes = [RCODES.get(parse_msg(g)["rcode"]) for g in got]
        self.assertTrue(rcodes and set(rcodes) == {"FORMERR"}, rcodes)
        self.assertLessEqual(len(got), 12, f"{len(got)} of 60 malformed queries answered "
                                           "(burst 10): malformed queries skip the bucket")
        time.sleep(0.5)
        lines = [e for e in self.cordon.audit_events()
                 if e.get("client") == "127.0.0.31" and e.get("reason") == "bad_request"]
        self.assertLessEqual(len(lines), 12, f"{len(lines)} audit lines for 60 malformed "
                                             "queries with burst 10")


class KillInFlightTest(DnsCase):

    def test_network_kill_cancels_lookups_in_flight(self):
        # The upstream ignores the first query; c-ares retries 3 s later. A kill in between
        # must stop that retry and leave the client without an address.
        name = f"once-{uuid.uuid4().hex[:12]}.wild.test"
        result = {}

        def ask():
            result["r"] = udp_ask(self.addr, build_query(name, T_A, qid=0x4B4B), timeout=9)

        import threading
        t = threading.Thread(target=ask)
        t.start()
        try:
            H.wait_until(lambda: UP.queries_for(name), 2)
            self.assertTrue(UP.queries_for(name), "the lookup never reached the upstream")
            t_kill = time.monotonic()
            status, js = self.cordon.admin("POST", "/v1/kill",
                                           {"reason": "test: kill in flight", "by": "tests"})
            self.assertEqual(status, 200, js)
        finally:
            t.join(12)
        answered_in = time.monotonic() - t_kill
        time.sleep(max(0.0, 5.0 - answered_in))
        ups = UP.queries_for(name)
        self.assertEqual(len(ups), 1, f"{len(ups) - 1} upstream queries for {name} went out "
                                      "after the network kill")
        r = result.get("r")
        self.assertIsNotNone(r, "the client waiting on the upstream was never answered")
        m = parse_msg(r)
        self.assertEqual(m["answers"], [], f"the client got an address after the kill: {m}")
        self.assertEqual(RCODES.get(m["rcode"]), "REFUSED", m)
        self.assertLess(answered_in, 1.5, f"refused {answered_in:.1f}s after the kill")


class UpstreamAnswerTest(DnsCase):
    """What is relayed from the upstream, and how: sizes, case, bailiwick, TTLs, class."""

    def test_udp_answers_capped_at_1232_bytes(self):
        name = f"big-{uuid.uuid4().hex[:12]}.wild.test"
        r = udp_ask(self.addr, build_query(name, T_A, qid=0x1232, edns=4096))
        self.assertIsNotNone(r, "no answer")
        m = parse_msg(r)
        self.assertLessEqual(len(r), 1232, "a UDP answer over 1232 bytes (EDNS 4096 asked)")
        self.assertTrue(m["tc"], "an answer cut for UDP without TC")
        s = tcp_connect(self.addr, "127.0.0.1")
        try:
            q = build_query(name, T_A, qid=0x1233)
            s.sendall(struct.pack("!H", len(q)) + q)
            full = TcpReader(s).message(3)
        finally:
            s.close()
        self.assertIsNotNone(full)
        self.assertEqual(len(parse_msg(full)["answers"]), 100, "TCP gets the whole answer")

    def test_question_echoed_as_asked(self):
        for name in ("A.TeSt", "DeNiEd.TeSt", f"MiXeD-{uuid.uuid4().hex[:6]}.WiLd.TeSt"):
            for attempt in ("first", "cached"):
                with self.subTest(name=name, attempt=attempt):
                    r = udp_ask(self.addr, build_query(name, T_A, qid=0x2020, edns=1232))
                    self.assertIsNotNone(r)
                    want = enc_name(name)
                    self.assertEqual(r[12:12 + len(want)], want,
                                     f"question not echoed byte for byte: {r[12:40]!r}")

    def test_out_of_bailiwick_records_dropped(self):
        name = f"lie-{uuid.uuid4().hex[:12]}.wild.test"
        for attempt in ("first", "cached"):
            r = udp_ask(self.addr, build_query(name, T_A, qid=0x0B0B, edns=1232))
            self.assertIsNotNone(r)
            m = parse_msg(r)
            self.assertEqual([(a["name"], a["data"]) for a in m["answers"]],
                             [(name, "127.0.0.3")], f"{attempt}: {m}")
            self.assertNotIn(bytes([6, 6, 6]), r, f"{attempt}: a record of a name never asked "
                                                  "was relayed")
            self.assertLessEqual(m["arcount"], 1, f"{attempt}: additional records relayed")

    def test_ttl_top_bit_served_and_cached_alike(self):
        name = f"ttlmax-{uuid.uuid4().hex[:12]}.wild.test"
        for _ in range(2):
            r = udp_ask(self.addr, build_query(name, T_A, qid=0x7777))
            self.assertIsNotNone(r)
            self.assertEqual([a["ttl"] for a in parse_msg(r)["answers"]], [0])
        self.assertEqual(len(UP.queries_for(name)), 2,
                         "a TTL served as 0 was cached: the second query was not relayed")

    def test_other_classes_never_get_the_in_answer(self):
        name = fresh("class")
        r = udp_ask(self.addr, build_query(name, T_A, qid=0x0101))
        self.assertEqual([a["data"] for a in parse_msg(r)["answers"]], ["127.0.0.3"])
        for qclass in (3, 255):  # CH, ANY
            with self.subTest(qclass=qclass):
                q = build_query(name, T_A, qid=0x0102)
                q = q[:-2] + struct.pack("!H", qclass)
                r = udp_ask(self.addr, q)
                self.assertIsNotNone(r)
                m = parse_msg(r)
                self.assertEqual(m["answers"], [], f"class {qclass} got the IN answer: {m}")
                self.assertEqual(RCODES.get(m["rcode"]), "REFUSED", m)


if __name__ == "__main__":
    unittest.main()
