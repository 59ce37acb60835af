"""Tests of dashboards/ (issue 6): the Grafana dashboard, the Prometheus alert rules and the
scrape config, against a real `cordon serve`, a real scrape and a real Prometheus, on
loopback only.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_dashboards   (from tests/integration)

- PromQLNamesTest:     the small PromQL tokeniser that finds the metric names of a query.
- DashboardShapeTest:  cordon.json is a dashboard of the current schema: uid, title,
                       variables `datasource` and `job`, every panel on `${datasource}` with a
                       sane grid position and queries, no duplicate ids.
- AlertFilesTest:      every rule of alerts.yaml has a severity, a summary and a description,
                       and alerts_test.yaml has a case where it fires and one where it does
                       not; the provisioning files point where they should.
- ScrapeTest:          cordon is started and driven (sessions, tokens, allowed and denied
                       requests, DNS, a network kill, reloads); every metric named by a panel,
                       an annotation or an alert rule is in its /metrics scrape, and
                       `promtool check metrics` passes on that scrape.
- PrometheusTest:      Prometheus runs dashboards/prometheus.yml (targets and token file
                       pointed at this cordon, 1 s intervals) with alerts.yaml: the scrape is
                       up, the job card label survives, every rule evaluates, a denial and a
                       network kill raise their alerts, and every dashboard query runs.

promtool and prometheus come from Debian's prometheus package (scripts/setup).
"""

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import yaml

import harness as H

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASH_DIR = os.path.join(REPO, "dashboards")
DASHBOARD = os.path.join(DASH_DIR, "cordon.json")
ALERTS = os.path.join(DASH_DIR, "alerts.yaml")
ALERTS_TEST = os.path.join(DASH_DIR, "alerts_test.yaml")
PROM_CONFIG = os.path.join(DASH_DIR, "prometheus.yml")
PROVISIONING = os.path.join(DASH_DIR, "provisioning")

# Series Prometheus makes itself for every target; never in cordon's exposition.
PROMETHEUS_SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                        "scrape_samples_post_metric_relabeling", "scrape_series_added"}
# Grafana's variables, as substituted when a dashboard query is run by hand.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__range": "5m", "$__interval": "15s",
                "$job": ".*", "${job}": ".*"}


# --------------------------------------------------------------------------------------
# PromQL: the metric names of a query
# --------------------------------------------------------------------------------------

_AGGREGATORS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                "count_values", "bottomk", "topk", "quantile"}
_LABEL_LIST_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = _AGGREGATORS | _LABEL_LIST_WORDS | {
    "offset", "bool", "and", "or", "unless", "atan2", "inf", "nan"}
_IDENT_START = re.compile(r"[A-Za-z_:]")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"([A-Za-z_:][A-Za-z0-9_:]*)"')


def _skip_string(s, i):
    """Index after the string literal starting at s[i] (", ' or `)."""
    q = s[i]
    i += 1
    while i < len(s):
        if s[i] == "\\" and q != "`":
            i += 2
            continue
        if s[i] == q:
            return i + 1
        i += 1
    raise ValueError(f"unterminated string in {s!r}")


def _skip_group(s, i, open_c, close_c):
    """(index after the bracket closing the one at s[i], text inside), strings skipped."""
    depth, j = 0, i
    while j < len(s):
        c = s[j]
        if c in "\"'`":
            j = _skip_string(s, j)
            continue
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return j + 1, s[i + 1:j]
        j += 1
    raise ValueError(f"unbalanced {open_c} in {s!r}")


def _next_nonspace(s, i):
    while i < len(s) and s[i].isspace():
        i += 1
    return i


