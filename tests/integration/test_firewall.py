"""`cordon firewall` in network namespaces made by the test (issue 9). Root only.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_firewall   (from tests/integration)

Three namespaces, nothing in the host's own:

    sandbox 10.231.1.2, fd00:231:1::2 ──veth── router 10.231.1.1, fd00:231:1::1 on r1
            also 10.231.2.2, fe80::2   s0  r1         also 10.231.2.1, fe80::1 (forwards;
            (sources --sandbox-cidr                   cordon listens here; the rules go
             does not list)                           here; "host services": TCP echo
                                                      :7000, UDP echo :7001 and :443)
                                                      │ veth
                                      internet 203.0.113.2, 2001:db8:231::2 (TCP echo :7000,
                                                UDP echo :7001 and :443, HTTP :8080)

test_sandbox_reaches_only_cordon: before the rules, the sandbox reaches the internet
directly, TCP and UDP (the control). With `cordon firewall --sandbox-cidr ... --apply` in the
router: direct TCP is reset at once and UDP (QUIC's 443 too) is refused with ICMP (the
datagram never arrives), IPv4 and IPv6; the admin listener, on the same address, is refused;
a datagram with a forged source is dropped; HTTP and CONNECT through cordon work, and its
DNS answers over UDP. After `--kill --apply`, cordon itself is unreachable; applying again
without --kill restores it.

test_unlisted_sources_and_sandbox_iface: a source the prefixes do not list (a second IPv4
network on the sandbox link, an IPv6 link-local address) slips past --sandbox-cidr alone (the
hole, kept as documentation); with --sandbox-iface r1 it is refused (alone) or dropped (with
the prefixes), neighbour discovery still works, cordon still answers, and --kill covers it.

test_forged_cordon_source_on_a_shared_bridge: cordon and two sandboxes on one bridge with
br_netfilter: a source forged as cordon's is delivered when it matches another sandbox's live
flow with cordon (the documented limit, asserted as such), refused otherwise.
Namespaces (and with them the nft table) are always removed.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import harness as H

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "netns_peer.py")
TAG = f"cfw{os.getpid() % 100000}"
NS_SBX, NS_RTR, NS_NET = f"{TAG}-sbx", f"{TAG}-rtr", f"{TAG}-net"
SBX4, RTR4_S, RTR4_N, NET4 = "10.231.1.2", "10.231.1.1", "203.0.113.1", "203.0.113.2"
SBX6, RTR6_S, RTR6_N, NET6 = "fd00:231:1::2", "fd00:231:1::1", "2001:db8:231::1", \
    "2001:db8:231::2"
SANDBOX_CIDRS = ["10.231.1.0/24", "fd00:231:1::/64"]
# On the same link, not in SANDBOX_CIDRS: a second IPv4 network and link-local addresses.
SBX4_X, RTR4_X = "10.231.2.2", "10.231.2.1"
SBX_LL, RTR_LL = "fe80::2%s0", "fe80::1%s0"  # as seen from the sandbox


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (network namespaces and nftables)"
    for tool in ("ip", "nft", "curl"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found: run scripts/setup (packages iproute2, nftables, curl)"
    probe = f"{TAG}-probe"
    r = subprocess.run(["ip", "netns", "add", probe], stderr=subprocess.PIPE, timeout=10)
    if r.returncode != 0:
        return "cannot create a network namespace: " + r.stderr.decode().strip()
    try:
        r = subprocess.run(["ip", "netns", "exec", probe, "nft", "list", "tables"],
                           stderr=subprocess.PIPE, timeout=10)
        if r.returncode != 0:
            return "nftables unusable in a namespace: " + r.stderr.decode().strip()
    finally:
        subprocess.run(["ip", "netns", "del", probe], timeout=10)
    return None


SKIP = skip_reason()


def sh(*args, ns=None, check=True, timeout=20):
    argv = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: {r.returncode}\n{r.stderr.decode()}")
    return r


def peer(ns, *args, timeout=20):
    r = sh(sys.executable, PEER, *args, ns=ns, timeout=timeout)
    return json.loads(r.stdout.decode().strip().splitlines()[-1])


def make_namespaces():
    for ns in (NS_SBX, NS_RTR, NS_NET):
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "set", "lo", "up", ns=ns)
    sh("ip", "link", "add", "s0", "netns", NS_SBX, "type", "veth", "peer", "name", "r1",
       "netns", NS_RTR)
    sh("ip", "link", "add", "i0", "netns", NS_NET, "type", "veth", "peer", "name", "r2",
       "netns", NS_RTR)
    for ns, dev, a4, a6 in ((NS_SBX, "s0", SBX4, SBX6), (NS_RTR, "r1", RTR4_S, RTR6_S),
                            (NS_RTR, "r2", RTR4_N, RTR6_N), (NS_NET, "i0", NET4, NET6)):
        plen4 = "24"
        sh("ip", "addr", "add", f"{a4}/{plen4}", "dev", dev, ns=ns)
        sh("ip", "-6", "addr", "add", f"{a6}/64", "dev", dev, "nodad", ns=ns)
        sh("ip", "link", "set", dev, "up", ns=ns)
    # The unlisted sources: used only when a probe binds them (--src).
    sh("ip", "addr", "add", f"{SBX4_X}/24", "dev", "s0", ns=NS_SBX)
    sh("ip", "addr", "add", f"{RTR4_X}/24", "dev", "r1", ns=NS_RTR)
    sh("ip", "-6", "addr", "add", "fe80::2/64", "dev", "s0", "nodad", ns=NS_SBX)
    sh("ip", "-6", "addr", "add", "fe80::1/64", "dev", "r1", "nodad", ns=NS_RTR)
    sh("ip", "route", "add", "default", "via", RTR4_S, "src", SBX4, ns=NS_SBX)
    sh("ip", "-6", "route", "add", "default", "via", RTR6_S, ns=NS_SBX)
    sh("ip", "route", "add", "default", "via", RTR4_N, ns=NS_NET)
    sh("ip", "-6", "route", "add", "default", "via", RTR6_N, ns=NS_NET)
    # The router forwards, with the kernel's own source checks off: the ruleset's are tested.
    sh("sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
       "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
       "net.ipv4.conf.r1.rp_filter=0", "net.ipv4.conf.r2.rp_filter=0", ns=NS_RTR)


def delete_namespaces():
    for ns in (NS_SBX, NS_RTR, NS_NET):
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "cordon"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10)


POLICY = """# test_firewall.py
listen:
  proxy: {rtr}:3128
  dns: {rtr}:53
  admin: {rtr}:9090          # routable from the sandbox: only the rules keep it out
