"""What a newcomer meets first (issue 19): the variables `cordon session create` prints,
`cordon status`'s denial rows, and scripts/test's summary (tests/summary.py).

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_newcomer   (from tests/integration)

test_session_create_exports_both_cases: the printed `export` lines, run by a shell, make curl
(which reads only the lower-case http_proxy for http:// URLs) go through cordon to a name only
cordon can resolve; upper case alone sends it direct, where the name does not resolve.
test_status_rows_add_up: four denied targets with the default --top 3: the rows under the
job add up to its DENIED (and to "denied N since start"), the rest on one line.
test_summary_counts_methods_and_names_failures: a ctest JUnit file and run_suite.py records
made up here: methods counted, not suites; every failure named; a suite without `end` counted
as failed; the last line "total: N passed, M failed".
"""

import os
import re
import subprocess
import sys
import time
import unittest

import harness as H

HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARY = os.path.join(HERE, "..", "summary.py")


def cordon(*args, env=None):
    return subprocess.run([H.CORDON_BIN, *args], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=30, env=env)


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.http = H.HTTPOrigin()
        cls.addClassCleanup(cls.http.stop)
        cls.dns = H.FakeDNS({"web.test": {"A": ["127.0.0.1"]}})
        cls.addClassCleanup(cls.dns.stop)
        jobs = ("  agent:\n"
                "    task: fetch one page\n"
                "    egress:\n"
                f"      - {{ host: web.test, ports: [{cls.http.port}], protocol: http, "
                "methods: [GET], resolves_to: [127.0.0.0/8] }\n")
        cls.c = H.Cordon(jobs, cls.dns.port)
        cls.addClassCleanup(cls.c.cleanup)
        cls.c.start()
        cls.admin = ["--admin", f"http://{cls.c.admin_addr[0]}:{cls.c.admin_addr[1]}",
                     "--admin-token-file", cls.c.token_file]

    def test_session_create_exports_both_cases(self):
        r = cordon("session", "create", "agent", *self.admin)
        self.assertEqual(r.returncode, 0, r.stderr)
        exports = [ln.strip() for ln in r.stdout.splitlines()
                   if ln.strip().startswith("export ")]
        self.assertEqual(len(exports), 2, r.stdout)
        names = re.findall(r"\b([A-Za-z_]+)=", " ".join(exports))
        self.assertEqual(sorted(names), sorted(["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY",
                                                "https_proxy", "http_proxy", "all_proxy"]))
        url = f"http://web.test:{self.http.port}/"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.c.tmp.path}
        # Direct, curl would find web.test on loopback (--resolve, no DNS query leaves the
        # machine); through cordon, it is a conn.open in the audit log.
        curl = (f"curl -q -s -o /dev/null -w '%{{http_code}}' -m 10 "
                f"--resolve web.test:{self.http.port}:127.0.0.1 {url}")

        def opened():
            return len([e for e in self.c.audit_events() if e["event"] == "conn.open"
                        and e.get("target", "").startswith("web.test:")])

        before = opened()
        got = subprocess.run(["sh", "-c", "\n".join(exports) + "\n" + curl], env=env,
                             stdout=subprocess.PIPE, text=True, timeout=30)
        self.assertEqual(got.stdout, "200")
        self.assertTrue(H.wait_until(lambda: opened() == before + 1, 5, 0.05),
                        "curl went through cordon")
        # The control: what it printed before, upper-case HTTPS_PROXY and HTTP_PROXY, leaves
        # curl direct for http://.
        old = re.sub(r" ALL_PROXY=\S+", "", exports[0])
        self.assertIn("HTTP_PROXY=", old)
        got = subprocess.run(["sh", "-c", old + "\n" + curl], env=env,
                             stdout=subprocess.PIPE, text=True, timeout=30)
        self.assertEqual(got.stdout, "200")
        time.sleep(0.5)
        self.assertEqual(opened(), before + 1, "upper case only: curl went direct")

    def test_status_rows_add_up(self):
        s = self.c.create_session("agent")
        for name in ("a", "b", "c", "d"):
            conn, resp = self.c.tunnel(s, f"{name}.nowhere.example:443")
            conn.close()
            self.assertEqual(resp.status, 403)
        self.assertTrue(self.c.wait_events(lambda e: e["event"] == "conn.deny", count=4))
        r = cordon("status", *self.admin)
        self.assertEqual(r.returncode, 0, r.stderr)
        total = int(re.search(r"^denied\s+(\d+) since start$", r.stdout, re.M).group(1))
        lines = r.stdout.splitlines()
        at = next(i for i, ln in enumerate(lines) if ln.startswith("agent "))
        denied = int(lines[at].split()[1])
        rows = []
        for ln in lines[at + 1:]:
            if not ln.startswith("  "):
                break
            rows.append(ln)
        self.assertEqual(total, denied)
        self.assertGreaterEqual(denied, 4)
        self.assertEqual(sum(int(ln.split()[0]) for ln in rows), denied, r.stdout)
        self.assertEqual(len([ln for ln in rows if "nowhere.example:443" in ln]), 3)
        self.assertRegex(rows[-1], r"^\s+\d+  to \d+ more targets? \(--top \d+ lists them\)$")
        r = cordon("status", "--top", "10", *self.admin)
        self.assertEqual(len(re.findall(r"nowhere\.example:443", r.stdout)), 4, r.stdout)
        self.assertNotIn("more target", r.stdout)