def promql_metric_names(expr):
    """The metric names a PromQL expression selects: identifiers that are not functions
    (followed by `(`), aggregators, keywords or label names (inside `{...}` or the label list
    of by/without/on/ignoring/group_left/group_right), plus `__name__="x"` matchers. Strings,
    numbers, durations, `[...]` ranges and Grafana `$variables` are skipped."""
    names = set()
    s = expr
    i = 0
    for _ in range(len(s) + 1):
        if i >= len(s):
            break
        c = s[i]
        if c.isspace():
            i += 1
        elif c == "#":                      # comment to end of line
            nl = s.find("\n", i)
            i = len(s) if nl < 0 else nl + 1
        elif c in "\"'`":
            i = _skip_string(s, i)
        elif c == "{":                      # label matchers
            i, inside = _skip_group(s, i, "{", "}")
            names.update(_NAME_MATCHER.findall(inside))
        elif c == "[":                      # range or subquery
            i, _ = _skip_group(s, i, "[", "]")
        elif c == "$":                      # Grafana variable: $name or ${name}
            if s.startswith("${", i):
                i, _ = _skip_group(s, i + 1, "{", "}")
            else:
                m = re.compile(r"\$[A-Za-z0-9_]*").match(s, i)
                i = m.end()
        elif c.isdigit() or (c == "." and i + 1 < len(s) and s[i + 1].isdigit()):
            m = re.compile(r"[0-9A-Za-z_.]+").match(s, i)   # 5, 0.99, 1e3, 0x1f, 5m, 1h30m
            i = m.end()
        elif _IDENT_START.match(c):
            m = _IDENT.match(s, i)
            word = m.group()
            i = m.end()
            j = _next_nonspace(s, i)
            if word.lower() in _LABEL_LIST_WORDS:
                if j < len(s) and s[j] == "(":
                    i, _ = _skip_group(s, j, "(", ")")
            elif word.lower() in _KEYWORDS:
                pass
            elif j < len(s) and s[j] == "(":
                pass                        # a function call
            else:
                names.add(word)
        else:
            i += 1                          # operators, parentheses, commas, @
    return names


class PromQLNamesTest(unittest.TestCase):
    CASES = [
        ('sum by (job, reason) (rate(cordon_denied_total{job=~"$job"}[$__rate_interval]))',
         {"cordon_denied_total"}),
        ('histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[5m])))',
         {"x_seconds_bucket"}),
        ('a / on(job) group_left(reason) b offset 5m > bool 0', {"a", "b"}),
        ('a * on (job) group_left c', {"a", "c"}),
        ('increase(a[5m]) > 0 or (a > 0 unless a offset 5m)', {"a"}),
        ('sum(rate(a[5m])) BY (job) / ignoring(x) sum without (y) (b)', {"a", "b"}),
        ('up{job="cordon"} == 0', {"up"}),
        ('absent(up{job="cordon", instance=~"a|b"})', {"up"}),
        ('{__name__="foo", job="x"}', {"foo"}),
        ('label_replace(a, "dst", "$1", "src", "(.*)")', {"a"}),
        ('max_over_time(a[10m:1m]) * 1e3 + Inf - NaN', {"a"}),
        ('topk(5, a) # a comment naming b', {"a"}),
        ('count_values("v", a) and on() vector(1)', {"a"}),
        ('sum(increase(a_sum[$__range])) / sum(increase(a_count[${__range}]))',
         {"a_sum", "a_count"}),
        ("a{reason='it\\'s'} + b:recorded:rate5m", {"a", "b:recorded:rate5m"}),
        ('a @ start() - a @ 1609746000', {"a"}),
    ]

    def test_cases(self):
        for expr, want in self.CASES:
            with self.subTest(expr=expr):
                self.assertEqual(promql_metric_names(expr), want)

    def test_unbalanced_is_an_error(self):
        for expr in ('rate(a{job="x"[5m])', 'a{job="x}'):
            with self.subTest(expr=expr):
                with self.assertRaises(ValueError):
                    promql_metric_names(expr)


# --------------------------------------------------------------------------------------
# The files
# --------------------------------------------------------------------------------------

def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def all_panels(dash):
    """Every panel, including those nested in collapsed rows."""
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []) or [])
    return out


def dashboard_exprs(dash):
    """[(where, expr)] of every panel query and annotation query."""
    out = []
    for p in all_panels(dash):
        for t in p.get("targets", []) or []:
            out.append((f"panel {p.get('id')} {p.get('title')!r} {t.get('refId')}",
                        t.get("expr", "")))
    for a in dash.get("annotations", {}).get("list", []):
        if a.get("expr"):
            out.append((f"annotation {a.get('name')!r}", a["expr"]))
    return out


def alert_rules():
    rules = []
    for g in load_yaml(ALERTS)["groups"]:
        rules.extend(g["rules"])
    return rules


def alert_exprs():
    return [(f"alert {r.get('alert') or r.get('record')}", r["expr"]) for r in alert_rules()]


