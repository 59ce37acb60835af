"""Integration tests of the Prometheus metrics, the denied-targets table (GET /v1/denials)
and `cordon status` (issue 6), against the real `cordon serve` on loopback.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_metrics   (from tests/integration)

Every assertion on a counter is on its change across one step (scrape before, act, scrape
after), so the steps do not depend on each other's counts. `promtool check metrics` (Debian's
prometheus package) lints a live scrape.
"""

import json
import re
import subprocess
import unittest
import urllib.parse

import harness as H

HTTP = ECHO = DNS = None
JOBS = ("web", "ci")
UNATTRIBUTED = "(none)"


def setUpModule():
    global HTTP, ECHO, DNS
    HTTP = H.HTTPOrigin()
    ECHO = H.CountingOrigin("echo")
    DNS = H.FakeDNS({"raw.test": {"A": ["127.0.0.1"]}, "denied.test": {"A": ["127.0.0.5"]}})


def tearDownModule():
    for o in (HTTP, ECHO, DNS):
        if o is not None:
            o.stop()


def jobs_yaml(extra_job=False):
    text = (
        "  web:\n"
        "    task: integration tests of the metrics\n"
        "    egress:\n"
        f"      - {{ host: raw.test, ports: [{ECHO.port}], protocol: tcp, "
        "resolves_to: [127.0.0.0/8] }\n"
        f"      - {{ host: localhost, ports: [{HTTP.port}], protocol: http, methods: [GET], "
        "resolves_to: [127.0.0.0/8, \"::1/128\"] }\n"
        "    identity: { ttl: 30m }\n"
        "  ci:\n"
        "    task: a job with no traffic, whose series exist at zero\n"
        "    egress:\n"
        "      - { host: ci.test, ports: [443] }\n")
    if extra_job:
        text += ("  late:\n"
                 "    task: added by a reload\n"
                 "    egress: []\n")
    return text


PROXY_OPTS = {"header_timeout": "5s", "idle_timeout": "60s", "handshake_timeout": "5s",
              "connect_timeout": "5s"}

# Every metric of DESIGN.md (and the webhook's denial bursts), with its type.
FAMILIES = {
    "cordon_connections_total": "counter",
    "cordon_denied_total": "counter",
    "cordon_active_tunnels": "gauge",
    "cordon_bytes_total": "counter",
    "cordon_dns_queries_total": "counter",
    "cordon_kill_switch_engaged": "gauge",
    "cordon_kills_total": "counter",
    "cordon_kill_duration_seconds": "histogram",
    "cordon_tokens_minted_total": "counter",
    "cordon_tokens_revoked_total": "counter",
    "cordon_sessions_active": "gauge",
    "cordon_upstream_connect_seconds": "histogram",
    "cordon_config_reloads_total": "counter",
    "cordon_audit_write_errors_total": "counter",
    "cordon_audit_dropped_total": "counter",
    "cordon_denial_bursts_total": "counter",
}
REASONS = ("no_rule", "port", "protocol", "method", "private_address", "bad_request",
           "unknown_job", "sni_mismatch", "kill_switch", "session_killed", "token_expired",
           "auth", "limit", "budget", "policy_changed", "token_revoked", "session_ended",
           "audit_unavailable", "http_rule", "upstream_tls", "credential_misuse",
           "credential_required", "secret_leak", "mcp_tool", "mcp_tool_changed", "no_session", "qtype", "other")


def L(**kw):
    return frozenset(kw.items())


def promtool_check(text):
    """(returncode, output) of `promtool check metrics` over `text`."""
    p = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    return p.returncode, p.stdout


