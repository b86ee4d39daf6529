"""Processes a lab benchmark starts, run as groups with a deadline and always stopped, and the
hosts' TCP congestion control (tools/bench/compare-allreduce and compare-allreduce --dataplane:
lab.compare, lab.compare_wan).

Runs keeps every process it starts (each a session leader) and stops them all, their children
too, also those that only name the run's private directory on their command line (mpirun's
remote daemon and ranks). set_cc makes an algorithm the default of the given namespaces and
reads it back; CcSampler checks with `ss -ti` which algorithm the live connections use.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import threading
import time


class Runs:
    """Every process this harness starts, so all of them (and their children) can be stopped:
    each is a session leader (its process group is its pid), and anything whose command line
    names this run's private directory is ours too (mpirun's remote daemon and ranks)."""

    def __init__(self, workdir: pathlib.Path):
        self.workdir = workdir
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        """SIGTERM to each group first (detwan-bench --lab then stops its own ranks), SIGKILL
        to whatever is still there after a grace period."""
        for sig, grace_s in ((signal.SIGTERM, 8.0), (signal.SIGKILL, 10.0)):
            live = [p for p in self.procs if p.poll() is None]
            for p in live:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, sig)
            deadline = time.monotonic() + grace_s
            for p in live:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
        self.procs = [p for p in self.procs if p.poll() is None]
        for pid in self.stray_pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def stray_pids(self) -> list[int]:
        return pids_mentioning(str(self.workdir))


def pids_mentioning(needle: str) -> list[int]:
    """Processes whose command line contains `needle` (read only; never this process)."""
    found = []
    key = needle.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if key in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def run_group(runs: Runs, procs_argv: list[list[str]], timeout_s: float,
              env: dict | None = None) -> tuple[list[tuple[int | None, str, str]], str | None]:
    """Starts every argv, waits for all (bounded); returns [(rc, out, err)] in order and a
    timeout reason (None when everything finished). On timeout every one is killed."""
    try:
        procs = [runs.start(a, env=env) for a in procs_argv]
    except OSError as e:  # not executable (e.g. being re-linked): this run is null, not the job
        runs.stop_all()
        return [(None, "", f"cannot start {e.filename}: {e.strerror}")] * len(procs_argv), \
            f"cannot start {e.filename}: {e.strerror}"
    outs: list[tuple[int | None, str, str]] = [(None, "", "")] * len(procs)
    deadline = time.monotonic() + timeout_s
    reason = None
    results: dict[int, tuple[int | None, str, str]] = {}

    def collect(i: int, p: subprocess.Popen) -> None:
        try:
            o, e = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results[i] = (p.returncode, o, e)
        except subprocess.TimeoutExpired:
            results[i] = (None, "", "")

    threads = [threading.Thread(target=collect, args=(i, p), daemon=True)
               for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 5)
    if any(p.poll() is None for p in procs) or len(results) < len(procs):
        reason = f"killed after the --timeout-per-run of {timeout_s:g} s"
        runs.stop_all()
        for t in threads:
            t.join(15)
    for i in range(len(procs)):
        outs[i] = results.get(i, (None, "", ""))
    return outs, reason


def last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                return json.loads(line)
    with contextlib.suppress(json.JSONDecodeError):
        return json.loads(text)
    return None


def tail(text: str, n: int = 600) -> str:
    t = " ".join(text.strip().split())
    return t[-n:]


# ------------------------------------------------------------------------------ TCP cc

def ns_sysctl(ns: str | None, *args: str) -> subprocess.CompletedProcess:
    prefix = ["ip", "netns", "exec", ns] if ns else []
    return subprocess.run([*prefix, "sysctl", *args], capture_output=True, text=True, timeout=10)


def set_cc(namespaces: list[str], cc: str) -> dict:
    """Makes `cc` the default of every namespace; returns what each reads back. Outside the
    initial namespace the kernel only accepts an algorithm on the allowed list
    (net.ipv4.tcp_allowed_congestion_control, one list for the whole machine, writable only from
    the initial namespace), so `cc` is added to it for the moment of the change and the list is
    put back right after: sockets take the namespace default without consulting the list."""
    before = ns_sysctl(None, "-n", "net.ipv4.tcp_allowed_congestion_control").stdout.split()
    if cc not in before:
        ns_sysctl(None, "-w", "net.ipv4.tcp_allowed_congestion_control="
                  + " ".join(dict.fromkeys(before + [cc])))
    out = {}
    try:
        for ns in namespaces:
            res = ns_sysctl(ns, "-w", f"net.ipv4.tcp_congestion_control={cc}")
            back = ns_sysctl(ns, "-n", "net.ipv4.tcp_congestion_control").stdout.strip()
            out[ns] = back if res.returncode == 0 else f"refused: {res.stderr.strip()}"
    finally:
        if cc not in before and before:
            ns_sysctl(None, "-w", "net.ipv4.tcp_allowed_congestion_control=" + " ".join(before))
    return out


class CcSampler:
    """Samples `ss -ti` in the given namespaces while a baseline runs and collects the
    congestion controls of established TCP connections between the sites' addresses."""
    ALGOS = ("cubic", "bbr", "reno", "bbr2", "dctcp", "vegas", "htcp")

    def __init__(self, namespaces: list[str], addrs: list[str]):
        self.namespaces, self.addrs = namespaces, addrs
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _loop(self):
        while not self._stop.is_set():
            for ns in self.namespaces:
                res = subprocess.run(["ip", "netns", "exec", ns, "ss", "-tinH", "state",
                                      "established"], capture_output=True, text=True, timeout=10)
                lines = res.stdout.splitlines()
                for i, line in enumerate(lines):
                    if not any(a in line for a in self.addrs) or i + 1 >= len(lines):
                        continue
                    words = lines[i + 1].split()
                    if words and words[0] in self.ALGOS:
                        self.seen.add(words[0])
            self._stop.wait(0.3)
