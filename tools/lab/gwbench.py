"""Shared parts of the gateway benchmarks (tools/bench/gw-determinism, tools/bench/gw-pacing):
running flows at the same time, capturing departures, percentiles and inter-departure errors."""
from __future__ import annotations

import concurrent.futures
import json
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Callable

from lab import measure

CAPTURE = pathlib.Path(__file__).resolve().parent / "capture.py"


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in [0, 1])."""
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[i]


def run_together(jobs: dict[str, Callable[[], object]]) -> dict[str, object]:
    """Runs the callables at the same time (each in a thread; they mostly wait for processes),
    so every flow sees the same machine; re-raises the first failure."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {name: pool.submit(fn) for name, fn in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def machine_wakeup_latency(seconds: float, rt_priority: int, interval_us: int = 1000) -> dict:
    """The machine's own timer wake-up latency over the same seconds as a benchmark's flows:
    cyclictest (rt-tests) with one thread sleeping `interval_us` periods at the gateways'
    scheduling (SCHED_FIFO `rt_priority`, or SCHED_OTHER at 0), memory locked. What a sleeping
    gateway loop cannot beat on this machine; a gateway's playout or departure error well
    above it is the gateway's own. Returns {samples, min, p50, p99, p99_9, max} in ns."""
    with tempfile.TemporaryDirectory(prefix="detwan-cyclictest-") as tmp:
        out = pathlib.Path(tmp) / "ct.json"
        argv = ["cyclictest", "-q", "-m", "-t", "1", "-i", str(interval_us),
                "-D", f"{max(1, round(seconds))}", "-h", "20000", f"--json={out}"]
        if rt_priority > 0:
            argv += ["-p", str(rt_priority)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
        except FileNotFoundError as e:
            raise RuntimeError("cyclictest not found: install rt-tests (tools/install-deps)") from e
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"cyclictest failed (exit {proc.returncode}): "
                               f"{proc.stderr.strip()[-300:]}")
        thread = json.loads(out.read_text())["thread"]["0"]
    hist = sorted((int(us), int(n)) for us, n in thread["histogram"].items())
    total = sum(n for _, n in hist)
    if total == 0:
        raise RuntimeError("cyclictest recorded no wake-up")

    def at(q: float) -> int:
        rank, seen = q * total, 0
        for us, n in hist:
            seen += n
            if seen >= rank:
                return us * 1000
        return hist[-1][0] * 1000

    # As a packet stream sees it: a packet released by a wake-up is as late as that wake-up
    # (cyclictest's own distribution), and a wake-up L late means the thread could not run for
    # L, so packets due in that time are late by L down to 0: the share of time in which they
    # would be at least x late is sum(max(0, L - x)) / span. The sum of the two is what a
    # gateway's per-packet playout error would be if the machine alone were to blame (one
    # 15 ms stall in 5 s puts a packet stream's p99.9 near 10 ms, while it is a single sample
    # of cyclictest's own 5,000).
    span_us = total * interval_us

    def time_weighted(q: float) -> int:
        lo, hi = 0, hist[-1][0]
        while lo < hi:  # the smallest x at which P(lateness > x) <= 1 - q
            mid = (lo + hi) // 2
            beyond = sum(n for us, n in hist if us > mid) / total
            if beyond + sum(n * max(0, us - mid) for us, n in hist) / span_us <= 1 - q:
                hi = mid
            else:
                lo = mid + 1
        return lo * 1000

    return {"samples": total, "min": int(thread["min"]) * 1000, "p50": at(0.5),
            "p99": at(0.99), "p99_9": at(0.999), "max": int(thread["max"]) * 1000,
            "time_weighted": {"p99": time_weighted(0.99), "p99_9": time_weighted(0.999)},
            "rt_priority": rt_priority, "interval_us": interval_us}


class Capture:
    """tools/lab/capture.py in a namespace, as a context: started and listening on enter,
    stopped (SIGTERM) and parsed by result()."""

    def __init__(self, ns: str, iface: str, seconds: float, min_bytes: int = 0):
        self.argv = ["ip", "netns", "exec", ns, "/usr/bin/python3", str(CAPTURE), "--iface",
                     iface, "--duration", f"{seconds:g}", "--min-bytes", str(min_bytes)]
        self.proc: subprocess.Popen | None = None
        self.seconds = seconds

    def __enter__(self):
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True)
        measure.wait_for_line(self.proc, "listening", 10)
        return self

    def result(self) -> dict:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
        out, err = self.proc.communicate(timeout=self.seconds + 60)
        if self.proc.returncode != 0:
            raise RuntimeError(f"capture failed (exit {self.proc.returncode}): {err[-2000:]}")
        return json.loads(out)

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)


def inter_departure_errors(t_ns: list[int], frame_bytes: list[int], rate_bps: float,
                           overhead_bytes: int = 0, trim_s: float = 0.5) -> dict:
    """Departure spacing of one flow against perfect pacing at `rate_bps`.

    For consecutive frames i-1, i inside the steady part (trim_s cut at both ends):
    ideal_i = (bytes_i + overhead_bytes) * 8 / rate_bps (overhead_bytes converts the captured
    frame length to the bytes the pacer counts: negative for a payload rate), error_i =
    (t_i - t_{i-1}) - ideal_i. A perfectly paced, always backlogged flow has error 0 for every
    frame; a burst gives negative errors (frames closer than the pace), an idle source or a late
    departure positive ones. Returns the achieved rate and percentiles of |error|, of the signed
    error and of the burst side max(0, -error), in ns."""
    if len(t_ns) < 3:
        raise RuntimeError(f"only {len(t_ns)} frames captured")
    start, end = t_ns[0] + trim_s * 1e9, t_ns[-1] - trim_s * 1e9
    idx = [i for i, t in enumerate(t_ns) if start <= t <= end]
    if len(idx) < 100:
        raise RuntimeError(f"only {len(idx)} frames in the steady part of the capture")
    span_ns = t_ns[idx[-1]] - t_ns[idx[0]]
    achieved_bps = 8 * sum(frame_bytes[i] for i in idx[1:]) * 1e9 / span_ns
    ideal = [(frame_bytes[i] + overhead_bytes) * 8e9 / rate_bps for i in idx[1:]]
    errors = [(t_ns[i] - t_ns[i - 1]) - g for i, g in zip(idx[1:], ideal)]
    abs_sorted = sorted(abs(e) for e in errors)
    signed = sorted(errors)
    burst = sorted(max(0.0, -e) for e in errors)
    points = (("p50", .5), ("p90", .9), ("p99", .99), ("p99_9", .999), ("max", 1.0))
    return {
        "frames": len(idx), "achieved_frame_bps": achieved_bps, "pace_bps": rate_bps,
        "ideal_gap_ns": sum(ideal) / len(ideal),
        "abs_error_ns": {k: percentile(abs_sorted, q) for k, q in points},
        "burst_ns": {k: percentile(burst, q) for k, q in points},
        "error_ns": {k: percentile(signed, q) for k, q in
                     (("min", 0.0), ("p1", .01), ("p50", .5), ("p99", .99), ("max", 1.0))},
    }


def today() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z")


def load_average() -> str:
    try:
        with open("/proc/loadavg", encoding="utf-8") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def fail(prog: str, message: str) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return 1
