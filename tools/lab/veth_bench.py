"""tools/bench/transport-vs-tcp --veth: the transport against kernel TCP on a plain veth pair.

Two network namespaces joined by one veth pair, default offloads, no emulator, best effort:
the path every datacenter-rate figure of issue 18 is measured on. One detwan transfer
(`detwan-bench transport send/recv`, every byte checked) and one iperf3 TCP transfer of the same
size, one after the other, then iperf3 UDP of the same size at detwan's goodput. CPU: detwan's own accounting (getrusage of sender and receiver,
pattern filling and checking excluded); iperf3's cpu_utilization_percent of both ends times
the transfer's duration. Both count the process's user and system time (the kernel's protocol
work in the process's context); neither counts softirq work run elsewhere.

channels > 1: the detwan transfer is split over that many channels on as many progress threads
at each end (`--channels K`, backend_config threads=K), and a one-channel detwan transfer runs
first in the same series as its baseline ("detwan_one_channel")."""
from __future__ import annotations

import json
import os
import subprocess

from lab import measure
from lab.transport_key import security_args

NS_A_SUFFIX, NS_B_SUFFIX = "a", "b"
ADDR_A, ADDR_B = "10.40.0.1", "10.40.0.2"
DETWAN_PORT, IPERF_PORT = 5400, 5411


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, capture_output=True, text=True)


def _in(ns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


class VethPair:
    """Namespaces <tag>-a and <tag>-b joined by a veth pair; removed on exit, also on errors."""

    def __init__(self, tag: str):
        self.a, self.b = f"{tag}-{NS_A_SUFFIX}", f"{tag}-{NS_B_SUFFIX}"

    def __enter__(self) -> "VethPair":
        try:
            for ns in (self.a, self.b):
                _run(["ip", "netns", "add", ns])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "link", "add", "va", "netns", self.a, "type", "veth", "peer", "name", "vb",
                  "netns", self.b])
            _run(["ip", "-n", self.a, "addr", "add", f"{ADDR_A}/24", "dev", "va"])
            _run(["ip", "-n", self.b, "addr", "add", f"{ADDR_B}/24", "dev", "vb"])
            _run(["ip", "-n", self.a, "link", "set", "va", "up"])
            _run(["ip", "-n", self.b, "link", "set", "vb", "up"])
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for ns in (self.a, self.b):
            subprocess.run(["ip", "netns", "del", ns], stdin=subprocess.DEVNULL,
                           capture_output=True)


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _json(out: str, err: str, what: str) -> dict:
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return {"error": f"{what} printed no JSON: {err.strip()[-800:]}"}


def with_threads(backend: str, threads: int) -> str:
    """`backend` with backend_config threads=N added ("udp" -> "udp:threads=2")."""
    return f"{backend},threads={threads}" if ":" in backend else f"{backend}:threads={threads}"


