"""Real cross traffic in the lab (`tools/testbed cross start|stop|status`).

The emulator's `cross=` SPEC key *models* cross traffic: a rate inside detwan-wanem that takes
capacity from best effort but never reacts to anything. This module runs *real* flows that
compete on the WAN: iperf3 between the sites' cross hosts (`<prefix>X-xh`, 10.30.i.2; not the
hosts the benchmarks' ranks run in), kernel-routed over the best-effort path 1 (never through
a tunnel). Per direction of each site pair:

  * `tcp_flows` TCP flows whose congestion control alternates over `cc` (cubic, bbr, cubic,
    ...; `iperf3 -C`), each capped with `iperf3 -b` so that TCP together offers
    (1 - udp_fraction) x rate;
  * one UDP flow offering udp_fraction x rate (`iperf3 -u -b`): unresponsive, it never backs
    off.

One iperf3 client (`-P` streams, one congestion control) and one server per group of flows;
servers run in the receiving cross host, clients in the sending one. Every pid is recorded in
the lab's run state (state file under "cross" and a pid file each), so `cross stop` and
`tools/testbed down` stop them. Planning (pure): cross_plan.py; reports: cross_report.py.

API (also for other tools; the lab must be up):
    handle = cross.start(rate_bps, tcp_flows=4, cc=("cubic", "bbr"), udp_fraction=0.5)
    ... measure ...
    report = cross.stop(handle)      # per-flow achieved throughput and totals
or `with cross.running(rate_bps) as handle: ...`, which always stops.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import time
from typing import Iterable, Iterator, Sequence

from lab import cross_report, state
from lab.cross_plan import (BASE_PORT, DEFAULT_CC, DEFAULT_TCP_FLOWS, DEFAULT_UDP_FRACTION,
                            FlowGroup, cc_per_flow, directions, iperf3_args, offered_rate_bps,
                            plan, split_rate)
from lab.netns import LabError, is_alive, process_start_time, run

__all__ = ["BASE_PORT", "DEFAULT_CC", "DEFAULT_TCP_FLOWS", "DEFAULT_UDP_FRACTION", "CrossHandle",
           "FlowGroup", "available_cc", "cc_per_flow", "directions", "ensure_cc",
           "offered_rate_bps", "plan", "recorded_pids", "report", "running", "split_rate",
           "start", "status", "stop"]

READY_TIMEOUT_S = 15.0
SERVER_EXIT_TIMEOUT_S = 8.0  # after SIGINT to the servers, for servers and clients to report
KILL_TIMEOUT_S = 3.0
STATE_KEY = "cross"
IP_UDP_HEADER_BYTES = 28
CC_AVAILABLE = "/proc/sys/net/ipv4/tcp_available_congestion_control"

_children: dict[int, subprocess.Popen] = {}  # reaped by stop() when started in this process


# ------------------------------------------------------------------------------ the handle

@dataclasses.dataclass
class CrossHandle:
    """Running cross traffic: what was asked, the groups and their processes. Also kept in the
    lab's state file under "cross" (to_record), so another process can stop it."""
    rate_bps: int
    tcp_flows: int
    cc: tuple[str, ...]
    udp_fraction: float
    both_directions: bool
    duration_s: int | None
    groups: list[FlowGroup]
    procs: dict[str, dict] = dataclasses.field(default_factory=dict)  # "<id>-server" -> record
    started_unix_ns: int = dataclasses.field(default_factory=time.time_ns)
    started_monotonic: float = dataclasses.field(default_factory=time.monotonic)
    final_report: dict | None = None  # set by running() when the block ends

    def to_record(self) -> dict:
        return {"rate_bps": self.rate_bps, "tcp_flows": self.tcp_flows, "cc": list(self.cc),
                "udp_fraction": self.udp_fraction, "both_directions": self.both_directions,
                "duration_s": self.duration_s, "started_unix_ns": self.started_unix_ns,
                "groups": [g.to_record() for g in self.groups], "procs": self.procs}

    @classmethod
    def from_record(cls, rec: dict) -> "CrossHandle":
        started = rec.get("started_unix_ns") or time.time_ns()
        # The monotonic start of another process is unknown: derive it from the wall clock.
        mono = time.monotonic() - max(0.0, (time.time_ns() - started) / 1e9)
        return cls(rate_bps=rec["rate_bps"], tcp_flows=rec["tcp_flows"], cc=tuple(rec["cc"]),
                   udp_fraction=rec["udp_fraction"], both_directions=rec["both_directions"],
                   duration_s=rec.get("duration_s"),
                   groups=[FlowGroup(**g) for g in rec["groups"]],
                   procs=dict(rec.get("procs") or {}), started_unix_ns=started,
                   started_monotonic=mono)

    def pids(self) -> dict[int, int | None]:
        return {p["pid"]: p.get("pid_start_time") for p in self.procs.values()}


