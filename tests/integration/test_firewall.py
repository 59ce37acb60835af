"""`cordon firewall` in network namespaces made by the test (issue 9). Root only.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_firewall   (from tests/integration)

Three namespaces, nothing in the host's own:

    sandbox 10.231.1.2, fd00:231:1::2 ──veth── router 10.231.1.1, fd00:231:1::1 (forwards;
                                                cordon listens here; the rules go here)
                                                      │ veth
                                      internet 203.0.113.2, 2001:db8:231::2 (TCP echo :7000,
                                                UDP echo :7001, HTTP :8080)

Before the rules, the sandbox reaches the internet directly (the control). With
`cordon firewall --sandbox-cidr ... --apply` in the router: direct TCP (reset at once) and
UDP to the internet fail, IPv4 and IPv6; the admin listener, on the same address, is refused;
a datagram with a forged source is dropped; HTTP and CONNECT through cordon work, and its
DNS answers over UDP. After `--kill --apply`, cordon itself is unreachable; applying again
without --kill restores it. Namespaces (and with them the nft table) are always removed.
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
    sh("ip", "route", "add", "default", "via", RTR4_S, ns=NS_SBX)
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
        ready = os.path.join(t, "ready.json")
        cls.cordon_err = open(os.path.join(t, "cordon.stderr"), "wb")
        cls.procs.append(subprocess.Popen(
            ["ip", "netns", "exec", NS_RTR, H.CORDON_BIN, "serve", "--config", cls.policy,
             "--ready-file", ready, "--threads", "2"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=cls.cordon_err))
        if not H.wait_until(lambda: os.path.exists(os.path.join(srv_dir, "ready")) and
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

    def firewall(self, *extra):
        argv = [H.CORDON_BIN, "firewall", "--policy", self.policy]
        for c in SANDBOX_CIDRS:
            argv += ["--sandbox-cidr", c]
        r = sh(*argv, *extra, "--apply", ns=NS_RTR, check=False)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        listed = sh("nft", "list", "table", "inet", "cordon", ns=NS_RTR).stdout.decode()
        self.assertIn("sandbox_to_cordon", listed)
        return listed

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
            self.assertEqual(peer(NS_SBX, "udp", host, "7001")["result"], "ok", host)
        self.assertEqual(peer(NS_SBX, "open", RTR4_S, "9090")["result"], "ok")  # admin
        self.assertTrue(self.spoofed_arrives("spoof-before"))

        listed = self.firewall()
        self.assertNotIn("9090", listed)

        # Direct: refused at once (TCP reset), or no answer (UDP), on both families.
        for host in (NET4, NET6):
            r = peer(NS_SBX, "tcp", host, "7000")
            self.assertEqual(r["result"], "refused", (host, r))
            self.assertLess(r["seconds"], 1.0)
            r = peer(NS_SBX, "udp", host, "7001")
            self.assertNotEqual(r["result"], "ok", (host, r))
            r = peer(NS_SBX, "udp", host, "443")  # QUIC's port: UDP like any other
            self.assertNotEqual(r["result"], "ok", (host, r))
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
        self.assertIn("drop", listed)
        self.assertNotEqual(self.http_via_cordon(max_time="2").returncode, 0)
        r = peer(NS_SBX, "connect", RTR4_S, "3128", self.auth, f"{NET4}:7000")
        self.assertIn(r["result"], ("timeout", "error"), r)
        self.assertEqual(peer(NS_SBX, "dns", RTR4_S, "53", "x.example")["result"], "timeout")
        self.assertEqual(peer(NS_SBX, "tcp", NET4, "7000")["result"], "timeout")
        self.assertIsNone(self.procs[1].poll(), "cordon died")

        # Revive: the same command without --kill.
        self.firewall()
        r = self.http_via_cordon()
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(peer(NS_SBX, "tcp", NET4, "7000")["result"], "refused")


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
                        ["--cgroup", "../x"], ["--sandbox-cidr"]):
                r = self.run_fw("--policy", policy, *bad)
                self.assertEqual(r.returncode, 2, bad)
                self.assertTrue(r.stderr.startswith(b"cordon firewall: "), r.stderr)
            r = self.run_fw("--policy", policy, "--sandbox-cidr", "10.0.0.0/8")
            self.assertEqual(r.returncode, 1)
            self.assertIn(b"loopback", r.stderr)
            self.assertEqual(r.stdout, b"")
            r = self.run_fw("--policy", policy, "--cgroup", "a/b")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(b'socket cgroupv2 level 2 "a/b"', r.stdout)
            r = self.run_fw("--policy", os.path.join(tmp, "missing.yaml"), "--cgroup", "a")
            self.assertEqual(r.returncode, 1)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