admin:
  token_file: {tmp}/admin.token
state:
  path: {tmp}/state
audit:
  path: {tmp}/audit
dns:
  upstream: ["127.0.0.1:9"]
  default_job: agent
jobs:
  agent:
    task: reach the test internet's echo and HTTP servers through cordon
    egress:
      - {{ cidr: 203.0.113.0/24, ports: [8080], protocol: http }}
      - {{ cidr: 203.0.113.0/24, ports: [7000], protocol: tcp }}
    identity: {{ ttl: 30m }}
"""


@unittest.skipIf(SKIP, SKIP or "")
class FirewallNamespaceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cordon-it-fw-")
        cls.procs = []
        try:
            cls._setup()
        except BaseException:
            cls._teardown()
            raise

    @classmethod
    def _setup(cls):
        delete_namespaces()  # leftovers of a killed run with this pid
        make_namespaces()
        t = cls.tmp
        for d in ("state", "audit"):
            os.makedirs(os.path.join(t, d), mode=0o700)
        cls.token = "t" * 8 + os.urandom(16).hex()
        with open(os.path.join(t, "admin.token"), "w") as f:
            f.write(cls.token + "\n")
        os.chmod(os.path.join(t, "admin.token"), 0o600)
        cls.policy = os.path.join(t, "policy.yaml")
        with open(cls.policy, "w") as f:
            f.write(POLICY.format(rtr=RTR4_S, tmp=t))

        srv_dir = os.path.join(t, "internet")
        os.makedirs(srv_dir)
        cls.udp_log = os.path.join(srv_dir, "udp.log")
        cls.procs.append(subprocess.Popen(
            ["ip", "netns", "exec", NS_NET, sys.executable, PEER, "servers", srv_dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # The router's own services (what a host runs beside cordon: sshd, a database...).
        rtr_dir = os.path.join(t, "router")
        os.makedirs(rtr_dir)
        cls.procs.append(subprocess.Popen(
            ["ip", "netns", "exec", NS_RTR, sys.executable, PEER, "servers", rtr_dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        ready = os.path.join(t, "ready.json")
        cls.cordon_err = open(os.path.join(t, "cordon.stderr"), "wb")
        cls.cordon = subprocess.Popen(
            ["ip", "netns", "exec", NS_RTR, H.CORDON_BIN, "serve", "--config", cls.policy,
             "--ready-file", ready, "--threads", "2"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=cls.cordon_err)
        cls.procs.append(cls.cordon)
        if not H.wait_until(lambda: os.path.exists(os.path.join(srv_dir, "ready")) and
                            os.path.exists(os.path.join(rtr_dir, "ready")) and
                            os.path.exists(ready), 15):
            raise AssertionError("servers or cordon not ready:\n" + cls._cordon_stderr())

        out = sh(H.CORDON_BIN, "session", "create", "agent", "--json", "--admin",
                 f"http://{RTR4_S}:9090", "--admin-token-file",
                 os.path.join(t, "admin.token"), ns=NS_RTR).stdout.decode()
        s = json.loads(out)
        cls.auth = f"{s['id']}:{s['token']}"

    @classmethod
    def _cordon_stderr(cls):
        try:
            with open(os.path.join(cls.tmp, "cordon.stderr"), "rb") as f:
                return f.read().decode(errors="replace")[-3000:]
        except OSError:
            return ""

    @classmethod
    def _teardown(cls):
        for p in cls.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        if getattr(cls, "cordon_err", None):
            cls.cordon_err.close()
        delete_namespaces()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls._teardown()

    # helpers ------------------------------------------------------------------------

    def setUp(self):
        # Each test starts without rules (the control), whatever ran before it.
        sh("nft", "delete", "table", "inet", "cordon", ns=NS_RTR, check=False)

    def firewall(self, *extra, cidrs=SANDBOX_CIDRS):
        argv = [H.CORDON_BIN, "firewall", "--policy", self.policy]
        for c in cidrs:
            argv += ["--sandbox-cidr", c]
        r = sh(*argv, *extra, "--apply", ns=NS_RTR, check=False)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.fw_stderr = r.stderr.decode()
        listed = sh("nft", "list", "table", "inet", "cordon", ns=NS_RTR).stdout.decode()
        self.assertIn("sandbox_to_cordon", listed)
        return listed

    def udp_refused(self, host, port, mark, src=None):
        """A datagram refused by the rules: ICMP admin-prohibited at once (EHOSTUNREACH for
        IPv4, EACCES for IPv6 on a connected socket), and it never reached the internet."""
        r = peer(NS_SBX, *(["--src", src] if src else []), "udp", host, port, mark)
        self.assertEqual(r["result"], "error", (host, port, r))
        self.assertIn(r.get("errno"), ("EHOSTUNREACH", "EACCES"), (host, port, r))
        self.assertLess(r["seconds"], 0.9, (host, port, r))
        if host in (NET4, NET6):
            time.sleep(0.2)
            self.assertNotIn(mark, self.udp_sources(), (host, port))

    def http_via_cordon(self, max_time="3"):
        return sh("curl", "-q", "-sS", "--max-time", max_time, "-x",
                  f"http://{self.auth}@{RTR4_S}:3128", f"http://{NET4}:8080/hello",
                  ns=NS_SBX, check=False)

    def udp_sources(self):
        try:
            with open(self.udp_log) as f:
                return f.read()
        except OSError:
            return ""

    def spoofed_arrives(self, mark):
        peer(NS_SBX, "spoof", "198.51.100.7", NET4, "7001", mark)
        return H.wait_until(lambda: mark in self.udp_sources(), 1.5)

    # the test -----------------------------------------------------------------------
    # One method, in order: control, rules, kill, revive (each step needs the one before).

    def test_sandbox_reaches_only_cordon(self):
        # Control: without rules the router forwards everything (once the fresh links have
        # settled: the first IPv6 neighbour discovery across the router can take seconds).
        for host in (NET4, NET6):
            self.assertTrue(H.wait_until(
                lambda: peer(NS_SBX, "tcp", host, "7000")["result"] == "ok", 15), host)
            for port in ("7001", "443"):  # UDP echo, and QUIC's port: both answer
                mark = f"before-{port}-{host}"
                self.assertEqual(peer(NS_SBX, "udp", host, port, mark)["result"], "ok",
                                 (host, port))
                self.assertIn(mark, self.udp_sources())
        self.assertEqual(peer(NS_SBX, "open", RTR4_S, "9090")["result"], "ok")  # admin
        self.assertTrue(self.spoofed_arrives("spoof-before"))

        listed = self.firewall()
        self.assertNotIn("9090", listed)

        self.assertIn("warning: --sandbox-cidr without --sandbox-iface", self.fw_stderr)

        # Direct: refused at once, TCP with a reset and UDP (QUIC's 443 too) with ICMP, on
        # both families; the same probes answered above, so the rules are what stops them.
        for host in (NET4, NET6):
            r = peer(NS_SBX, "tcp", host, "7000")
            self.assertEqual(r["result"], "refused", (host, r))
            self.assertLess(r["seconds"], 1.0)
            for port in ("7001", "443"):
                self.udp_refused(host, port, f"after-{port}-{host}")
        self.assertEqual(peer(NS_SBX, "open", RTR4_S, "9090")["result"], "refused")
        self.assertFalse(self.spoofed_arrives("spoof-after"), "a forged source got through")

        # Through cordon: HTTP forwarding, CONNECT, DNS over UDP.
        r = self.http_via_cordon()
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(r.stdout, b"hello from the internet\n")
        r = peer(NS_SBX, "connect", RTR4_S, "3128", self.auth, f"{NET4}:7000")
        self.assertEqual(r["result"], "ok", r)
        r = peer(NS_SBX, "dns", RTR4_S, "53", "not-allowed.example")
        self.assertEqual(r["result"], "ok", r)
        self.assertEqual(r["rcode"], 5)  # REFUSED: an answer, from cordon's resolver

        # Kill: nothing from the sandbox passes, cordon included; cordon itself is fine.
        listed = self.firewall("--kill")
        self.assertRegex(listed, r"chain refuse \{\s*drop\s*\}")
        self.assertNotIn("reject", listed)
        self.assertNotEqual(self.http_via_cordon(max_time="2").returncode, 0)
        r = peer(NS_SBX, "connect", RTR4_S, "3128", self.auth, f"{NET4}:7000")
        self.assertIn(r["result"], ("timeout", "error"), r)
        self.assertEqual(peer(NS_SBX, "dns", RTR4_S, "53", "x.example")["result"], "timeout")
        self.assertEqual(peer(NS_SBX, "tcp", NET4, "7000")["result"], "timeout")
        self.assertEqual(peer(NS_SBX, "udp", NET4, "443", "kill-443")["result"], "timeout")
        self.assertNotIn("kill-443", self.udp_sources())
        self.assertIsNone(self.cordon.poll(), "cordon died:\n" + self._cordon_stderr())

        # Revive: the same command without --kill.
        self.firewall()
        r = self.http_via_cordon()
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(peer(NS_SBX, "tcp", NET4, "7000")["result"], "refused")

    def probe(self, src, *args):
        return peer(NS_SBX, "--src", src, *args)["result"]

    def neighbour_discovery_works(self):
        """IPv6 across the sandbox link after both ends forget each other: the router's
        reset arrives at once only if neighbour solicitations and advertisements pass. And a
        solicitation from the sandbox's link-local address (as the kernel sends its
        reachability probes) is answered: not caught by the drop of unlisted sources."""
        sh("ip", "-6", "neigh", "flush", "dev", "s0", ns=NS_SBX)
        sh("ip", "-6", "neigh", "flush", "dev", "r1", ns=NS_RTR)
        r = peer(NS_SBX, "tcp", RTR6_S, "7000")  # a router service: refused by the rules
        self.assertEqual(r["result"], "refused", r)
        self.assertLess(r["seconds"], 1.5, r)
        self.assertEqual(self.probe(SBX_LL, "nd", "s0", RTR6_S), "ok")

    def cordon_works(self, src=SBX4):
        r = peer(NS_SBX, "--src", src, "connect", RTR4_S, "3128", self.auth, f"{NET4}:7000")
        self.assertEqual(r["result"], "ok", (src, r))
        r = peer(NS_SBX, "--src", src, "dns", RTR4_S, "53", "not-allowed.example")
        self.assertEqual((r["result"], r.get("rcode")), ("ok", 5), (src, r))

    def test_unlisted_sources_and_sandbox_iface(self):
        # Control, no rules: both unlisted sources reach the internet / the router's services.
        self.assertTrue(H.wait_until(
            lambda: self.probe(SBX4_X, "tcp", NET4, "7000") == "ok", 15))
        self.assertTrue(H.wait_until(
            lambda: self.probe(SBX_LL, "tcp", RTR_LL, "7000") == "ok", 15))
        self.assertEqual(self.probe(SBX4_X, "udp", NET4, "443", "x-before"), "ok")
        self.assertEqual(self.probe(SBX_LL, "udp", RTR_LL, "7001", "ll-before"), "ok")
        self.assertEqual(self.probe(SBX_LL, "nd", "s0", RTR6_S), "ok")

        # --sandbox-cidr only (the old behaviour, kept): the listed source is refused but the
        # unlisted ones are not matched at all. This is the hole, and the warning says so.
        self.firewall()
        self.assertIn("link-local (fe80::/10)", self.fw_stderr)
        self.assertEqual(self.probe(SBX4, "tcp", NET4, "7000"), "refused")
        self.assertEqual(self.probe(SBX4_X, "tcp", NET4, "7000"), "ok")      # forwarded
        self.assertEqual(self.probe(SBX4_X, "tcp", RTR4_X, "7000"), "ok")    # host service
        self.assertEqual(self.probe(SBX_LL, "tcp", RTR_LL, "7000"), "ok")    # host service
        self.assertEqual(self.probe(SBX_LL, "udp", RTR_LL, "7001", "ll-cidr"), "ok")

        # --sandbox-iface r1 alone: everything arriving on r1 is a sandbox's, any source.
        listed = self.firewall("--sandbox-iface", "r1", cidrs=())
        self.assertIn('iifname "r1" jump sandbox_iface', listed)
        self.assertNotIn("warning", self.fw_stderr)
        for src, host in ((SBX4_X, NET4), (SBX4_X, RTR4_X), (SBX4, NET4)):
            r = peer(NS_SBX, "--src", src, "tcp", host, "7000")
            self.assertEqual(r["result"], "refused", (src, host, r))
            self.assertLess(r["seconds"], 1.0, (src, host, r))
        # Link-local: refused too. A TCP reset cannot be routed to a link-local address (no
        # interface in the kernel's lookup), so TCP from one is refused with ICMPv6 (sent
        # out of the incoming interface), which fails the connect with EACCES; without it,
        # the probe timed out (2 s). Over a veth pair the first SYN's ICMP arrives while
        # connect() still holds the socket (a soft error), so the SYN's first retransmission
        # (1 s) is the one that ends it; across a real link the first one does.
        r = peer(NS_SBX, "--src", SBX_LL, "tcp", RTR_LL, "7000")
        self.assertEqual((r["result"], r.get("errno")), ("error", "EACCES"), r)
        self.assertLess(r["seconds"], 1.6, r)
        self.udp_refused(RTR_LL, "7001", "ll-iface", src=SBX_LL)
        self.udp_refused(NET4, "443", "x-iface-443", src=SBX4_X)
        self.udp_refused(NET6, "443", "x-iface6-443")
        self.neighbour_discovery_works()
        self.cordon_works(SBX4)
        self.cordon_works(SBX4_X)  # any source on the interface may use cordon
        r = self.http_via_cordon()
        self.assertEqual(r.stdout, b"hello from the internet\n", r.stderr.decode())

        # --sandbox-iface r1 with the prefixes: a source outside them on r1 is dropped.
        self.firewall("--sandbox-iface", "r1")
        self.assertNotIn("warning", self.fw_stderr)
        self.assertEqual(self.probe(SBX4_X, "tcp", NET4, "7000"), "timeout")
        self.assertEqual(self.probe(SBX_LL, "tcp", RTR_LL, "7000"), "timeout")
        self.assertEqual(self.probe(SBX4_X, "dns", RTR4_S, "53", "x.example"), "timeout")
        self.assertEqual(self.probe(SBX4, "tcp", NET4, "7000"), "refused")
        self.neighbour_discovery_works()  # link-local solicitations pass before the drop
        self.cordon_works(SBX4)
        r = self.http_via_cordon()
        self.assertEqual(r.stdout, b"hello from the internet\n", r.stderr.decode())

        # Kill covers the interface: cordon unreachable from any source on it.
        self.firewall("--sandbox-iface", "r1", "--kill", cidrs=())
        self.assertEqual(self.probe(SBX4_X, "dns", RTR4_S, "53", "x.example"), "timeout")
        self.assertEqual(self.probe(SBX4, "dns", RTR4_S, "53", "x.example"), "timeout")
        self.assertEqual(self.probe(SBX_LL, "tcp", RTR_LL, "7000"), "timeout")
        self.assertEqual(self.probe(SBX_LL, "nd", "s0", RTR6_S), "timeout")  # ND too
        self.assertNotEqual(self.http_via_cordon(max_time="2").returncode, 0)
        self.assertIsNone(self.cordon.poll(), "cordon died:\n" + self._cordon_stderr())

        # Lifted: the same command without --kill.
        self.firewall("--sandbox-iface", "r1", cidrs=())
        self.cordon_works(SBX4_X)


@unittest.skipIf(SKIP, SKIP or "")
class FirewallSharedBridgeTest(unittest.TestCase):
    """The limit documented in docs/deploy.md, "cordon on the sandbox bridge", asserted as
    such: cordon (here the UDP echo standing for its DNS listener) and sandboxes A and B on
    one bridge br0 of the router, `--sandbox-iface br0`. Without br_netfilter the bridged
    frames never reach the rules (A reaches B directly). With it, A to B is refused, cordon
    answers B, and a datagram A forges with cordon's address and port as source is refused
    unless it matches B's live flow with cordon: then conntrack takes it for cordon's reply
    and it is delivered (the bridge is the input interface of both, so the reverse-path check
    passes, and no inet rule sees the bridge port)."""

    def test_forged_cordon_source_on_a_shared_bridge(self):
        tag = f"{TAG}b"
        nss = {k: f"{tag}-{k}" for k in ("r", "a", "b", "c")}
        ip = {"a": "10.232.0.4", "b": "10.232.0.2", "c": "10.232.0.3"}
        tmp = tempfile.mkdtemp(prefix="cordon-it-fw-")
        procs = []
        try:
            for ns in nss.values():
                sh("ip", "netns", "add", ns)
                sh("ip", "link", "set", "lo", "up", ns=ns)
            r = nss["r"]
            sh("ip", "link", "add", "br0", "type", "bridge", ns=r)
            sh("ip", "link", "set", "br0", "up", ns=r)
            sh("ip", "addr", "add", "10.232.0.1/24", "dev", "br0", ns=r)
            for k in ("a", "b", "c"):
                sh("ip", "link", "add", "e0", "netns", nss[k], "type", "veth", "peer", "name",
                   f"p{k}", "netns", r)
                sh("ip", "link", "set", f"p{k}", "master", "br0", ns=r)
                sh("ip", "link", "set", f"p{k}", "up", ns=r)
                sh("ip", "addr", "add", ip[k] + "/24", "dev", "e0", ns=nss[k])
                sh("ip", "link", "set", "e0", "up", ns=nss[k])
            if sh("sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=0", ns=r,
                  check=False).returncode != 0:
                self.skipTest("br_netfilter not available (modprobe br_netfilter)")
            policy = os.path.join(tmp, "p.yaml")
            with open(policy, "w") as f:
                f.write(f"listen: {{ proxy: {ip['c']}:3128, dns: {ip['c']}:7001 }}\njobs: {{}}\n")
            for k in ("b", "c"):
                d = os.path.join(tmp, k)
                os.makedirs(d)
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", nss[k], sys.executable, PEER, "servers", d],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.assertTrue(H.wait_until(lambda: all(
                os.path.exists(os.path.join(tmp, k, "ready")) for k in ("b", "c")), 15))
            r_fw = sh(H.CORDON_BIN, "firewall", "--policy", policy, "--sandbox-iface", "br0",
                      "--apply", ns=r, check=False)
            self.assertEqual(r_fw.returncode, 0, r_fw.stderr.decode())
            self.assertIn(f"ct direction reply ip saddr {ip['c']} udp sport 7001 accept",
                          sh("nft", "list", "table", "inet", "cordon", ns=r).stdout.decode())

            # No br_netfilter: bridged frames bypass the inet hooks; A reaches B directly.
            self.assertTrue(H.wait_until(
                lambda: peer(nss["a"], "udp", ip["b"], "7001", "nobrnf")["result"] == "ok", 10))

            sh("sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1", ns=r)
            r_ab = peer(nss["a"], "udp", ip["b"], "7001", "brnf")
            self.assertEqual((r_ab["result"], r_ab.get("errno")), ("error", "EHOSTUNREACH"),
                             r_ab)
            self.assertEqual(peer(nss["a"], "udp", ip["c"], "7001", "a-c")["result"], "ok")

            flow = subprocess.Popen(
                ["ip", "netns", "exec", nss["b"], sys.executable, PEER, "flow", ip["c"],
                 "7001", "5555", "5556", "2"], stdout=subprocess.PIPE)
            procs.append(flow)
            self.assertEqual(json.loads(flow.stdout.readline()), {"ready": True})
            for port, mark in (("5555", "forged-live-flow"), ("5556", "forged-no-flow")):
                peer(nss["a"], "spoof", ip["c"], ip["b"], port, mark, "7001")
            got = json.loads(flow.communicate(timeout=10)[0].decode().splitlines()[-1])["got"]
            texts = {g[3]: g for g in got}
            self.assertEqual(texts.get("flow-query"), [5555, ip["c"], 7001, "flow-query"])
            # The limit: accepted as cordon's reply. Not matching a flow: refused.
            self.assertEqual(texts.get("forged-live-flow"),
                             [5555, ip["c"], 7001, "forged-live-flow"], got)
            self.assertNotIn("forged-no-flow", texts, got)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(5)
            for ns in nss.values():
                subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL,
                               timeout=10)
            shutil.rmtree(tmp, ignore_errors=True)


@unittest.skipIf(SKIP, SKIP or "")
class FirewallApplyErrorsTest(unittest.TestCase):
    """--apply that cannot work leaves the running ruleset alone and says why."""

    def test_bad_cgroup_refused_by_nft_keeps_old_table(self):
        ns = f"{TAG}-err"
        tmp = tempfile.mkdtemp(prefix="cordon-it-fw-")
        try:
            sh("ip", "netns", "add", ns)
            policy = os.path.join(tmp, "p.yaml")
            with open(policy, "w") as f:
                f.write("listen: { proxy: 10.9.0.1:3128 }\njobs: {}\n")
            sh("nft", "add", "table", "inet", "cordon", ns=ns)
            sh("nft", "add", "chain", "inet", "cordon", "marker", ns=ns)
            r = sh(H.CORDON_BIN, "firewall", "--policy", policy, "--cgroup",
                   "cordon-test-no-such-cgroup/x", "--apply", ns=ns, check=False)
            self.assertEqual(r.returncode, 1)
            self.assertIn("previous ruleset", r.stderr.decode())
            listed = sh("nft", "list", "table", "inet", "cordon", ns=ns).stdout.decode()
            self.assertIn("marker", listed)  # the failed transaction changed nothing
        finally:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL, timeout=10)
            shutil.rmtree(tmp, ignore_errors=True)

    def test_iface_holding_a_default_route_refused(self):
        # Naming the uplink (or a wildcard that matches it) would make the administrators'
        # own traffic a sandbox's: --apply refuses and leaves the running table alone.
        ns = f"{TAG}-up"
        tmp = tempfile.mkdtemp(prefix="cordon-it-fw-")
        try:
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", "uplink4", "type", "veth", "peer", "name", "p4", ns=ns)
            sh("ip", "link", "add", "uplink6", "type", "veth", "peer", "name", "p6", ns=ns)
            for dev in ("uplink4", "p4", "uplink6", "p6"):
                sh("ip", "link", "set", dev, "up", ns=ns)
            sh("ip", "addr", "add", "192.0.2.1/24", "dev", "uplink4", ns=ns)
            sh("ip", "route", "add", "default", "via", "192.0.2.254", ns=ns)
            sh("ip", "-6", "addr", "add", "2001:db8:9::1/64", "dev", "uplink6", "nodad", ns=ns)
            sh("ip", "-6", "route", "add", "default", "via", "2001:db8:9::fe", "dev",
               "uplink6", ns=ns)
            policy = os.path.join(tmp, "p.yaml")
            with open(policy, "w") as f:
                f.write("listen: { proxy: 10.9.0.1:3128 }\njobs: {}\n")
            sh("nft", "add", "table", "inet", "cordon", ns=ns)
            sh("nft", "add", "chain", "inet", "cordon", "marker", ns=ns)
            for name in ("uplink4", "uplink6", "upl*"):
                r = sh(H.CORDON_BIN, "firewall", "--policy", policy, "--sandbox-iface", name,
                       "--apply", ns=ns, check=False)
                self.assertEqual(r.returncode, 1, name)
                self.assertIn("default route", r.stderr.decode(), name)
                listed = sh("nft", "list", "table", "inet", "cordon", ns=ns).stdout.decode()
                self.assertIn("marker", listed, name)
            r = sh(H.CORDON_BIN, "firewall", "--policy", policy, "--sandbox-iface", "p4",
                   "--apply", ns=ns, check=False)
            self.assertEqual(r.returncode, 0, r.stderr.decode())
            listed = sh("nft", "list", "table", "inet", "cordon", ns=ns).stdout.decode()
            self.assertIn('iifname "p4" jump sandbox_iface', listed)
        finally:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL, timeout=10)
            shutil.rmtree(tmp, ignore_errors=True)


class FirewallCliTest(unittest.TestCase):
    """Usage errors, no root needed."""

    def run_fw(self, *args):
        return subprocess.run([H.CORDON_BIN, "firewall", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=20)

    def test_usage_errors(self):
        r = self.run_fw("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"--sandbox-cidr", r.stdout)
        self.assertEqual(self.run_fw().returncode, 2)
        tmp = tempfile.mkdtemp(prefix="cordon-it-fw-")
        try:
            policy = os.path.join(tmp, "p.yaml")
            with open(policy, "w") as f:
                f.write("listen: { proxy: 127.0.0.1:3128 }\njobs: {}\n")
            for bad in (["--sandbox-cidr", "10.0.0.1/8"], ["--sandbox-cidr", "0.0.0.0/0"],
                        ["--cgroup", "../x"], ["--sandbox-cidr"], ["--sandbox-iface"],
                        ["--sandbox-iface", "a/b"], ["--sandbox-iface", "*"],
                        ["--sandbox-iface", "lo"], ["--sandbox-iface", "x" * 16],
                        ["--sandbox-iface", "eth0", "--sandbox-iface", "eth0"]):
                r = self.run_fw("--policy", policy, *bad)
                self.assertEqual(r.returncode, 2, bad)
                self.assertTrue(r.stderr.startswith(b"cordon firewall: "), r.stderr)
            r = self.run_fw("--policy", policy, "--sandbox-cidr", "10.0.0.0/8")
            self.assertEqual(r.returncode, 1)
            self.assertIn(b"loopback", r.stderr)
            self.assertEqual(r.stdout, b"")
            r = self.run_fw("--policy", policy, "--sandbox-iface", "veth*")
            self.assertEqual(r.returncode, 1)
            self.assertIn(b"--sandbox-iface interfaces cannot reach", r.stderr)
            routed = os.path.join(tmp, "routed.yaml")
            with open(routed, "w") as f:
                f.write("listen: { proxy: 10.9.0.1:3128 }\njobs: {}\n")
            r = self.run_fw("--policy", routed, "--sandbox-cidr", "10.9.0.0/24")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(b"cordon firewall: warning: --sandbox-cidr without --sandbox-iface",
                          r.stderr)
            r = self.run_fw("--policy", routed, "--sandbox-cidr", "10.9.0.0/24",
                            "--sandbox-iface", "veth*")
            self.assertEqual((r.returncode, r.stderr), (0, b""))
            self.assertIn(b'iifname "veth*" jump sandbox_iface', r.stdout)
            r = self.run_fw("--policy", policy, "--cgroup", "a/b")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(b'socket cgroupv2 level 2 "a/b"', r.stdout)
            # nft binds the cgroup's inode: a recreated cgroup is not matched; said so.
            self.assertIn(b"cordon firewall: warning: --cgroup a/b: nft binds the cgroup's "
                          b"inode", r.stderr)
            self.assertIn(b"inode", self.run_fw("--help").stdout)
            r = self.run_fw("--policy", os.path.join(tmp, "missing.yaml"), "--cgroup", "a")
            self.assertEqual(r.returncode, 1)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@unittest.skipIf(SKIP, SKIP or "")
class FirewallWithoutNetbaseTest(unittest.TestCase):
    """nft looks up a protocol name that is not one of its keywords (ipv6-icmp) in
    /etc/protocols, and fails without it; nftables only recommends netbase, so minimal roots
    and containers lack the file (issue 19). Every ruleset cordon prints loads (`nft -c`, in a
    network namespace of its own) with /etc/protocols hidden."""

    def test_rulesets_load_without_etc_protocols(self):
        tmp = tempfile.mkdtemp(prefix="cordon-it-fw-")
        try:
            policy = os.path.join(tmp, "p.yaml")
            with open(policy, "w") as f:
                f.write("listen: { proxy: 10.9.0.1:3128, dns: 10.9.0.1:53 }\njobs: {}\n")
            variants = {
                "cidr": ["--sandbox-cidr", "10.9.0.0/24", "--sandbox-cidr", "fd00:9::/64"],
                "iface": ["--sandbox-iface", "veth*"],
                "both": ["--sandbox-cidr", "10.9.0.0/24", "--sandbox-iface", "veth*"],
            }
            variants["kill"] = variants["both"] + ["--kill"]
            for name, args in variants.items():
                r = subprocess.run([H.CORDON_BIN, "firewall", "--policy", policy, *args],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
                self.assertEqual(r.returncode, 0, r.stderr)
                rules = os.path.join(tmp, name + ".nft")
                with open(rules, "wb") as f:
                    f.write(r.stdout)
                hide = ("[ ! -e /etc/protocols ] || mount --bind /dev/null /etc/protocols; "
                        "getent protocols ipv6-icmp && exit 99; exec nft -c -f \"$0\"")
                r = subprocess.run(["unshare", "--mount", "--net", "--propagation", "private",
                                    "sh", "-c", hide, rules], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=20)
                self.assertEqual(r.returncode, 0, f"{name}: {r.stderr.decode()}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