def grafana_expand(expr):
    for k in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace(k, GRAFANA_VARS[k])
    return expr


class DashboardShapeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dash = load_dashboard()

    def test_top_level(self):
        d = self.dash
        self.assertRegex(d.get("uid", ""), r"^[A-Za-z0-9_-]{1,40}$")
        self.assertTrue(d.get("title"))
        self.assertIsInstance(d.get("schemaVersion"), int)
        self.assertGreaterEqual(d["schemaVersion"], 36, "not the current dashboard schema")
        self.assertIsNone(d.get("id"), "a provisioned dashboard carries no database id")
        self.assertNotIn("__inputs", d, "uses the datasource variable, not import inputs")
        self.assertIn("time", d)

    def test_variables(self):
        by_name = {v["name"]: v for v in self.dash["templating"]["list"]}
        ds = by_name.get("datasource")
        self.assertIsNotNone(ds, "no datasource variable")
        self.assertEqual(ds["type"], "datasource")
        self.assertEqual(ds["query"], "prometheus")
        job = by_name.get("job")
        self.assertIsNotNone(job, "no job variable")
        self.assertEqual(job["type"], "query")
        self.assertEqual(job["datasource"]["uid"], "${datasource}")
        q = job["query"]["query"] if isinstance(job["query"], dict) else job["query"]
        self.assertEqual(q, "label_values(cordon_connections_total, job)")
        self.assertTrue(job["multi"])
        self.assertTrue(job["includeAll"])

    def test_panels(self):
        panels = all_panels(self.dash)
        self.assertGreaterEqual(len(panels), 10)
        ids = [p.get("id") for p in panels]
        self.assertEqual(len(ids), len(set(ids)), f"duplicate panel ids: {ids}")
        self.assertTrue(all(isinstance(i, int) for i in ids), ids)
        queries = 0
        for p in panels:
            with self.subTest(panel=p.get("title")):
                self.assertTrue(p.get("title"))
                g = p.get("gridPos")
                self.assertIsNotNone(g, "no gridPos")
                for k in ("h", "w", "x", "y"):
                    self.assertIsInstance(g.get(k), int, f"gridPos.{k}")
                self.assertTrue(0 <= g["x"] and g["x"] + g["w"] <= 24 and g["w"] > 0
                                and g["h"] > 0 and g["y"] >= 0, g)
                if p["type"] == "row":
                    continue
                self.assertEqual(p.get("datasource"),
                                 {"type": "prometheus", "uid": "${datasource}"})
                self.assertTrue(p.get("description"), "no description")
                targets = p.get("targets") or []
                self.assertTrue(targets, "no queries")
                refs = [t.get("refId") for t in targets]
                self.assertEqual(len(refs), len(set(refs)), refs)
                for t in targets:
                    self.assertTrue(t.get("expr", "").strip(), f"target {t} has no expr")
                    self.assertEqual(t.get("datasource", {}).get("uid"), "${datasource}")
                    queries += 1
                unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
                self.assertTrue(unit, "no unit")
        self.assertGreater(queries, 0)

    def test_grid_has_no_overlaps(self):
        cells = {}
        for p in all_panels(self.dash):
            g = p["gridPos"]
            for y in range(g["y"], g["y"] + g["h"]):
                for x in range(g["x"], g["x"] + g["w"]):
                    self.assertNotIn((x, y), cells,
                                     f"{p['title']!r} overlaps {cells.get((x, y))!r}")
                    cells[(x, y)] = p["title"]

    def test_every_query_filters_by_job_where_the_metric_has_it(self):
        # Families with a `job` label (DESIGN.md): their panels follow the job variable.
        with_job = {"cordon_connections_total", "cordon_denied_total", "cordon_active_tunnels",
                    "cordon_bytes_total", "cordon_dns_queries_total",
                    "cordon_denial_bursts_total"}
        for where, expr in dashboard_exprs(self.dash):
            if where.startswith("annotation"):
                continue
            for name in promql_metric_names(expr) & with_job:
                with self.subTest(where=where):
                    self.assertRegex(expr, re.escape(name) + r'\{[^}]*job=~"\$job"',
                                     f"{where}: {name} not filtered by $job")

    def test_topics_covered(self):
        names = set()
        for _, expr in dashboard_exprs(self.dash):
            names |= promql_metric_names(expr)
        for want in ("cordon_denied_total", "cordon_connections_total", "cordon_bytes_total",
                     "cordon_active_tunnels", "cordon_sessions_active",
                     "cordon_kill_switch_engaged", "cordon_kill_duration_seconds_bucket",
                     "cordon_dns_queries_total", "cordon_upstream_connect_seconds_bucket",
                     "cordon_audit_write_errors_total", "cordon_config_reloads_total"):
            self.assertIn(want, names)
        types = {p["type"] for p in all_panels(self.dash)}
        self.assertIn("table", types, "no live denial table")
        self.assertTrue(any("histogram_quantile" in e for _, e in dashboard_exprs(self.dash)))


