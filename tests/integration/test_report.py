"""Integration tests of report mode (`mode: report` on a job card, issue 10) against the real
`cordon serve` on loopback: what enforce mode would deny is let through, audited as conn.open
(or dns.query) with `would_deny` and counted as decision `would_deny`; non-public addresses,
the kill switch, bad requests and bad credentials are never relaxed.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_report   (from tests/integration)

Two jobs with the same rules in one policy: `learner` (mode: report) and `strict` (enforce).
Every origin is on 127.0.0.1, a non-public address: a request reaches one only through a
rule naming its host with `resolves_to` (as in enforce mode), so "let through" is shown on a
listed host with a port or method its rule does not list. A host no rule names resolves here
to loopback and stays denied (private_address); that the same host with a public address is
let through is in the unit tests (tests/unit/config/mode_test.cpp).
"""

import re
import subprocess
import time
import unittest

import harness as H

HTTP = ECHO = DNS = None


def setUpModule():
    global HTTP, ECHO, DNS
    HTTP = H.HTTPOrigin()
    ECHO = H.EchoOrigin("echo")
    DNS = H.FakeDNS({"listed.test": {"A": ["127.0.0.1"]},
                     "web.test": {"A": ["127.0.0.1"]},
                     "unlisted.test": {"A": ["127.0.0.1"]}})


def tearDownModule():
    for o in (HTTP, ECHO, DNS):
        if o is not None:
            o.stop()


def rules():
    return (
        "    egress:\n"
        f"      - {{ host: listed.test, ports: [{ECHO.port}], protocol: tcp, "
        "resolves_to: [127.0.0.0/8] }\n"
        f"      - {{ host: web.test, ports: [{HTTP.port}], protocol: http, methods: [GET], "
        "resolves_to: [127.0.0.0/8] }\n"
        "    identity: { ttl: 30m }\n")


def jobs_yaml():
    return ("  learner:\n"
            "    task: learn an allowlist from traffic\n"
            "    mode: report\n" + rules() +
            "  strict:\n"
            "    task: the same rules, enforced\n"
            "    sources: [127.0.0.2/32]\n" + rules())


def http_req(method, url, auth, body=b""):
    netloc = url.split("://", 1)[1].split("/", 1)[0]
    head = f"{method} {url} HTTP/1.1\r\nHost: {netloc}\r\nProxy-Authorization: {auth}\r\n"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return (head + "Connection: close\r\n\r\n").encode() + body


