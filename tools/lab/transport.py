"""detwan transport against kernel TCP over the same emulated WAN path.

`detwan-bench transport --lab ...` execs `python3 -m lab.transport ...` (this module). It brings
up a 2-site lab whose path runs detwan-wanem with delay = RTT/2 each way, the loss, the rate and
a drop-tail queue of max(BDP, 128 KiB) (or reuses a lab that is already up), runs
`detwan-bench transport recv` in site b's host namespace and `... send` in site a's, then iperf3
TCP (cubic, then bbr) between the same two hosts over the same path, and prints ONE JSON object
(--json) or a table. Everything it starts is stopped, and a lab it brought up is torn down, also
on failure and on SIGINT/SIGTERM/SIGHUP; a lab it found running is left as it was.

With --paths 2 both ends run in the gateway namespaces instead, where both WAN paths end, and
the sender stripes over path 1 and path 2 (each at --rate); iperf3 then runs host to host over
path 1 (the only path the lab routes).

Payload limit (docs: tools/bench/transport-vs-tcp): detwan-wanem's rate limiter counts whole
Ethernet frames, L2 header + IP packet (no preamble/FCS/IFG): MTU + 14 bytes for a full datagram.
A full detwan datagram carries MTU - 28 (IPv4 + UDP) - header_bytes of payload, header_bytes as
measured by `detwan-bench transport info` on the wire. So
    payload_limit_bps = rate * (MTU - 28 - header_bytes) / (MTU + 14)
(TCP's equivalent with 1448-byte segments: rate * 1448 / 1514.)
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

from lab.units import (arg_type, parse_duration_ns, parse_fraction, parse_rate_bps,
                       parse_size_bytes)
from lab import measure, wanem
from lab.transport_key import MODES as SECURITY_MODES, security_args

PROG = "detwan-bench transport --lab"
BENCH_BINARY = "tools/bench/detwan-bench"
MTU_BYTES = 1500
ETHERNET_BYTES = 14
TCP_MSS_BYTES = 1448  # MTU 1500 with TCP timestamps
MIN_QUEUE_BYTES = 128 * 1024
SENDER, RECEIVER = "a", "b"


class BenchError(Exception):
    pass


# ------------------------------------------------------------------------------ quantities

def wan_spec(rate_bps: int, rtt_ns: int, loss: float, queue_bytes: int) -> str:
    delay_us = rtt_ns // 2 // 1000
    tokens = [f"delay={delay_us}us", f"rate={rate_bps}bit", f"queue={queue_bytes}b"]
    if loss > 0:
        tokens.append(f"loss={loss * 100:g}%")
    return ",".join(tokens)


def spec_values(spec: str) -> dict:
    """rate_bps, rtt_ns (2 x delay) and loss of a running lab's canonical SPEC."""
    out = {"rate_bps": 0, "rtt_ns": 0, "loss": 0.0}
    for token in spec.split(","):
        key, _, value = token.partition("=")
        try:
            if key == "rate":
                out["rate_bps"] = parse_rate_bps(value)
            elif key == "delay":
                out["rtt_ns"] = 2 * parse_duration_ns(value)
            elif key == "loss":
                out["loss"] = parse_fraction(value)
        except argparse.ArgumentTypeError:
            pass
    return out


def running_lab() -> tuple[dict, dict]:
    """The running lab's status and its path 1 (rate_bps, rtt_ns, loss, spec), for --no-setup."""
    res = subprocess.run([str(measure.TESTBED), "status", "--json"], capture_output=True,
                         text=True, timeout=60)
    if res.returncode != 0:
        raise BenchError(f"the running lab is not healthy: {res.stderr.strip()}")
    st = json.loads(res.stdout)
    spec = st["paths"][0]["spec"]
    path = spec_values(spec)
    path["spec"] = spec
    path["mtu_bytes"] = st.get("options", {}).get("mtu") or MTU_BYTES
    return st, path


# ---------------------------------------------------------------------------- processes

