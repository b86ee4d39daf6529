"""detwan vs gloo vs Open MPI allreduce over the same lab path (tools/bench/compare-allreduce).

One 2-site lab (per loss level: the lab is re-created with that loss, so every tool of that loss
level sees the identical path spec), N ranks per site. For each loss level detwan runs once per
size (`detwan-bench allreduce --lab --no-setup ...`; detwan does not use kernel TCP, so its
figure is reported in every congestion-control row of that loss, with "detwan_cc": "n/a
(not TCP)"); then for each TCP congestion control (set as the default of every host namespace
with `sysctl net.ipv4.tcp_congestion_control`, read back, and checked on the live sockets with
`ss -ti` while the baselines run) gloo (tools/bench/baselines/gloo-allreduce, tcp transport,
FileStore rendezvous in a fresh directory) and Open MPI (mpi-allreduce under mpirun, btl
tcp,self) run the same sweep over the same path.

Open MPI across the lab's namespaces: mpirun runs in the first site's host namespace and starts
the other site's daemon through `--mca plm_rsh_agent <script>`, which maps the site's host
address to its namespace (`ip netns exec NS sh -c "<orted command>"`). Open MPI 4.1's btl tcp
keeps ONE IPv4 address per interface and publishes the last one the kernel lists: a lab host
interface carries its best-effort /24 address and its tunnel /32 address, so it publishes the
tunnel address, and every inbound connection (whose source is the best-effort address) is
dropped ("inbound MPI TCP connection ... from an IP address that is unexpected"). The tunnel
address is idle in a lab without --dataplane (this one), so it is removed from the host
interfaces for the MPI runs and put back afterwards ("mpi_workaround" in the JSON).

bound_time_s (2 sites): each direction of the WAN must carry the full buffer once, so an
allreduce of S bytes cannot finish before S * 8 / rate seconds.

Every run is bounded by --timeout-per-run (killed and reported as null with the reason);
everything started here is stopped and the lab and the store directories removed, also on
failure and on SIGINT/SIGTERM/SIGHUP.
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

from lab import measure
from lab.allreduce_runs import (CompareError, binaries, lab_sites, parse_row, raise_terminated,
                                rank_sites, result, run_gloo, run_mpi, sweep_args,
                                without_tunnel_addrs)
from lab.runs import CcSampler, Runs, last_json, ns_sysctl, run_group, set_cc, tail
from lab.transport import MIN_QUEUE_BYTES, wan_spec
from lab.units import (arg_type, format_rate, list_type, parse_duration_ns, parse_fraction,
                       parse_rate_bps, parse_size_bytes)

PROG = "compare-allreduce"
REPO = pathlib.Path(__file__).resolve().parents[2]
BOUND_FORMULA = ("bound_time_s = size_bytes * 8 / rate_bps (2 sites: each direction of the WAN "
                 "must carry the full buffer once)")
BUSBW_FORMULA = "busbw = size / time * 2 (n - 1) / n (nccl-tests allreduce), GB/s = 1e9 B/s"


def log(msg: str) -> None:
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------- tools


def run_detwan(runs: Runs, args, binary: str | None, size: int, timeout_s: float,
               path: dict | None) -> dict:
    if binary is None:
        return result(None, "detwan-bench not built")
    if path is None:
        argv = [binary, "allreduce", "--local", str(args.one_site), "--json",
                "--timeout", f"{timeout_s:g}", *sweep_args(size, args)]
    else:
        argv = [binary, "allreduce", "--lab", "--no-setup", "--sites", str(args.sites),
                "--ranks-per-site", str(args.ranks_per_site), "--rate",
                format_rate(path["rate_bps"]), "--rtt", f"{path['rtt_ns'] // 1000}us",
                "--loss", f"{path['loss'] * 100:g}%", "--timeout", f"{timeout_s:g}", "--json",
                *sweep_args(size, args)]
    outs, killed = run_group(runs, [argv], timeout_s)
    if killed:
        return result(None, killed)
    rc, out, err = outs[0]
    doc = last_json(out)
    row, reason = parse_row(doc, size)
    if row is None:
        reason = f"{reason} (detwan-bench exit {rc}): {tail(err)}"
    extra = {}
    if row is not None:
        for key in ("algorithm", "algo", "chunk_bytes"):
            if key in row:
                extra[f"detwan_{key}"] = row[key]
    return result(row, reason, extra)


# --------------------------------------------------------------------------------- rows

def ratio(a, b):
    return a / b if a is not None and b else None


def make_row(size: int, loss: float | None, cc: str, sites: int, ranks: int, det: dict,
             gloo: dict, mpi: dict, bound_s: float | None, cc_seen: dict) -> dict:
    row = {"size_bytes": size, "loss": loss, "cc": cc, "sites": sites, "ranks": ranks,
           "detwan_busbw": det["busbw"], "gloo_busbw": gloo["busbw"], "mpi_busbw": mpi["busbw"],
           "detwan_over_gloo": ratio(det["busbw"], gloo["busbw"]),
           "detwan_over_mpi": ratio(det["busbw"], mpi["busbw"]),
           "detwan_time_s": det["time_s"], "gloo_time_s": gloo["time_s"],
           "mpi_time_s": mpi["time_s"], "bound_time_s": bound_s,
           "detwan_over_bound": ratio(det["time_s"], bound_s),
           "detwan_wrong": det["wrong"], "gloo_wrong": gloo["wrong"], "mpi_wrong": mpi["wrong"],
           "detwan_cc": "n/a (not TCP; one run per loss level, shown in every cc row)",
           "cc_seen": cc_seen}
    for name, r in (("detwan", det), ("gloo", gloo), ("mpi", mpi)):
        if r["busbw"] is None:
            row[f"{name}_reason"] = r["reason"]
    for k, v in det.items():
        if k.startswith("detwan_"):
            row[k] = v
    return row


def run_two_sites(args, runs: Runs, bins: dict, doc: dict) -> None:
    queue = max(int(args.rate * args.rtt / 8e9), MIN_QUEUE_BYTES)
    for loss in args.losses:
        spec = wan_spec(args.rate, args.rtt, loss, queue)
        up = ["--sites", str(args.sites), "--wan", spec, "--seed", str(args.seed),
              "--mtu", str(args.mtu)]
        if args.lab_build_dir:
            up += ["--build-dir", args.lab_build_dir]
        log(f"tools/testbed up {' '.join(up)}")
        with measure.own_lab(*up) as st:
            doc["lab"].append({"loss": loss, "spec": spec, "mtu_bytes": args.mtu,
                               "prefix": os.environ["DETWAN_TESTBED_PREFIX"]})
            sites = lab_sites(st, args.sites)
            where = rank_sites(sites, args.ranks_per_site)
            namespaces = [s["host_ns"] for s in sites]
            addrs = [s["best_effort_addr"] for s in sites]
            path = {"rate_bps": args.rate, "rtt_ns": args.rtt, "loss": loss}
            det = {}
            for size in args.sizes:
                log(f"detwan {size} B, loss {loss:g}")
                det[size] = run_detwan(runs, args, bins["detwan"], size, args.timeout_per_run,
                                       path)
            for cc in args.ccs:
                readback = set_cc(namespaces, cc)
                doc["cc_sysctl"].append({"loss": loss, "cc": cc, "readback": readback})
                for size in args.sizes:
                    bound = size * 8 / args.rate
                    if bins["gloo"] is None:
                        gloo = result(None, "gloo-allreduce not built (libgloo-dev missing)")
                        gloo_seen: set = set()
                    else:
                        log(f"gloo {size} B, loss {loss:g}, {cc}")
                        with CcSampler(namespaces, addrs) as sampler:
                            gloo = run_gloo(runs, args, bins["gloo"], where, size,
                                            args.timeout_per_run)
                        gloo_seen = sampler.seen
                    log(f"mpi {size} B, loss {loss:g}, {cc}")
                    with without_tunnel_addrs(sites) as changed, \
                            CcSampler(namespaces, addrs) as sampler:
                        mpi = run_mpi(runs, args, bins["mpi"], sites, len(where), size,
                                      args.timeout_per_run)
                    doc["mpi_workaround"] = {
                        "tunnel_addrs_removed_during_mpi": changed,
                        "why": "Open MPI 4.1 btl tcp publishes one IPv4 address per interface "
                               "(a tunnel-prefix /32, not its best-effort address), then drops "
                               "connections from the best-effort address"}
                    seen = {"gloo": sorted(gloo_seen), "mpi": sorted(sampler.seen)}
                    for tool, r in (("gloo", gloo), ("mpi", mpi)):
                        got = set(seen[tool])
                        if r["busbw"] is not None and got and got != {cc}:
                            r.update(busbw=None, time_s=None,
                                     reason=f"ran with {sorted(got)}, not {cc}")
                    if any(v != cc for v in readback.values()):
                        for r in (gloo, mpi):
                            if r["busbw"] is not None:
                                r.update(busbw=None, time_s=None,
                                         reason=f"could not set {cc}: {readback}")
                    doc["rows"].append(make_row(size, loss, cc, args.sites, len(where), det[size],
                                                gloo, mpi, bound, seen))
        log("lab removed")


def run_one_site(args, runs: Runs, bins: dict, doc: dict) -> None:
    """No WAN: N ranks in this namespace; detwan --local (shm inside a site) vs gloo and MPI over
    loopback TCP. The kernel's default congestion control applies (not changed here)."""
    cc = ns_sysctl(None, "-n", "net.ipv4.tcp_congestion_control").stdout.strip() or "default"
    n = args.one_site
    for size in args.sizes:
        log(f"one site, {n} ranks, {size} B")
        det = run_detwan(runs, args, bins["detwan"], size, args.timeout_per_run, None)
        gloo = (run_gloo(runs, args, bins["gloo"], [None] * n, size, args.timeout_per_run)
                if bins["gloo"] else result(None, "gloo-allreduce not built"))
        mpi = run_mpi(runs, args, bins["mpi"], None, n, size, args.timeout_per_run)
        doc["rows"].append(make_row(size, None, cc, 1, n, det, gloo, mpi, None, {}))


