"""Integration tests of `cordon policy suggest` and `cordon policy replay` (issue 10,
"Learning an allowlist"): on a recorded audit fixture with known answers
(tests/fixtures/policy_learn/), and on the audit of real traffic through a real
`cordon serve`. The suggested section must pass `cordon check-config` inside a job card, and
replaying it against the audit it was learned from must deny nothing newly. MCP servers
(issue 22): `mcp: {tools: [...]}` learned from the tool calls cordon decided, and replayed.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_policy_learn   (from tests/integration)
"""

import http.client
import json
import os
import subprocess
import unittest

import harness as H
import mcp_server as M

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "fixtures", "policy_learn")
AUDIT = os.path.join(FIXTURE, "audit")


def cordon(*args, timeout=60):
    return subprocess.run([H.CORDON_BIN] + list(args), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def card(tmp, job, section, audit_dir, mode=None):
    """A policy file with one job card whose egress is `section` (the suggest output)."""
    text = ("listen: { proxy: 127.0.0.1:3128 }\n"
            f"audit: {{ path: {audit_dir} }}\n"
            "jobs:\n"
            f"  {job}:\n"
            "    task: learned from the audit log\n")
    if mode:
        text += f"    mode: {mode}\n"
    text += "".join("    " + ln + "\n" for ln in section.splitlines())
    path = tmp.join(f"{job}-{len(os.listdir(tmp.path))}.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def rules(section):
    return [ln.strip() for ln in section.splitlines() if ln.startswith("  - {")]


def localhost_resolves_to():
    """The resolves_to that suggest learns for localhost here: a /32 or /128 for each
    address /etc/hosts gives it, as cordon's resolver reads it (Debian: 127.0.0.1 and ::1),
    in suggest's order."""
    addrs = set()
    try:
        with open("/etc/hosts") as f:
            for line in f:
                fields = line.split("#", 1)[0].split()
                if len(fields) > 1 and "localhost" in (n.lower() for n in fields[1:]):
                    addrs.add(fields[0])
    except OSError:
        pass
    cidrs = sorted(f"{a}/{128 if ':' in a else 32}" for a in (addrs or {"127.0.0.1"}))
    return "[" + ", ".join(f'"{c}"' for c in cidrs) + "]"


class FixtureTest(unittest.TestCase):
    """The recorded fixture: a report-mode job `research` (allowed, would-deny and denied
    requests, DNS), another job's traffic, and lines naming the job only inside values."""

    def setUp(self):
        self.tmp = H.TempDir("cordon-it-learn-")
        self.addCleanup(self.tmp.cleanup)

    def test_suggest_known_answer(self):
        p = cordon("policy", "suggest", "--job", "research", "--audit", AUDIT)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(FIXTURE, "expected.yaml")) as f:
            self.assertEqual(p.stdout, f.read())
        self.assertEqual(rules(p.stdout), [
            # each bucket and site is its own registrable domain: never a wildcard
            '- { host: bucket1.s3.amazonaws.com, ports: [443] }',
            '- { host: bucket2.s3.amazonaws.com, ports: [443] }',
            '- { host: bucket3.s3.amazonaws.com, ports: [443] }',
            '- { host: bucket4.s3.amazonaws.com, ports: [443] }',
            '- { host: "*.cdn.example.com", ports: [443] }',  # 4 names > 3
            '- { host: api.github.com, ports: [443, 8443] }',
            '- { host: user1.github.io, ports: [443] }',
            '- { host: user2.github.io, ports: [443] }',
            '- { host: user3.github.io, ports: [443] }',
            '- { host: user4.github.io, ports: [443] }',
            '- { host: x.static.example.net, ports: [443] }',  # 2 names: exact
            '- { host: y.static.example.net, ports: [443] }',
            '- { host: docs.example.org, ports: [80], protocol: http, methods: [GET, HEAD] }',
            '- { host: pypi.org, ports: [443] }',
            '- { host: files.pythonhosted.org, ports: [443] }',
            '- { cidr: 1.1.1.1/32, ports: [853], protocol: tcp }',
        ])
        # left out, with the reasons; the other job's target nowhere
        self.assertIn("#   intranet.example.com:443, 2 requests (2 denied): resolved to a "
                      "non-public address", p.stdout)
        self.assertIn("#   10.1.2.3:5432, 1 request (1 denied): a non-public address",
                      p.stdout)
        self.assertIn("kill_switch 1", p.stdout)
        self.assertIn("#   telemetry.example.io: 3 queries (2 denied)", p.stdout)
        self.assertNotIn("evil.example", p.stdout.replace("evil.example.com", ""))
        self.assertNotIn("fake.example", p.stdout)

    def test_suggest_json_and_siblings(self):
        p = cordon("policy", "suggest", "--job", "research", "--audit", AUDIT,
                   "--format", "json", "--siblings", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        hosts = [r.get("host") or r.get("cidr") for r in doc["egress"]]
        # more than one name under static.example.net now collapses; github.io and the
        # s3.amazonaws.com buckets never do (public suffixes)
        self.assertIn("*.static.example.net", hosts)
        self.assertIn("user1.github.io", hosts)
        self.assertNotIn("*.github.io", hosts)
        self.assertNotIn("*.s3.amazonaws.com", hosts)
        self.assertNotIn("*.amazonaws.com", hosts)
        cdn = doc["egress"][hosts.index("*.cdn.example.com")]
        self.assertEqual(cdn["seen"]["would_deny"], 5)
        self.assertEqual(cdn["seen"]["names"]["a.cdn.example.com"], 2)
        self.assertEqual(doc["requests"], {"requests": 30, "allowed": 3, "would_deny": 24,
                                           "denied": 3})
        self.assertEqual(doc["sessions"], 2)

    def test_suggested_section_checks_and_replays_clean(self):
        p = cordon("policy", "suggest", "--job", "research", "--audit", AUDIT)
        self.assertEqual(p.returncode, 0, p.stderr)
        policy = card(self.tmp, "research", p.stdout, AUDIT)
        c = cordon("check-config", policy)
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
        r = cordon("policy", "replay", "--config", policy, "--job", "research", "--format",
                   "json")
        self.assertEqual(r.returncode, 4, r.stderr)  # newly allowed only
        doc = json.loads(r.stdout)
        self.assertEqual(doc["newly_denied"], [])
        self.assertEqual(sum(x["requests"] for x in doc["newly_allowed"]), 24)
        self.assertEqual(doc["unchanged"], {"allowed": {"requests": 3, "targets": 1},
                                            "denied": {"requests": 3, "targets": 2}})

    def test_replay_reports_what_a_tighter_policy_breaks(self):
        tight = ("egress:\n"
                 "  - { host: api.github.com, ports: [8443] }\n"
                 "  - { host: pypi.org, ports: [443] }\n"
                 "  - { host: docs.example.org, ports: [80], protocol: http, methods: [HEAD] }\n")
        policy = card(self.tmp, "research", tight, AUDIT)
        r = cordon("policy", "replay", "--config", policy, "--job", "research")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("newly denied: 1 target, 3 requests", r.stdout)
        self.assertIn("CONNECT api.github.com:443", r.stdout)
        self.assertIn("denied port", r.stdout)
        self.assertIn("newly allowed: 3 targets, 4 requests", r.stdout)
        self.assertIn("HEAD http docs.example.org:80", r.stdout)
        self.assertIn("allowed by api.github.com:8443/tls", r.stdout)
        # the same, within a window that holds no api.github.com:443 request
        r = cordon("policy", "replay", "--config", policy, "--job", "research",
                   "--since", "2026-11-29T09:00:20Z", "--until", "2026-11-29T09:00:59Z")
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        # and the policy as it was recorded: no change at all
        same = ("egress:\n  - { host: api.github.com, ports: [443] }\n")
        r = cordon("policy", "replay", "--config", card(self.tmp, "research", same, AUDIT),
                   "--job", "research")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_errors(self):
        r = cordon("policy", "suggest", "--job", "research", "--audit", AUDIT,
                   "--public-suffix-list", self.tmp.join("missing.dat"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("public suffix list", r.stderr)
        self.assertIn("--public-suffix-list", r.stderr)
        r = cordon("policy", "suggest", "--audit", AUDIT)
        self.assertEqual(r.returncode, 2)
        r = cordon("policy", "suggest", "--job", "nobody", "--audit", AUDIT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no traffic of job nobody", r.stderr)
        self.assertIn("egress: []", r.stdout)
        r = cordon("policy", "replay", "--job", "research", "--audit", AUDIT)
        self.assertEqual(r.returncode, 2)
        policy = card(self.tmp, "other", "egress: []", AUDIT)
        r = cordon("policy", "replay", "--config", policy, "--job", "research")
        self.assertEqual(r.returncode, 1)
        self.assertIn("not in", r.stderr)
        # Nothing recorded (a wrong --audit): an error, never "no change" for a CI gate.
        policy = card(self.tmp, "research", "egress: []", AUDIT)
        empty = self.tmp.join("empty-audit")
        os.mkdir(empty)
        r = cordon("policy", "replay", "--config", policy, "--job", "research", "--audit", empty)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("no requests of job research", r.stderr)
        for verb in ("suggest", "replay"):
            h = cordon("policy", verb, "--help")
            self.assertEqual(h.returncode, 0)
            self.assertIn("Exit status", h.stdout)


class LiveTrafficTest(unittest.TestCase):
    """Real requests through a real `cordon serve` (enforce mode: report mode needs a
    public upstream to show would-deny connections, and these tests stay on loopback), then
    suggest and replay on the audit log it wrote."""

    def setUp(self):
        self.http = H.HTTPOrigin()
        self.addCleanup(self.http.stop)
        self.dns = H.FakeDNS({})
        self.addCleanup(self.dns.stop)
        self.tmp = H.TempDir("cordon-it-learn-")
        self.addCleanup(self.tmp.cleanup)
        jobs = ("  agent:\n"
                "    task: learn my allowlist\n"
                "    egress:\n"
                f"      - {{ host: localhost, ports: [{self.http.port}], protocol: http, "
                "methods: [GET], resolves_to: [127.0.0.0/8, \"::1/128\"] }\n")
        self.c = H.Cordon(jobs, self.dns.port)
        self.addCleanup(self.c.cleanup)
        self.c.start()

    def test_learn_from_real_traffic(self):
        s = self.c.create_session("agent")
        proxy = self.c.proxy_url(s)
        base = f"http://localhost:{self.http.port}/"
        for _ in range(2):
            r = H.run_curl(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-x", proxy, base])
            self.assertEqual(r.stdout, b"200")
        r = H.run_curl(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-x", proxy,
                        "-X", "POST", "-d", "x", base])
        self.assertEqual(r.stdout, b"403")  # method
        for name in ("a", "b", "c", "d"):  # no rule: denied before any lookup
            conn, resp = self.c.tunnel(s, f"{name}.cdn.example.com:443")
            conn.close()
            self.assertEqual(resp.status, 403)
        conn, resp = self.c.tunnel(s, "8.8.8.8:853")
        conn.close()
        self.assertEqual(resp.status, 403)
        conn, resp = self.c.tunnel(s, "10.1.2.3:5432")
        conn.close()
        self.assertEqual(resp.status, 403)
        self.assertTrue(self.c.wait_events(lambda e: e["event"] == "conn.deny", count=7),
                        "the denials reached the audit log")

        p = cordon("policy", "suggest", "--job", "agent", "--config", self.c.config_path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rules(p.stdout), [
            '- { host: "*.cdn.example.com", ports: [443] }',
            f'- {{ host: localhost, ports: [{self.http.port}], protocol: http, '
            f'methods: [GET, POST], resolves_to: {localhost_resolves_to()} }}',
            '- { cidr: 8.8.8.8/32, ports: [853], protocol: tcp }',
        ])
        self.assertIn("10.1.2.3:5432", p.stdout)  # left out, with why

        policy = card(self.tmp, "agent", p.stdout, self.c.audit_dir)
        c = cordon("check-config", policy)
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
        r = cordon("policy", "replay", "--config", policy, "--job", "agent", "--format", "json")
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["newly_denied"], [])
        self.assertEqual(sorted((x["target"], x["requests"]) for x in doc["newly_allowed"]), [
            ("8.8.8.8:853", 1), ("a.cdn.example.com:443", 1), ("b.cdn.example.com:443", 1),
            ("c.cdn.example.com:443", 1), ("d.cdn.example.com:443", 1),
            (f"localhost:{self.http.port}", 1)])
        self.assertEqual(doc["unchanged"]["allowed"]["requests"], 2)
        self.assertEqual(doc["unchanged"]["denied"]["requests"], 1)  # 10.1.2.3

        # The learned card, enforced (reloaded): the POST that was denied reaches the origin.
        with open(policy) as f:
            learned_jobs = f.read().split("jobs:\n", 1)[1]
        self.c.write_policy(learned_jobs)
        status, _ = self.c.admin("POST", "/v1/reload")
        self.assertEqual(status, 200)
        s = self.c.create_session("agent")
        r = H.run_curl(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-x",
                        self.c.proxy_url(s), "-X", "POST", "-d", "x", base])
        self.assertEqual(r.stdout, b"200")


class SeveralAddressesTest(unittest.TestCase):
    """Issue 19: a name with several addresses (Debian's localhost is 127.0.0.1 and ::1).
    serve checks every address the name resolves to and refuses them all when one is not
    covered; so suggest learns each of them, and replay of a card covering only the one
    connected to reports what serve then refuses. Here a name served with an A and an AAAA
    record, the origin on 127.0.0.1 only."""

    def setUp(self):
        self.http = H.HTTPOrigin()
        self.addCleanup(self.http.stop)
        self.dns = H.FakeDNS({"dual.test": {"A": ["127.0.0.1"], "AAAA": ["::1"]}})
        self.addCleanup(self.dns.stop)
        self.tmp = H.TempDir("cordon-it-learn-")
        self.addCleanup(self.tmp.cleanup)
        self.c = H.Cordon(self.jobs('[127.0.0.0/8, "::1/128"]'), self.dns.port)
        self.addCleanup(self.c.cleanup)
        self.c.start()

    def jobs(self, resolves_to):
        return ("  agent:\n"
                "    task: reach a dual-stack name\n"
                "    egress:\n"
                f"      - {{ host: dual.test, ports: [{self.http.port}], protocol: http, "
                f"methods: [GET], resolves_to: {resolves_to} }}\n")

    def get(self):
        s = self.c.create_session("agent")
        r = H.run_curl(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-x",
                        self.c.proxy_url(s), f"http://dual.test:{self.http.port}/"])
        return r.stdout

    def test_suggest_replay_and_serve_agree(self):
        self.assertEqual(self.get(), b"200")
        self.assertTrue(self.c.wait_events(lambda e: e["event"] == "conn.open", count=1))
        opened = [e for e in self.c.audit_events() if e["event"] == "conn.open"]
        self.assertEqual(sorted(opened[-1]["resolved"].split()), ["127.0.0.1", "::1"])

        p = cordon("policy", "suggest", "--job", "agent", "--config", self.c.config_path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rules(p.stdout), [
            f'- {{ host: dual.test, ports: [{self.http.port}], protocol: http, '
            'methods: [GET], resolves_to: ["127.0.0.1/32", "::1/128"] }'])
        learned = card(self.tmp, "agent", p.stdout, self.c.audit_dir)
        r = cordon("policy", "replay", "--config", learned, "--job", "agent", "--format",
                   "json")
        self.assertEqual(json.loads(r.stdout)["newly_denied"], [], r.stdout + r.stderr)

        # A card that covers only the address connected to: replay says newly denied...
        narrow = card(self.tmp, "agent",
                      f"egress:\n  - {{ host: dual.test, ports: [{self.http.port}], "
                      'protocol: http, methods: [GET], resolves_to: ["127.0.0.1/32"] }\n',
                      self.c.audit_dir)
        r = cordon("policy", "replay", "--config", narrow, "--job", "agent", "--format", "json")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual([(x["target"], x["reason"]) for x in doc["newly_denied"]],
                         [(f"dual.test:{self.http.port}", "private_address")])
        # ...and serve, enforcing it, refuses the request.
        self.c.write_policy(self.jobs('["127.0.0.1/32"]'))
        status, _ = self.c.admin("POST", "/v1/reload")
        self.assertEqual(status, 200)
        self.assertEqual(self.get(), b"403")
        # The learned card, enforced: allowed again.
        self.c.write_policy(self.jobs('["127.0.0.1/32", "::1/128"]'))
        status, _ = self.c.admin("POST", "/v1/reload")
        self.assertEqual(status, 200)
        self.assertEqual(self.get(), b"200")


class ReportModeTest(unittest.TestCase):
    """A report-mode job on loopback: its rules name the hosts with `resolves_to` (every
    origin here is 127.0.0.1), so report mode lets through an unlisted port or method of a
    listed host (would-deny) and refuses a host no rule names (private_address)."""

    def setUp(self):
        self.http = H.HTTPOrigin()
        self.addCleanup(self.http.stop)
        self.echo = H.EchoOrigin("echo")
        self.addCleanup(self.echo.stop)
        self.dns = H.FakeDNS({"listed.test": {"A": ["127.0.0.1"]},
                              "web.test": {"A": ["127.0.0.1"]},
                              "unlisted.test": {"A": ["127.0.0.1"]}})
        self.addCleanup(self.dns.stop)
        self.tmp = H.TempDir("cordon-it-learn-")
        self.addCleanup(self.tmp.cleanup)
        jobs = ("  learner:\n"
                "    task: learn my allowlist in report mode\n"
                "    mode: report\n"
                "    egress:\n"
                f"      - {{ host: listed.test, ports: [{self.echo.port}], protocol: tcp, "
                "resolves_to: [127.0.0.0/8] }\n"
                f"      - {{ host: web.test, ports: [{self.http.port}], protocol: http, "
                "methods: [GET], resolves_to: [127.0.0.0/8] }\n")
        self.c = H.Cordon(jobs, self.dns.port)
        self.addCleanup(self.c.cleanup)
        self.c.start()

    def test_learn_from_report_mode(self):
        s = self.c.create_session("learner")
        proxy = self.c.proxy_url(s)
        conn, resp = self.c.tunnel(s, f"listed.test:{self.echo.port}")
        conn.close()
        self.assertEqual(resp.status, 200, resp)
        # Another port of listed.test would resolve to loopback, which its rule opens on
        # echo.port only: report mode does not lend it (private_address, not learned).
        conn, resp = self.c.tunnel(s, f"listed.test:{self.http.port}")
        conn.close()
        self.assertEqual(resp.status, 403, resp)
        web = f"http://web.test:{self.http.port}/"
        r = H.run_curl(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-x", proxy, web])
        self.assertEqual(r.stdout, b"200")
        r = H.run_curl(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-x", proxy,
                        "-X", "POST", "-d", "x", web])
        self.assertEqual(r.stdout, b"200")  # would-deny method
        conn, resp = self.c.tunnel(s, "unlisted.test:443")
        conn.close()
        self.assertEqual(resp.status, 403)  # private_address: never relaxed
        self.assertTrue(self.c.wait_events(lambda e: e["event"] == "conn.deny", count=2))
        self.assertTrue(self.c.wait_events(lambda e: e["event"] == "conn.open", count=3))

        p = cordon("policy", "suggest", "--job", "learner", "--config", self.c.config_path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rules(p.stdout), [
            f'- {{ host: listed.test, ports: [{self.echo.port}], protocol: tcp, '
            'resolves_to: ["127.0.0.1/32"] }',
            f'- {{ host: web.test, ports: [{self.http.port}], protocol: http, '
            'methods: [GET, POST], resolves_to: ["127.0.0.1/32"] }',
        ])
        self.assertIn("#   unlisted.test:443, 1 request (1 denied): resolved to a non-public "
                      "address", p.stdout)
        self.assertIn("2 requests (1 allowed, 1 would-deny)", p.stdout)

        policy = card(self.tmp, "learner", p.stdout, self.c.audit_dir)
        c = cordon("check-config", policy)
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
        r = cordon("policy", "replay", "--config", policy, "--job", "learner", "--format",
                   "json")
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["newly_denied"], [])
        self.assertEqual(sorted((x["target"], x.get("method"), x["was_reason"])
                                for x in doc["newly_allowed"]),
                         [(f"web.test:{self.http.port}", "POST", "method")])
        self.assertEqual(doc["unchanged"]["allowed"]["requests"], 2)
        self.assertEqual(doc["unchanged"]["denied"]["requests"], 2)


def mcp_call(cordon, session, port, tool, arguments, id_):
    """One tools/call through cordon's proxy (plain HTTP, absolute form) on a connection of
    its own; returns (status, X-Cordon-Deny)."""
    host, proxy_port = cordon.proxy_addr
    conn = http.client.HTTPConnection(host, proxy_port, timeout=10)
    try:
        body = {"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}}
        conn.request("POST", f"http://mcp.test:{port}/mcp", body=json.dumps(body), headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Proxy-Authorization": H.basic(session["id"], session["token"])})
        r = conn.getresponse()
        r.read()
        return r.status, r.getheader("X-Cordon-Deny")
    finally:
        conn.close()


class McpTest(unittest.TestCase):
    """Tool calls to a real MCP server (mcp_server.py, plain HTTP) through a real `cordon
    serve`: allowed, refused (mcp_tool) and, for a report-mode job, would-deny. suggest puts
    every tool called on the server's rule (`mcp: { tools: [...] }`, the refused ones named
    in a comment); the card passes check-config; replay decides the calls again; enforced,
    the learned card lets the refused tools through."""

    def setUp(self):
        self.mcp = M.MCPServer()
        self.addCleanup(self.mcp.stop)
        self.dns = H.FakeDNS({"mcp.test": {"A": ["127.0.0.1"]}})
        self.addCleanup(self.dns.stop)
        self.tmp = H.TempDir("cordon-it-learn-")
        self.addCleanup(self.tmp.cleanup)
        self.c = H.Cordon(self.jobs("[search]"), self.dns.port)
        self.addCleanup(self.c.cleanup)
        self.c.start()

    def jobs(self, tools):
        rule = (f"      - {{ host: mcp.test, ports: [{self.mcp.port}], protocol: http, "
                f"resolves_to: [127.0.0.0/8], mcp: {{ tools: {tools} }} }}\n")
        return ("  tooler:\n"
                "    task: search through one MCP server\n"
                "    egress:\n" + rule +
                "  watcher:\n"
                "    task: the same, reported\n"
                "    mode: report\n"
                "    egress:\n" + rule)

    def call(self, session, tool, id_):
        return mcp_call(self.c, session, self.mcp.port, tool, {"q": "x"}, id_)

    def test_learn_and_replay_tools(self):
        s = self.c.create_session("tooler")
        self.assertEqual(self.call(s, "search", 1), (200, None))
        self.assertEqual(self.call(s, "search", 2), (200, None))
        self.assertEqual(self.call(s, "fetch_page", 3), (200, "mcp_tool"))
        self.assertEqual(self.call(s, "delete_repo", 4), (200, "mcp_tool"))
        w = self.c.create_session("watcher")
        self.assertEqual(self.call(w, "fetch_page", 5), (200, None))  # would-deny
        self.assertTrue(self.c.wait_events(lambda e: e["event"] == "tool.call"
                                           and e.get("via") == "mcp", count=5))
        self.assertTrue(self.c.wait_events(lambda e: e["event"] == "conn.close", count=3))
        port = self.mcp.port

        p = cordon("policy", "suggest", "--job", "tooler", "--config", self.c.config_path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rules(p.stdout), [
            f'- {{ host: mcp.test, ports: [{port}], protocol: http, methods: [POST], '
            'resolves_to: ["127.0.0.1/32"], mcp: { tools: [delete_repo, fetch_page, search] } }'])
        self.assertIn("and 4 tool calls (2 allowed, 2 denied)", p.stdout)
        self.assertIn("  # MCP tools called: delete_repo 1 (1 refused), fetch_page 1 (1 refused), "
                      "search 2\n", p.stdout)
        self.assertIn("  # refused by the rule's mcp.tools (mcp_tool), learned as denied requests "
                      "are: delete_repo, fetch_page\n", p.stdout)
        # the requests refused for their calls were allowed by the egress rule
        self.assertIn("  # 4 requests (4 allowed)\n", p.stdout)
        self.assertNotIn("Denied for reasons no rule changes", p.stdout)
        j = cordon("policy", "suggest", "--job", "tooler", "--config", self.c.config_path,
                   "--format", "json")
        doc = json.loads(j.stdout)
        self.assertEqual(doc["egress"][0]["mcp"], {"tools": ["delete_repo", "fetch_page",
                                                             "search"]})
        self.assertEqual(doc["egress"][0]["seen"]["tools"]["fetch_page"],
                         {"calls": 1, "allowed": 0, "would_deny": 0, "denied": 1, "changed": 0})
        self.assertEqual(doc["tool_calls"], {"requests": 4, "allowed": 2, "would_deny": 0,
                                             "denied": 2})

        learned = card(self.tmp, "tooler", p.stdout, self.c.audit_dir)
        c = cordon("check-config", learned)
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
        r = cordon("policy", "replay", "--config", learned, "--job", "tooler", "--format",
                   "json")
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)  # newly allowed only
        doc = json.loads(r.stdout)
        self.assertEqual(doc["newly_denied"], [])
        self.assertEqual(sorted((x["tool"], x["calls"], x["was_reason"], x["rule"])
                                for x in doc["newly_allowed"]),
                         [("delete_repo", 1, "mcp_tool", f"mcp.test:{port}/http"),
                          ("fetch_page", 1, "mcp_tool", f"mcp.test:{port}/http")])
        self.assertEqual(doc["tool_calls"], {"replayed": 4,
                                             "unchanged": {"allowed": 2, "denied": 0}})
        # The policy as it was recorded: no change. One without search: newly denied.
        r = cordon("policy", "replay", "--config", self.c.config_path, "--job", "tooler")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("and 4 tool calls", r.stdout)
        self.assertIn("tool calls: 2 allowed, 2 denied", r.stdout)
        tight = card(self.tmp, "tooler",
                     f"egress:\n  - {{ host: mcp.test, ports: [{port}], protocol: http, "
                     'resolves_to: ["127.0.0.1/32"], mcp: { tools: [] } }\n', self.c.audit_dir)
        r = cordon("policy", "replay", "--config", tight, "--job", "tooler")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("newly denied: 0 targets, 0 requests, 2 tool calls (1 tool)", r.stdout)
        self.assertIn(f"tools/call search (http mcp.test:{port})", r.stdout)
        self.assertIn("denied mcp_tool", r.stdout)

        # Report mode: the would-deny call is learned.
        p = cordon("policy", "suggest", "--job", "watcher", "--config", self.c.config_path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("mcp: { tools: [fetch_page] }", p.stdout)
        self.assertIn("# MCP tools called: fetch_page 1 (1 would-deny)", p.stdout)
        self.assertIn("and 1 tool call (1 would-deny)", p.stdout)

        # The learned card, enforced (reloaded): the refused tools reach the server.
        with open(learned) as f:
            learned_jobs = f.read().split("jobs:\n", 1)[1]
        self.c.write_policy(learned_jobs)
        status, _ = self.c.admin("POST", "/v1/reload")
        self.assertEqual(status, 200)
        s = self.c.create_session("tooler")
        self.assertEqual(self.call(s, "fetch_page", 6), (200, None))
        self.assertEqual(self.call(s, "delete_repo", 7), (200, None))
        self.assertEqual(self.call(s, "other_tool", 8), (200, "mcp_tool"))


if __name__ == "__main__":
    unittest.main()