class AlertFilesTest(unittest.TestCase):
    REQUIRED = {"CordonEgressDenied", "CordonDenialBurst", "CordonKillSwitchEngaged",
                "CordonAuditWriteErrors", "CordonAuditRecordsDropped", "CordonConfigReloadFailed",
                "CordonDown",
                "CordonTargetMissing", "CordonMcpToolChanged"}

    def test_rules_have_severity_summary_description(self):
        rules = alert_rules()
        names = [r["alert"] for r in rules]
        self.assertEqual(len(names), len(set(names)), names)
        self.assertTrue(self.REQUIRED <= set(names), self.REQUIRED - set(names))
        for r in rules:
            with self.subTest(alert=r["alert"]):
                self.assertIn(r["labels"]["severity"], ("critical", "warning", "info"))
                self.assertTrue(r["annotations"]["summary"].strip())
                self.assertTrue(r["annotations"]["description"].strip())

    def test_every_rule_is_tested_firing_and_quiet(self):
        fires, quiet = set(), set()
        tests = load_yaml(ALERTS_TEST)
        self.assertEqual(tests["rule_files"], ["alerts.yaml"])
        for t in tests["tests"]:
            for case in t.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
        names = {r["alert"] for r in alert_rules()}
        self.assertEqual(names - fires, set(), "rules never shown to fire")
        self.assertEqual(names - quiet, set(), "rules never shown to stay quiet")

    def test_promtool_checks_rules(self):
        p = subprocess.run(["promtool", "check", "rules", ALERTS], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout)

    def test_scrape_config_and_provisioning(self):
        cfg = load_yaml(PROM_CONFIG)
        self.assertEqual(cfg["rule_files"], ["alerts.yaml"])
        self.assertTrue(cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"])
        (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "cordon"]
        self.assertIs(job["honor_labels"], True, "the job card label would be renamed")
        self.assertEqual(job.get("metrics_path", "/metrics"), "/metrics")
        self.assertEqual(job["authorization"]["type"], "Bearer")
        self.assertTrue(job["authorization"]["credentials_file"])
        ds = load_yaml(os.path.join(PROVISIONING, "datasources", "prometheus.yaml"))
        self.assertEqual(ds["datasources"][0]["type"], "prometheus")
        prov = load_yaml(os.path.join(PROVISIONING, "dashboards", "cordon.yaml"))
        self.assertEqual(prov["providers"][0]["type"], "file")
        self.assertTrue(prov["providers"][0]["options"]["path"])


# --------------------------------------------------------------------------------------
# A running cordon, driven so that every family has a series
# --------------------------------------------------------------------------------------

HTTP = DNS = None


def setUpModule():
    global HTTP, DNS
    HTTP = H.HTTPOrigin()
    DNS = H.FakeDNS({"a.test": {"A": ["127.0.0.1"]}, "denied.test": {"A": ["127.0.0.5"]}})


def tearDownModule():
    for o in (HTTP, DNS):
        if o is not None:
            o.stop()


def jobs_yaml():
    return (
        "  web:\n"
        "    task: integration tests of the dashboards\n"
        "    egress:\n"
        f"      - {{ host: localhost, ports: [{HTTP.port}], protocol: http, methods: [GET], "
        "resolves_to: [127.0.0.0/8, \"::1/128\"] }\n"
        "      - { host: a.test, ports: [443], resolves_to: [127.0.0.0/8] }\n"
        "    identity: { ttl: 30m }\n")


def start_cordon(attempts=3):
    """cordon on ephemeral ports. A start that fails with EADDRINUSE is retried, and said on
    stderr: listeners on port 0 that must share the port picked first (the DNS listener's
    UDP and TCP sockets, one per worker) can find it held by another test's socket."""
    for n in range(1, attempts + 1):
        try:
            return _start_cordon()
        except H.CordonError as e:
            if "Address already in use" not in str(e) or n == attempts:
                raise
            print(f"test_dashboards: cordon start {n} hit EADDRINUSE; retrying",
                  file=sys.stderr)
    raise AssertionError("unreachable")


def _start_cordon():
    c = H.Cordon(jobs_yaml(), DNS.port, listen_dns="127.0.0.1:0",
                 dns_yaml="  default_job: web\n",
                 proxy_opts={"header_timeout": "5s", "idle_timeout": "30s",
                             "connect_timeout": "5s"})
    # No alerts.webhook: denial bursts are counted on a default install too.
    try:
        c.start()
    except BaseException:
        c.cleanup()
        raise
    return c


def dns_query(addr, name, qid):
    """Sends one A query over UDP; returns the rcode, or None without an answer."""
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack("!HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.settimeout(2)
        s.sendto(q, addr)
        data, _ = s.recvfrom(4096)
        return data[3] & 15 if len(data) >= 12 else None
    except OSError:
        return None
    finally:
        s.close()


def proxy_get(cordon, session, url):
    """(status, X-Cordon-Deny or None) of a GET through the proxy."""
    p = H.run_curl(["-s", "-o", "/dev/null", "-D", "-", "--max-time", "10",
                    "-x", cordon.proxy_url(session), url])
    head = p.stdout.decode("latin-1")
    m = re.match(r"HTTP/\S+ (\d+)", head)
    deny = re.search(r"(?im)^x-cordon-deny:\s*(\S+)", head)
    return (int(m.group(1)) if m else None), (deny.group(1) if deny else None)


def drive_traffic(test, cordon):
    """Uses every feature once or a few times, so that every family has series."""
    s = cordon.create_session("web")
    status, _ = proxy_get(cordon, s, f"http://localhost:{HTTP.port}/")
    test.assertEqual(status, 200, cordon.stderr_text())
    # 12 denials of one session within seconds: past the burst threshold (10 a minute).
    for _ in range(12):
        status, reason = proxy_get(cordon, s, "http://denied.test/")
        test.assertEqual((status, reason), (403, "no_rule"))
    test.assertEqual(dns_query(cordon.dns_addr, "a.test", 1), 0)
    test.assertEqual(dns_query(cordon.dns_addr, "denied.test", 2), 5)
    tok = cordon.mint_token(s["id"])
    status, _ = cordon.admin("DELETE", f"/v1/sessions/{s['id']}/tokens/{tok['token_id']}")
    test.assertIn(status, (200, 204))
    status, _ = cordon.admin("POST", "/v1/kill", {"reason": "dashboard test", "by": "tests"})
    test.assertEqual(status, 200)
    status, _ = cordon.admin("POST", "/v1/revive", {"reason": "dashboard test", "by": "tests"})
    test.assertEqual(status, 200)
    status, _ = cordon.admin("POST", "/v1/reload", {})
    test.assertEqual(status, 200)
    with open(cordon.config_path) as f:
        good = f.read()
    cordon.write_policy(raw_text=good + "no_such_key: 1\n")
    status, _ = cordon.admin("POST", "/v1/reload", {})
    test.assertNotEqual(status, 200, "a policy with an unknown key was accepted")
    cordon.write_policy(raw_text=good)
    return s


def scrape(test, cordon):
    status, _, raw = cordon.admin_raw("GET", "/metrics")
    test.assertEqual(status, 200, raw[:300])
    return raw.decode("utf-8")


def exposition(text):
    """(sample names, {family: type}) of a Prometheus text exposition."""
    samples, types = set(), {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                types[parts[2]] = parts[3]
        elif line and not line.startswith("#"):
            m = re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line)
            if m:
                samples.add(m.group())
    return samples, types


# Served only by an instance with `cluster` (docs/fleet.md); test_fleet scrapes them there.
FLEET_ONLY = {"cordon_cluster_store_up", "cordon_cluster_instances",
              "cordon_kill_propagation_seconds", "cordon_kill_propagation_seconds_bucket"}


def missing_metrics(names, text):
    """{name: why} for each referenced name the scrape does not serve."""
    samples, types = exposition(text)
    out = {}
    for n in sorted(names):
        if n in PROMETHEUS_SYNTHETIC or n in samples or n in FLEET_ONLY:
            continue
        if types.get(n) in ("histogram", "summary"):
            out[n] = f"is a {types[n]} family: query {n}_bucket, _sum or _count"
            continue
        base = re.sub(r"_(bucket|sum|count)$", "", n)
        if base != n and types.get(base) in ("histogram", "summary"):
            out[n] = f"{types[base]} {base} is declared but has no {n} sample"
        elif n in types:
            out[n] = "declared (# TYPE) but no sample"
        else:
            out[n] = "not in the scrape"
    return out


class ScrapeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cordon = start_cordon()

    @classmethod
    def tearDownClass(cls):
        cls.cordon.cleanup()

    def test_every_metric_of_the_dashboard_and_the_alerts_is_served(self):
        drive_traffic(self, self.cordon)
        text = scrape(self, self.cordon)
        where = {}
        for w, expr in dashboard_exprs(load_dashboard()) + alert_exprs():
            for n in promql_metric_names(expr):
                where.setdefault(n, []).append(w)
        self.assertIn("cordon_denied_total", where)
        missing = missing_metrics(where, text)
        self.assertEqual(
            missing, {}, "metrics named by dashboards/ but not served by cordon:\n" +
            "\n".join(f"  {n}: {why} (used by {', '.join(where[n][:3])})"
                      for n, why in missing.items()))

    def test_promtool_check_metrics(self):
        self.cordon.create_session("web")
        text = scrape(self, self.cordon)
        p = subprocess.run(["promtool", "check", "metrics"], input=text,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, f"promtool check metrics:\n{p.stdout}")


# --------------------------------------------------------------------------------------
# A real Prometheus on dashboards/prometheus.yml and alerts.yaml
# --------------------------------------------------------------------------------------

class Prometheus:
    """`prometheus` on 127.0.0.1:<free port> with its TSDB in a temp dir."""

    def __init__(self, tmp, config_path):
        self.port = H.free_port()
        self.log = open(os.path.join(tmp, "prometheus.log"), "wb")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config_path}",
             f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        ok = H.wait_until(lambda: self.proc.poll() is None and self._ready(), 30, 0.2)
        if not ok:
            self.stop()
            raise AssertionError(f"prometheus not ready:\n{self.log_text()}")

    def _ready(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready",
                                        timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return json.load(e)

    def query(self, expr):
        return self.api("query", query=expr)

    def alerts(self, name):
        return [a for a in self.api("alerts")["data"]["alerts"]
                if a["labels"].get("alertname") == name]

    def log_text(self):
        self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read().decode("utf-8", "replace")[-4000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


class PrometheusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("prometheus") is None:
            raise AssertionError("no prometheus binary: run scripts/setup")
        cls.cordon = start_cordon()
        cls.prom = None
        try:
            cls.tmp = H.TempDir("cordon-it-prom-")
            cfg = load_yaml(PROM_CONFIG)
            cfg["global"]["scrape_interval"] = "1s"
            cfg["global"]["evaluation_interval"] = "1s"
            cfg["rule_files"] = [ALERTS]
            del cfg["alerting"]          # no Alertmanager here: alerts are read from the API
            (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "cordon"]
            job["authorization"]["credentials_file"] = cls.cordon.token_file
            host, port = cls.cordon.admin_addr
            job["static_configs"] = [{"targets": [f"{host}:{port}"]}]
            cls.config = cls.tmp.join("prometheus.yml")
            with open(cls.config, "w") as f:
                yaml.safe_dump(cfg, f)
            p = subprocess.run(["promtool", "check", "config", cls.config],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=60)
            if p.returncode != 0:
                raise AssertionError(f"promtool check config:\n{p.stdout}")
            cls.prom = Prometheus(cls.tmp.path, cls.config)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.prom is not None:
            cls.prom.stop()
        cls.cordon.cleanup()
        if getattr(cls, "tmp", None):
            cls.tmp.cleanup()

    def wait_query(self, expr, pred, timeout=20):
        last = None

        def check():
            nonlocal last
            last = self.prom.query(expr)
            return last.get("status") == "success" and pred(last["data"]["result"])
        ok = H.wait_until(check, timeout, 0.25)
        self.assertTrue(ok, f"{expr}: {last}\n{self.prom.log_text()}")
        return last["data"]["result"]

    def wait_alert(self, name, pred, timeout=20):
        found = []

        def check():
            nonlocal found
            found = [a for a in self.prom.alerts(name) if pred(a)]
            return found
        H.wait_until(check, timeout, 0.25)
        return found

    def test_scrape_rules_alerts_and_dashboard_queries(self):
        # The scrape works with the config's bearer token file; the job card label is kept.
        self.wait_query('up{job="cordon"} == 1', bool)
        s = drive_traffic(self, self.cordon)
        self.wait_query('cordon_connections_total{job="web", decision="allowed"} > 0', bool)
        values = self.prom.api("label/job/values", **{"match[]": "cordon_connections_total"})
        self.assertIn("web", values["data"], "the job variable would not list job web")

        # Every rule loads and evaluates.
        def rules_ok():
            groups = self.prom.api("rules")["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            return (len(rules) == len(alert_rules()) and
                    all(r["health"] == "ok" and r["lastEvaluation"][:4] != "0001"
                        for r in rules)), rules
        ok = H.wait_until(lambda: rules_ok()[0], 20, 0.25)
        self.assertTrue(ok, rules_ok()[1])

        # The denials raise CordonEgressDenied with the job and reason; a new kind of
        # denial, after Prometheus has seen the counter at zero, too.
        self.assertTrue(self.wait_alert(
            "CordonEgressDenied",
            lambda a: a["state"] == "firing" and a["labels"].get("job") == "web"
            and a["labels"].get("reason") == "no_rule"), self.prom.api("alerts"))
        status, reason = proxy_get(self.cordon, s, "http://localhost:1/")
        self.assertEqual(status, 403)
        self.assertTrue(self.wait_alert(
            "CordonEgressDenied",
            lambda a: a["state"] == "firing" and a["labels"].get("reason") == reason),
            self.prom.api("alerts"))
        self.assertTrue(self.wait_alert(
            "CordonDenialBurst",
            lambda a: a["state"] == "firing" and a["labels"].get("job") == "web"),
            self.prom.api("alerts"))

        # Nothing else is wrong.
        for name in ("CordonKillSwitchEngaged", "CordonAuditWriteErrors", "CordonDown",
                     "CordonTargetMissing"):
            self.assertEqual(self.prom.alerts(name), [], name)

        # A network kill raises CordonKillSwitchEngaged; the revive clears it.
        status, _ = self.cordon.admin("POST", "/v1/kill", {"reason": "alert test", "by": "t"})
        self.assertEqual(status, 200)
        try:
            self.assertTrue(self.wait_alert("CordonKillSwitchEngaged",
                                            lambda a: a["state"] == "firing"))
        finally:
            status, _ = self.cordon.admin("POST", "/v1/revive",
                                          {"reason": "alert test", "by": "t"})
            self.assertEqual(status, 200)
        H.wait_until(lambda: not self.prom.alerts("CordonKillSwitchEngaged"), 20, 0.25)
        self.assertEqual(self.prom.alerts("CordonKillSwitchEngaged"), [])

        # The failed reload of drive_traffic raises CordonConfigReloadFailed.
        self.assertTrue(self.wait_alert("CordonConfigReloadFailed",
                                        lambda a: a["state"] == "firing"))

        # Every dashboard query runs; those not filtered by "> 0" return series (but the Fleet
        # row's: this cordon has no `cluster`; test_fleet checks those metrics are served).
        time.sleep(2)  # a few more scrapes, so that rates over the run have two samples
        for where, expr in dashboard_exprs(load_dashboard()):
            with self.subTest(where=where):
                r = self.prom.query(grafana_expand(expr))
                self.assertEqual(r.get("status"), "success", f"{expr}: {r}")
                if not re.search(r">\s*0\s*$", expr) and \
                        not promql_metric_names(expr) <= FLEET_ONLY:
                    self.assertTrue(r["data"]["result"], f"{expr}: no series")


if __name__ == "__main__":
    unittest.main()
