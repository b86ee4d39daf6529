"""Measurements inside a running lab, through the tools/testbed command line: detwan-probe
one-way-delay runs and iperf3 TCP goodput. Used by tests/lab and tools/bench/wan-*. Every wait
is bounded and every process started here is stopped before returning."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import select
import shutil
import signal
import subprocess
import time

TESTBED = pathlib.Path(__file__).resolve().parents[1] / "testbed"


def wait_for_line(proc: subprocess.Popen, needle: str, timeout_s: float) -> None:
    """Waits (bounded) until `needle` appears on proc's stderr. Reads the raw fd, so the rest of
    the output is still there for communicate()."""
    if proc.stderr is None:
        raise ValueError("wait_for_line: the process was not started with stderr=PIPE")
    fd = proc.stderr.fileno()
    deadline = time.monotonic() + timeout_s
    seen = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            chunk = os.read(fd, 4096)
            seen += chunk
            if needle.encode() in seen:
                return
            if not chunk:
                break
        if proc.poll() is not None:
            break
    raise RuntimeError(f"'{needle}' not seen within {timeout_s} s (exit status "
                       f"{proc.poll()}): {seen.decode(errors='replace')}")


@dataclasses.dataclass
class ProbeFlow:
    """One detwan-probe run from site `src` to site record `dst` (an element of
    `status --json`'s sites). in_gateway: receive in dst's gateway namespace (then use
    addr_key="gateway_addr")."""
    src: str
    dst: dict
    addr_key: str = "best_effort_addr"
    pps: int = 1000
    count: int = 1000
    size: int = 64
    port: int = 47000
    dscp: int | None = None
    in_gateway: bool = False

    @property
    def seconds(self) -> float:
        return self.count / self.pps


def probe_flows(binary: str, flows: list[ProbeFlow]) -> list[dict]:
    """Runs the flows at the same time (so they see the same machine noise); returns each
    receiver's report plus its sender's under "sender"."""
    recvs, sends = [], []
    longest = max(f.seconds for f in flows)
    try:
        for f in flows:
            where = [f.dst["name"], "--gw"] if f.in_gateway else [f.dst["name"]]
            recvs.append(subprocess.Popen(
                [str(TESTBED), "exec", *where, "--", binary, "recv", "--bind", f.dst[f.addr_key],
                 "--port", str(f.port), "--count", str(f.count), "--duration",
                 f"{f.seconds + 10:.1f}", "--json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                stdin=subprocess.DEVNULL))
        for r in recvs:
            wait_for_line(r, "listening", 10)
        for f in flows:
            cmd = [str(TESTBED), "exec", f.src, "--", binary, "send", "--to", f.dst[f.addr_key],
                   "--port", str(f.port), "--pps", str(f.pps), "--count", str(f.count),
                   "--size", str(f.size), "--json"]
            if f.dscp is not None:
                cmd += ["--dscp", str(f.dscp)]
            sends.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, stdin=subprocess.DEVNULL))
        reports = []
        for s, r in zip(sends, recvs):
            s_out, s_err = s.communicate(timeout=longest + 20)
            if s.returncode != 0:
                raise RuntimeError(f"probe send failed: {s_out} {s_err}")
            r_out, r_err = r.communicate(timeout=longest + 20)
            if r.returncode != 0:
                raise RuntimeError(f"probe recv failed: {r_err}")
            report = json.loads(r_out)
            report["sender"] = json.loads(s_out)
            reports.append(report)
        return reports
    finally:
        for proc in recvs + sends:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)


def probe(binary: str, src: str, dst: dict, **kwargs) -> dict:
    """One ProbeFlow (same keyword arguments); returns its report."""
    return probe_flows(binary, [ProbeFlow(src, dst, **kwargs)])[0]


def iperf3_goodput_bps(src: str, dst: dict, seconds: int = 4, cc: str | None = None,
                       omit: int = 1, port: int = 5201) -> dict:
    """TCP goodput from `src` to `dst` measured by iperf3 at the receiver (bits/s)."""
    if shutil.which("iperf3") is None:
        raise RuntimeError("iperf3 missing: run tools/install-deps")
    server = subprocess.Popen([str(TESTBED), "exec", dst["name"], "--", "iperf3", "-s", "-1",
                               "-B", dst["best_effort_addr"], "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # ready when the port listens
            ss = subprocess.run(["ip", "netns", "exec", dst["host_ns"], "ss", "-Htln",
                                 f"sport = :{port}"], capture_output=True, text=True)
            if ss.stdout.strip():
                break
            time.sleep(0.05)
        cmd = [str(TESTBED), "exec", src, "--", "iperf3", "-c", dst["best_effort_addr"],
               "-p", str(port), "-t", str(seconds), "-O", str(omit), "-J"]
        if cc:
            cmd += ["-C", cc]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30,
                             stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            raise RuntimeError(f"iperf3 failed: {res.stdout[-2000:]} {res.stderr}")
        report = json.loads(res.stdout)
        end = report["end"]
        return {"received_bps": end["sum_received"]["bits_per_second"],
                "sent_bps": end["sum_sent"]["bits_per_second"],
                "retransmits": end["sum_sent"].get("retransmits"),
                "cc": end.get("sender_tcp_congestion")}
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=5)


def wait_listening(ns: str, port: int, proto: str = "t", timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # ready when the port listens
        ss = subprocess.run(["ip", "netns", "exec", ns, "ss", f"-H{proto}ln", f"sport = :{port}"],
                            capture_output=True, text=True)
        if ss.stdout.strip():
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} in {ns} after {timeout_s} s")


def iperf3_udp(src: str, dst: dict, addr_key: str = "best_effort_addr", rate: str = "20M",
               seconds: float = 3, length: int = 1200, port: int = 5201,
               dscp: int | None = None) -> dict:
    """iperf3 UDP from `src` to dst[addr_key] at `rate` (iperf3 -b) with `length`-byte
    datagrams. Returns the receiver's view: packets (sent), lost_packets, lost_percent,
    jitter_ms (RFC 3550 smoothed transit difference), received_bps, plus the client's report
    under "client". The TCP control connection goes to the same address (through the tunnel
    for a tunnel address)."""
    if shutil.which("iperf3") is None:
        raise RuntimeError("iperf3 missing: run tools/install-deps")
    addr = dst[addr_key]
    server = subprocess.Popen([str(TESTBED), "exec", dst["name"], "--", "iperf3", "-s", "-1",
                               "-B", addr, "-p", str(port), "-J"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    try:
        wait_listening(dst["host_ns"], port)
        cmd = [str(TESTBED), "exec", src, "--", "iperf3", "-c", addr, "-p", str(port), "-u",
               "-b", rate, "-t", f"{seconds:g}", "-l", str(length), "-J"]
        if dscp is not None:
            cmd += ["--dscp", str(dscp)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30,
                             stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            raise RuntimeError(f"iperf3 -u failed: {res.stdout[-2000:]} {res.stderr}")
        client = json.loads(res.stdout)
        s_out, _ = server.communicate(timeout=20)
        report = json.loads(s_out)
        end = report.get("end") or {}
        total = end.get("sum_received") or end.get("sum")
        if not total or "error" in report:
            raise RuntimeError(f"iperf3 -u to {addr}: the server reported "
                               f"{report.get('error') or 'no result'}")
        return {"packets": total["packets"], "lost_packets": total["lost_packets"],
                "lost_percent": total["lost_percent"], "jitter_ms": total["jitter_ms"],
                "received_bps": total["bits_per_second"], "client": client["end"]["sum"]}
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=5)


def gateway_stats(site: str) -> dict:
    """`detwan-gw stats --json` of a site's gateway (lab up with --dataplane)."""
    res = subprocess.run([str(TESTBED), "gw", site, "--", "stats", "--json"], capture_output=True,
                         text=True, timeout=30, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise RuntimeError(f"detwan-gw stats of site {site} failed: {res.stderr.strip()}")
    return json.loads(res.stdout)


def wanem_stats(pair: str, path: int = 1) -> dict:
    """`detwan-wanem stats --json` of path `path` between the sites of `pair`."""
    res = subprocess.run([str(TESTBED), "wanem", pair, str(path), "--", "stats", "--json"],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise RuntimeError(f"detwan-wanem stats of {pair} {path} failed: {res.stderr.strip()}")
    return json.loads(res.stdout)


def lab_present() -> str | None:
    """Describes a lab that is up (any project namespace or state file), else None."""
    from lab import builder  # local import: keeps measure usable without root for probes
    return builder.existing_lab()


class Terminated(Exception):
    """SIGTERM or SIGHUP inside own_lab: the lab is removed, then this is raised."""


def _raise_terminated(signum, _frame):
    raise Terminated(f"signal {signum}")


@contextlib.contextmanager
def own_lab(*up_args: str):
    """Brings a lab up for a benchmark and always tears it down (also on SIGINT/SIGTERM/SIGHUP).
    Refuses to touch a lab that someone else brought up."""
    existing = lab_present()
    if existing:
        raise RuntimeError(f"a lab is already up ({existing}); run tools/testbed down first")
    saved = {s: signal.signal(s, _raise_terminated)
             for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        res = subprocess.run([str(TESTBED), "up", "-q", *up_args], capture_output=True,
                             text=True, stdin=subprocess.DEVNULL, timeout=300)
        if res.returncode != 0:
            raise RuntimeError(f"tools/testbed up {' '.join(up_args)} failed: {res.stderr}")
        st = subprocess.run([str(TESTBED), "status", "--json"], capture_output=True, text=True,
                            check=True, timeout=60)
        yield json.loads(st.stdout)
    finally:
        for s in saved:
            signal.signal(s, signal.SIG_IGN)
        subprocess.run([str(TESTBED), "down", "-q"], capture_output=True, timeout=120)
        for s, h in saved.items():
            signal.signal(s, h)