# ---------------------------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--loss", dest="losses", type=list_type(parse_fraction), default=[0.0, 0.001],
                   help="loss levels, comma-separated (default 0,0.1%%)")
    p.add_argument("--rtt", type=arg_type(parse_duration_ns), default=parse_duration_ns("20ms"))
    p.add_argument("--rate", type=arg_type(parse_rate_bps), default=parse_rate_bps("200mbit"))
    p.add_argument("--sizes", type=list_type(parse_size_bytes),
                   help="sizes, comma-separated (default 64M,256M,1G)")
    p.add_argument("-b", "--minbytes", type=arg_type(parse_size_bytes))
    p.add_argument("-e", "--maxbytes", type=arg_type(parse_size_bytes))
    p.add_argument("-f", "--stepfactor", type=int, default=4)
    p.add_argument("-n", "--iters", type=int, default=3, help="timed iterations per size")
    p.add_argument("-w", "--warmup", type=int, default=1, help="untimed iterations per size")
    p.add_argument("--cc", dest="ccs", type=list_type(str), default=["bbr", "cubic"],
                   help="TCP congestion controls for gloo and MPI (default bbr,cubic)")
    p.add_argument("--mtu", type=int, default=1500,
                   help="IP MTU of the lab's links (detwan's datagrams and TCP's MSS follow it)")
    p.add_argument("--sites", type=int, default=2)
    p.add_argument("--ranks-per-site", type=int, default=2)
    p.add_argument("--one-site", type=int, metavar="N",
                   help="no WAN: N ranks in one namespace (detwan shm vs loopback TCP)")
    p.add_argument("--mpi-btl", default="tcp,self", help="Open MPI btl list (default tcp,self)")
    p.add_argument("--build-dir", help="build with the baselines and detwan-bench "
                   "(default $DETWAN_BUILD_DIR, else <repo>/build)")
    p.add_argument("--lab-build-dir", help="build whose detwan-wanem the lab runs "
                   "(default: --build-dir)")
    p.add_argument("--bench-binary", help="detwan-bench to use (default: in --build-dir)")
    p.add_argument("--timeout-per-run", type=float, default=900.0,
                   help="seconds one tool may take for one size (then killed: null + reason)")
    p.add_argument("--seed", type=int, default=1)
    return p


