"""Integration tests of the containment worksheet (issue 10): `cordon worksheet JOB` and
GET /v1/jobs/JOB/worksheet, for every example job card (config/examples) and a running cordon.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_worksheet   (from tests/integration)

The Markdown is converted to HTML by a real Markdown tool, Debian's cmark-gfm (GitHub
Flavored Markdown: tables and task lists), and the HTML is checked: the title, the six
section headings in order, the egress table (one row per rule) and the kill switch table,
and the checkboxes; for a job with MCP rules, the column of their tools and the box that says
what cordon decides on their tool calls.
"""

import html.parser
import json
import os
import shutil
import signal
import subprocess
import unittest

import harness as H

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(REPO, "config", "examples")
SECTIONS = ["1. Job card", "2. Egress allowlist", "3. Filesystem", "4. Identity",
            "5. Kill switch", "6. Audit log"]
EGRESS_HEADERS = ["Host / CIDR", "Ports", "Protocol", "Methods", "May resolve to (non-public)"]
KILL_HEADERS = ["Layer", "Command", "Effect"]


class Page(html.parser.HTMLParser):
    """Headings, tables (header cells, body rows of cell texts), checkboxes, paragraphs."""

    def __init__(self):
        super().__init__()
        self.headings = []  # (level, text)
        self.tables = []    # {"head": [...], "rows": [[...]]}
        self.checkboxes = []  # checked?
        self.paragraphs = []
        self._text = None
        self._where = None
        self._row = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("h1", "h2", "h3", "p", "th", "td"):
            self._text = ""
        if tag == "table":
            self.tables.append({"head": [], "rows": []})
        elif tag == "thead":
            self._where = "head"
        elif tag == "tbody":
            self._where = "body"
        elif tag == "tr" and self._where == "body":
            self._row = []
        elif tag == "input" and a.get("type") == "checkbox":
            self.checkboxes.append("checked" in a)

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3"):
            self.headings.append((int(tag[1]), self._text.strip()))
        elif tag == "p":
            self.paragraphs.append(self._text.strip())
        elif tag == "th":
            self.tables[-1]["head"].append(self._text.strip())
        elif tag == "td" and self._row is not None:
            self._row.append(self._text.strip())
        elif tag == "tr" and self._row is not None:
            self.tables[-1]["rows"].append(self._row)
            self._row = None
        if tag in ("h1", "h2", "h3", "p", "th", "td"):
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text += data


