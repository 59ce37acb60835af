"""Integration tests of the alert webhook (issue 6, alerts.webhook) against a local HTTP
receiver that the test starts, with denied CONNECTs (raw proxy client) and denied DNS queries
(dig with the EDNS session option), on loopback only.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_webhook   (from tests/integration)

What is proved: one POST per session per interval (coalescing), its JSON shape for Slack
(`text`) and Alertmanager-style receivers (`alerts[0].labels.alertname`), the burst counter,
a retry after a 500 and after a 429 with Retry-After, the per-minute rate limit, new settings
on reload, https with certificate and host-name verification, that a dead or hanging receiver
never slows denials, that failures are audited as alert.error, and that the URL's secret path
and query and the header values never reach cordon's stderr or audit log.
"""

import http.server
import json
import os
import socket
import socketserver
import ssl
import statistics
import subprocess
import threading
import time
import unittest

import harness as H

SESSION_OPTION = 65001
URL_SECRET = "T000/B000/XyZsecretPATHpart"
QUERY_SECRET = "qSECRETvalue42"
HEADER_SECRET = "hdrSECRETbearer99"


# --------------------------------------------------------------------------------------
# The receiver
# --------------------------------------------------------------------------------------

class _ReceiverHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10

    def log_message(self, *args):
        pass

    def do_POST(self):
        rec = self.server.receiver
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(n, 1 << 20)) if n else b""
        try:
            js = json.loads(body.decode("utf-8"))
        except ValueError:
            js = None
        with rec.lock:
            index = len(rec.requests)
            rec.requests.append({"path": self.path, "headers": dict(self.headers.items()),
                                 "body": body, "json": js, "time": time.monotonic()})
            status, extra = (rec.answers[index] if index < len(rec.answers) else (200, {}))
        out = b'{"ok": true}' if status < 300 else b"try again"
        self.send_response(status)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(out)
        self.close_connection = True


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass


class Receiver:
    """A webhook receiver on 127.0.0.1:<ephemeral> recording every POST. `answers`: the
    (status, headers) of the first requests, in order; 200 after them."""

    def __init__(self, answers=()):
        self.lock = threading.Lock()
        self.requests = []
        self.answers = list(answers)
        self.server = _Server((H.LOOPBACK, 0), _ReceiverHandler)
        self.server.receiver = self
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def url(self, path="/hook"):
        return f"http://127.0.0.1:{self.port}{path}"

    def snapshot(self):
        with self.lock:
            return list(self.requests)

    def wait(self, n, timeout):
        H.wait_until(lambda: len(self.snapshot()) >= n, timeout, 0.02)
        return self.snapshot()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class TLSReceiver(Receiver):
    """Receiver over TLS with a certificate made for `san` (e.g. "IP:127.0.0.1")."""

    def __init__(self, tmp, san, answers=()):
        super().__init__(answers)
        self.cert, key = tmp.join(f"cert-{self.port}.pem"), tmp.join(f"key-{self.port}.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                        "2", "-keyout", key, "-out", self.cert, "-subj", "/CN=webhook-test",
                        "-addext", f"subjectAltName={san}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=60)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)

    def url(self, path="/hook"):
        return f"https://127.0.0.1:{self.port}{path}"


class HangingReceiver:
    """Accepts connections and never answers (a receiver that hangs)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((H.LOOPBACK, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self._stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        for _ in range(10_000):
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)  # held open, never read from or written to
            if self._stop:
                return

    def stop(self):
        self._stop = True
        for c in self.conns + [self.sock]:
            try:
                c.close()
            except OSError:
                pass


# --------------------------------------------------------------------------------------
# cordon with an alerts section
# --------------------------------------------------------------------------------------

JOBS = (
    "  web:\n"
    "    task: integration tests of the alert webhook\n"
    "    egress:\n"
    "      - { host: a.test, ports: [443], resolves_to: [127.0.0.0/8] }\n"
    "    identity: { ttl: 30m }\n")


def alerts_yaml(url, interval="1s", max_per_minute=30, timeout="2s", retries=3,
                burst_threshold=3, burst_window="10s", headers=None):
    text = ("alerts:\n  webhook:\n"
            f"    url: \"{url}\"\n"
            f"    interval: {interval}\n"
            f"    max_per_minute: {max_per_minute}\n"
            f"    timeout: {timeout}\n"
            f"    retries: {retries}\n"
            f"    burst_threshold: {burst_threshold}\n"
            f"    burst_window: {burst_window}\n")
    if headers:
        text += "    headers:\n" + "".join(f"      {k}: \"{v}\"\n" for k, v in headers.items())
    return text


class WebhookCordon(H.Cordon):
    """H.Cordon with an `alerts:` section (replaceable for reload tests)."""

    def __init__(self, alerts, dns_port):
        self.alerts = alerts
        super().__init__(JOBS, dns_port, listen_dns="127.0.0.1:0",
                         dns_yaml="  default_job: null\n"
                                  "  rate_limit: { qps: 10000, burst: 10000 }\n",
                         proxy_opts={"header_timeout": "5s"})

    def policy_text(self, jobs_yaml):
        text = super().policy_text(jobs_yaml)
        return text.replace("\njobs:\n", "\n" + self.alerts + "jobs:\n", 1)

    def set_alerts(self, alerts):
        self.alerts = alerts
        self.write_policy(JOBS)


def deny_connect(cordon, session, target):
    """One denied CONNECT; returns its latency in seconds (403 received)."""
    t0 = time.monotonic()
    c, r = cordon.tunnel(session, target)
    dt = time.monotonic() - t0
    c.close()
    if r.status != 403:
        raise AssertionError(f"CONNECT {target}: expected 403, got {r.status}")
    return dt


def deny_dns(cordon, session, name):
    """One denied DNS query attributed to `session` by the EDNS session option."""
    host, port = cordon.dns_addr
    data = f"{session['id']}:{session['token']}".encode("ascii").hex()
    p = subprocess.run(["dig", "-r", f"@{host}", "-p", str(port), name, "A", "+tries=1",
                        "+time=2", f"+ednsopt={SESSION_OPTION}:{data}"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=15)
    if "status: REFUSED" not in p.stdout:
        raise AssertionError(f"dig {name}: expected REFUSED:\n{p.stdout[-800:]}")


def metric(cordon, name, labels):
    status, _, raw = cordon.admin_raw("GET", "/metrics")
    if status != 200:
        return None
    want = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    for line in raw.decode().splitlines():
        if line.startswith(name + want + " ") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return None


class WebhookCase(unittest.TestCase):
    UP = None

    @classmethod
    def setUpClass(cls):
        cls.UP = H.FakeDNS({"a.test": {"A": ["127.0.0.1"]}}, ttl=30)

    @classmethod
    def tearDownClass(cls):
        cls.UP.stop()

    def start(self, alerts, ca_file=None):
        """Starts cordon; with ca_file, OpenSSL's default CA store is that file
        (SSL_CERT_FILE), as if it were the system's."""
        c = WebhookCordon(alerts, self.UP.port)
        self.addCleanup(c.cleanup)
        saved = os.environ.get("SSL_CERT_FILE")
        if ca_file:
            os.environ["SSL_CERT_FILE"] = ca_file
        try:
            c.start()
        finally:
            if saved is None:
                os.environ.pop("SSL_CERT_FILE", None)
            else:
                os.environ["SSL_CERT_FILE"] = saved
        return c

    def receiver(self, answers=()):
        r = Receiver(answers)
        self.addCleanup(r.stop)
        return r

    def assert_no_secrets(self, cordon, extra=()):
        stderr = cordon.stderr_text(tail=1 << 20)
        audit = cordon.audit_raw().decode("utf-8", "replace")
        for s in (URL_SECRET, "XyZsecret", QUERY_SECRET, HEADER_SECRET) + tuple(extra):
            self.assertNotIn(s, stderr, "a webhook secret reached stderr")
            self.assertNotIn(s, audit, "a webhook secret reached the audit log")


# --------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------

class CoalescingTest(WebhookCase):

    def test_one_post_per_session_per_interval_with_both_shapes(self):
        rec = self.receiver()
        path = f"/services/{URL_SECRET}?token={QUERY_SECRET}"
        cordon = self.start(alerts_yaml(rec.url(path),
                                        headers={"Authorization": f"Bearer {HEADER_SECRET}"}))
        s = cordon.create_session("web")
        t0 = time.monotonic()
        for target in ["evil.test:443"] * 3 + ["exfil.test:443", "a.test:22"]:
            deny_connect(cordon, s, target)
        posts = rec.wait(1, 5)
        self.assertEqual(len(posts), 1, posts)
        p = posts[0]
        # Coalesced: sent once the 1 s interval is over, not per denial.
        self.assertGreaterEqual(p["time"] - t0, 0.9)
        time.sleep(1.5)
        self.assertEqual(len(rec.snapshot()), 1, "a second POST for the same window")

        self.assertEqual(p["path"], path)  # the URL as configured, secret parts included
        self.assertEqual(p["headers"].get("Authorization"), f"Bearer {HEADER_SECRET}")
        self.assertTrue(p["headers"].get("Content-Type", "").startswith("application/json"))
        js = p["json"]
        self.assertIsInstance(js, dict, p["body"][:300])
        # Slack-compatible: one paragraph in `text`.
        self.assertIn("5 denied attempts", js["text"])
        self.assertIn(f"session {s['id']}", js["text"])
        self.assertIn("(job web)", js["text"])
        self.assertIn("no_rule ×4", js["text"])
        self.assertIn("evil.test:443 ×3", js["text"])
        # Alertmanager-style.
        self.assertEqual(js["version"], "4")
        self.assertEqual(js["status"], "firing")
        a = js["alerts"][0]
        self.assertEqual(a["labels"]["alertname"], "CordonDenialBurst")
        self.assertEqual(a["labels"]["job"], "web")
        self.assertEqual(a["labels"]["severity"], "critical")  # 5 >= burst_threshold 3
        self.assertEqual(a["status"], "firing")
        self.assertTrue(H.RFC3339_MS.match(a["startsAt"]), a)
        self.assertTrue(H.RFC3339_MS.match(a["endsAt"]), a)
        self.assertIn("summary", a["annotations"])
        self.assertIn("description", a["annotations"])
        # The structured details.
        c = js["cordon"]
        self.assertEqual((c["job"], c["session"], c["denials"]), ("web", s["id"], 5))
        self.assertEqual(c["reasons"], {"no_rule": 4, "port": 1})
        self.assertEqual(c["top_targets"][0],
                         {"target": "evil.test:443", "kind": "connect", "count": 3})
        self.assertTrue(c["burst"])
        # No session token in the alert.
        self.assertNotIn(s["token"].encode(), p["body"])
        # The burst was counted once.
        self.assertEqual(metric(cordon, "cordon_denial_bursts_total", {"job": "web"}), 1.0)
        self.assert_no_secrets(cordon)
        self.assertIn(f"http://127.0.0.1:{rec.port}", cordon.stderr_text(),
                      "the webhook's origin is said at start")

    def test_sessions_apart_dns_included_no_burst_below_threshold(self):
        rec = self.receiver()
        cordon = self.start(alerts_yaml(rec.url(), burst_threshold=10))
        s1 = cordon.create_session("web")
        s2 = cordon.create_session("web")
        deny_connect(cordon, s1, "evil.test:443")
        # Two names: identical DNS queries are counted once a second (docs/dns.md), which
        # could put the second one in the next alert window.
        deny_dns(cordon, s2, "exfil.test")
        deny_dns(cordon, s2, "other.exfil.test")
        posts = rec.wait(2, 5)
        time.sleep(1.2)
        posts = rec.snapshot()
        self.assertEqual(len(posts), 2, [p["json"]["text"] for p in posts])
        by_session = {p["json"]["cordon"]["session"]: p["json"] for p in posts}
        self.assertEqual(set(by_session), {s1["id"], s2["id"]})
        d = by_session[s2["id"]]
        self.assertEqual(d["cordon"]["denials"], 2)
        self.assertEqual({t["kind"] for t in d["cordon"]["top_targets"]}, {"dns"})
        self.assertEqual({t["target"] for t in d["cordon"]["top_targets"]},
                         {"exfil.test", "other.exfil.test"})
        self.assertEqual(d["alerts"][0]["labels"]["severity"], "warning")
        self.assertFalse(d["cordon"]["burst"])
        self.assertEqual(by_session[s1["id"]]["cordon"]["denials"], 1)
        self.assertIn(metric(cordon, "cordon_denial_bursts_total", {"job": "web"}), (None, 0.0))

    def test_a_new_window_after_the_interval(self):
        rec = self.receiver()
        cordon = self.start(alerts_yaml(rec.url()))
        s = cordon.create_session("web")
        deny_connect(cordon, s, "evil.test:443")
        self.assertEqual(len(rec.wait(1, 5)), 1)
        deny_connect(cordon, s, "evil.test:443")
        deny_connect(cordon, s, "evil.test:443")
        posts = rec.wait(2, 5)
        self.assertEqual(len(posts), 2)
        self.assertEqual(posts[1]["json"]["cordon"]["denials"], 2)


class DeliveryTest(WebhookCase):

    def test_retry_after_500(self):
        rec = self.receiver(answers=[(500, {})])
        cordon = self.start(alerts_yaml(rec.url()))
        s = cordon.create_session("web")
        deny_connect(cordon, s, "evil.test:443")
        posts = rec.wait(2, 8)
        self.assertEqual(len(posts), 2, "no retry after a 500")
        self.assertEqual(posts[0]["body"], posts[1]["body"], "the retry sent another body")
        gap = posts[1]["time"] - posts[0]["time"]
        self.assertGreaterEqual(gap, 0.45, "retried without backoff")  # first retry 0.5-1 s
        self.assertLess(gap, 3.0)
        time.sleep(1.0)
        self.assertEqual(len(rec.snapshot()), 2, "retried after a 200")
        self.assertEqual([e for e in cordon.audit_events() if e["event"] == "alert.error"], [])

    def test_429_retry_after_is_honoured(self):
        rec = self.receiver(answers=[(429, {"Retry-After": "2"})])
        cordon = self.start(alerts_yaml(rec.url()))
        s = cordon.create_session("web")
        deny_connect(cordon, s, "evil.test:443")
        posts = rec.wait(2, 10)
        self.assertEqual(len(posts), 2, "no retry after a 429")
        self.assertGreaterEqual(posts[1]["time"] - posts[0]["time"], 1.9)

    def test_4xx_is_not_retried_and_is_audited(self):
        rec = self.receiver(answers=[(404, {})])
        cordon = self.start(alerts_yaml(rec.url(f"/x/{URL_SECRET}")))
        s = cordon.create_session("web")
        deny_connect(cordon, s, "evil.test:443")
        self.assertEqual(len(rec.wait(1, 5)), 1)
        errs = cordon.wait_events(lambda e: e["event"] == "alert.error", 1, 5)
        self.assertEqual(len(errs), 1, errs)
        e = errs[0]
        self.assertEqual(e["webhook"], f"http://127.0.0.1:{rec.port}")
        self.assertEqual((e["job"], e["session"], e["attempts"], e["error"]),
                         ("web", s["id"], 1, "HTTP 404"))
        time.sleep(1.0)
        self.assertEqual(len(rec.snapshot()), 1, "a 404 was retried")
        self.assert_no_secrets(cordon)

    def test_rate_limit_across_sessions(self):
        rec = self.receiver()
        cordon = self.start(alerts_yaml(rec.url(), max_per_minute=2))
        sessions = [cordon.create_session("web") for _ in range(5)]
        for s in sessions:
            deny_connect(cordon, s, "evil.test:443")
        rec.wait(2, 5)
        time.sleep(2.0)  # the other three windows are due, but the minute's two are used
        posts = rec.snapshot()
        self.assertEqual(len(posts), 2, [p["json"]["cordon"]["session"] for p in posts])
        # The two oldest windows went first.
        self.assertEqual({p["json"]["cordon"]["session"] for p in posts},
                         {sessions[0]["id"], sessions[1]["id"]},
                         ([s["id"] for s in sessions], [p["json"]["cordon"] for p in posts]))

    def test_reload_applies_new_settings(self):
        first, second = self.receiver(), self.receiver()
        cordon = self.start(alerts_yaml(first.url()))
        s = cordon.create_session("web")
        cordon.set_alerts(alerts_yaml(second.url("/second"), interval="500ms"))
        status, js = cordon.admin("POST", "/v1/reload")
        self.assertEqual(status, 200, js)
        deny_connect(cordon, s, "evil.test:443")
        posts = second.wait(1, 5)
        self.assertEqual(len(posts), 1)
        self.assertEqual(posts[0]["path"], "/second")
        self.assertEqual(first.snapshot(), [])
        # Reloaded without a webhook: nothing more is sent.
        cordon.set_alerts("")
        status, js = cordon.admin("POST", "/v1/reload")
        self.assertEqual(status, 200, js)
        deny_connect(cordon, s, "evil.test:443")
        time.sleep(1.5)
        self.assertEqual(len(second.snapshot()), 1)
        self.assertEqual(first.snapshot(), [])


class NoWebhookTest(WebhookCase):
    """Bursts are counted without alerts.webhook (defaults: 10 denials within 60 s), so the
    CordonDenialBurst rule can fire on a default install; nothing is sent."""

    def wait_bursts(self, cordon, want, timeout=5):
        deadline = time.monotonic() + timeout
        got = None
        while time.monotonic() < deadline:
            got = metric(cordon, "cordon_denial_bursts_total", {"job": "web"})
            if got == want:
                break
            time.sleep(0.05)
        return got

    def test_bursts_are_counted_without_a_webhook(self):
        cordon = self.start("")
        s1 = cordon.create_session("web")
        s2 = cordon.create_session("web")
        for _ in range(9):
            deny_connect(cordon, s1, "evil.test:443")
        for _ in range(9):
            deny_dns(cordon, s2, "exfil.test")
        time.sleep(0.5)  # the notifier drains every 50 ms
        self.assertEqual(metric(cordon, "cordon_denial_bursts_total", {"job": "web"}), 0.0,
                         "9 denials of a session are no burst (default threshold 10)")
        deny_connect(cordon, s1, "evil.test:443")  # the 10th of s1
        self.assertEqual(self.wait_bursts(cordon, 1.0), 1.0, cordon.stderr_text())
        for _ in range(5):  # the same burst goes on: not counted again
            deny_connect(cordon, s1, "evil.test:443")
        deny_dns(cordon, s2, "exfil.test")  # the 10th of s2 (DNS counts too)
        self.assertEqual(self.wait_bursts(cordon, 2.0), 2.0)
        time.sleep(0.3)
        self.assertEqual(metric(cordon, "cordon_denial_bursts_total", {"job": "web"}), 2.0)
        self.assertNotIn("webhook", cordon.stderr_text(),
                         "nothing is said about a webhook that is not configured")
        self.assertEqual([e for e in cordon.audit_events() if e.get("event") == "alert.error"],
                         [])

    def test_reload_without_the_webhook_keeps_counting_bursts(self):
        rec = self.receiver()
        cordon = self.start(alerts_yaml(rec.url(), burst_threshold=3))
        s = cordon.create_session("web")
        for _ in range(3):
            deny_connect(cordon, s, "evil.test:443")
        self.assertEqual(self.wait_bursts(cordon, 1.0), 1.0)
        self.assertEqual(len(rec.wait(1, 5)), 1)
        cordon.set_alerts("")
        status, js = cordon.admin("POST", "/v1/reload")
        self.assertEqual(status, 200, js)
        s2 = cordon.create_session("web")
        for _ in range(10):  # the defaults now: 10 within 60 s
            deny_connect(cordon, s2, "evil.test:443")
        self.assertEqual(self.wait_bursts(cordon, 2.0), 2.0, cordon.stderr_text())
        time.sleep(1.5)  # interval 1s: a webhook would have been sent to by now
        self.assertEqual(len(rec.snapshot()), 1, "sent after the webhook was removed")


class HttpsTest(WebhookCase):

    def setUp(self):
        self.tmp = H.TempDir("cordon-it-webhook-")
        self.addCleanup(self.tmp.cleanup)

    def tls_receiver(self, san):
        r = TLSReceiver(self.tmp, san)
        self.addCleanup(r.stop)
        return r

    def test_https_delivered_when_the_certificate_verifies(self):
        rec = self.tls_receiver("IP:127.0.0.1")
        cordon = self.start(alerts_yaml(rec.url()), ca_file=rec.cert)
        s = cordon.create_session("web")
        deny_connect(cordon, s, "evil.test:443")
        posts = rec.wait(1, 5)
        self.assertEqual(len(posts), 1, cordon.stderr_text())
        self.assertEqual(posts[0]["json"]["cordon"]["session"], s["id"])

    def test_https_refused_for_an_untrusted_certificate(self):
        rec = self.tls_receiver("IP:127.0.0.1")
        cordon = self.start(alerts_yaml(rec.url(), retries=0))  # the system CAs only
        s = cordon.create_session("web")
        deny_connect(cordon, s, "evil.test:443")
        errs = cordon.wait_events(lambda e: e["event"] == "alert.error", 1, 6)
        self.assertEqual(len(errs), 1)
        self.assertIn("TLS handshake", errs[0]["error"])
        self.assertEqual(rec.snapshot(), [], "an alert went to an unverified receiver")

    def test_https_refused_for_another_host_name(self):
        rec = self.tls_receiver("DNS:other.test")  # trusted, but not for 127.0.0.1
        cordon = self.start(alerts_yaml(rec.url(), retries=0), ca_file=rec.cert)
        s = cordon.create_session("web")
        deny_connect(cordon, s, "evil.test:443")
        errs = cordon.wait_events(lambda e: e["event"] == "alert.error", 1, 6)
        self.assertEqual(len(errs), 1)
        self.assertIn("TLS handshake", errs[0]["error"])
        self.assertEqual(rec.snapshot(), [], "an alert went to a receiver of another name")


class DeadReceiverTest(WebhookCase):

    def measure(self, cordon, n=100):
        s = cordon.create_session("web")
        return [deny_connect(cordon, s, f"t{i % 7}.evil.test:443") for i in range(n)]

    def test_baseline_and_dead_receivers_never_slow_denials(self):
        # Baseline: no webhook.
        base = self.start("")
        base_lat = self.measure(base)
        base.stop()
        # A closed port (connection refused) and a receiver that accepts and never answers;
        # low interval and threshold so alerts are due (and failing) while denials run.
        dead_port = H.free_port()
        hang = HangingReceiver()
        self.addCleanup(hang.stop)
        results = {}
        for name, port in (("closed", dead_port), ("hanging", hang.port)):
            url = f"http://127.0.0.1:{port}/services/{URL_SECRET}?token={QUERY_SECRET}"
            cordon = self.start(alerts_yaml(url, interval="200ms", timeout="3s", retries=1,
                                            burst_threshold=2,
                                            headers={"Authorization": HEADER_SECRET}))
            lat = []
            t_end = time.monotonic() + 3.0
            for _ in range(20):  # about 3 s of denials, many sessions (several alerts due)
                lat += self.measure(cordon, 25)
                if time.monotonic() > t_end:
                    break
            results[name] = lat
            if name == "closed":
                errs = cordon.wait_events(lambda e: e["event"] == "alert.error", 1, 10)
                self.assertTrue(errs, "no alert.error for a refused delivery")
                self.assertEqual(errs[0]["webhook"], f"http://127.0.0.1:{port}")
                self.assertEqual(errs[0]["attempts"], 2)
                self.assertIn("connect", errs[0]["error"])
            # Stopping with deliveries pending (hanging) is still prompt.
            rc, took = cordon.stop(timeout=15)
            self.assertEqual(rc, 0, cordon.stderr_text())
            self.assertLess(took, 5.0, f"stop took {took:.1f}s with a {name} receiver")
            self.assert_no_secrets(cordon)
        b_med = statistics.median(base_lat)
        for name, lat in results.items():
            med = statistics.median(lat)
            p99 = sorted(lat)[int(len(lat) * 0.99) - 1]
            print(f"\n  denial latency ({name} receiver): median {med * 1000:.2f} ms, "
                  f"p99 {p99 * 1000:.2f} ms, max {max(lat) * 1000:.2f} ms over {len(lat)} "
                  f"(no webhook: median {b_med * 1000:.2f} ms)")
            # A blocked data path would take the delivery timeout (3 s) or the retry backoff.
            self.assertLess(max(lat), 1.0, f"{name}: a denial took {max(lat):.2f}s")
            self.assertLess(med, max(5 * b_med, 0.02), f"{name}: denials slowed down")


if __name__ == "__main__":
    unittest.main()