class SummaryTest(unittest.TestCase):
    def test_summary_counts_methods_and_names_failures(self):
        tmp = H.TempDir("cordon-it-summary-")
        self.addCleanup(tmp.cleanup)
        junit = tmp.join("junit.xml")
        with open(junit, "w") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuite tests="6">\n'
                    '<testcase name="unit: load: a" status="run"/>\n'
                    '<testcase name="unit: load: b" status="fail"><failure message=""/>'
                    '</testcase>\n'
                    '<testcase name="fuzz: x" status="notrun">'
                    '<skipped message="Unable to find executable"/></testcase>\n'
                    '<testcase name="integration: proxy" status="fail"><failure/></testcase>\n'
                    '<testcase name="integration: kill" status="fail"><failure/></testcase>\n'
                    '<testcase name="integration: dns" status="run"/>\n'
                    '</testsuite>\n')
        results = tmp.join("results")
        os.makedirs(results)
        with open(os.path.join(results, "proxy.txt"), "w") as f:
            f.write("begin test_proxy\nok test_proxy.A.test_1\nok test_proxy.A.test_2\n"
                    "FAIL test_proxy.B.test_3\nERROR test_proxy.C.setUpClass\n"
                    "skip test_proxy.D.test_4 needs root\nend\n")
        with open(os.path.join(results, "kill.txt"), "w") as f:
            f.write("begin test_kill\nok test_kill.A.test_1\n")  # timed out
        with open(os.path.join(results, "dns.txt"), "w") as f:
            f.write("begin test_dns\nok test_dns.A.test_1\nok test_dns.A.test_2\n"
                    "ok test_dns.A.test_3\nend\n")
        r = subprocess.run([sys.executable, SUMMARY, f"build={junit}={results}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = r.stdout.splitlines()
        # passed: unit a, proxy 2, kill 1, dns 3 = 7; failed: unit b, fuzz x (not run),
        # proxy test_3 and setUpClass, kill did not finish = 5; skipped: proxy test_4.
        self.assertEqual(lines[-1], "total: 7 passed, 5 failed")
        self.assertEqual(lines[0], "build: 7 passed, 5 failed, 1 skipped")
        failed = [ln for ln in lines if ln.startswith("failed: ")]
        self.assertEqual(failed, [
            "failed: [build] unit: load: b (fail)",
            "failed: [build] fuzz: x (notrun)",
            "failed: [build] integration: proxy: test_proxy.B.test_3 (FAIL)",
            "failed: [build] integration: proxy: test_proxy.C.setUpClass (ERROR)",
            "failed: [build] integration: kill: did not finish (timeout or crash; see its "
            "output above)",
        ])
        # A missing JUnit file (ctest never ran) is a failure, not "0 failed".
        r = subprocess.run([sys.executable, SUMMARY, f"b={tmp.join('none.xml')}={results}"],
                           stdout=subprocess.PIPE, text=True, timeout=30)
        self.assertEqual(r.stdout.splitlines()[-1], "total: 0 passed, 1 failed")


if __name__ == "__main__":
    unittest.main()