def sizes_of(args) -> list[int]:
    if args.sizes:
        return args.sizes
    if args.minbytes is not None or args.maxbytes is not None:
        lo = args.minbytes if args.minbytes is not None else args.maxbytes
        hi = args.maxbytes if args.maxbytes is not None else lo
        out, s = [], max(lo, 4)
        while s <= hi:
            out.append(s)
            s *= max(args.stepfactor, 2)
        return out
    return [64 << 20, 256 << 20, 1 << 30]


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(doc: dict) -> None:
    p = doc["path"]
    if p.get("sites") == 1:
        print(f"{PROG}: one site, {p['ranks']} ranks, no WAN (detwan --local vs loopback TCP)")
    else:
        print(f"{PROG}: {p['sites']} sites x {p['ranks_per_site']} ranks, WAN "
              f"{p['rate_bps'] / 1e6:g} Mbit/s, RTT {p['rtt_ns'] / 1e6:g} ms, MTU "
              f"{p.get('mtu_bytes', 1500)}; busbw in GB/s "
              f"(nccl-tests); bound = size*8/rate")
    print(f"{'size':>11} {'loss':>6} {'cc':>6} {'detwan':>8} {'gloo':>8} {'mpi':>8} "
          f"{'d/gloo':>7} {'d/mpi':>7} {'detwan s':>9} {'gloo s':>8} {'mpi s':>8} {'bound s':>8}")
    for r in doc["rows"]:
        loss = "-" if r["loss"] is None else f"{r['loss'] * 100:g}%"
        print(f"{r['size_bytes']:>11} {loss:>6} {r['cc']:>6} {fmt(r['detwan_busbw'], '8.4f')} "
              f"{fmt(r['gloo_busbw'], '8.4f'):>8} {fmt(r['mpi_busbw'], '8.4f'):>8} "
              f"{fmt(r['detwan_over_gloo'], '7.2f'):>7} {fmt(r['detwan_over_mpi'], '7.2f'):>7} "
              f"{fmt(r['detwan_time_s'], '9.2f'):>9} {fmt(r['gloo_time_s'], '8.2f'):>8} "
              f"{fmt(r['mpi_time_s'], '8.2f'):>8} {fmt(r['bound_time_s'], '8.2f'):>8}")
        for name in ("detwan", "gloo", "mpi"):
            if r.get(f"{name}_reason"):
                print(f"{'':>11} {name}: {r[f'{name}_reason']}")
    print("detwan does not use TCP: its figure is one run per loss level, repeated in each cc row")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--dataplane" in argv or any(a.startswith("--dataplane=") for a in argv):
        from lab import compare_wan  # noqa: PLC0415 - the tunnel comparison (its own module)
        return compare_wan.main(argv)
    args = parser().parse_args(argv)
    if args.build_dir:
        os.environ["DETWAN_BUILD_DIR"] = str(pathlib.Path(args.build_dir).resolve())
    args.lab_build_dir = args.lab_build_dir or args.build_dir
    args.sizes = sizes_of(args)
    doc: dict[str, Any]  # the JSON report: values of every type
    doc = {"schema": "detwan-compare-allreduce", "version": 1, "rows": [], "lab": [],
           "cc_sysctl": [], "bound_formula": BOUND_FORMULA, "busbw_formula": BUSBW_FORMULA,
           "detwan_cc_note": "detwan does not use kernel TCP: it runs once per loss level and "
                             "that figure appears in every congestion-control row",
           "error": None}
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="detwan-compare-"))
    runs = Runs(workdir)
    saved = {s: signal.signal(s, raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    allowed_before = ns_sysctl(None, "-n", "net.ipv4.tcp_allowed_congestion_control").stdout
    status = 0
    try:
        if os.geteuid() != 0:
            raise CompareError("must run as root (network namespaces, sysctl)")
        bins = binaries(args)
        doc["binaries"] = bins
        doc["iters"], doc["warmup_iters"] = args.iters, args.warmup
        if args.one_site:
            doc["path"] = {"sites": 1, "ranks": args.one_site, "wan": None}
            run_one_site(args, runs, bins, doc)
        else:
            if args.sites != 2:
                raise CompareError("--sites: only 2 sites are supported (the bound and the "
                                   "MPI launch assume one WAN path)")
            doc["path"] = {"sites": args.sites, "ranks_per_site": args.ranks_per_site,
                           "rate_bps": args.rate, "rtt_ns": args.rtt, "mtu_bytes": args.mtu,
                           "losses": args.losses,
                           "ccs": args.ccs, "queue_bytes": max(int(args.rate * args.rtt / 8e9),
                                                               MIN_QUEUE_BYTES)}
            run_two_sites(args, runs, bins, doc)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - reported in the JSON
        # (measure.own_lab raises its own exception type on SIGTERM/SIGHUP inside the lab)
        doc["error"] = str(e) or type(e).__name__
        print(f"{PROG}: {doc['error']}", file=sys.stderr)
        status = 130 if isinstance(e, KeyboardInterrupt) else 1
    finally:
        for s in saved:
            signal.signal(s, signal.SIG_IGN)
        runs.stop_all()
        after = ns_sysctl(None, "-n", "net.ipv4.tcp_allowed_congestion_control").stdout
        if after.split() != allowed_before.split() and allowed_before.strip():
            ns_sysctl(None, "-w", "net.ipv4.tcp_allowed_congestion_control="
                      + allowed_before.strip())
        shutil.rmtree(workdir, ignore_errors=True)
        for s, h in saved.items():
            signal.signal(s, h)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        if doc["rows"]:
            print_table(doc)
    if status == 0 and doc["error"] is None:
        wrong = [r for r in doc["rows"] for k in ("detwan_wrong", "gloo_wrong", "mpi_wrong")
                 if r.get(k)]
        return 1 if wrong else 0
    return status


if __name__ == "__main__":
    sys.exit(main())
