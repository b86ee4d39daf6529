#!/usr/bin/python3
"""Prints the ninja targets the unit tests of a configured meson build need (each test's
executable and its declared `depends`), one per line, relative to the build directory. The
sanitizer build of tools/run-tests builds only these: it runs the unit suite and nothing else,
so daemons, tools and benchmarks would be compiled for nothing. With test names, only those
tests' targets (the ThreadSanitizer build runs the threaded components' tests only).

Usage: tools/ci/unit_targets.py BUILD_DIR [TEST_NAME...]
"""
import json
import os
import subprocess
import sys


def main() -> int:
    build = os.path.abspath(sys.argv[1])
    only = set(sys.argv[2:])
    missing = set(only)
    introspect = lambda what: json.loads(subprocess.run(  # noqa: E731
        ["meson", "introspect", what, build], capture_output=True, text=True, check=True).stdout)
    by_id = {t["id"]: t for t in introspect("--targets")}
    needed = set()
    for test in introspect("--tests"):
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