def bench_binary(cli_value: str | None) -> str:
    path = (cli_value or os.environ.get("DETWAN_BENCH_BINARY")
            or str(wanem.build_dir(None) / BENCH_BINARY))
    if not os.access(path, os.X_OK):
        raise BenchError(f"{path} not built (ninja -C <build> tools/bench/detwan-bench)")
    return path


def log(msg: str) -> None:
    print(f"[transport] {msg}", file=sys.stderr, flush=True)


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def exec_cmd(site: str, gw: bool, argv: list[str]) -> list[str]:
    return [str(measure.TESTBED), "exec", site, *(["--gw"] if gw else []), "--", *argv]


def header_info(binary: str, mtu: int, security: str = "authenticate") -> dict:
    res = subprocess.run([binary, "transport", "info", "--json", "--mtu", str(mtu),
                          *(["--insecure"] if security == "none" else
                            ["--encrypt"] if security == "encrypt" else [])],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise BenchError(f"detwan-bench transport info failed: {res.stderr.strip()}")
    return json.loads(res.stdout)


def allow_cubic(namespaces: list[str]) -> dict:
    """Tries to allow cubic in each namespace. In a non-initial namespace the kernel may refuse
    (the allowed list is then global): iperf3 -C still works as root (CAP_NET_ADMIN bypasses
    the allowed list), and its report names the algorithm it ran, which is checked."""
    out = {}
    for ns in namespaces:
        res = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-w",
                              "net.ipv4.tcp_allowed_congestion_control=reno cubic bbr"],
                             capture_output=True, text=True, timeout=10)
        out[ns] = "set" if res.returncode == 0 else f"refused: {res.stderr.strip()}"
    return out


def run_detwan(args, binary: str, ends: dict, timeout_s: float) -> tuple[dict, dict]:
    """recv in the receiver's namespace, send from the sender's; returns both JSON reports."""
    security = security_args(getattr(args, "security", None) or "authenticate")
    recv_cmd = exec_cmd(RECEIVER, ends["gw"], [
        binary, "transport", "recv", "--listen", f"0.0.0.0:{args.port}", "--backend",
        args.backend, "--mtu", str(args.mtu), "--json", "--timeout", f"{timeout_s:.0f}",
        *security])
    send_argv = [binary, "transport", "send", ends["remotes"][0], "--size", str(args.size),
                 "--message-size", str(args.message_size), "--backend", args.backend,
                 "--mtu", str(args.mtu), "--json", "--timeout", f"{timeout_s:.0f}",
                 "--inflight", str(args.inflight), *security]
    if ends["rates"][0] > 0:
        send_argv += ["--rate", f"{ends['rates'][0]}bit"]
    if len(ends["remotes"]) > 1:
        send_argv += ["--paths", ",".join(ends["remotes"]),
                      "--path-rates", ",".join(f"{r}bit" for r in ends["rates"]),
                      "--local-paths", ",".join(ends["locals"])]
    if args.fec:
        send_argv += ["--fec", "--fec-k", str(args.fec_k), "--fec-m", str(args.fec_m)]
    recv = subprocess.Popen(recv_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    send = None

    def doc(out: str, err: str, what: str) -> dict:
        try:
            return json.loads(out)
        except json.JSONDecodeError:
            return {"error": f"{what} printed no JSON: {err.strip()[-1500:]}"}
    try:
        try:
            measure.wait_for_line(recv, "listening", 15)
        except RuntimeError as e:
            stop(recv)
            out, err = recv.communicate(timeout=10)
            return {"error": "not started: the receiver did not come up"}, doc(out, f"{e} {err}",
                                                                               "recv")
        log(f"detwan {args.backend}: {' '.join(send_argv[1:])}")
        send = subprocess.Popen(exec_cmd(SENDER, ends["gw"], send_argv), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        s_out, s_err = send.communicate(timeout=timeout_s + 60)
        r_out, r_err = recv.communicate(timeout=60)
    finally:
        stop(send)
        stop(recv)
    return doc(s_out, s_err, "send"), doc(r_out, r_err, "recv")


def run_iperf3(dst: dict, cc: str, args, seconds: float | None, size: int) -> dict:
    """iperf3 TCP from the sender's host to dst's best-effort address with congestion control
    `cc`: -n SIZE, or -t SECONDS when given. Goodput as the receiver counted it."""
    addr = dst["best_effort_addr"]
    server = subprocess.Popen(exec_cmd(RECEIVER, False, [
        "iperf3", "-s", "-1", "-B", addr, "-p", str(args.iperf_port)]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        measure.wait_listening(dst["host_ns"], args.iperf_port)
        amount = ["-t", f"{seconds:g}"] if seconds else ["-n", str(size)]
        cmd = exec_cmd(SENDER, False, ["iperf3", "-c", addr, "-p", str(args.iperf_port), "-C", cc,
                                       "-i", "0.2", "-J", *amount])
        log(f"iperf3 -C {cc} {' '.join(amount)}")
        limit = (seconds or 3600) + 60
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=limit,
                             stdin=subprocess.DEVNULL)
    finally:
        stop(server)
    try:
        report = json.loads(res.stdout)
    except json.JSONDecodeError:
        return {"cc": cc, "error": f"iperf3 printed no JSON: {res.stderr.strip()[-800:]}"}
    if res.returncode != 0 or "error" in report:
        return {"cc": cc, "error": report.get("error") or res.stderr.strip()[-800:]}
    end = report["end"]
    received = end["sum_received"]
    intervals = [i["sum"]["bits_per_second"] for i in report.get("intervals", [])
                 if i["sum"].get("seconds", 0) > 0.1]
    return {"cc": end.get("sender_tcp_congestion", cc), "requested_cc": cc,
            "goodput_bps": received["bits_per_second"], "bytes": received["bytes"],
            "seconds": received["seconds"], "retransmits": end["sum_sent"].get("retransmits"),
            "interval_bps": intervals, "mode": "time" if seconds else "bytes", "error": None}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(q * len(v) + 0.999999) - 1))]


