"""CPU seconds per lab component over one measured run (issue 33: "CPU accounted per component
in the benchmark's output").

    with cpu_account.Window() as w:
        ... run something (its processes started and waited for by this process) ...
    w.report  # {"wall_s", "components": {name: {"cpu_s", "share", "processes", "max_share"}},
              #  "machine": {"busy_s", "softirq_s", "cores"}}

Components are found by process name at the start and end of the window (/proc/PID/stat,
utime + stime of every thread, children it waited for not included):
  gateways   detwan-gw          emulator   detwan-wanem
  agents     detwan-agent       cross      iperf3 (the lab's cross-traffic generators)
and `ranks`: everything this process started and waited for during the window (getrusage
RUSAGE_CHILDREN: the benchmark's launcher and the rank processes it reaped). A process alive at
only one end of the window counts from its start (new) or not at all (gone). `share` is cpu_s /
wall_s: 1.0 = one core busy for the whole window; `max_share` the busiest process's.
`machine` is /proc/stat over the same window: every core's busy time (everything but idle and
iowait) and the part of it spent in softirq (the kernel's packet processing, charged to no
process here).
"""
from __future__ import annotations

import os
import resource
import time

COMPONENTS = {"detwan-gw": "gateways", "detwan-wanem": "emulator", "detwan-agent": "agents",
              "iperf3": "cross"}
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[str, float, int]]:
    """pid -> (component, cpu seconds, start time in ticks) of the processes we account."""
    out: dict[int, tuple[str, float, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                raw = f.read().decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        comm = raw[raw.find("(") + 1:raw.rfind(")")]
        component = COMPONENTS.get(comm)
        if component is None:
            continue
        fields = raw[raw.rfind(")") + 2:].split()
        # fields[0] is field 3 (state): utime 14, stime 15, starttime 22.
        cpu_s = (int(fields[11]) + int(fields[12])) * _TICK_S
        out[int(entry.name)] = (component, cpu_s, int(fields[19]))
    return out


def _machine() -> tuple[float, float]:
    """(busy, softirq) seconds summed over every core, from /proc/stat's cpu line."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice
    busy = sum(values[:8]) - values[3] - values[4]
    return busy * _TICK_S, values[6] * _TICK_S


def _children_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Window:
    def __init__(self) -> None:
        self.report: dict | None = None

    def __enter__(self) -> "Window":
        self._t0 = time.monotonic()
        self._procs0 = _processes()
        self._machine0 = _machine()
        self._children0 = _children_s()
        return self

    def __exit__(self, *exc) -> None:
        wall_s = max(time.monotonic() - self._t0, 1e-9)
        procs1 = _processes()
        machine1 = _machine()
        components: dict[str, dict] = {
            name: {"cpu_s": 0.0, "processes": 0, "max_share": 0.0}
            for name in (*sorted(set(COMPONENTS.values())), "ranks")}
        for pid, (component, cpu_s, start) in procs1.items():
            before = self._procs0.get(pid)
            used = cpu_s - before[1] if before is not None and before[2] == start else cpu_s
            c = components[component]
            c["cpu_s"] += used
            c["processes"] += 1
            c["max_share"] = max(c["max_share"], used / wall_s)
        ranks = components["ranks"]
        ranks["cpu_s"] = _children_s() - self._children0
        ranks["processes"] = None  # reaped: not counted one by one
        ranks["max_share"] = None
        for c in components.values():
            c["share"] = c["cpu_s"] / wall_s
        self.report = {
            "wall_s": wall_s, "components": components,
            "machine": {"busy_s": machine1[0] - self._machine0[0],
                        "softirq_s": machine1[1] - self._machine0[1],
                        "cores": os.cpu_count()}}
