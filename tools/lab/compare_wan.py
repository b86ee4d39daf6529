"""The comparison that matters (`tools/bench/compare-allreduce --dataplane`): a 2-site job's
allreduce through a reserved tunnel vs over best effort, detwan vs gloo vs Open MPI, with the WAN
idle and flooded, side by side on the same lab path.

Per loss level one lab: `tools/testbed up --dataplane uring --agents` with the WAN SPEC of
compare.py (delay = RTT/2 each way, --rate, the loss, a drop-tail queue of max(BDP, 128 KiB)), one
reservation a<->b of --reserve through the lab's agent (provisioned before the first run, ended
after the last). Then, for wan in (idle, flooded) — flooded: real cross traffic between the
sites' cross hosts over the best-effort path (tools/lab/cross.py: TCP cubic and BBR flows plus
unresponsive UDP) offering --cross of the best-effort share (rate - reserve) in each direction —
and for each size, one run of each:

  detwan / tunnel       detwan-bench allreduce --lab --no-setup --reservation ID (the library
                        asks the agent, listens on the tunnel address, paces at the reservation)
  detwan / best_effort  detwan-bench allreduce --lab --no-setup --best-effort
  gloo / best_effort    tools/bench/baselines/gloo-allreduce over the best-effort addresses
  mpi / best_effort     mpi-allreduce under mpirun (btl tcp), as compare.py

Every tool times each iteration (max over ranks); a row has p50, p99 and max of them (nearest
rank), the mean, busbw (nccl-tests) and bound_s = size * 8 / reserved rate: each direction of
the WAN must carry the whole buffer once (2 sites), so no allreduce over the reservation can be
faster. Best-effort rows show the same bound, for comparison. Each row's `cpu` is what every
component spent during that run (tools/lab/cpu_account.py: ranks, gateways, emulator, agents,
cross-traffic generators, and the machine's busy and softirq time), with its share of a core. TCP baselines use --cc (default
cubic) as the hosts' congestion control.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import sys
import tempfile
from typing import Any

from lab import cpu_account, cross, measure, reserve
from lab.allreduce_runs import (CompareError, binaries, lab_sites, parse_row, raise_terminated,
                                rank_sites, run_gloo, run_mpi, sweep_args, without_tunnel_addrs)
from lab.runs import Runs, last_json, run_group, set_cc, tail
from lab.transport import MIN_QUEUE_BYTES, wan_spec
from lab.units import (arg_type, list_type, parse_duration_ns, parse_fraction, parse_rate_bps,
                       parse_share, parse_size_bytes)

PROG = "compare-allreduce --dataplane"
SCHEMA = "detwan-compare-wan"
IMPLS = ("detwan", "gloo", "mpi")
BOUND_FORMULA = "bound_s = size_bytes * 8 / reserved rate (each direction carries the buffer once)"


def log(msg: str) -> None:
    print(f"[compare-wan] {msg}", file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--dataplane", nargs="?", const="uring", choices=("uring", "dpdk"),
                   required=True, help="the gateways' backend (default uring)")
    p.add_argument("--reserve", type=arg_type(parse_rate_bps), required=True,
                   help="the job's reservation a<->b, each direction (e.g. 100mbit)")
    p.add_argument("--reserve-burst", type=arg_type(parse_size_bytes),
                   help="the reservation's max_burst_bytes (default: the agent's)")
    p.add_argument("--cross", type=arg_type(parse_share), default=1.5,
                   help="flooded: cross traffic offered per direction, as a share of the "
                   "best-effort share rate - reserve (default 150%%)")
    p.add_argument("--cross-tcp", type=int, default=4, help="TCP cross flows per direction "
                   "(cubic and bbr alternating; default 4)")
    p.add_argument("--cross-udp", type=arg_type(parse_fraction), default=0.5,
                   help="share of the cross traffic that is unresponsive UDP (default 50%%)")
    p.add_argument("--wan", dest="wans", type=list_type(str), default=["idle", "flooded"],
                   help="idle,flooded (default both)")
    p.add_argument("--impls", type=list_type(str), default=list(IMPLS),
                   help="detwan,gloo,mpi (default all)")
    p.add_argument("--paths", type=list_type(str), default=["tunnel", "best_effort"],
                   help="detwan's paths: tunnel,best_effort (default both)")
    p.add_argument("--loss", dest="losses", type=list_type(parse_fraction), default=[0.0],
                   help="loss levels, comma-separated (default 0)")
    p.add_argument("--rtt", type=arg_type(parse_duration_ns),
                   default=parse_duration_ns("20ms"))
    p.add_argument("--rate", type=arg_type(parse_rate_bps), default=parse_rate_bps("200mbit"))
    p.add_argument("--sizes", type=list_type(parse_size_bytes), default=[64 << 20])
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations (default 20)")
    p.add_argument("-w", "--warmup", type=int, default=1)
    p.add_argument("--cc", default="cubic", help="the hosts' TCP congestion control for gloo and "
                   "MPI (default cubic)")
    p.add_argument("--mtu", type=int, default=1500,
                   help="IP MTU of the lab's links (default 1500): the tunnel carries MTU - 68, "
                   "detwan's datagrams fill it, TCP's MSS follows it")
    p.add_argument("--gw-wake", choices=("batched", "exact"), default="batched",
                   help="how the gateways wake (tools/testbed up --gw-wake; default batched); "
                   "exact also makes the emulator wake for every frame (--rx-coalesce-us 0): "
                   "the per-packet wake-ups before issue 33, for an A/B")
    p.add_argument("--ranks-per-site", type=int, default=2)
    p.add_argument("--mpi-btl", default="tcp,self")
    p.add_argument("--build-dir")
    p.add_argument("--bench-binary")
    p.add_argument("--timeout-per-run", type=float, default=1200.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    return p


def row_of(size: int, impl: str, path: str, wan: str, loss: float, bound_s: float,
           got: dict | None, reason: str | None, extra: dict | None = None) -> dict:
    row = {"size_bytes": size, "impl": impl, "path": path, "wan": wan, "loss": loss,
           "time_s_p50": None, "time_s_p99": None, "time_s_max": None, "time_s_mean": None,
           "bound_s": bound_s, "busbw": None, "iters": None, "wrong": None, "reason": reason}
    if got is not None:
        row.update(time_s_p50=got["time_us_p50"] / 1e6, time_s_p99=got["time_us_p99"] / 1e6,
                   time_s_max=got["time_us_max"] / 1e6, time_s_mean=got["time_us"] / 1e6,
                   busbw=got.get("busbw_GBps"), iters=len(got.get("iter_time_us", [])),
                   wrong=got.get("wrong"), iter_time_s=[t / 1e6 for t in got["iter_time_us"]],
                   reason=None)
    row.update(extra or {})
    return row


def run_detwan(runs: Runs, args, binary: str, size: int, riding: str | None) -> tuple:
    argv = [binary, "allreduce", "--lab", "--no-setup", "--sites", "2", "--ranks-per-site",
            str(args.ranks_per_site), "--timeout", f"{args.timeout_per_run:g}", "--json",
            *sweep_args(size, args)]
    argv += ["--reservation", riding] if riding else ["--best-effort"]
    outs, killed = run_group(runs, [argv], args.timeout_per_run + 60)
    if killed:
        return None, killed
    rc, out, err = outs[0]
    got, reason = parse_row(last_json(out), size)
    if got is None:
        reason = f"{reason} (detwan-bench exit {rc}): {tail(err)}"
    return got, reason


def run_baseline(runs: Runs, args, impl: str, bins: dict, sites: list[dict],
                 size: int) -> tuple:
    where = rank_sites(sites, args.ranks_per_site)
    if impl == "gloo":
        if bins["gloo"] is None:
            return None, "gloo-allreduce not built (libgloo-dev missing)"
        r = run_gloo(runs, args, bins["gloo"], where, size, args.timeout_per_run)
    else:
        with without_tunnel_addrs(sites):
            r = run_mpi(runs, args, bins["mpi"], sites, len(where), size,
                                args.timeout_per_run)
    return r.get("row"), r["reason"]


def measure_wan(runs, args, bins, sites, loss, wan, riding, doc) -> None:
    for size in args.sizes:
        bound_s = size * 8 / args.reserve
        for impl in args.impls:
            paths = args.paths if impl == "detwan" else ["best_effort"]
            for path in paths:
                log(f"{impl} {path} {size} B, WAN {wan}, loss {loss:g}")
                with cpu_account.Window() as cpu:
                    if impl == "detwan":
                        got, reason = run_detwan(runs, args, bins["detwan"], size,
                                                 riding if path == "tunnel" else None)
                    else:
                        got, reason = run_baseline(runs, args, impl, bins, sites, size)
                report = cpu.report
                assert report is not None  # made when the window closed
                row = row_of(size, impl, path, wan, loss, bound_s, got, reason,
                             {"cpu": report})
                if row["reason"]:
                    log(f"  null: {row['reason']}")
                else:
                    c = report["components"]
                    log(f"  p50 {row['time_s_p50']:.3f} s, p99 {row['time_s_p99']:.3f} s, "
                        f"max {row['time_s_max']:.3f} s (bound {bound_s:.3f} s); CPU share: "
                        f"ranks {c['ranks']['share']:.2f}, busiest gateway "
                        f"{c['gateways']['max_share']:.3f}, emulator "
                        f"{c['emulator']['share']:.3f}, cross {c['cross']['share']:.2f}, "
                        f"softirq {report['machine']['softirq_s'] / report['wall_s']:.2f}")
                doc["rows"].append(row)


def run_loss(runs, args, bins, loss: float, doc: dict) -> None:
    queue = max(int(args.rate * args.rtt / 8e9), MIN_QUEUE_BYTES)
    spec = wan_spec(args.rate, args.rtt, loss, queue)
    up = ["--sites", "2", "--wan", spec, "--seed", str(args.seed), "--dataplane", args.dataplane,
          "--agents", "--mtu", str(args.mtu), "--gw-wake", args.gw_wake]
    if args.gw_wake == "exact":
        up += ["--wanem-opt=--rx-coalesce-us=0"]
    if args.build_dir:
        up += ["--build-dir", args.build_dir]
    log(f"tools/testbed up {' '.join(up)}")
    with measure.own_lab(*up) as st:
        sites = lab_sites(st, 2)
        readback = set_cc([s["host_ns"] for s in sites], args.cc)
        url = st["agents"][0]["url"]
        with reserve.reserved_pairs(url, [s["name"] for s in sites], args.reserve,
                                    burst_bytes=args.reserve_burst) as made:
            riding = made[0]["id"]
            lab = {"loss": loss, "spec": spec, "cc_readback": readback,
                   "reservation": reserve.summary(made[0]), "cross": {}}
            doc["lab"].append(lab)
            log(f"reservation {riding}: bound {made[0]['bound']['max_latency_ns'] / 1e6:.2f} ms")
            for wan in args.wans:
                if wan == "idle":
                    measure_wan(runs, args, bins, sites, loss, wan, riding, doc)
                    continue
                share = args.rate - args.reserve
                offered = int(args.cross * share)
                log(f"cross traffic: {offered / 1e6:g} Mbit/s per direction "
                    f"({args.cross:.0%} of the {share / 1e6:g} Mbit/s best-effort share)")
                with cross.running(offered, tcp_flows=args.cross_tcp,
                                   udp_fraction=args.cross_udp) as handle:
                    measure_wan(runs, args, bins, sites, loss, wan, riding, doc)
                lab["cross"] = handle.final_report
    log("lab removed")


def summarize(doc: dict) -> list[dict]:
    """Per size and loss: the claims of issue 13 as ratios."""
    out = []
    keys = sorted({(r["size_bytes"], r["loss"]) for r in doc["rows"]})
    for size, loss in keys:
        def get(impl, path, wan):
            for r in doc["rows"]:
                if (r["size_bytes"], r["loss"], r["impl"], r["path"], r["wan"]) == \
                        (size, loss, impl, path, wan) and r["time_s_p50"] is not None:
                    return r
            return None
        t_fl, t_id = get("detwan", "tunnel", "flooded"), get("detwan", "tunnel", "idle")
        s = {"size_bytes": size, "loss": loss}
        if t_fl:
            s["tunnel_flooded_p99_over_bound"] = t_fl["time_s_p99"] / t_fl["bound_s"]
            s["tunnel_flooded_p99_over_p50"] = t_fl["time_s_p99"] / t_fl["time_s_p50"]
        if t_fl and t_id:
            s["tunnel_flooded_p50_over_idle_p50"] = t_fl["time_s_p50"] / t_id["time_s_p50"]
        for impl, path in (("detwan", "best_effort"), ("gloo", "best_effort"),
                           ("mpi", "best_effort")):
            other = get(impl, path, "flooded")
            if t_fl and other:
                s[f"{impl}_{path}_flooded_p50_over_tunnel"] = other["time_s_p50"] / \
                    t_fl["time_s_p50"]
        out.append(s)
    return out


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(doc: dict, out=sys.stdout) -> None:
    p = doc["params"]
    out.write(f"# 2 sites x {p['ranks_per_site']} ranks, WAN {p['rate_bps'] / 1e6:g} Mbit/s, "
              f"RTT {p['rtt_ns'] / 1e6:g} ms, MTU {p['mtu_bytes']}; reservation {p['reserve_bps'] / 1e6:g} Mbit/s; "
              f"flooded = cross traffic at {p['cross']:.0%} of the best-effort share; "
              f"{p['iters']} iterations; times in s\n")
    out.write(f"{'size':>6} {'loss':>6} {'impl':>6} {'path':>11} {'wan':>7} {'p50':>8} "
              f"{'p99':>8} {'max':>8} {'bound':>7} {'p99/bnd':>7} {'p99/p50':>7}\n")
    for r in doc["rows"]:
        ok = r["time_s_p50"] is not None
        out.write(f"{r['size_bytes'] >> 20:>5}M {r['loss'] * 100:>5g}% {r['impl']:>6} "
                  f"{r['path']:>11} {r['wan']:>7} {fmt(r['time_s_p50'], '8.3f')} "
                  f"{fmt(r['time_s_p99'], '8.3f')} {fmt(r['time_s_max'], '8.3f')} "
                  f"{r['bound_s']:>7.3f} "
                  f"{fmt(r['time_s_p99'] / r['bound_s'] if ok else None, '7.2f')} "
                  f"{fmt(r['time_s_p99'] / r['time_s_p50'] if ok else None, '7.3f')}"
                  f"{'' if ok else '  (' + str(r['reason'])[:80] + ')'}\n")
    for s in doc["summary"]:
        out.write("# " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                   for k, v in s.items()) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.build_dir:
        os.environ["DETWAN_BUILD_DIR"] = str(pathlib.Path(args.build_dir).resolve())
    doc: dict[str, Any]  # the JSON report: values of every type
    doc = {"schema": SCHEMA, "version": 1, "rows": [], "lab": [], "summary": [], "error": None,
           "bound_formula": BOUND_FORMULA,
           "params": {"dataplane": args.dataplane, "reserve_bps": args.reserve,
                      "rate_bps": args.rate, "rtt_ns": args.rtt, "cross": args.cross,
                      "cross_tcp": args.cross_tcp, "cross_udp": args.cross_udp,
                      "losses": args.losses, "sizes": args.sizes, "iters": args.iters,
                      "warmup": args.warmup, "cc": args.cc,
                      "ranks_per_site": args.ranks_per_site, "mtu_bytes": args.mtu}}
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="detwan-compare-wan-"))
    runs = Runs(workdir)
    saved = {s: signal.signal(s, raise_terminated) for s in (signal.SIGTERM,
                                                                      signal.SIGHUP)}
    status = 0
    try:
        if os.geteuid() != 0:
            raise CompareError("must run as root (network namespaces)")
        if not 0 < args.reserve < args.rate:
            raise CompareError("--reserve must be below --rate (the best-effort share "
                                       "is rate - reserve)")
        if args.iters < 1:
            raise CompareError("--iters must be >= 1")
        bins = binaries(args)
        if bins["detwan"] is None:
            raise CompareError("detwan-bench not built")
        doc["binaries"] = bins
        for loss in args.losses:
            run_loss(runs, args, bins, loss, doc)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - reported in the JSON
        doc["error"] = str(e) or type(e).__name__
        print(f"{PROG}: {doc['error']}", file=sys.stderr)
        status = 130 if isinstance(e, KeyboardInterrupt) else 1
    finally:
        for s in saved:
            signal.signal(s, signal.SIG_IGN)
        runs.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
        for s, h in saved.items():
            signal.signal(s, h)
    doc["summary"] = summarize(doc)
    if args.json:
        print(json.dumps(doc, indent=2))
    elif doc["rows"]:
        print_table(doc)
    wrong = [r for r in doc["rows"] if r.get("wrong")]
    return status or (1 if wrong else 0)
