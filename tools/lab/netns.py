"""Thin wrappers over ip(8), sysctl and process handling. Every call is bounded in time."""
from __future__ import annotations

import os
import signal
import subprocess
import time

from lab.topology import PREFIX

COMMAND_TIMEOUT_S = 20


class LabError(Exception):
    """A setup step failed; the message says which command and why."""


def run(cmd: list[str], ns: str | None = None, check: bool = True,
        timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    full = (["ip", "netns", "exec", ns] if ns else []) + cmd
    try:
        res = subprocess.run(full, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise LabError(f"'{' '.join(full)}' did not finish within {timeout} s") from e
    except FileNotFoundError as e:
        raise LabError(f"'{full[0]}' not found: run tools/install-deps") from e
    if check and res.returncode != 0:
        msg = (res.stderr or res.stdout).strip()
        raise LabError(f"'{' '.join(full)}' failed (exit {res.returncode}): {msg}")
    return res


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return run(["ip", *(["-n", ns] if ns else []), *args], check=check)


def sysctl(ns: str, key: str, value: str) -> None:
    # Written through /proc inside the namespace: sysctl(8) may be missing in slim images.
    run(["sh", "-c", f"echo {value} > /proc/sys/{key.replace('.', '/')}"], ns=ns)


def list_namespaces(prefix: str = PREFIX) -> list[str]:
    res = run(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in res.stdout.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(prefix))


def namespace_pids(ns: str) -> list[int]:
    res = run(["ip", "netns", "pids", ns], check=False)
    return [int(t) for t in res.stdout.split() if t.isdigit()]


def root_links(prefix: str = PREFIX) -> list[str]:
    """Project interfaces left in the root namespace (only possible after a crash mid-move)."""
    res = run(["ip", "-o", "link", "show"], check=False)
    names = []
    for line in res.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            name = parts[1].strip().split("@")[0]
            if name.startswith(prefix):
                names.append(name)
    return names


def process_start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot (field 22 of /proc/PID/stat), None if gone.

    Recorded with every pid so a recycled pid is never signalled by mistake.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None  # zombie: already exited
    return int(fields[19])


def is_alive(pid: int, start_time: int | None = None) -> bool:
    now = process_start_time(pid)
    return now is not None and (start_time is None or now == start_time)


def stop_processes(pids: dict[int, int | None], term_timeout_s: float = 5.0,
                   kill_timeout_s: float = 3.0) -> list[int]:
    """SIGTERM, wait (bounded), then SIGKILL what is left. `pids` maps pid -> start time
    (None: trust the pid, it came from `ip netns pids` just now). Returns pids that survived."""
    me = {os.getpid(), os.getppid()}
    targets = {p: st for p, st in pids.items() if p not in me and is_alive(p, st)}
    for sig, timeout in ((signal.SIGTERM, term_timeout_s), (signal.SIGKILL, kill_timeout_s)):
        for p in targets:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            targets = {p: st for p, st in targets.items() if is_alive(p, st)}
            if not targets:
                return []
            time.sleep(0.02)
    return sorted(targets)
