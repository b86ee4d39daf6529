"""detwan-perf inside a running lab, through the tools/testbed command line: a server in one
site's host namespace and a client in another's. Used by the demo (tools/demo), tests/lab and
tools/bench/perf-*. Every wait is bounded and every process started here is stopped."""
from __future__ import annotations

import contextlib
import json
import subprocess

from lab import measure, wanem

PERF_BINARY = "tools/perf/detwan-perf"
DEFAULT_PORT = 5301


def binary() -> str:
    """The built detwan-perf ($DETWAN_BUILD_DIR, else <repo>/build)."""
    return str(wanem.build_dir(None) / PERF_BINARY)


@contextlib.contextmanager
def server(dst: dict, port: int = DEFAULT_PORT, extra: list[str] | None = None):
    """`detwan-perf server` in site dst's host namespace, listening on every address (so both
    its tunnel and its best-effort address answer); stopped on exit."""
    proc = subprocess.Popen([str(measure.TESTBED), "exec", dst["name"], "--", binary(), "server",
                             "-p", str(port), *(extra or [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        measure.wait_listening(dst["host_ns"], port)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def client(src: str, target: str, args: list[str], port: int = DEFAULT_PORT,
           seconds: float = 10, json_output: bool = True):
    """`detwan-perf client TARGET ARGS` from site src's host. Returns the parsed JSON document
    (json_output) or the printed text. A failed run raises RuntimeError with its stderr."""
    cmd = [str(measure.TESTBED), "exec", src, "--", binary(), "client", target, "-p", str(port),
           *args]
    if json_output:
        cmd.append("--json")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60,
                         stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise RuntimeError(f"detwan-perf client {target} {' '.join(args)} failed "
                           f"(exit {res.returncode}): {res.stderr.strip()} {res.stdout[-2000:]}")
    return json.loads(res.stdout) if json_output else res.stdout