# ------------------------------------------------------------------ for tools/bench/transport-*

def bench_binary_for(build_dir: str | None) -> str:
    """The built detwan-bench of --build-dir / $DETWAN_BUILD_DIR / <repo>/build."""
    return str(wanem.build_dir(build_dir) / BENCH_BINARY)


def run_lab_bench(binary: str, extra: list[str], timeout_s: float = 3600) -> dict:
    """`detwan-bench transport --lab EXTRA --json`; its JSON document (which carries "error" when
    the run failed). RuntimeError when it printed none."""
    res = subprocess.run([binary, "transport", "--lab", *extra, "--json"], capture_output=True,
                         text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"detwan-bench transport --lab {' '.join(extra)} (exit "
                           f"{res.returncode}) printed no JSON: {res.stderr[-2000:]}") from None
    sys.stderr.write(res.stderr)
    return doc


# ---------------------------------------------------------------------------------- main

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=arg_type(parse_rate_bps), help="path rate, e.g. 200mbit (per path)")
    p.add_argument("--rtt", type=arg_type(parse_duration_ns), default=parse_duration_ns("40ms"),
                   help="round-trip time (delay = rtt/2 each way; default 40ms)")
    p.add_argument("--loss", type=arg_type(parse_fraction), default=0.0, help="random loss each way, 1%%")
    p.add_argument("--size", type=arg_type(parse_size_bytes), default=1 << 30, help="bytes (1g = 2^30)")
    p.add_argument("--message-size", type=arg_type(parse_size_bytes), default=4 << 20)
    p.add_argument("--inflight", type=int, default=0, help="detwan messages in flight (0 = auto)")
    p.add_argument("--queue", type=arg_type(parse_size_bytes), help="emulator queue (default max(BDP, 128k))")
    p.add_argument("--paths", type=int, choices=(1, 2), default=1,
                   help="2: stripe detwan over two disjoint paths of --rate each")
    p.add_argument("--fec", action="store_true", help="detwan with Reed-Solomon FEC")
    p.add_argument("--fec-k", type=int, default=32)
    p.add_argument("--fec-m", type=int, default=4)
    p.add_argument("--backend", default="udp", help="detwan transport backend (default udp)")
    p.add_argument("--security", choices=SECURITY_MODES, default="authenticate",
                   help="the transfer's channel security (a key file is made for the run)")
    p.add_argument("--detwan-rate", type=arg_type(parse_rate_bps),
                   help="detwan's reserved rate per path (default: the path rate)")
    p.add_argument("--best-effort", action="store_true",
                   help="run detwan best effort (congestion control) instead of reserved")
    p.add_argument("--tcp", default="cubic,bbr",
                   help="iperf3 congestion controls to run, comma-separated, or 'none'")
    p.add_argument("--tcp-seconds", type=float,
                   help="iperf3 -t SECONDS (default: the time SIZE takes at TCP's payload limit "
                   "+ 10 %%, in [5, --tcp-max-seconds]: a lossy path can hold cubic to a few "
                   "Mbit/s, and -n SIZE would then run for most of an hour)")
    p.add_argument("--tcp-max-seconds", type=float, default=60.0)
    p.add_argument("--tcp-bytes", action="store_true",
                   help="iperf3 -n SIZE (the same bytes as detwan) instead of -t")
    p.add_argument("--mtu", type=int, default=MTU_BYTES)
    p.add_argument("--port", type=int, default=5400)
    p.add_argument("--iperf-port", type=int, default=5201)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-setup", action="store_true", help="use the lab that is up (else fail)")
    p.add_argument("--build-dir")
    p.add_argument("--bench-binary")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def lab_ends(st: dict, paths: int, rates: list[int], port: int) -> dict:
    """Where recv listens and send connects: hosts over path 1, or both gateways (2 paths)."""
    b = next(s for s in st["sites"] if s["name"] == RECEIVER)
    if paths == 1:
        return {"gw": False, "remotes": [f"{b['best_effort_addr']}:{port}"], "locals": [],
                "rates": rates[:1], "receiver": b}
    wan = sorted((p for p in st["paths"] if p["pair"] == SENDER + RECEIVER),
                 key=lambda p: p["index"])
    if len(wan) < 2:
        raise BenchError("the running lab has one path between a and b; --paths 2 needs two")
    return {"gw": True, "receiver": b,
            "remotes": [f"{p['gateway_addrs'][RECEIVER]}:{port}" for p in wan[:2]],
            "locals": [f"{p['gateway_addrs'][SENDER]}:0" for p in wan[:2]],
            "rates": rates[:2]}


