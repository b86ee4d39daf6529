#!/usr/bin/python3
"""Prints the ninja targets the unit tests of a configured meson build need (each test's
executable and its declared `depends`), one per line, relative to the build directory. The
sanitizer build of tools/run-tests builds only these: it runs the unit suite and nothing else,
so daemons, tools and benchmarks would be compiled for nothing. With test names, only those
tests' targets (the ThreadSanitizer build runs the threaded components' tests only).

With --all-but-tests, the complement for the main build: every target built by default except
the unit tests' executables and whatever is defined under tests/ (their helpers). The lab and
torch suites, the demo and the tools need nothing more; the unit suite runs in the sanitizer
build, so compiling it a second time here would be CI time for nothing.

Usage: tools/ci/unit_targets.py BUILD_DIR [TEST_NAME...]
       tools/ci/unit_targets.py --all-but-tests BUILD_DIR
"""
import json
import os
import subprocess
import sys


def introspect(build: str, what: str):
    return json.loads(subprocess.run(["meson", "introspect", what, build], capture_output=True,
                                     text=True, check=True).stdout)


def all_but_tests(build: str) -> int:
    with open(os.path.join(build, "meson-info", "meson-info.json")) as f:
        info = json.load(f)
    tests_dir = os.path.join(info["directories"]["source"], "tests") + os.sep
    unit_executables = {os.path.abspath(t["cmd"][0]) for t in introspect(build, "--tests")
                        if any(s.split(":")[-1] == "unit" for s in t["suite"])}
    wanted = []
    for target in introspect(build, "--targets"):
        if not target.get("build_by_default", True):
            continue
        if target["defined_in"].startswith(tests_dir):
            continue
        files = [os.path.abspath(f) for f in target.get("filename", [])]
        if any(f in unit_executables for f in files):
            continue
        wanted += [os.path.relpath(f, build) for f in files]
    print("\n".join(sorted(wanted)))
    return 0 if wanted else 1


def main() -> int:
    if sys.argv[1:2] == ["--all-but-tests"]:
        return all_but_tests(os.path.abspath(sys.argv[2]))
    build = os.path.abspath(sys.argv[1])
    only = set(sys.argv[2:])
    missing = set(only)
    by_id = {t["id"]: t for t in introspect(build, "--targets")}
    needed = set()
    for test in introspect(build, "--tests"):
        if not any(s.split(":")[-1] == "unit" for s in test["suite"]):
            continue
        if only and test["name"] not in only:
            continue
        missing.discard(test["name"])
        for dep in test.get("depends", []):
            for f in by_id.get(dep, {}).get("filename", []):
                needed.add(os.path.relpath(f, build))
    if missing:
        print(f"unit_targets: no unit test named {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    print("\n".join(sorted(needed)))
    return 0 if needed else 1


if __name__ == "__main__":
    sys.exit(main())
