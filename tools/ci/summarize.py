#!/usr/bin/env python3
"""Counts test results over every suite and prints one closing line "N passed, N failed".

Arguments: LABEL=RESULTS_DIR[:MESON_TESTLOG] for each suite run. Each directory holds GoogleTest JSON reports (one per binary, from GTEST_OUTPUT=json:DIR/) and
pytest JUnit XML files, plus meson's testlog.json; binaries declared with meson's protocol 'gtest'
write their report where meson tells them (<build dir>/<test name>.xml) and are read from there. A test binary that meson saw fail but that left
no report (a crash, a timeout) counts as one failure, so nothing disappears from the count; a
test without a report of cases (a script) counts as one test, passed or skipped as meson saw it.
Exit status 1 when anything failed.
"""
import collections
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

# GoogleTest prints a GTEST_SKIP() as "file:line: Skipped", the message, then the "[  SKIPPED ]"
# line; its JSON report (1.12) keeps no message, so the reasons come from the output meson kept.
GTEST_SKIP = re.compile(r": Skipped\n(.*?)\n\[  SKIPPED \] ", re.S)


def gtest_counts(path):
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    passed = failed = skipped = 0
    failures = []
    for suite in report.get("testsuites", []):
        for case in suite.get("testsuite", []):
            name = f"{suite.get('name')}.{case.get('name')}"
            if case.get("failures"):
                failed += 1
                failures.append(name)
            elif case.get("result") == "SKIPPED" or case.get("status") == "NOTRUN":
                skipped += 1
            else:
                passed += 1
    return passed, failed, skipped, failures


def junit_counts(path, reasons=None):
    """Counts; with `reasons` (a Counter), also each skipped case's message (pytest writes it)."""
    root = ET.parse(path).getroot()
    passed = failed = skipped = 0
    failures = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            failures.append(name)
        elif case.find("skipped") is not None or case.get("status") == "notrun":
            skipped += 1
            message = case.find("skipped").get("message") if case.find("skipped") is not None else ""
            if reasons is not None and message:
                reasons[message.strip()] += 1
        else:
            passed += 1
    return passed, failed, skipped, failures


def summarize_dir(label, results_dir, testlog, totals, failures, skip_reasons):
    """Adds one results directory (and the meson testlog of the build that produced it);
    skip_reasons[label] counts why tests were skipped."""
    reasons = skip_reasons.setdefault(label, collections.Counter())
    reported = {}  # gtest binary name -> failures in its report
    names = sorted(os.listdir(results_dir)) if os.path.isdir(results_dir) else []
    for name in names:
        path = os.path.join(results_dir, name)
        try:
            if name.endswith(".json"):
                counts = gtest_counts(path)
                reported[name[: -len(".json")]] = counts[1]
            elif name.endswith(".xml"):
                counts = junit_counts(path, reasons)
            else:
                continue
        except (ValueError, ET.ParseError, OSError) as err:
            counts = (0, 1, 0, [f"{name}: unreadable report ({err})"])
        for i in range(3):
            totals[i] += counts[i]
        failures += [f"{label}{f}" for f in counts[3]]
        print(f"  {label}{name}: {counts[0]} passed, {counts[1]} failed, {counts[2]} skipped")

    if testlog and os.path.exists(testlog):
        # Binaries declared with meson's protocol 'gtest' get GTEST_OUTPUT from meson, not from
        # us: their report is <build dir>/<test name>.xml (JUnit). Count those cases too.
        build_dir = os.path.dirname(os.path.dirname(os.path.abspath(testlog)))
        with open(testlog, encoding="utf-8") as f:
            entries = [json.loads(line) for line in f if line.strip()]
        for entry in entries:
            for message in GTEST_SKIP.findall(entry.get("stdout") or ""):
                reasons[message.strip()] += 1
        for entry in entries:
            exe = os.path.basename((entry.get("command") or entry.get("cmd") or [""])[0])
            # meson names a test "project:suite / name" in its log once the project has more
            # than one suite; the report file is named after the test alone.
            plain = (entry.get("name") or "").split(" / ")[-1]
            xml = os.path.join(build_dir, f"{plain}.xml")
            if exe in reported or not entry.get("name") or not os.path.exists(xml):
                continue
            try:
                counts = junit_counts(xml)
            except (ET.ParseError, OSError) as err:
                counts = (0, 1, 0, [f"{entry.get('name')}.xml: unreadable report ({err})"])
            reported[exe] = counts[1]
            for i in range(3):
                totals[i] += counts[i]
            failures += [f"{label}{f}" for f in counts[3]]
            print(f"  {label}{entry.get('name')}.xml: {counts[0]} passed, {counts[1]} failed, "
                  f"{counts[2]} skipped")
        for entry in entries:
            exe = os.path.basename((entry.get("command") or entry.get("cmd") or [""])[0])
            if exe not in reported and entry.get("result") in ("OK", "SKIP"):
                # A test without a report of cases (a script: install checks, the example
                # program) is one test.
                totals[0 if entry.get("result") == "OK" else 2] += 1
                continue
            if entry.get("result") in ("OK", "SKIP", "EXPECTEDFAIL"):
                continue
            # Failed in meson's eyes but no failing case in a report: a crash, a timeout or
            # a sanitizer error at exit. Count it once.
            if reported.get(exe, 0) == 0:
                totals[1] += 1
                failures.append(f"{label}{entry.get('name')}: {entry.get('result')} "
                                "(exit status)")


def main():
    """Arguments: LABEL=RESULTS_DIR[:MESON_TESTLOG] ..."""
    totals = [0, 0, 0]
    failures = []
    skip_reasons = {}
    for arg in sys.argv[1:]:
        label, _, rest = arg.partition("=")
        results_dir, _, testlog = rest.partition(":")
        summarize_dir(f"{label}/" if label else "", results_dir, testlog or None, totals,
                      failures, skip_reasons)
    for name in failures:
        print(f"  FAILED: {name}")
    # The closing line CI reads is exactly "N passed, N failed"; skips go on the lines before.
    print(f"  {totals[2]} skipped" + (", why:" if totals[2] else ""))
    for label, reasons in skip_reasons.items():
        for message, count in sorted(reasons.items()):
            print(f"    {label.rstrip('/') or 'tests'}: {count} x {message}")
    print(f"{totals[0]} passed, {totals[1]} failed")
    return 1 if totals[1] else 0


if __name__ == "__main__":
    sys.exit(main())
