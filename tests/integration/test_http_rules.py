"""Integration tests of HTTP request rules (`http:` under a `protocol: http` rule, issue 21):
methods and path globs decided per request on a kept-alive connection, denials answered 403
with `X-Cordon-Deny: http_rule` and never forwarded, path tricks refused before any rule
sees them, the normal form sent upstream (what was matched is what the origin reads), report
mode's would_deny, the audit record's method and path (no query), and the metric.
Real `cordon serve`, real curl and raw sockets, on loopback only.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_http_rules   (from tests/integration)
"""

import json
import re
import unittest
import uuid

import harness as H

HTTP = DNS = None


def setUpModule():
    global HTTP, DNS
    HTTP = H.HTTPOrigin()
    DNS = H.FakeDNS({"api.test": {"A": ["127.0.0.1"]}})


def tearDownModule():
    for o in (HTTP, DNS):
        if o is not None:
            o.stop()


def jobs_yaml():
    res = 'resolves_to: [127.0.0.0/8, "::1/128"]'
    return (
        "  coder:\n"
        "    task: call one API, a few endpoints only\n"
        "    egress:\n"
        f"      - host: localhost\n"
        f"        ports: [{HTTP.port}]\n"
        "        protocol: http\n"
        f"        {res}\n"
        "        http:\n"
        "          - { methods: [POST], paths: [/v1/chat/completions, /v1/responses] }\n"
        "          - { methods: [GET, HEAD], paths: [\"/v1/models/**\", \"/files/*/raw\"] }\n"
        f"      - {{ host: api.test, ports: [{HTTP.port}], protocol: http, {res} }}\n"
        "    identity: { ttl: 30m }\n"
        "  watcher:\n"
        "    task: the same rules, reported\n"
        "    mode: report\n"
        "    egress:\n"
        f"      - {{ host: localhost, ports: [{HTTP.port}], protocol: http, {res},\n"
        "          http: [{ methods: [GET], paths: [\"/v1/**\"] }] }\n"
        "    identity: { ttl: 30m }\n")


class RequestRulesTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cordon = H.Cordon(jobs_yaml(), DNS.port).start()
        cls.s = cls.cordon.create_session("coder")
        cls.w = cls.cordon.create_session("watcher")

    @classmethod
    def tearDownClass(cls):
        cls.cordon.stop()
        cls.cordon.cleanup()

    def setUp(self):
        self.conns = []

    def tearDown(self):
        for c in self.conns:
            c.close()

    def raw(self, method, target, session=None, body=b"", conn=None):
        """Sends one request for http://localhost:PORT<target> as written (no client-side
        normalisation); returns (conn, response)."""
        s = session or self.s
        c = conn or self.cordon.conn()
        if conn is None:
            self.conns.append(c)
        head = (f"{method} http://localhost:{HTTP.port}{target} HTTP/1.1\r\n"
                f"Host: localhost:{HTTP.port}\r\n"
                f"Proxy-Authorization: {H.basic(s['id'], s['token'])}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        c.send(head + body)
        return c, c.read_response(10, method=method)

    def origin_saw(self, marker):
        return [r["path"] for r in HTTP.requests_matching(marker)]

    def deny_events(self, marker):
        return [e for e in self.cordon.audit_events()
                if e["event"] == "conn.deny" and marker in e.get("path", "")]

    def test_allowed_methods_and_paths_reach_the_origin(self):
        m = uuid.uuid4().hex[:8]
        for method, target in (("POST", "/v1/responses"), ("GET", f"/v1/models/{m}"),
                               ("GET", f"/v1/models/{m}/deep/er"), ("HEAD", f"/files/{m}/raw")):
            _, r = self.raw(method, target, body=b"{}" if method == "POST" else b"")
            self.assertEqual(r.status, 200, (method, target, r.body[:200]))
        self.assertEqual(sorted(self.origin_saw(m)),
                         sorted([f"/v1/models/{m}", f"/v1/models/{m}/deep/er", f"/files/{m}/raw"]))
        # curl, the way an agent's tool sends it.
        p = H.run_curl(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-x",
                        self.cordon.proxy_url(self.s), "-d", "{}",
                        f"http://localhost:{HTTP.port}/v1/chat/completions?m={m}"])
        self.assertEqual(p.stdout.decode(), "200", p.stderr)
        self.assertEqual(self.origin_saw(f"?m={m}"), [f"/v1/chat/completions?m={m}"])

    def test_a_request_no_rule_allows_is_denied_and_never_forwarded(self):
        m = uuid.uuid4().hex[:8]
        s = self.cordon.create_session("coder")  # its records are this test's only
        cases = (("GET", f"/v1/chat/completions?m={m}"),   # the method is not allowed here
                 ("DELETE", f"/v1/models/{m}"),
                 ("POST", f"/v1/files/{m}"),               # the path is not
                 ("GET", f"/files/{m}/raw/more"),          # '*' is one segment
                 ("GET", f"/admin/{m}"))
        for method, target in cases:
            _, r = self.raw(method, target, session=s)
            self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "http_rule"),
                             (method, target))
            body = json.loads(r.body)
            self.assertEqual(body["reason"], "http_rule")
            self.assertEqual(body["job"], "coder")
            self.assertIn("request rule", body["message"])
        self.assertEqual(self.origin_saw(m), [])
        # Each denial is audited with its method and path; the query is not written.
        def denials():
            return [e for e in self.cordon.audit_events() if e["event"] == "conn.deny"
                    and e.get("session") == s["id"]]
        H.wait_until(lambda: len(denials()) >= len(cases), 5)  # the writer flushes in batches
        events = denials()
        self.assertEqual(len(events), len(cases), events)
        for e in events:
            self.assertEqual(e["reason"], "http_rule")
            self.assertNotIn("?", e["path"])
        self.assertIn(("GET", "/v1/chat/completions"),
                      [(e["method"], e["path"]) for e in events])

    def test_curl_sees_the_denial(self):
        m = uuid.uuid4().hex[:8]
        p = H.run_curl(["-sS", "-D", "-", "-o", "/dev/null", "-x", self.cordon.proxy_url(self.s),
                        "-X", "PUT", "-d", "x", f"http://localhost:{HTTP.port}/v1/models/{m}"])
        head = p.stdout.decode().lower()
        self.assertTrue(head.startswith("http/1.1 403"), head)
        self.assertIn("x-cordon-deny: http_rule", head)
        self.assertEqual(self.origin_saw(m), [])

    def test_path_tricks_are_refused_before_any_rule(self):
        m = uuid.uuid4().hex[:8]
        for target in (f"/v1/models/../../admin/{m}", f"/v1/models/%2e%2e/%2E%2E/admin/{m}",
                       f"/v1/models%2f..%2fadmin/{m}", f"/v1/models/{m}%2Fx",
                       f"/v1/models/.%2e/x{m}", f"/v1/models/{m}%5c..%5cadmin",
                       f"/v1/models/{m}%00", f"/v1/models/./{m}", f"/v1/models/{m}%zz",
                       f"/v1/models/..;/..;/admin/{m}", f"/v1/models/{m}/..%20/..%20/x"):
            _, r = self.raw("GET", target)
            self.assertEqual((r.status, r.header("X-Cordon-Deny")), (400, "bad_request"), target)
            self.assertRegex(json.loads(r.body)["message"],
                             r"segment|encoded|escape", target)
        self.assertEqual(self.origin_saw(m), [])
        # curl --path-as-is sends the dots unresolved: refused the same way.
        p = H.run_curl(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--path-as-is", "-x",
                        self.cordon.proxy_url(self.s),
                        f"http://localhost:{HTTP.port}/v1/models/../../etc/{m}"])
        self.assertEqual(p.stdout.decode(), "400")
        self.assertEqual(self.origin_saw(m), [])

    def test_a_request_smuggled_in_a_body_never_reaches_the_origin(self):
        # A GET body an origin ignores would be read as the next request: refused outright.
        m = uuid.uuid4().hex[:8]
        hp = f"localhost:{HTTP.port}"
        inner = f"DELETE /admin/{m} HTTP/1.1\r\nHost: {hp}\r\n\r\n".encode()
        for method in ("GET", "HEAD"):  # the methods the rule allows here
            c = self.cordon.conn()
            self.conns.append(c)
            c.send((f"{method} http://{hp}/v1/models/{m} HTTP/1.1\r\nHost: {hp}\r\n"
                    f"Proxy-Authorization: {H.basic(self.s['id'], self.s['token'])}\r\n"
                    f"Content-Length: {len(inner)}\r\n\r\n").encode() + inner)
            r = c.read_response(10, method=method)
            self.assertEqual((r.status, r.header("X-Cordon-Deny")), (400, "bad_request"), method)
        c = self.cordon.conn()  # chunked the same
        self.conns.append(c)
        c.send((f"GET http://{hp}/v1/models/{m} HTTP/1.1\r\nHost: {hp}\r\n"
                f"Proxy-Authorization: {H.basic(self.s['id'], self.s['token'])}\r\n"
                f"Transfer-Encoding: chunked\r\n\r\n{len(inner):x}\r\n").encode() + inner +
               b"\r\n0\r\n\r\n")
        self.assertEqual(c.read_response(10).status, 400)
        self.assertEqual(self.origin_saw(m), [])
        # A body where the method carries one is forwarded as before.
        _, r = self.raw("POST", f"/v1/responses?m={m}", body=b"{}")
        self.assertEqual(r.status, 200)

    def test_only_websocket_upgrades_pass_request_rules(self):
        m = uuid.uuid4().hex[:8]
        hp = f"localhost:{HTTP.port}"
        c = self.cordon.conn()
        self.conns.append(c)
        c.send((f"GET http://{hp}/v1/models/{m} HTTP/1.1\r\nHost: {hp}\r\n"
                f"Proxy-Authorization: {H.basic(self.s['id'], self.s['token'])}\r\n"
                f"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                f"HTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n").encode())
        r = c.read_response(10)
        self.assertEqual((r.status, r.header("X-Cordon-Deny")), (400, "bad_request"))
        self.assertIn("WebSocket", json.loads(r.body)["message"])
        self.assertEqual(self.origin_saw(m), [])

    def test_the_origin_reads_the_path_that_was_matched(self):
        m = uuid.uuid4().hex[:8]
        # (Python's origin would collapse a leading "//" itself: the test's is in the middle.)
        _, r = self.raw("GET", f"/v1//models///{m}/%7Euser/%61")
        self.assertEqual(r.status, 200)
        self.assertEqual(self.origin_saw(m), [f"/v1/models/{m}/~user/a"])
        # A rule without request rules forwards the target exactly as sent.
        c = self.cordon.conn()
        self.conns.append(c)
        c.send((f"GET http://api.test:{HTTP.port}/raw//{m}/%7E HTTP/1.1\r\n"
                f"Host: api.test:{HTTP.port}\r\n"
                f"Proxy-Authorization: {H.basic(self.s['id'], self.s['token'])}\r\n\r\n").encode())
        self.assertEqual(c.read_response(10).status, 200)
        self.assertEqual(self.origin_saw(f"/raw//{m}"), [f"/raw//{m}/%7E"])

    def test_every_request_of_a_kept_alive_connection_is_decided(self):
        m = uuid.uuid4().hex[:8]
        c, r = self.raw("GET", f"/v1/models/{m}/1")
        self.assertEqual(r.status, 200)
        _, r = self.raw("GET", f"/v1/models/{m}/2", conn=c)
        self.assertEqual(r.status, 200)
        _, r = self.raw("GET", f"/secret/{m}", conn=c)  # the same connection, another path
        self.assertEqual((r.status, r.header("X-Cordon-Deny")), (403, "http_rule"))
        self.assertEqual(sorted(self.origin_saw(m)), [f"/v1/models/{m}/1", f"/v1/models/{m}/2"])

    def test_report_mode_lets_through_and_flags_would_deny(self):
        m = uuid.uuid4().hex[:8]
        _, r = self.raw("POST", f"/v2/x/{m}", session=self.w, body=b"{}")
        self.assertEqual(r.status, 200)
        self.assertEqual(self.origin_saw(m), [f"/v2/x/{m}"])
        def opens_of():
            return [e for e in self.cordon.audit_events()
                    if e["event"] == "conn.open" and e.get("path") == f"/v2/x/{m}"]
        H.wait_until(opens_of, 5)
        opens = opens_of()
        self.assertEqual(len(opens), 1, opens)
        self.assertEqual(opens[0]["would_deny"], "http_rule")
        # A path trick is never relaxed.
        _, r = self.raw("GET", f"/v1/../x/{m}", session=self.w)
        self.assertEqual(r.status, 400)
        self.assertEqual(self.origin_saw(f"x/{m}"), [f"/v2/x/{m}"])

    def test_denials_are_counted_by_reason(self):
        self.raw("GET", "/nope")
        _, _, raw = self.cordon.admin_raw("GET", "/metrics")
        line = re.search(r'cordon_denied_total\{job="coder",reason="http_rule"\} (\d+)',
                         raw.decode())
        self.assertIsNotNone(line)
        self.assertGreaterEqual(int(line.group(1)), 1)


if __name__ == "__main__":
    unittest.main()