def recorded_pids(st: dict | None) -> dict[int, int]:
    """pid -> start time of the cross traffic recorded in a state dict (for `down`)."""
    rec = (st or {}).get(STATE_KEY)
    procs = rec.get("procs") if isinstance(rec, dict) else None
    if not isinstance(procs, dict):
        return {}
    return {p["pid"]: p["pid_start_time"] for p in procs.values()
            if isinstance(p, dict) and isinstance(p.get("pid"), int)
            and isinstance(p.get("pid_start_time"), int)}


# ------------------------------------------------------------------------- processes

def available_cc() -> set[str]:
    try:
        with open(CC_AVAILABLE, encoding="utf-8") as f:
            return set(f.read().split())
    except OSError:
        return set()


def ensure_cc(names: Iterable[str]) -> None:
    """Every congestion control in `names` is available to TCP sockets; loads tcp_<name>
    (modprobe) where needed. LabError naming what is missing and why."""
    missing = sorted(set(names) - available_cc())
    problems = []
    for name in missing:
        try:
            res = run(["modprobe", f"tcp_{name}"], check=False)
            if res.returncode != 0:
                problems.append(f"modprobe tcp_{name}: {(res.stderr or res.stdout).strip()}")
        except LabError as e:
            problems.append(str(e))
    still = sorted(set(names) - available_cc())
    if still:
        raise LabError(f"TCP congestion control {', '.join(still)} not available (the kernel "
                       f"offers: {' '.join(sorted(available_cc())) or 'unknown'}); "
                       + ("; ".join(problems) or "modprobe did not help"))


def _iperf3() -> str:
    path = shutil.which("iperf3")
    if path is None:
        raise LabError("iperf3 missing: run tools/install-deps")
    return path


def _files(key: str) -> tuple[str, str]:
    return str(state.RUN_DIR / f"cross-{key}.json"), str(state.RUN_DIR / f"cross-{key}.log")


def _spawn(key: str, ns: str, args: list[str]) -> dict:
    """Starts iperf3 in namespace ns (its own session: it outlives the caller); its JSON goes
    to cross-<key>.json, stderr to cross-<key>.log after the command line. Pid file at once."""
    out_path, log_path = _files(key)
    argv = ["ip", "netns", "exec", ns, _iperf3(), *args]
    with open(out_path, "w", encoding="utf-8") as out, \
            open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + shlex.join(argv) + "\n")
        log.flush()
        # `ip netns exec` execs the command, so this pid is iperf3's own.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=log,
                                start_new_session=True)
    _children[proc.pid] = proc
    start_time = process_start_time(proc.pid)
    state.write_pid_file(f"cross-{key}", proc.pid, start_time)
    return {"pid": proc.pid, "pid_start_time": start_time, "ns": ns, "json": out_path,
            "log": log_path, "argv": argv}


def _listening(ns: str, port: int) -> bool:
    res = run(["ss", "-Htln", f"sport = :{port}"], ns=ns, check=False)
    return bool(res.stdout.strip())


def _established(ns: str, port: int) -> int:
    res = run(["ss", "-Htn", "state", "established", f"dport = :{port}"], ns=ns, check=False)
    return len([line for line in res.stdout.splitlines() if line.strip()])


def _died(proc: dict, what: str) -> LabError:
    doc = cross_report.load_json(proc["json"]) or {}
    return LabError(f"iperf3 {what} in {proc['ns']} exited: {doc.get('error') or 'no report'}"
                    f"\n{state.file_tail(pathlib.Path(proc['log']), 5)}")


def _wait(handle: CrossHandle, ready, what: str, timeout_s: float) -> None:
    """Polls (bounded) until ready(group) holds for every group; fails early if an iperf3 of
    the group exits."""
    deadline = time.monotonic() + timeout_s
    pending = list(handle.groups)
    while pending and time.monotonic() < deadline:
        for g in list(pending):
            for role in ("server", "client"):
                proc = handle.procs.get(f"{g.id}-{role}")
                if proc and not is_alive(proc["pid"], proc["pid_start_time"]):
                    raise _died(proc, f"{role} of {g.id}")
            if ready(g):
                pending.remove(g)
        if pending:
            time.sleep(0.05)
    if pending:
        raise LabError(f"cross traffic: {', '.join(g.id for g in pending)} not {what} within "
                       f"{timeout_s:.0f} s")


