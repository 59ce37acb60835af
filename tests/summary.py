"""scripts/test's summary: counts test methods, not ctest entries, and names every failure.

Usage: python3 tests/summary.py LABEL=JUNIT_XML=RESULTS_DIR ...
  one argument per ctest run: its label, the file of `ctest --output-junit`, and the
  directory where tests/integration/run_suite.py recorded each method of the Python suites.

Each ctest entry counts as one test (a Catch2 TEST_CASE, a fuzz target, a script), except a
Python suite ("integration: NAME") with a record NAME.txt: it counts as its methods, and a
record without its `end` line (the suite timed out or crashed) adds one failure. Prints a
line per run, `failed: [LABEL] NAME` per failure, and last `total: N passed, M failed`.
"""

import os
import sys
import xml.etree.ElementTree as ET

PREFIX = "integration: "


def read_record(path):
    """(methods {name: outcome}, skipped reasons {name: reason}, finished)"""
    methods, reasons, finished = {}, {}, False
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            word, _, rest = line.partition(" ")
            if word == "end":
                finished = True
            elif word in ("ok", "FAIL", "ERROR", "skip"):
                name, _, reason = rest.partition(" ")
                # A failed subtest and its test: the failure wins.
                if methods.get(name) not in ("FAIL", "ERROR"):
                    methods[name] = word
                if word == "skip":
                    reasons[name] = reason
    return methods, reasons, finished


def summarize(label, junit, results):
    passed, failed, skipped, names = 0, 0, 0, []
    try:
        cases = ET.parse(junit).getroot().iter("testcase")
        cases = list(cases)
    except (OSError, ET.ParseError) as e:
        return 0, 1, 0, [f"ctest wrote no results ({e})"]
    for case in cases:
        name = case.get("name", "?")
        status = case.get("status", "")
        skip = case.find("skipped")
        ok = status == "run" and case.find("failure") is None
        is_skip = status == "notrun" and skip is not None and \
            skip.get("message", "").startswith("SKIP_")
        record = None
        if name.startswith(PREFIX):
            path = os.path.join(results, name[len(PREFIX):] + ".txt")
            if os.path.exists(path):
                record = read_record(path)
        if record is None:
            if ok:
                passed += 1
            elif is_skip:
                skipped += 1
            else:
                failed += 1
                names.append(f"{name} ({status or 'unknown'})")
            continue
        methods, _, finished = record
        bad = 0
        for method, outcome in sorted(methods.items()):
            if outcome == "ok":
                passed += 1
            elif outcome == "skip":
                skipped += 1
            else:
                bad += 1
                names.append(f"{name}: {method} ({outcome})")
        failed += bad
        if not finished:
            failed += 1
            names.append(f"{name}: did not finish (timeout or crash; see its output above)")
        elif not ok and bad == 0:
            failed += 1
            names.append(f"{name}: exited non-zero with every method passed")
    return passed, failed, skipped, names


def main(argv):
    total_passed = total_failed = 0
    failures = []
    for arg in argv:
        label, junit, results = arg.split("=", 2)
        p, f, s, names = summarize(label, junit, results)
        print(f"{label}: {p} passed, {f} failed, {s} skipped")
        total_passed += p
        total_failed += f
        failures += [f"failed: [{label}] {n}" for n in names]
    for line in failures:
        print(line)
    print(f"total: {total_passed} passed, {total_failed} failed")
    return 0 if total_failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