def to_html(markdown):
    p = subprocess.run(["cmark-gfm", "-e", "table", "-e", "tasklist"], input=markdown,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if p.returncode != 0:
        raise AssertionError(f"cmark-gfm failed: {p.stderr}")
    page = Page()
    page.feed(p.stdout)
    return page, p.stdout


def run_cli(*args, env_extra=None):
    env = dict(os.environ)
    env.pop("CORDON_ADMIN", None)
    env.pop("CORDON_ADMIN_TOKEN_FILE", None)
    env.update(env_extra or {})
    return subprocess.run([H.CORDON_BIN, "worksheet", *args], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=30, env=env)


def example_jobs():
    """(file, job, mode, rule count) of every example job card, from the JSON worksheet's
    own job card section (the policy is read by cordon, not by a second YAML parser)."""
    out = []
    for name in sorted(os.listdir(EXAMPLES)):
        if not name.endswith(".yaml"):
            continue
        path = os.path.join(EXAMPLES, name)
        p = subprocess.run([H.CORDON_BIN, "check-config", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30)
        if p.returncode != 0:
            raise AssertionError(f"{path}: {p.stderr}")
        with open(path) as f:
            text = f.read()
        jobs_part = text.split("\njobs:\n", 1)[1]
        for line in jobs_part.splitlines():
            if (line.startswith("  ") and not line.startswith("   ")
                    and not line.strip().startswith("#") and line.rstrip().endswith(":")):
                job = line.strip()[:-1]
                r = run_cli(job, "--config", path, "--format", "json")
                if r.returncode != 0:
                    raise AssertionError(f"{job}: {r.stderr}")
                js = json.loads(r.stdout)
                rules = js["sections"]["job_card"]["facts"]["egress_rules"]
                out.append((path, job, js["mode"], rules))
    return out


class ExampleWorksheetsTest(unittest.TestCase):
    """Every example job card's worksheet, from the file (no running cordon)."""

    @classmethod
    def setUpClass(cls):
        if shutil.which("cmark-gfm") is None:
            raise AssertionError("cmark-gfm not found: run scripts/setup")
        cls.jobs = example_jobs()

    def test_examples_found(self):
        names = {job for _, job, _, _ in self.jobs}
        self.assertTrue({"coding-agent", "support-agent", "browsing-agent",
                         "hello-agent"} <= names, names)

    def test_markdown_renders_headings_and_tables(self):
        for path, job, mode, rules in self.jobs:
            with self.subTest(job=job):
                r = run_cli(job, "--config", path)
                self.assertEqual(r.returncode, 0, r.stderr)
                page, out = to_html(r.stdout)
                h1 = [t for level, t in page.headings if level == 1]
                self.assertEqual(h1, [f"Containment worksheet: {job}"], out)
                h2 = [t for level, t in page.headings if level == 2]
                self.assertEqual(h2, SECTIONS, out)
                egress = [t for t in page.tables if t["head"] == EGRESS_HEADERS]
                self.assertEqual(len(egress), 1, out)
                self.assertEqual(len(egress[0]["rows"]), rules, out)
                for row in egress[0]["rows"]:
                    self.assertEqual(len(row), len(EGRESS_HEADERS), row)
                    self.assertTrue(row[1] and all(p.strip().isdigit()
                                                   for p in row[1].split(",")), row)
                kill = [t for t in page.tables if t["head"] == KILL_HEADERS]
                self.assertEqual(len(kill), 1, out)
                self.assertEqual([row[0] for row in kill[0]["rows"]],
                                 ["network kill", "session kill", "credential kill",
                                  "firewall kill"])
                self.assertGreaterEqual(len(page.checkboxes), 15, out)
                # No running cordon: the state-dependent boxes are unticked and say why.
                self.assertIn("no running cordon", r.stdout)
                first = r.stdout.splitlines()[0]
                if mode == "report":
                    self.assertIn("NOT ENFORCED", first)
                    self.assertIn("NOT ENFORCED", page.paragraphs[0])
                else:
                    self.assertEqual(first, f"# Containment worksheet: `{job}`")
                    self.assertNotIn("NOT ENFORCED", r.stdout)

    def test_report_example_is_not_enforced(self):
        path = os.path.join(EXAMPLES, "agent-fleet.yaml")
        js = json.loads(run_cli("browsing-agent", "--config", path, "--format",
                                "json").stdout)
        self.assertFalse(js["enforced"])
        self.assertTrue(js["notice"].startswith("NOT ENFORCED"))
        self.assertFalse(js["sections"]["egress"]["checks"]["default_deny"]["ticked"])
        js = json.loads(run_cli("coding-agent", "--config", path, "--format",
                                "json").stdout)
        self.assertTrue(js["enforced"])
        self.assertTrue(js["sections"]["egress"]["checks"]["default_deny"]["ticked"])
        self.assertTrue(js["sections"]["identity"]["checks"]["mint_hook"]["ticked"])
        self.assertEqual(js["sections"]["kill_switch"]["facts"]["stop_authority"],
                         ["netops-oncall", "security-oncall"])

    def test_usage_errors(self):
        path = os.path.join(EXAMPLES, "agent-fleet.yaml")
        self.assertEqual(run_cli().returncode, 2)
        self.assertEqual(run_cli("coding-agent", "--config", path, "--format", "html")
                         .returncode, 2)
        self.assertEqual(run_cli("../x", "--config", path).returncode, 2)
        r = run_cli("nobody", "--config", path)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no job nobody", r.stderr)
        r = run_cli("coding-agent", "--config", path, "--admin", "http://127.0.0.1:1")
        self.assertEqual(r.returncode, 2)


class RunningWorksheetTest(unittest.TestCase):
    """GET /v1/jobs/JOB/worksheet and `cordon worksheet --admin` against a running cordon."""

    @classmethod
    def setUpClass(cls):
        # An echo origin the agent may tunnel to: a kill that closes a live tunnel.
        cls.echo = H.EchoOrigin()
        cls.dns = H.FakeDNS({"raw.test": {"A": ["127.0.0.1"]}})
        jobs = ("  agent:\n"
                "    task: answer with the worksheet\n"
                "    egress:\n"
                "      - { host: api.example.com, ports: [443] }\n"
                f"      - {{ host: raw.test, ports: [{cls.echo.port}], protocol: tcp, "
                "resolves_to: [127.0.0.0/8] }\n"
                "    filesystem: { scratch: /scratch, never_write: [/etc] }\n"
                "    identity: { ttl: 30m }\n"
                "  learner:\n"
                "    task: learn its allowlist\n"
                "    mode: report\n"
                "    egress: []\n"
                "  tooler:\n"
                "    task: search through one MCP server\n"
                "    egress:\n"
                "      - { host: api.example.com, ports: [443] }\n"
                "      - { host: mcp.test, ports: [8080], protocol: http,\n"
                "          mcp: { tools: [search, fetch_page], max_body: 64KiB } }\n")
        cls.cordon = H.Cordon(jobs, cls.dns.port)
        # A webhook whose path and query are secrets: the worksheet shows the origin only.
        cls.cordon.write_policy(raw_text=cls.cordon.policy_text(jobs) +
                                "alerts:\n  webhook: { url: \"http://127.0.0.1:9/"
                                "hooks/SECRETPATH?token=SECRETQUERY\" }\n"
                                "kill: { stop_authority: [netops-oncall], "
                                "max_stop_seconds: 30 }\n")
        try:
            cls.cordon.start()
        except Exception:
            cls.cordon.cleanup()
            cls.dns.stop()
            cls.echo.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cordon.cleanup()
        cls.dns.stop()
        cls.echo.stop()

    def get(self, path, headers=None, token="default"):
        return self.cordon.admin_raw("GET", path, headers=headers, token=token)

    def worksheet_json(self, job="agent"):
        status, hdrs, raw = self.get(f"/v1/jobs/{job}/worksheet?format=json")
        self.assertEqual(status, 200, raw)
        self.assertTrue(hdrs["content-type"].startswith("application/json"), hdrs)
        return json.loads(raw)

    def test_markdown_and_json_formats(self):
        status, hdrs, raw = self.get("/v1/jobs/agent/worksheet?format=md")
        self.assertEqual(status, 200, raw)
        self.assertTrue(hdrs["content-type"].startswith("text/markdown"), hdrs)
        page, out = to_html(raw.decode())
        self.assertEqual([t for level, t in page.headings if level == 2], SECTIONS, out)
        status, hdrs, raw2 = self.get("/v1/jobs/agent/worksheet",
                                      headers={"Accept": "text/markdown"})
        self.assertEqual(status, 200)
        self.assertTrue(hdrs["content-type"].startswith("text/markdown"), hdrs)
        status, hdrs, raw3 = self.get("/v1/jobs/agent/worksheet")
        self.assertTrue(hdrs["content-type"].startswith("application/json"), hdrs)
        js = json.loads(raw3)
        self.assertEqual(js["job"], "agent")
        self.assertIsNotNone(js["state_source"])  # the running cordon's state was read
        self.assertTrue(js["sections"]["audit"]["checks"]["writable_now"]["ticked"])
        self.assertTrue(js["sections"]["kill_switch"]["checks"]["kills_persist"]["ticked"])

    def test_errors_and_auth(self):
        status, _, _ = self.get("/v1/jobs/agent/worksheet", token=None)
        self.assertEqual(status, 401)
        status, _, _ = self.get("/v1/jobs/agent/worksheet", token="wrong")
        self.assertEqual(status, 401)
        status, _, raw = self.get("/v1/jobs/nobody/worksheet")
        self.assertEqual(status, 404, raw)
        status, _, raw = self.get("/v1/jobs/agent/worksheet?format=html")
        self.assertEqual(status, 400, raw)

    def test_webhook_secret_never_shown(self):
        for fmt in ("md", "json"):
            _, _, raw = self.get(f"/v1/jobs/agent/worksheet?format={fmt}")
            self.assertNotIn(b"SECRETPATH", raw)
            self.assertNotIn(b"SECRETQUERY", raw)
            self.assertIn(b"http://127.0.0.1:9", raw)
        js = self.worksheet_json()
        self.assertTrue(js["sections"]["egress"]["checks"]["webhook"]["ticked"])

    def test_mcp_servers_and_their_tools(self):
        # The Markdown, through cmark-gfm: the egress table has a column of each MCP rule's
        # tools, and the box says what cordon does with its tool calls.
        status, _, raw = self.get("/v1/jobs/tooler/worksheet?format=md")
        self.assertEqual(status, 200, raw)
        page, out = to_html(raw.decode())
        self.assertEqual([t for level, t in page.headings if level == 2], SECTIONS, out)
        egress = [t for t in page.tables if t["head"][:len(EGRESS_HEADERS)] == EGRESS_HEADERS]
        self.assertEqual(len(egress), 1, out)
        self.assertEqual(egress[0]["head"], EGRESS_HEADERS + ["MCP tools allowed"], out)
        self.assertEqual([(row[0], row[2], row[-1]) for row in egress[0]["rows"]],
                         [("api.example.com", "tls", "-"),
                          ("mcp.test", "http", "fetch_page, search")], out)
        self.assertIn("- [x] **MCP tool calls decided and recorded by cordon**: cordon reads "
                      "the JSON-RPC messages to and from mcp.test:8080/http (tools: "
                      "fetch\\_page, search; messages up to 64KiB) on the wire", raw.decode())
        # JSON: the same, for programs.
        js = self.worksheet_json("tooler")
        egress = js["sections"]["egress"]
        self.assertEqual([r["mcp_tools"] for r in egress["table"]],
                         [None, ["fetch_page", "search"]])
        box = egress["checks"]["mcp_tools"]
        self.assertTrue(box["ticked"])
        for what in ("a tools/call of a tool not listed is refused",
                     "tools/list answers are filtered to the listed tools",
                     "pinned per session", "mcp_tool_changed", "tool.call with via mcp"):
            self.assertIn(what, box["why"])
        self.assertTrue(any(x.startswith("tool.call with via mcp")
                            for x in js["sections"]["audit"]["facts"]["logged"]))
        self.assertTrue(any(x.startswith("CordonMcpToolChanged (critical)")
                            for x in egress["facts"]["alert_rules"]))
        # A job without an MCP rule: nothing new, in either form.
        js = self.worksheet_json("agent")
        self.assertNotIn("mcp_tools", js["sections"]["egress"]["checks"])
        self.assertFalse(any("Mcp" in x for x in js["sections"]["egress"]["facts"]["alert_rules"]))
        self.assertTrue(all("mcp_tools" not in r for r in js["sections"]["egress"]["table"]))
        _, _, raw = self.get("/v1/jobs/agent/worksheet?format=md")
        self.assertNotIn(b"MCP", raw)
        self.assertNotIn(b"mcp", raw)

    def test_report_job_first_line(self):
        _, _, raw = self.get("/v1/jobs/learner/worksheet?format=md")
        self.assertIn("NOT ENFORCED", raw.decode().splitlines()[0])

    def test_kill_timing_measured_stored_and_kept_across_restart(self):
        # Before any kill on this cordon (a fresh state dir): not yet measured. Other tests
        # of this class make no kill.
        js = self.worksheet_json()
        kill = js["sections"]["kill_switch"]
        if kill["facts"]["last_measured"] == "not yet measured":
            self.assertFalse(kill["checks"]["measured_within_promise"]["ticked"])
        # A kill of a session with no connection measures nothing: the box stays unticked.
        session = self.cordon.create_session("agent")
        status, body = self.cordon.admin("POST", f"/v1/sessions/{session['id']}/kill",
                                         {"reason": "worksheet test"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["connections_closed"], 0, body)
        kill = self.worksheet_json()["sections"]["kill_switch"]
        self.assertIn("session kill:", kill["facts"]["last_measured"])
        self.assertFalse(kill["checks"]["measured_within_promise"]["ticked"], kill)
        self.assertIn("closed no connection: nothing measured",
                      kill["checks"]["measured_within_promise"]["why"])
        # A kill that cuts a live tunnel is a measurement.
        session = self.cordon.create_session("agent")
        c, r = self.cordon.tunnel(session, f"raw.test:{self.echo.port}")
        try:
            self.assertEqual(r.status, 200, r)
            c.send(b"ping")
            self.assertEqual(c.recv_exact(4, 5), b"ping")
            status, body = self.cordon.admin("POST", f"/v1/sessions/{session['id']}/kill",
                                             {"reason": "worksheet test"})
            self.assertEqual(status, 200, body)
            self.assertGreaterEqual(body["connections_closed"], 1, body)
        finally:
            c.close()
        # The measurement is saved just after the kill's answer: wait for it (bounded).
        H.wait_until(lambda: "(1 connections closed)" in self.worksheet_json()[
            "sections"]["kill_switch"]["facts"]["last_measured"], 5)
        kill = self.worksheet_json()["sections"]["kill_switch"]
        self.assertIn("session kill:", kill["facts"]["last_measured"])
        self.assertIn("(1 connections closed)", kill["facts"]["last_measured"])
        self.assertTrue(kill["checks"]["measured_within_promise"]["ticked"], kill)
        # Kept in the state store: a restart still knows it.
        H.cordon_restart(self.cordon, signal.SIGTERM)
        kill = self.worksheet_json()["sections"]["kill_switch"]
        self.assertIn("session kill:", kill["facts"]["last_measured"])

    def test_cli_against_the_admin_api(self):
        host, port = self.cordon.admin_addr
        r = run_cli("agent", "--admin", f"http://{host}:{port}", "--admin-token-file",
                    self.cordon.token_file)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("# Containment worksheet: `agent`"), r.stdout)
        self.assertIn("running state: the running cordon", r.stdout)
        r = run_cli("agent", "--format", "json", env_extra={
            "CORDON_ADMIN": f"http://{host}:{port}",
            "CORDON_ADMIN_TOKEN_FILE": self.cordon.token_file})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["job"], "agent")
        r = run_cli("nobody", "--admin", f"http://{host}:{port}", "--admin-token-file",
                    self.cordon.token_file)
        self.assertEqual(r.returncode, 1)
        self.assertIn("404", r.stderr)


if __name__ == "__main__":
    unittest.main()