def measure_all(args, binary: str, st: dict, path: dict, reused: bool) -> dict:
    rate, rtt_ns, loss = path["rate_bps"], path["rtt_ns"], path["loss"]
    info = header_info(binary, args.mtu, args.security)
    header = info["header_bytes"]
    seg_payload = args.mtu - 28 - header
    frame = args.mtu + ETHERNET_BYTES
    total_rate = rate * args.paths
    payload_limit = total_rate * seg_payload / frame if rate else None
    tcp_limit = rate * TCP_MSS_BYTES / (TCP_MSS_BYTES + 66) if rate else None
    detwan_rate = 0 if args.best_effort else (args.detwan_rate or rate)
    ends = lab_ends(st, args.paths, [detwan_rate] * args.paths, args.port)
    ideal_s = args.size * 8 / payload_limit if payload_limit else 60.0
    timeout_s = 60 + 8 * ideal_s

    doc = {"schema": "detwan-bench-transport", "version": 1,
           "path_rate_bps": total_rate, "paths": args.paths, "rtt_ns": rtt_ns, "loss": loss,
           "size_bytes": args.size, "message_bytes": args.message_size, "mtu_bytes": args.mtu,
           "backend": args.backend, "fec": args.fec, "detwan_rate_bps": detwan_rate,
           "header_bytes": header, "header_source": info["source"],
           "segment_payload_bytes": seg_payload, "frame_bytes": frame,
           "payload_limit_bps": payload_limit, "tcp_payload_limit_bps": tcp_limit,
           "lab": {"reused": reused, "spec": path["spec"], "sender": SENDER,
                   "receiver": RECEIVER, "namespaces": "gateway" if ends["gw"] else "host"},
           "error": None}

    send, recv = run_detwan(args, binary, ends, timeout_s)
    errors = [f"{k}: {d['error']}" for k, d in (("send", send), ("recv", recv))
              if d.get("error")]
    goodput = recv.get("goodput_bps") if not errors else None
    cpu = None
    if not errors:
        cpu = send.get("transport_cpu_s", 0) + recv.get("transport_cpu_s", 0)
    doc.update({
        "goodput_bps": goodput,
        "wrong_bytes": recv.get("wrong_bytes"),
        "retransmissions": send.get("retransmissions"),
        "fec_parity_sent": send.get("stats", {}).get("fec_parity_sent"),
        "fec_recovered": recv.get("stats", {}).get("fec_recovered"),
        "cpu_s": cpu,
        "cpu_s_per_gb": cpu / (args.size / 1e9) if cpu is not None else None,
        "cpu_s_per_gb_with_checking": (
            (send.get("cpu_s", 0) + recv.get("cpu_s", 0)) / (args.size / 1e9)
            if not errors else None),
        "message_latency_ns": recv.get("message_latency_ns"),
        "detwan": {"send": send, "recv": recv},
        "warnings": [w for w in (send.get("warning"), recv.get("done_send_error")) if w],
    })
    if errors:
        doc["error"] = "; ".join(errors)

    tcp = {}
    ccs = [] if args.tcp == "none" else [c for c in args.tcp.split(",") if c]
    if ccs:
        if shutil.which("iperf3") is None:
            raise BenchError("iperf3 missing: run tools/install-deps")
        doc["tcp_sysctl"] = allow_cubic([s["host_ns"] for s in st["sites"]
                                         if s["name"] in (SENDER, RECEIVER)])
        seconds = args.tcp_seconds
        if args.tcp_bytes:
            seconds = None
        elif seconds is None:
            ideal = args.size * 8 / tcp_limit if tcp_limit else args.tcp_max_seconds
            seconds = round(min(max(ideal * 1.1, 5.0), args.tcp_max_seconds), 1)
        for cc in ccs:
            tcp[cc] = run_iperf3(ends["receiver"], cc, args, seconds, args.size)
            r = tcp[cc]
            if r.get("error") is None and r["cc"] != cc:
                r["error"] = f"iperf3 ran {r['cc']}, not {cc}"
            if r.get("interval_bps"):
                # Time per message at each 0.2 s interval's rate plus the one-way delay: what a
                # message of the same size would have taken in that stretch of the transfer.
                per_msg = [args.message_size * 8 / bps * 1e9 + rtt_ns / 2
                           for bps in r["interval_bps"] if bps > 0]
                r["time_per_message_ns"] = {"p50": percentile(per_msg, 0.5),
                                            "p99": percentile(per_msg, 0.99),
                                            "max": max(per_msg) if per_msg else 0}
    doc["tcp"] = tcp
    for cc in ("cubic", "bbr"):
        r = tcp.get(cc) or {}
        value = r.get("goodput_bps") if r.get("error") is None else None
        doc[f"tcp_{cc}_goodput_bps"] = value
        doc[f"tcp_{cc}_retransmits"] = r.get("retransmits")
        doc[f"goodput_over_tcp_{cc}"] = goodput / value if goodput and value else None
    doc["goodput_over_payload_limit"] = (goodput / payload_limit
                                         if goodput and payload_limit else None)
    return doc