def dig(addr, name):
    host, port = addr
    p = subprocess.run(["dig", "-r", f"@{host}", "-p", str(port), name, "A", "+tries=1",
                        "+time=2"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=15)
    m = re.findall(r"status: (\w+)", p.stdout)
    return m[-1] if m else None


class MetricsCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cordon = H.Cordon(jobs_yaml(), DNS.port, PROXY_OPTS, listen_dns="127.0.0.1:0",
                              dns_yaml="  default_job: web\n")
        try:
            cls.cordon.start()
        except BaseException:
            cls.cordon.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        rc, _ = cls.cordon.stop()
        err = cls.cordon.stderr_text()
        cls.cordon.cleanup()
        if rc != 0:
            raise AssertionError(f"cordon serve exited {rc} on SIGTERM; stderr:\n{err}")

    def scrape_text(self):
        status, headers, raw = self.cordon.admin_raw("GET", "/metrics")
        self.assertEqual(status, 200, raw[:500])
        self.assertTrue(headers.get("content-type", "").startswith("text/plain"), headers)
        return raw.decode()

    def scrape(self):
        return H.prometheus_samples(self.scrape_text())

    def assertDelta(self, before, after, name, labels, want, msg=""):
        got = after.get((name, labels), 0.0) - before.get((name, labels), 0.0)
        self.assertEqual(got, want, f"{name}{dict(labels)}: changed by {got}, want {want}. "
                                    f"{msg}")

    def wait_gauge(self, name, labels, want, timeout=5):
        ok = H.wait_until(lambda: self.scrape().get((name, labels)) == want, timeout)
        self.assertTrue(ok, f"{name}{dict(labels)} never became {want}: "
                            f"{self.scrape().get((name, labels))}")


class FreshScrapeTest(MetricsCase):
    """Before any traffic: every family, every job's label sets at zero, a clean lint."""

    def test_every_family_with_help_type_and_units(self):
        text = self.scrape_text()
        for name, kind in FAMILIES.items():
            self.assertRegex(text, rf"(?m)^# HELP {name} \S.*$", f"no HELP for {name}")
            self.assertRegex(text, rf"(?m)^# TYPE {name} {kind}$", f"{name} is not a {kind}")
        for name, kind in re.findall(r"(?m)^# TYPE (\S+) (\S+)$", text):
            if kind == "counter":
                self.assertTrue(name.endswith("_total"), f"counter {name} lacks _total")
            self.assertTrue(name.startswith("cordon_"), name)

    def test_job_label_sets_exist_at_zero(self):
        s = self.scrape()
        for job in JOBS + (UNATTRIBUTED,):
            for decision in ("allowed", "denied"):
                self.assertEqual(s.get(("cordon_connections_total",
                                        L(job=job, decision=decision))), 0.0, job)
                self.assertEqual(s.get(("cordon_dns_queries_total",
                                        L(job=job, decision=decision))), 0.0, job)
            for reason in REASONS:
                self.assertEqual(s.get(("cordon_denied_total", L(job=job, reason=reason))),
                                 0.0, (job, reason))
            for direction in ("up", "down"):
                self.assertEqual(s.get(("cordon_bytes_total",
                                        L(job=job, direction=direction))), 0.0, job)
            self.assertEqual(s.get(("cordon_active_tunnels", L(job=job))), 0.0, job)
            self.assertEqual(s.get(("cordon_denial_bursts_total", L(job=job))), 0.0, job)
        for result in ("ok", "error"):
            self.assertEqual(s.get(("cordon_config_reloads_total", L(result=result))), 0.0)
        self.assertEqual(s.get(("cordon_upstream_connect_seconds_count", L())), 0.0)
        self.assertEqual(s.get(("cordon_audit_write_errors_total", L())), 0.0)
        self.assertEqual(s.get(("cordon_sessions_active", L())), 0.0)

    def test_promtool_accepts_a_fresh_scrape(self):
        rc, out = promtool_check(self.scrape_text())
        self.assertEqual((rc, out.strip()), (0, ""), "promtool check metrics: " + out)

    def test_metrics_and_denials_need_the_admin_token(self):
        for path in ("/metrics", "/v1/denials"):
            status, _, _ = self.cordon.admin_raw("GET", path, token=None)
            self.assertEqual(status, 401, path)
            status, _, _ = self.cordon.admin_raw("GET", path, token="wrong")
            self.assertEqual(status, 401, path)

    def test_no_denials_yet(self):
        status, js = self.cordon.admin("GET", "/v1/denials")
        self.assertEqual(status, 200, js)
        self.assertEqual(js["jobs"], [])
        status, js = self.cordon.admin("GET", "/v1/denials?job=ci")
        self.assertEqual((status, js["jobs"]), (200, []))
        status, js = self.cordon.admin("GET", "/v1/denials?job=nope")
        self.assertEqual(status, 404, js)
        status, js = self.cordon.admin("GET", "/v1/denials?limit=0")
        self.assertEqual(status, 400, js)


class TrafficTest(MetricsCase):
    """Each kind of event moves exactly its series."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.session = cls.cordon.create_session("web")
        cls.auth = H.basic(cls.session["id"], cls.session["token"])

    def connect(self, target, auth="default"):
        c = self.cordon.conn()
        self.addCleanup(c.close)
        c.send(H.connect_request(target, self.auth if auth == "default" else auth))
        return c, c.read_response(10, method="CONNECT")

    def http_get(self, url, auth="default"):
        c = self.cordon.conn()
        host = urllib.parse.urlsplit(url).netloc
        head = f"GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
        a = self.auth if auth == "default" else auth
        if a:
            head += f"Proxy-Authorization: {a}\r\n"
        c.send((head + "\r\n").encode())
        r = c.read_response(10)
        c.close()
        return r

    def test_allowed_tunnel_counts_connection_bytes_gauge_and_latency(self):
        before = self.scrape()
        c, r = self.connect(f"raw.test:{ECHO.port}")
        self.assertEqual(r.status, 200, r)
        payload = b"x" * 1000
        c.send(payload)
        self.assertEqual(c.recv_exact(len(payload)), payload)
        self.wait_gauge("cordon_active_tunnels", L(job="web"), 1.0)
        # Bytes are counted as they pass, before the tunnel closes.
        mid = self.scrape()
        self.assertDelta(before, mid, "cordon_bytes_total", L(job="web", direction="up"), 1000)
        self.assertDelta(before, mid, "cordon_bytes_total", L(job="web", direction="down"),
                         1000)
        c.close()
        self.wait_gauge("cordon_active_tunnels", L(job="web"), 0.0)
        after = self.scrape()
        self.assertDelta(before, after, "cordon_connections_total",
                         L(job="web", decision="allowed"), 1)
        self.assertDelta(before, after, "cordon_connections_total",
                         L(job="web", decision="denied"), 0)
        self.assertDelta(before, after, "cordon_bytes_total", L(job="web", direction="up"),
                         1000)
        self.assertDelta(before, after, "cordon_upstream_connect_seconds_count", L(), 1)
        self.assertDelta(before, after, "cordon_upstream_connect_seconds_bucket",
                         L(le="+Inf"), 1)
        total = after[("cordon_upstream_connect_seconds_sum", L())]
        self.assertGreater(total, 0)
        self.assertLess(total, 60)

    def test_denied_connect_and_http_by_reason(self):
        before = self.scrape()
        _, r = self.connect("raw.test:1")
        self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "port"))
        _, r = self.connect("evil.test:443")
        self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "no_rule"))
        r = self.http_get("http://evil.test/x")
        self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "no_rule"))
        _, r = self.connect("evil.test:443", auth=None)
        self.assertEqual(r.status, 407)
        after = self.scrape()
        self.assertDelta(before, after, "cordon_connections_total",
                         L(job="web", decision="denied"), 3)
        self.assertDelta(before, after, "cordon_connections_total",
                         L(job="web", decision="allowed"), 0)
        self.assertDelta(before, after, "cordon_denied_total", L(job="web", reason="port"), 1)
        self.assertDelta(before, after, "cordon_denied_total", L(job="web", reason="no_rule"),
                         2)
        self.assertDelta(before, after, "cordon_denied_total",
                         L(job=UNATTRIBUTED, reason="auth"), 1)
        self.assertDelta(before, after, "cordon_connections_total",
                         L(job=UNATTRIBUTED, decision="denied"), 1)

        status, js = self.cordon.admin("GET", "/v1/denials?job=web")
        self.assertEqual(status, 200, js)
        self.assertEqual([j["job"] for j in js["jobs"]], ["web"])
        top = {e["target"]: e for e in js["jobs"][0]["top"]}
        self.assertIn("raw.test:1", top)
        self.assertIn("evil.test:443", top)
        self.assertEqual(top["raw.test:1"]["last_reason"], "port")
        self.assertEqual(top["raw.test:1"]["reasons"], ["port"])
        self.assertEqual(top["raw.test:1"]["kinds"], ["connect"])
        self.assertGreaterEqual(top["evil.test:443"]["count"], 1)
        self.assertRegex(top["evil.test:443"]["last_seen"], H.RFC3339_MS)
        counts = [e["count"] for e in js["jobs"][0]["top"]]
        self.assertEqual(counts, sorted(counts, reverse=True))
        self.assertGreaterEqual(js["jobs"][0]["denied"], 3)
        status, js = self.cordon.admin("GET", "/v1/denials?job=%28none%29")
        self.assertEqual(status, 200, js)
        self.assertEqual(js["jobs"][0]["job"], UNATTRIBUTED)
        self.assertEqual(js["jobs"][0]["top"][0]["last_reason"], "auth")
        status, js = self.cordon.admin("GET", "/v1/denials?limit=1")
        self.assertEqual(status, 200, js)
        self.assertTrue(all(len(j["top"]) <= 1 for j in js["jobs"]), js)

    def test_allowed_http_request(self):
        before = self.scrape()
        r = self.http_get(f"http://localhost:{HTTP.port}/metrics-test")
        self.assertEqual(r.status, 200, r)
        self.wait_gauge("cordon_active_tunnels", L(job="web"), 0.0)
        after = self.scrape()
        self.assertDelta(before, after, "cordon_connections_total",
                         L(job="web", decision="allowed"), 1)
        down = (after[("cordon_bytes_total", L(job="web", direction="down"))] -
                before[("cordon_bytes_total", L(job="web", direction="down"))])
        up = (after[("cordon_bytes_total", L(job="web", direction="up"))] -
              before[("cordon_bytes_total", L(job="web", direction="up"))])
        self.assertGreaterEqual(down, len(r.body))
        self.assertGreater(up, 0)

    def test_dns_allowed_and_denied(self):
        before = self.scrape()
        self.assertEqual(dig(self.cordon.dns_addr, "raw.test"), "NOERROR")
        self.assertEqual(dig(self.cordon.dns_addr, "denied.test"), "REFUSED")
        after = self.scrape()
        self.assertDelta(before, after, "cordon_dns_queries_total",
                         L(job="web", decision="allowed"), 1)
        self.assertDelta(before, after, "cordon_dns_queries_total",
                         L(job="web", decision="denied"), 1)
        self.assertDelta(before, after, "cordon_denied_total", L(job="web", reason="no_rule"),
                         1)
        # A DNS denial is not a proxy connection.
        self.assertDelta(before, after, "cordon_connections_total",
                         L(job="web", decision="denied"), 0)
        status, js = self.cordon.admin("GET", "/v1/denials?job=web")
        top = {e["target"]: e for e in js["jobs"][0]["top"]}
        self.assertIn("denied.test", top, js)
        self.assertEqual(top["denied.test"]["kinds"], ["dns"])

    def test_kill_and_revive(self):
        before = self.scrape()
        status, js = self.cordon.admin("POST", "/v1/kill", {"reason": "metrics test"})
        self.assertEqual(status, 200, js)
        try:
            mid = self.scrape()
            self.assertEqual(mid[("cordon_kill_switch_engaged", L())], 1.0)
            _, r = self.connect(f"raw.test:{ECHO.port}")
            self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "kill_switch"))
        finally:
            status, js = self.cordon.admin("POST", "/v1/revive", {"reason": "metrics test"})
            self.assertEqual(status, 200, js)
        after = self.scrape()
        self.assertEqual(after[("cordon_kill_switch_engaged", L())], 0.0)
        self.assertDelta(before, after, "cordon_kills_total", L(scope="network"), 1)
        self.assertDelta(before, after, "cordon_kill_duration_seconds_count", L(), 1)
        # The kill switch refuses before credentials are read: unattributed.
        self.assertDelta(before, after, "cordon_denied_total",
                         L(job=UNATTRIBUTED, reason="kill_switch"), 1)

    def test_tokens_minted_and_revoked(self):
        before = self.scrape()
        t = self.cordon.mint_token(self.session["id"])
        status, js = self.cordon.admin(
            "DELETE", f"/v1/sessions/{self.session['id']}/tokens/{t['token_id']}")
        self.assertEqual(status, 200, js)
        status, js = self.cordon.admin(  # again: already revoked, not counted twice
            "DELETE", f"/v1/sessions/{self.session['id']}/tokens/{t['token_id']}")
        self.assertEqual(status, 200, js)
        other = self.cordon.create_session("web")
        status, js = self.cordon.admin("DELETE", f"/v1/sessions/{other['id']}")
        self.assertEqual(status, 200, js)
        after = self.scrape()
        self.assertDelta(before, after, "cordon_tokens_minted_total", L(), 2)
        self.assertDelta(before, after, "cordon_tokens_revoked_total", L(), 2)
        self.assertDelta(before, after, "cordon_kills_total", L(scope="credential"), 2)
        self.assertEqual(after[("cordon_sessions_active", L())],
                         float(self.cordon.status()["sessions_active"]))

    def test_reload_ok_adds_job_series_and_failed_reload_counts(self):
        before = self.scrape()
        try:
            self.cordon.write_policy(jobs_yaml(extra_job=True))
            status, js = self.cordon.admin("POST", "/v1/reload")
            self.assertEqual(status, 200, js)
            self.cordon.write_policy(raw_text="jobs: [this is not a policy\n")
            status, js = self.cordon.admin("POST", "/v1/reload")
            self.assertEqual(status, 400, js)
        finally:
            self.cordon.write_policy(jobs_yaml(extra_job=True))
        after = self.scrape()
        self.assertDelta(before, after, "cordon_config_reloads_total", L(result="ok"), 1)
        self.assertDelta(before, after, "cordon_config_reloads_total", L(result="error"), 1)
        self.assertEqual(after.get(("cordon_connections_total",
                                    L(job="late", decision="allowed"))), 0.0)
        self.assertEqual(after.get(("cordon_denied_total", L(job="late", reason="no_rule"))),
                         0.0)

    def test_zz_scrape_lint_labels_and_status(self):
        # Some of every kind first, so that every series has moved (if run alone).
        self.connect("evil.test:443")
        self.connect("evil.test:443", auth=None)
        dig(self.cordon.dns_addr, "denied.test")
        text = self.scrape_text()
        rc, out = promtool_check(text)
        self.assertEqual((rc, out.strip()), (0, ""), "promtool check metrics: " + out)
        # Labels are bounded: no session id, host, target or address ever becomes one.
        for s in (self.session["id"], "evil.test", "raw.test", "denied.test", "127.0.0.1"):
            self.assertNotIn(s, text)
        samples = H.prometheus_samples(text)
        jobs = {dict(lb).get("job") for (_, lb) in samples if dict(lb).get("job")}
        self.assertLessEqual(jobs, {"web", "ci", "late", UNATTRIBUTED}, jobs)
        reasons = {dict(lb)["reason"] for (_, lb) in samples if "reason" in dict(lb)}
        self.assertLessEqual(reasons, set(REASONS))

        res = H.cordon_cli(self.cordon, ["status"])
        self.assertEqual(res.returncode, 0, res.stderr)
        out = res.stdout
        for line in out.splitlines():
            self.assertLessEqual(len(line), 80, f"status line too wide: {line!r}")
        self.assertRegex(out, r"(?m)^kill switch\s+off$")
        self.assertRegex(out, r"(?m)^sessions\s+\d+ active$")
        self.assertRegex(out, r"(?m)^tunnels\s+0 active$")
        status, js = self.cordon.admin("GET", "/v1/denials?job=web")
        web_denied = js["jobs"][0]["denied"]
        self.assertRegex(out, rf"(?m)^web\s+{web_denied}\s+0$")
        self.assertRegex(out, r"(?m)^\s+\d+\s+evil\.test:443\s+no_rule\s+\d\d:\d\d:\d\d$")
        self.assertRegex(out, rf"(?m)^\(none\)\s+\d+\s+0$")
        res = H.cordon_cli(self.cordon, ["status", "--top", "1"])
        self.assertEqual(res.returncode, 0, res.stderr)
        web_block = res.stdout.split("\nweb ", 1)[1].split("\n")[1:]
        target_lines = [l for l in web_block if l.startswith("  ")]
        # One target row, then the rest of the job's denials on one line (issue 19: the
        # rows add up to DENIED).
        self.assertEqual(len(target_lines), 2, res.stdout)
        self.assertRegex(target_lines[1],
                         r"^\s+\d+  to \d+ more targets? \(--top \d+ lists them\)$")
        self.assertEqual(sum(int(l.split()[0]) for l in target_lines), web_denied, res.stdout)
        res = H.cordon_cli(self.cordon, ["status", "--json"])
        self.assertEqual(res.returncode, 0, res.stderr)
        js = json.loads(res.stdout)
        self.assertIn("kill", js["status"])
        self.assertIn("jobs", js["denials"])
        res = H.cordon_cli(self.cordon, ["status", "--top", "x"])
        self.assertEqual(res.returncode, 2)

    def test_live_tunnel_shows_in_status(self):
        c, r = self.connect(f"raw.test:{ECHO.port}")
        self.assertEqual(r.status, 200, r)
        try:
            c.send(b"ping")
            self.assertEqual(c.recv_exact(4), b"ping")
            self.assertEqual(self.cordon.status()["tunnels"], {"web": 1})
            res = H.cordon_cli(self.cordon, ["status"])
            self.assertRegex(res.stdout, r"(?m)^tunnels\s+1 active$")
        finally:
            c.close()
        self.wait_gauge("cordon_active_tunnels", L(job="web"), 0.0)
        self.assertEqual(self.cordon.status()["tunnels"], {})


class AuditBrokenTest(unittest.TestCase):
    """With the audit log unwritable (RLIMIT_FSIZE, see harness), the failures and the
    refusals they cause are counted: metrics are then the one record of them."""

    def test_audit_write_errors_and_audit_unavailable_denials(self):
        cordon = H.Cordon(jobs_yaml(), DNS.port, PROXY_OPTS, fsize_limit=256 * H.KiB)
        self.addCleanup(cordon.cleanup)
        cordon.start()
        s = cordon.create_session("web")
        auth = H.basic(s["id"], s["token"])
        # Denied requests fill the day's file up to the limit.
        self.assertTrue(cordon.fill_audit_with_denials(auth),
                        "audit still healthy after the file hit RLIMIT_FSIZE")
        _, _, raw = cordon.admin_raw("GET", "/metrics")
        before = H.prometheus_samples(raw.decode())
        self.assertGreater(before[("cordon_audit_write_errors_total", L())], 0)
        self.assertEqual(before[("cordon_audit_write_errors_total", L())],
                         float(cordon.status()["audit"]["write_errors"]))
        c = cordon.conn()
        self.addCleanup(c.close)
        c.send(H.connect_request(f"raw.test:{ECHO.port}", auth))
        r = c.read_response(method="CONNECT")
        self.assertEqual((r.status, r.header("X-Cordon-Deny")), (503, "audit_unavailable"))
        _, _, raw = cordon.admin_raw("GET", "/metrics")
        after = H.prometheus_samples(raw.decode())
        key = ("cordon_denied_total", L(job="web", reason="audit_unavailable"))
        self.assertEqual(after[key] - before[key], 1)
        key = ("cordon_connections_total", L(job="web", decision="denied"))
        self.assertEqual(after[key] - before[key], 1)
        self.assertGreaterEqual(after[("cordon_audit_write_errors_total", L())],
                                before[("cordon_audit_write_errors_total", L())])


if __name__ == "__main__":
    unittest.main()