def _site_records(st: dict) -> dict[str, dict]:
    sites = {s["name"]: s for s in st.get("sites", []) if isinstance(s, dict)}
    if any("cross_ns" not in s for s in sites.values()):
        raise LabError("this lab has no cross hosts (brought up by an older tools/testbed): "
                       "run tools/testbed down and up again")
    return sites


def _save(st: dict, handle: CrossHandle | None) -> None:
    if handle is None:
        st.pop(STATE_KEY, None)
    else:
        st[STATE_KEY] = handle.to_record()
    state.write(st)


def start(rate_bps: int, tcp_flows: int = DEFAULT_TCP_FLOWS, cc: Sequence[str] = DEFAULT_CC,
          udp_fraction: float = DEFAULT_UDP_FRACTION,
          pairs: Iterable[str | Sequence[str]] | None = None, both_directions: bool = True,
          duration_s: float | None = None) -> CrossHandle:
    """Starts cross traffic offering rate_bps per direction of each pair (default: every pair
    of sites, both directions) and returns once every flow is connected. duration_s: None =
    until stop(). On any failure (or an exception such as KeyboardInterrupt) everything it
    started is stopped again. LabError: no lab, cross traffic already running, iperf3 or a
    congestion control missing, a flow that did not start; ValueError: bad arguments."""
    duration = None if duration_s is None else max(1, int(-(-duration_s // 1)))
    with state.locked():
        st = state.read()
        if st is None or st.get("phase") != "up":
            raise LabError("no lab is up (run tools/testbed up)")
        sites = _site_records(st)
        if STATE_KEY in st:
            old = CrossHandle.from_record(st[STATE_KEY])
            if any(is_alive(p, s) for p, s in old.pids().items()):
                raise LabError("cross traffic is already running: tools/testbed cross stop")
            _remove_pid_files(old)
        groups = plan(list(sites), rate_bps, tcp_flows, cc, udp_fraction, pairs,
                      both_directions)
        ensure_cc({g.cc for g in groups if g.cc})
        mtu = min(int((st.get("options") or {}).get("mtu") or 1500), 1500)
        handle = CrossHandle(rate_bps, tcp_flows, tuple(cc), udp_fraction, both_directions,
                             duration, groups)
        try:
            for g in groups:
                dst = sites[g.dst]
                handle.procs[f"{g.id}-server"] = _spawn(
                    f"{g.id}-server", dst["cross_ns"],
                    iperf3_args(g, "server", dst["cross_addr"], duration, 0))
            _save(st, handle)
            _wait(handle, lambda g: _listening(sites[g.dst]["cross_ns"], g.port), "listening",
                  READY_TIMEOUT_S)
            handle.started_unix_ns, handle.started_monotonic = time.time_ns(), time.monotonic()
            for g in groups:
                handle.procs[f"{g.id}-client"] = _spawn(
                    f"{g.id}-client", sites[g.src]["cross_ns"],
                    iperf3_args(g, "client", sites[g.dst]["cross_addr"], duration,
                                mtu - IP_UDP_HEADER_BYTES))
            _save(st, handle)
            # Connected: the control connection, plus one per stream for TCP.
            _wait(handle, lambda g: _established(sites[g.src]["cross_ns"], g.port) >=
                  (1 + g.streams if g.kind == "tcp" else 1), "connected", READY_TIMEOUT_S)
        except BaseException:
            _terminate(handle)
            _remove_pid_files(handle)
            _save(st, None)
            raise
    return handle


def _signal_all(pids: dict[int, int | None], sig: int) -> None:
    for pid, start_time in pids.items():
        if is_alive(pid, start_time):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


def _wait_gone(pids: dict[int, int | None], timeout_s: float) -> dict[int, int | None]:
    deadline = time.monotonic() + timeout_s
    while True:
        for pid, proc in list(_children.items()):
            if proc.poll() is not None:
                _children.pop(pid, None)
        left = {p: s for p, s in pids.items() if is_alive(p, s)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def _terminate(handle: CrossHandle) -> list[int]:
    """Servers first (SIGINT: each reports and tells its client, which reports too), then the
    clients that are left, then SIGKILL. Returns pids that survived."""
    servers = {p["pid"]: p["pid_start_time"] for k, p in handle.procs.items()
               if k.endswith("-server")}
    _signal_all(servers, signal.SIGINT)
    left = _wait_gone(handle.pids(), SERVER_EXIT_TIMEOUT_S)
    if left:
        _signal_all(left, signal.SIGINT)
        left = _wait_gone(left, KILL_TIMEOUT_S)
    if left:
        _signal_all(left, signal.SIGKILL)
        left = _wait_gone(left, KILL_TIMEOUT_S)
    return sorted(left)


def _remove_pid_files(handle: CrossHandle) -> None:
    for key in handle.procs:
        with contextlib.suppress(OSError):
            state.pid_file(f"cross-{key}").unlink()


def report(handle: CrossHandle, wall_s: float) -> dict:
    """Per-flow results and totals from the groups' iperf3 JSON files (after they exited)."""
    flows: list[dict] = []
    for g in handle.groups:
        server = handle.procs.get(f"{g.id}-server")
        client = handle.procs.get(f"{g.id}-client")
        flows += cross_report.group_flows(
            g.to_record(), cross_report.load_json(server["json"]) if server else None,
            cross_report.load_json(client["json"]) if client else None, wall_s)
    return {"offered_bps": handle.rate_bps, "tcp_flows": handle.tcp_flows,
            "cc": list(handle.cc), "udp_fraction": handle.udp_fraction,
            "started_unix_ns": handle.started_unix_ns, "seconds": wall_s,
            "flows": flows, "totals": cross_report.totals(flows)}


def stop(handle: CrossHandle | None = None) -> dict:
    """Stops cross traffic (handle None: the one recorded in the lab's state) and returns the
    report: offered_bps (per direction), seconds, flows[] (id, group, src, dst, kind, cc,
    offered_bps, achieved_bps, received/sent bytes, retransmits or UDP loss, error) and
    totals (achieved_bps, tcp_bps, udp_bps, by_kind, by_direction), plus survivors[] (pids
    that outlived SIGKILL). Works after `down` too (then from whatever iperf3 wrote)."""
    with state.locked():
        st = state.read()
        if handle is None:
            if not st or STATE_KEY not in st:
                raise LabError("no cross traffic is running (tools/testbed cross start)")
            handle = CrossHandle.from_record(st[STATE_KEY])
        wall_s = time.monotonic() - handle.started_monotonic
        if handle.duration_s:
            wall_s = min(wall_s, float(handle.duration_s))
        survivors = _terminate(handle)
        _remove_pid_files(handle)
        if st and (st.get(STATE_KEY) or {}).get("started_unix_ns") == handle.started_unix_ns:
            _save(st, None)
    out = report(handle, wall_s)
    out["survivors"] = survivors
    return out


@contextlib.contextmanager
def running(rate_bps: int, **kwargs) -> Iterator[CrossHandle]:
    """start(rate_bps, **kwargs) for the duration of the block, always stopped at its end;
    stop()'s report is then in handle.final_report."""
    handle = start(rate_bps, **kwargs)
    try:
        yield handle
    finally:
        handle.final_report = stop(handle)


def status(handle: CrossHandle | None = None) -> dict:
    """What runs: running (every iperf3 alive), the request, and per group its processes'
    pids and liveness, plus the congestion control of the data connections each sending
    cross host has right now (`ss -ti`). {"running": False, "groups": []} when none."""
    if handle is None:
        st = state.read() or {}
        if STATE_KEY not in st:
            return {"running": False, "groups": []}
        handle = CrossHandle.from_record(st[STATE_KEY])
    groups, all_alive = [], True
    for g in handle.groups:
        rec = g.to_record()
        rec["offered_bps"] = g.offered_bps
        for role in ("server", "client"):
            p = handle.procs.get(f"{g.id}-{role}")
            alive = bool(p and is_alive(p["pid"], p["pid_start_time"]))
            all_alive = all_alive and alive
            rec[role] = {"pid": p["pid"] if p else None, "alive": alive, "ns": p and p["ns"],
                         "json": p and p["json"], "log": p and p["log"]}
        groups.append(rec)
    known = available_cc()
    cc_in_use = {}
    for ns in dict.fromkeys(p["ns"] for k, p in handle.procs.items() if k.endswith("-client")):
        res = run(["ss", "-Htin", "state", "established"], ns=ns, check=False)
        cc_in_use[ns] = cross_report.count_cc(cross_report.parse_ss_ti(res.stdout, known))
    rec = handle.to_record()
    rec.pop("procs")
    rec.update(running=all_alive and bool(groups), groups=groups, cc_in_use=cc_in_use,
               seconds=time.monotonic() - handle.started_monotonic)
    return rec