def run_detwan(pair: VethPair, binary: str, size: str, timeout_s: float,
               backend: str = "udp", recycle: bool = True, channels: int = 1,
               security: str = "authenticate") -> dict:
    """One transfer; `security`: "authenticate" (default), "encrypt" or "none"."""
    recv = subprocess.Popen(_in(pair.b, [binary, "transport", "recv", "--listen",
                                         f"{ADDR_B}:{DETWAN_PORT}", "--json", "--timeout",
                                         f"{timeout_s:.0f}", "--backend", backend,
                                         "--channels", str(channels), *security_args(security),
                                         *([] if recycle else ["--no-recycle"])]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    send = None
    try:
        measure.wait_for_line(recv, "listening", 15)
        send = subprocess.Popen(_in(pair.a, [binary, "transport", "send",
                                             f"{ADDR_B}:{DETWAN_PORT}", "--size", size, "--json",
                                             "--timeout", f"{timeout_s:.0f}", "--backend",
                                             backend, "--channels", str(channels),
                                             *security_args(security)]),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
        s_out, s_err = send.communicate(timeout=timeout_s + 60)
        r_out, r_err = recv.communicate(timeout=60)
    finally:
        _stop(send)
        _stop(recv)
    sent, received = _json(s_out, s_err, "send"), _json(r_out, r_err, "recv")
    if sent.get("error") or received.get("error"):
        return {"error": sent.get("error") or received.get("error")}
    nbytes = received.get("bytes_received") or sent.get("bytes_sent") or 0
    # The transport's CPU: the processes' time minus the pattern's filling (sender) and
    # checking (receiver), which iperf3 does not do; with them as cpu_s_per_gb_with_checking.
    cpu_s = (sent.get("transport_cpu_s") or 0) + (received.get("transport_cpu_s") or 0)
    all_cpu_s = (sent.get("cpu_s") or 0) + (received.get("cpu_s") or 0)
    return {"goodput_bps": sent.get("goodput_bps"), "bytes": nbytes,
            "cpu_s": cpu_s, "cpu_s_sender": sent.get("transport_cpu_s"),
            "cpu_s_receiver": received.get("transport_cpu_s"),
            "cpu_s_per_gb": cpu_s / (nbytes / 1e9) if nbytes else None,
            "cpu_s_per_gb_with_checking": all_cpu_s / (nbytes / 1e9) if nbytes else None,
            "wrong_bytes": received.get("wrong_bytes"), "channels": channels,
            "backend": backend, "security": security, "error": None}


def _iperf3(pair: VethPair, client_args: list[str], timeout_s: float, what: str) -> dict:
    """One iperf3 run from a to an iperf3 server in b; its JSON report (or {"error"})."""
    server = subprocess.Popen(_in(pair.b, ["iperf3", "-s", "-1", "-B", ADDR_B, "-p",
                                           str(IPERF_PORT)]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL)
    try:
        measure.wait_listening(pair.b, IPERF_PORT)
        res = subprocess.run(_in(pair.a, ["iperf3", "-c", ADDR_B, "-p", str(IPERF_PORT),
                                          *client_args, "-J"]),
                             capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
    finally:
        _stop(server)
    return _json(res.stdout, res.stderr, what)


def _cpu_s(end: dict, seconds: float) -> float:
    cpu = end.get("cpu_utilization_percent", {})
    return (cpu.get("host_total", 0) + cpu.get("remote_total", 0)) / 100 * seconds


def run_tcp(pair: VethPair, nbytes: int, timeout_s: float) -> dict:
    report = _iperf3(pair, ["-n", str(nbytes)], timeout_s, "iperf3")
    if report.get("error"):
        return {"error": report["error"]}
    end = report["end"]
    received = end["sum_received"]
    cpu_s = _cpu_s(end, received["seconds"])
    return {"goodput_bps": received["bits_per_second"], "bytes": received["bytes"],
            "cpu_s": cpu_s, "cpu_s_per_gb": cpu_s / (received["bytes"] / 1e9),
            "cc": end.get("sender_tcp_congestion"), "retransmits": end["sum_sent"].get(
                "retransmits"), "error": None}


def run_udp(pair: VethPair, nbytes: int, rate_bps: float, timeout_s: float) -> dict:
    """iperf3 UDP of nbytes at rate_bps (detwan's goodput), 1,472-byte datagrams (MTU 1500)."""
    report = _iperf3(pair, ["-u", "-b", str(int(rate_bps)), "-l", "1472", "-n", str(nbytes)],
                     timeout_s, "iperf3 -u")
    if report.get("error"):
        return {"error": report["error"]}
    total = report["end"]["sum"]
    lost = (total.get("lost_percent") or 0) / 100
    received = total["bytes"] * (1 - lost)
    cpu_s = _cpu_s(report["end"], total["seconds"])
    return {"goodput_bps": total["bits_per_second"] * (1 - lost), "bytes": received,
            "cpu_s": cpu_s, "cpu_s_per_gb": cpu_s / (received / 1e9) if received else None,
            "lost_percent": total.get("lost_percent"), "error": None}


def run(binary: str, size: str, size_bytes: int, timeout_s: float = 900,
        backend: str = "udp", recycle: bool = True, channels: int = 1) -> dict:
    one_channel = None
    with VethPair(f"dtvt{os.getpid()}") as pair:
        if channels > 1:
            one_channel = run_detwan(pair, binary, size, timeout_s, backend, recycle)
            detwan = run_detwan(pair, binary, size, timeout_s, with_threads(backend, channels),
                                recycle, channels)
        else:
            detwan = run_detwan(pair, binary, size, timeout_s, backend, recycle)
        tcp = run_tcp(pair, size_bytes, timeout_s)
        udp = ({"error": "no detwan rate to match"} if detwan.get("error") else
               run_udp(pair, size_bytes, detwan["goodput_bps"], timeout_s))
    out = {"path": "veth pair, default offloads, best effort", "size": size,
           "backend": backend, "detwan": detwan, "tcp": tcp, "udp": udp}
    if one_channel is not None:
        out["detwan_one_channel"] = one_channel
        if not one_channel.get("error") and not detwan.get("error"):
            out["channels_goodput_over_one"] = detwan["goodput_bps"] / one_channel["goodput_bps"]
    if not udp.get("error") and udp.get("cpu_s_per_gb") and detwan.get("cpu_s_per_gb"):
        out["bytes_per_cpu_s_over_udp"] = udp["cpu_s_per_gb"] / detwan["cpu_s_per_gb"]
    if not detwan.get("error") and not tcp.get("error") and detwan.get("cpu_s_per_gb"):
        # Bytes per CPU-second, detwan over TCP (target >= 0.5), and goodput over TCP's.
        out["bytes_per_cpu_s_over_tcp"] = tcp["cpu_s_per_gb"] / detwan["cpu_s_per_gb"]
        out["goodput_over_tcp"] = detwan["goodput_bps"] / tcp["goodput_bps"]
    return out


def security_ab(binary: str, size: str, repetitions: int, timeout_s: float = 900,
                backend: str = "udp") -> dict:
    """The cost of authenticated channels: transfers with security none, authenticate and
    encrypt, alternating (each round starting with the next mode), `repetitions` rounds on one
    veth pair. Per mode the median goodput and
    CPU-seconds per GB (sender + receiver), and each against "none" of the same run."""
    runs: list[dict] = []
    with VethPair(f"dtsa{os.getpid()}") as pair:
        modes = ("none", "authenticate", "encrypt")
        for rep in range(repetitions):
            # Each round starts with another mode, so no mode always runs first (or last).
            for mode in modes[rep % 3:] + modes[:rep % 3]:
                r = run_detwan(pair, binary, size, timeout_s, backend, security=mode)
                r["round"] = rep
                runs.append(r)

    def median(values: list[float]) -> float | None:
        values = sorted(v for v in values if v is not None)
        if not values:
            return None
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    summary: dict = {}
    for mode in ("none", "authenticate", "encrypt"):
        ok = [r for r in runs if r["security"] == mode and not r.get("error")]
        summary[mode] = {"runs": len(ok),
                         "goodput_bps_median": median([r["goodput_bps"] for r in ok]),
                         "cpu_s_per_gb_median": median([r["cpu_s_per_gb"] for r in ok]),
                         "wrong_bytes": sum(r.get("wrong_bytes") or 0 for r in ok)}
    base = summary["none"]
    for mode in ("authenticate", "encrypt"):
        m = summary[mode]
        if base["goodput_bps_median"] and m["goodput_bps_median"]:
            m["goodput_over_none"] = m["goodput_bps_median"] / base["goodput_bps_median"]
        if base["cpu_s_per_gb_median"] and m["cpu_s_per_gb_median"]:
            m["cpu_per_byte_over_none"] = m["cpu_s_per_gb_median"] / base["cpu_s_per_gb_median"]
    return {"path": "veth pair, default offloads, best effort", "size": size, "backend": backend,
            "repetitions": repetitions, "runs": runs, "summary": summary}