def metric(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    m = re.search(r"^" + re.escape(f"{name}{{{want}}}") + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


class ReportModeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cordon = H.Cordon(jobs_yaml(), DNS.port,
                              {"connect_timeout": "5s", "header_timeout": "5s"},
                              listen_dns="127.0.0.1:0", dns_yaml="  default_job: learner\n")
        try:
            cls.cordon.start()
        except Exception:
            cls.cordon.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cordon.cleanup()

    def setUp(self):
        self.learner = self.cordon.create_session("learner")
        self.strict = self.cordon.create_session("strict")
        self.conns = []

    def tearDown(self):
        for c in self.conns:
            c.close()

    def auth(self, s, token=None):
        return H.basic(s["id"], token or s["token"])

    def scrape(self):
        status, _, raw = self.cordon.admin_raw("GET", "/metrics")
        self.assertEqual(status, 200)
        return raw.decode()

    def send(self, data, method="GET"):
        c = self.cordon.conn()
        self.conns.append(c)
        c.send(data)
        return c, c.read_response(10, method=method)

    def connect(self, session, target, auth=None):
        c = self.cordon.conn()
        self.conns.append(c)
        c.send(H.connect_request(target, auth or self.auth(session)))
        return c, c.read_response(10, method="CONNECT")

    def assertDenied(self, r, status, reason):
        self.assertEqual(r.status, status, r)
        self.assertEqual(r.header("X-Cordon-Deny"), reason, r)

    def opens(self, session, target):
        return self.cordon.wait_events(
            lambda e: e["event"] == "conn.open" and e.get("session") == session["id"]
            and e.get("target") == target)

    # -- let through, audited, counted ---------------------------------------------------

    def test_connect_with_unlisted_protocol_is_let_through_and_audited(self):
        # web.test:HTTP.port is open to http only: a CONNECT there would be denied
        # (protocol). Same host and port, so the rule's resolves_to (loopback) still applies.
        target = f"web.test:{HTTP.port}"
        before = self.scrape()
        c, r = self.connect(self.learner, target)
        self.assertEqual(r.status, 200, r)
        c.send(b"GET /through-the-tunnel HTTP/1.1\r\nHost: listed.test\r\n"
               b"Connection: close\r\n\r\n")
        inner = c.read_response(10)
        self.assertEqual(inner.status, 200, inner)
        c.close()
        opened = self.opens(self.learner, target)
        self.assertEqual(len(opened), 1, opened)
        self.assertEqual(opened[0]["would_deny"], "protocol")
        self.assertEqual(opened[0]["job"], "learner")
        after = self.scrape()
        self.assertEqual(metric(after, "cordon_connections_total", job="learner",
                                decision="would_deny")
                         - metric(before, "cordon_connections_total", job="learner",
                                  decision="would_deny"), 1)
        self.assertEqual(metric(after, "cordon_connections_total", job="learner",
                                decision="allowed"),
                         metric(before, "cordon_connections_total", job="learner",
                                decision="allowed"))
        # The same request of the enforced job is denied.
        _, r = self.connect(self.strict, target)
        self.assertDenied(r, 403, "protocol")

    def test_unlisted_port_gets_no_loan_of_non_public_addresses(self):
        # listed.test may resolve to loopback on ECHO.port only; on any other port report
        # mode lets through public addresses alone.
        _, r = self.connect(self.learner, f"listed.test:{HTTP.port}")
        self.assertDenied(r, 403, "private_address")
        _, r = self.connect(self.strict, f"listed.test:{HTTP.port}")
        self.assertDenied(r, 403, "port")

    def test_http_method_not_listed_is_forwarded_and_audited(self):
        url = f"http://web.test:{HTTP.port}/report-post"
        _, r = self.send(http_req("POST", url, self.auth(self.learner), b"hello"), "POST")
        self.assertEqual(r.status, 200, r)
        self.assertTrue(HTTP.requests_matching("/report-post"))
        opened = self.opens(self.learner, f"web.test:{HTTP.port}")
        self.assertTrue(any(e.get("would_deny") == "method" for e in opened), opened)
        _, r = self.send(http_req("POST", url, self.auth(self.strict), b"hello"), "POST")
        self.assertDenied(r, 403, "method")

    def test_allowed_request_carries_no_would_deny(self):
        target = f"listed.test:{ECHO.port}"
        c, r = self.connect(self.learner, target)
        self.assertEqual(r.status, 200, r)
        c.close()
        opened = self.opens(self.learner, target)
        self.assertEqual(len(opened), 1, opened)
        self.assertNotIn("would_deny", opened[0])

    # -- never relaxed -------------------------------------------------------------------

    def test_private_addresses_stay_denied(self):
        # No rule names it, and it resolves to loopback: nothing lends it a resolves_to.
        _, r = self.connect(self.learner, f"unlisted.test:{ECHO.port}")
        self.assertDenied(r, 403, "private_address")
        _, r = self.connect(self.learner, f"127.0.0.1:{ECHO.port}")
        self.assertDenied(r, 403, "private_address")
        _, r = self.send(http_req("GET", f"http://unlisted.test:{HTTP.port}/",
                                  self.auth(self.learner)))
        self.assertDenied(r, 403, "private_address")
        _, r = self.send(http_req("GET", "http://169.254.169.254/latest/meta-data/",
                                  self.auth(self.learner)))
        self.assertDenied(r, 403, "private_address")

    def test_bad_credentials_and_bad_requests_stay_denied(self):
        _, r = self.connect(self.learner, f"listed.test:{HTTP.port}",
                            auth=self.auth(self.learner, token="wrong-token"))
        self.assertEqual(r.status, 407, r)
        c = self.cordon.conn()
        self.conns.append(c)
        c.send(f"CONNECT listed.test:{HTTP.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        r = c.read_response(10, method="CONNECT")
        self.assertEqual(r.status, 407, r)
        _, r = self.connect(self.learner, "bad..name:443")
        self.assertDenied(r, 403, "bad_request")
        _, r = self.connect(self.learner, "listed.test:0")
        self.assertEqual(r.status, 400, r)

    def test_kill_switch_is_never_relaxed(self):
        status, js = self.cordon.admin("POST", "/v1/kill", {"reason": "report-mode test"})
        self.assertEqual(status, 200, js)
        try:
            _, r = self.connect(self.learner, f"listed.test:{HTTP.port}")
            self.assertDenied(r, 403, "kill_switch")
            p = self.dig("unlisted.test")
            self.assertIn("status: REFUSED", p)
        finally:
            status, js = self.cordon.admin("POST", "/v1/revive", {"reason": "done"})
            self.assertEqual(status, 200, js)

    # -- DNS -----------------------------------------------------------------------------

    def dig(self, name, src=None):
        host, port = self.cordon.dns_addr
        args = ["dig", "-r", f"@{host}", "-p", str(port), name, "A", "+tries=1", "+time=2"]
        if src:
            args += ["-b", src]
        return subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=15).stdout

    def test_dns_names_not_listed_resolve_with_would_deny(self):
        before = self.scrape()
        out = self.dig("unlisted.test")  # default_job: learner
        self.assertIn("status: NOERROR", out)
        self.assertRegex(out, r"unlisted\.test\.\s+\d+\s+IN\s+A\s+127\.0\.0\.1")
        found = self.cordon.wait_events(
            lambda e: e["event"] == "dns.query" and e.get("name") == "unlisted.test"
            and e.get("job") == "learner")
        self.assertTrue(found)
        self.assertEqual(found[0]["would_deny"], "no_rule")
        # Listed names carry no would_deny.
        self.assertIn("status: NOERROR", self.dig("listed.test"))
        listed = self.cordon.wait_events(
            lambda e: e["event"] == "dns.query" and e.get("name") == "listed.test")
        self.assertTrue(listed)
        self.assertNotIn("would_deny", listed[0])
        # The enforced job (client 127.0.0.2 by its sources) is refused the same name.
        self.assertIn("status: REFUSED", self.dig("unlisted.test", src="127.0.0.2"))
        # Malformed names are never relaxed.
        self.assertIn("status: REFUSED", self.dig("10.0.0.1"))

        def counted():
            now = self.scrape()
            return (metric(now, "cordon_dns_queries_total", job="learner",
                           decision="would_deny")
                    - metric(before, "cordon_dns_queries_total", job="learner",
                             decision="would_deny")) >= 1
        self.assertTrue(H.wait_until(counted, 5), "dns would_deny not counted")

    # -- metrics -------------------------------------------------------------------------

    def test_would_deny_series_exist_for_every_job(self):
        text = self.scrape()
        for job in ("learner", "strict", "(none)"):
            self.assertIsNotNone(metric(text, "cordon_connections_total", job=job,
                                        decision="would_deny"), job)
            self.assertIsNotNone(metric(text, "cordon_dns_queries_total", job=job,
                                        decision="would_deny"), job)
        self.assertEqual(metric(text, "cordon_connections_total", job="strict",
                                decision="would_deny"), 0)

    def test_reload_keeps_would_deny_tunnels_of_report_jobs(self):
        target = f"web.test:{HTTP.port}"  # would-deny: protocol
        c, r = self.connect(self.learner, target)
        self.assertEqual(r.status, 200, r)
        status, js = self.cordon.admin("POST", "/v1/reload")
        self.assertEqual(status, 200, js)
        # Still open: a request through it is answered.
        c.send(b"GET /after-reload HTTP/1.1\r\nHost: web.test\r\nConnection: close\r\n\r\n")
        self.assertEqual(c.read_response(10).status, 200)
        c.close()


if __name__ == "__main__":
    unittest.main()