def fmt_bps(v) -> str:
    return "-" if v is None else f"{v / 1e6:9.2f} Mbit/s"


def fmt_ratio(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def print_table(doc: dict) -> None:
    lab = doc["lab"]
    print(f"{PROG}: {doc['paths']} x path, {fmt_bps(doc['path_rate_bps']).strip()} total, "
          f"RTT {doc['rtt_ns'] / 1e6:g} ms, loss {doc['loss'] * 100:g} %, "
          f"{doc['size_bytes']} bytes, lab {'reused' if lab['reused'] else 'own'} "
          f"('{lab['spec']}')")
    print(f"payload limit: {fmt_bps(doc['payload_limit_bps']).strip()} "
          f"({doc['segment_payload_bytes']} payload bytes per {doc['frame_bytes']}-byte frame, "
          f"header {doc['header_bytes']} B {doc['header_source']})")
    print(f"{'flow':<16} {'goodput':>16} {'/limit':>8} {'retrans':>9}  notes")
    lim = doc["payload_limit_bps"]
    print(f"{'detwan ' + doc['backend']:<16} {fmt_bps(doc['goodput_bps']):>16} "
          f"{fmt_ratio(doc['goodput_over_payload_limit']):>8} "
          f"{str(doc['retransmissions']):>9}  wrong bytes {doc['wrong_bytes']}, CPU "
          f"{fmt_ratio(doc['cpu_s_per_gb'])} s/GB"
          + (f", error: {doc['error']}" if doc["error"] else ""))
    for cc, r in doc["tcp"].items():
        g = r.get("goodput_bps")
        print(f"{'tcp ' + cc:<16} {fmt_bps(g):>16} "
              f"{fmt_ratio(g / lim if g and lim else None):>8} {str(r.get('retransmits')):>9}  "
              + (f"error: {r['error']}" if r.get("error") else
                 f"{r['mode']}: {r['bytes']} bytes in {r['seconds']:.1f} s"))
    print(f"detwan / tcp bbr: {fmt_ratio(doc['goodput_over_tcp_bbr'])}, "
          f"detwan / tcp cubic: {fmt_ratio(doc['goodput_over_tcp_cubic'])}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.build_dir:
        os.environ["DETWAN_BUILD_DIR"] = str(pathlib.Path(args.build_dir).resolve())
    try:
        binary = bench_binary(args.bench_binary)
        existing = measure.lab_present()
        if existing or args.no_setup:
            if os.geteuid() != 0:
                raise BenchError("must run as root (network namespaces)")
            if not existing:
                raise BenchError("--no-setup: no lab is up (tools/testbed up ...)")
            st, path = running_lab()
            spec = path["spec"]
            log(f"using the running lab ({existing}): '{spec}'")
            doc = measure_all(args, binary, st, path, reused=True)
        else:
            if args.rate is None:
                raise BenchError("--rate is required to build the lab path")
            if os.geteuid() != 0:
                raise BenchError("must run as root (network namespaces)")
            bdp = int(args.rate * args.rtt / 8e9)
            queue = args.queue or max(bdp, MIN_QUEUE_BYTES)
            spec = wan_spec(args.rate, args.rtt, args.loss, queue)
            up = ["--wan", spec, "--seed", str(args.seed), "--paths", str(args.paths)]
            if args.build_dir:
                up += ["--build-dir", args.build_dir]
            log(f"tools/testbed up {' '.join(up)}")
            with measure.own_lab(*up) as st:
                path = {"rate_bps": args.rate, "rtt_ns": args.rtt, "loss": args.loss,
                        "spec": spec}
                doc = measure_all(args, binary, st, path, reused=False)
            log("lab removed")
    except (BenchError, RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        if args.json:
            print(json.dumps({"schema": "detwan-bench-transport", "version": 1,
                              "error": str(e)}))
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc)
    ok = doc["error"] is None and doc["wrong_bytes"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
