"""Helpers for the lab tests: run tools/testbed, bring labs up and down, drive detwan-probe and
iperf3 inside the lab. Every wait is bounded."""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTBED = REPO / "tools" / "testbed"
# The lab's prefix and run directory, as tools/lab/topology.py and state.py read them.
PREFIX = os.environ.get("DETWAN_TESTBED_PREFIX", "dwtb-")
RUN_DIR = pathlib.Path(os.environ.get("DETWAN_TESTBED_RUN_DIR", "/run/detwan-testbed"))

sys.path.insert(0, str(REPO / "tools"))
from lab import measure  # noqa: E402


def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("DETWAN_BUILD_DIR") or REPO / "build").resolve()


def probe_binary() -> pathlib.Path:
    return build_dir() / "tools" / "probe" / "detwan-probe"


def wanem_binary() -> pathlib.Path:
    return build_dir() / "tools" / "wanem" / "detwan-wanem"


def gw_binary() -> pathlib.Path:
    return build_dir() / "dataplane" / "daemon" / "detwan-gw"


def tb(*args: str, check: bool = False, timeout: float = 120,
            env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, **(env or {}))
    res = subprocess.run([str(TESTBED), *args], capture_output=True, text=True,
                         timeout=timeout, env=full_env, stdin=subprocess.DEVNULL)
    if check and res.returncode != 0:
        raise AssertionError(f"tools/testbed {' '.join(args)} exited {res.returncode}:\n"
                             f"{res.stdout}\n{res.stderr}")
    return res


def status() -> dict:
    res = tb("status", "--json")
    assert res.returncode in (0, 3), res.stderr
    return json.loads(res.stdout)


def namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.strip() and line.startswith(PREFIX)]


def bench_processes(any_of: tuple[bytes, ...]) -> list[str]:
    """Command lines of running detwan-bench processes with one of `any_of` among their
    arguments (read only: for checks that a run left nothing behind)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"detwan-bench") for a in argv) and any(x in argv for x in any_of):
            found.append(b" ".join(argv).decode(errors="replace"))
    return found


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def lab(*up_args: str):
    """A lab for the duration of the block; always torn down, whatever happens inside."""
    try:
        tb("up", "-q", *up_args, check=True)
        yield status()
    finally:
        res = tb("down", "-q")
        assert res.returncode == 0, f"down failed: {res.stderr}"


def gw_built_with_dpdk() -> bool:
    """Whether the build found libdpdk (detwan-gw's dpdk backend is compiled only then)."""
    info = build_dir() / "meson-info" / "intro-dependencies.json"
    try:
        deps = json.loads(info.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return any(d.get("name") == "libdpdk" for d in deps)


def gw_stats(site: str) -> dict:
    """`detwan-gw stats --json` of the site's gateway (lab up with --dataplane)."""
    res = tb("gw", site, "--", "stats", "--json", timeout=20)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def ping_replies(src: str, addr: str, count: int) -> int:
    """Replies received from `count` pings 20 ms apart from site `src`'s host."""
    res = tb("exec", src, "--", "ping", "-n", "-q", "-c", str(count), "-i", "0.02", "-W", "2",
             addr, timeout=count * 0.02 + 20)
    for line in res.stdout.splitlines():
        if "received" in line:
            return int(line.split(",")[1].split()[0])
    raise AssertionError(f"no ping summary: {res.stdout} {res.stderr}")


def probe(src: str, dst: dict, **kwargs) -> dict:
    return measure.probe(str(probe_binary()), src, dst, **kwargs)


def probe_flows(flows: list) -> list[dict]:
    return measure.probe_flows(str(probe_binary()), flows)


ProbeFlow = measure.ProbeFlow


iperf3_goodput_bps = measure.iperf3_goodput_bps
iperf3_udp = measure.iperf3_udp


def wanem_class_counters(pair: str, cls: str, direction: str | None = None,
                         path: int = 1) -> dict:
    """One class's engine counters ("reserved", "best_effort", "cross") of path `path` between
    `pair`, direction `direction` (default: the pair's own order, e.g. "ab")."""
    res = tb("wanem", pair, str(path), "--", "stats", "--json", check=True)
    return json.loads(res.stdout)[direction or pair][cls]
def wanem_port_drops(pair: str, path: int = 1) -> int:
    """Frames the emulator of `pair` lost outside its engine, both directions (kernel socket
    buffer full before it read them, no pool buffer, failed or refused sends, ...)."""
    res = tb("wanem", pair, str(path), "--", "stats", "--json", check=True)
    return sum(json.loads(res.stdout)["port"]["drops"].values())


wait_for_line = measure.wait_for_line


def allreduce_job(args: list[str], sites: int = 2, ranks_per_site: int = 2,
                  **popen) -> subprocess.Popen:
    """`detwan-bench allreduce --lab --no-setup --json` over the lab that is up, started (not
    waited for: finish_job)."""
    env = dict(os.environ, DETWAN_BUILD_DIR=str(build_dir()))
    return subprocess.Popen([str(build_dir() / "tools/bench/detwan-bench"), "allreduce", "--lab",
                             "--no-setup", "--sites", str(sites), "--ranks-per-site",
                             str(ranks_per_site), "--json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL, **popen)


def finish_job(p: subprocess.Popen, timeout: float) -> tuple[int, dict, str]:
    """Waits (bounded) for an allreduce_job: return code, its JSON report ({} if none), stderr.
    A job still running at the timeout is a hang: terminated, and the test fails."""
    import pytest  # only the tests use this module with pytest
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.terminate()
        out, err = p.communicate(timeout=30)
        pytest.fail(f"detwan-bench did not finish within {timeout:g} s (a hang):\n{err[-3000:]}")
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        doc = {}
    return p.returncode, doc, err
