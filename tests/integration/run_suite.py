"""Runs one integration suite as `python3 -m unittest -v test_SUITE` does, and records each
test method's outcome, one line as it ends, for scripts/test's summary (tests/summary.py).

Usage (ctest runs it; tests/CMakeLists.txt): python3 run_suite.py SUITE [CLASS.METHOD ...]
With CLASS.METHOD arguments only those tests of the suite run (the TSan build's short subset).
The record goes to $CORDON_TEST_RESULTS/SUITE.txt when that is set:

    begin test_proxy
    ok test_proxy.ForwardedResponseTests.test_chunked_body
    FAIL test_proxy.ForwardedResponseTests.test_interim_response
    ERROR test_proxy.SomeTests.setUpClass
    skip test_firewall.FirewallCliTest.test_usage_errors needs root
    end

A file without its `end` line is a suite that did not finish (timeout, crash): the summary
counts it as failed. Exit status as unittest's: 0 when every test passed.
"""

import os
import sys
import unittest


class RecordingResult(unittest.TextTestResult):
    record = None  # the open results file, or None

    def _write(self, word, test, extra=""):
        if self.record is None:
            return
        name = test.id() if hasattr(test, "id") else str(test)
        # setUpClass / setUpModule errors come as an _ErrorHolder: "setUpClass (mod.Class)"
        desc = str(test)
        if " (" in desc and desc.startswith(("setUpClass", "tearDownClass", "setUpModule",
                                             "tearDownModule")):
            fixture, where = desc.split(" (", 1)
            name = where.rstrip(")") + "." + fixture
        line = f"{word} {name}"
        if extra:
            line += " " + " ".join(str(extra).split())[:200]
        self.record.write(line + "\n")
        self.record.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._write("ok", test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._write("FAIL", test)

    def addError(self, test, err):
        super().addError(test, err)
        self._write("ERROR", test)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._write("skip", test, reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._write("ok", test)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._write("FAIL", test, "unexpected success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            word = "FAIL" if issubclass(err[0], test.failureException) else "ERROR"
            self._write(word, subtest)


def main():
    if len(sys.argv) < 2:
        print("usage: run_suite.py SUITE [CLASS.METHOD ...]", file=sys.stderr)
        return 2
    suite_name = "test_" + sys.argv[1]
    results = os.environ.get("CORDON_TEST_RESULTS")
    if results:
        os.makedirs(results, exist_ok=True)
        RecordingResult.record = open(os.path.join(results, sys.argv[1] + ".txt"), "w")
        RecordingResult.record.write(f"begin {suite_name}\n")
        RecordingResult.record.flush()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    names = [f"{suite_name}.{m}" for m in sys.argv[2:]] or [suite_name]
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=RecordingResult)
    result = runner.run(suite)
    if RecordingResult.record is not None:
        RecordingResult.record.write("end\n")
        RecordingResult.record.close()
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
