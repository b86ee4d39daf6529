#!/usr/bin/python3
"""Static checks of the lab's Python (tools/pyproject.toml), run by tests/meson.build (suite
'unit') and by hand from any directory:

  tests/lab/check_python.py pyflakes   lint (pyflakes: ruff is not in Debian 12) over tools/lab,
                                       tests/lab, tools/testbed and tools/bench's Python scripts
  tests/lab/check_python.py mypy [--cache-dir DIR]
                                       types of the `lab` package (configuration: [tool.mypy] in
                                       tools/pyproject.toml; cache: DIR, default none written)

Exit status: 0 clean, 1 findings (printed), 77 the checker is not installed (meson counts the
test as skipped; Debian 12: python3-pyflakes, mypy; tools/install-deps installs both).
"""
from __future__ import annotations

import argparse
import importlib.util
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SKIP = 77


def python_files() -> list[pathlib.Path]:
    """What pyflakes reads: the package, the lab tests, and the front ends that are Python
    scripts without a .py name (tools/testbed, most of tools/bench)."""
    files = [*sorted((REPO / "tools" / "lab").rglob("*.py")),
             *sorted((REPO / "tests" / "lab").rglob("*.py"))]
    for script in [REPO / "tools" / "testbed", *sorted((REPO / "tools" / "bench").iterdir())]:
        if script.is_file() and script.suffix == "":
            with open(script, "rb") as f:
                first = f.readline()
            if first.startswith(b"#!") and b"python" in first:
                files.append(script)
    return files


def run_pyflakes() -> int:
    if importlib.util.find_spec("pyflakes") is None:
        print("check_python: pyflakes is not installed (Debian: python3-pyflakes; "
              "tools/install-deps): skipped")
        return SKIP
    files = python_files()
    res = subprocess.run([sys.executable, "-m", "pyflakes", *map(str, files)], check=False)
    if res.returncode == 0:
        print(f"check_python: pyflakes: {len(files)} files clean")
    return 0 if res.returncode == 0 else 1


def run_mypy(cache_dir: str) -> int:
    if importlib.util.find_spec("mypy") is None:
        print("check_python: mypy is not installed (Debian: mypy; tools/install-deps): skipped")
        return SKIP
    res = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                          str(REPO / "tools" / "pyproject.toml"), "--cache-dir", cache_dir],
                         check=False)
    return 0 if res.returncode == 0 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checker", choices=("pyflakes", "mypy"))
    ap.add_argument("--cache-dir", default="/dev/null",
                    help="mypy's cache (default /dev/null: none written into the tree)")
    args = ap.parse_args(argv)
    return run_pyflakes() if args.checker == "pyflakes" else run_mypy(args.cache_dir)


if __name__ == "__main__":
    sys.exit(main())
