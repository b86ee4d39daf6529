"""Cross-site training against a single site (`tools/bench/train-cross-site`).

One lab: `tools/testbed up --sites 2 --dataplane uring --agents` with a WAN of --delay one way
(default 10 ms) at --rate, and one reservation a<->b of --reserve provisioned through the lab's
agent. Then the same DDP training job (tools/lab/train_worker.py: a character-level transformer
on Debian's `fortunes` text, same seed, same data per rank) runs:

  single site   4 ranks in site a's host (no WAN), detwan and gloo
  cross site    2 sites x 2 ranks; detwan rides the reservation (DETWAN_RESERVATION,
                DETWAN_AGENT: the library paces at its rate and sends through the tunnel);
                gloo's device is bound to each host's tunnel address, so its TCP crosses the
                same reserved tunnel

--speeds 1,1,0.5,0.25: each rank's compute stands for an accelerator of that speed (device time
spent waiting, not host CPU; --device-ms-per-sample at speed 1); every run shares the global
batch by speed (detwan.torch.hetero: weighted shares and gradient average), one more cross-site
run gives equal shares, and each rank first runs alone to measure its own samples/s: the report
adds weighted, equal and ideal_samples_per_s (the sum of the ranks' own rates). --site-sizes 3,1
places the cross-site ranks unevenly.

Per run: samples/s (world x batch x timed steps / the slowest rank's wall time over the timed
steps), step time p50/p99 (each step's time the max over ranks), the loss per step and the final
loss. Efficiency = cross-site samples/s / single-site samples/s (the better single-site backend, the same reference for both).
The report (report.json, report.md, loss.svg) goes to --out; --json prints the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from lab import measure, pipeline, reserve, torchrun
from lab.transport import percentile  # nearest rank
from lab.units import parse_duration_ns, parse_rate_bps

PROG = "train-cross-site"
WORKER = pathlib.Path(__file__).resolve().parent / "train_worker.py"


def log(msg: str) -> None:
    print(f"[{PROG}] {msg}", file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--lab", action="store_true", help="run in a lab of its own (the only mode)")
    p.add_argument("--json", action="store_true", help="print the report's JSON on stdout")
    p.add_argument("--out", help="report directory (default: a new /tmp/detwan-train-* dir)")
    p.add_argument("--dataplane", default="uring", choices=("uring", "dpdk"))
    p.add_argument("--delay", type=parse_duration_ns, default=parse_duration_ns("10ms"),
                   help="WAN one-way delay (default 10ms)")
    p.add_argument("--rate", type=parse_rate_bps, default=parse_rate_bps("200mbit"),
                   help="WAN link rate (default 200mbit)")
    p.add_argument("--reserve", type=parse_rate_bps, default=parse_rate_bps("100mbit"),
                   help="the job's reservation a<->b, each direction (default 100mbit)")
    p.add_argument("--mtu", type=int, default=9000, help="lab link MTU (default 9000)")
    p.add_argument("--impls", default="detwan,gloo",
                   help="backends (default detwan,gloo); hybrid = gloo inside each site and detwan "
                   "between the sites' leaders (detwan.torch.hybrid)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per run (default 30)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--layers", type=int, help="default 4; 2 with --speeds (the host's compute "
                   "must stay below the emulated device's)")
    p.add_argument("--dim", type=int, help="default 128; 64 with --speeds")
    p.add_argument("--bucket-mb", type=float, default=0.25,
                   help="DDP bucket size: small buckets start the WAN transfer early (0.25)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compute-nice", type=int, default=0,
                   help="nice of each rank's training thread (its communication threads keep "
                   "0); same in every run")
    p.add_argument("--deterministic", action="store_true",
                   help="detwan with DETWAN_DETERMINISTIC=1, run twice cross-site: the two loss "
                   "curves must be identical")
    p.add_argument("--speeds", help="ranks of different speeds, e.g. 1,1,0.5,0.25: each rank's "
                   "compute stands for an accelerator of that speed (device time, not host CPU: "
                   "tools/lab/train_worker.py EmulatedDevice); every run shares the global batch "
                   "by speed with the weighted gradient average, and one more cross-site run "
                   "gives equal shares")
    p.add_argument("--device-ms-per-sample", type=float, default=50.0,
                   help="with --speeds: device time per sample at speed 1 (default 50)")
    p.add_argument("--site-sizes", default="2,2",
                   help="cross-site placement: ranks in site a, site b (default 2,2; e.g. 3,1)")
    p.add_argument("--pipeline", action="store_true",
                   help="instead of data parallelism: a two-stage pipeline, stage 0 in site a and "
                   "stage 1 in site b, activations by send/recv through the reservation, against "
                   "both stages in site a (tools/lab/pipeline.py)")
    p.add_argument("--micro-batches", type=int, default=8, help="with --pipeline (default 8)")
    p.add_argument("--trace-buckets", action="store_true",
                   help="record each gradient bucket's allreduce start and end (per rank and "
                   "step, in the runs' rank-<r>.json; summarised as bucket_trace in the run)")
    p.add_argument("--timeout-per-run", type=float, default=900)
    p.add_argument("--build-dir")
    return p


def lab_pids(st: dict) -> dict[str, int]:
    """The lab's own processes: both gateways, the WAN emulator(s), the agent."""
    pids = {f"gw-{s['name']}": s["gateway"]["pid"] for s in st["sites"] if s.get("gateway")}
    pids.update({f"wanem-{i}": p["pid"] for i, p in enumerate(st.get("paths", []))})
    pids.update({f"agent-{i}": a["pid"] for i, a in enumerate(st.get("agents", []))})
    return {k: v for k, v in pids.items() if v}


def _positive(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def cpu_s(pids: dict[str, int]) -> float:
    """utime + stime of the processes (all threads), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids.values():
        try:
            fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def run_job(args, name: str, impl: str, sites: list[dict], placement: list[str],
            out: pathlib.Path, riding: dict | None, extra_env: dict | None = None,
            pids: dict[str, int] | None = None, shares: str | None = None) -> dict:
    """One training run; placement[r] is rank r's site name."""
    run_dir = out / name
    run_dir.mkdir(parents=True, exist_ok=True)
    by_name = {s["name"]: s for s in sites}
    prefix = [["ip", "netns", "exec", by_name[p]["host_ns"]] for p in placement]
    cross = len(set(placement)) > 1
    master = by_name[placement[0]]["best_effort_addr"] if cross else "127.0.0.1"
    rank_env = []
    for p in placement:
        e = {"DETWAN_MTU": str(args.mtu - 28 - 40)}  # the lab's path MTU (IP+UDP overhead)
        if impl in ("detwan", "hybrid") and cross and riding:
            e["DETWAN_RESERVATION"] = riding["id"]
            e["DETWAN_AGENT"] = riding["host_urls"][p]
        rank_env.append(e)
    argv = [str(WORKER), "--backend", impl, "--out", str(run_dir), "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--batch", str(args.batch), "--layers",
            str(args.layers), "--dim", str(args.dim), "--bucket-mb", str(args.bucket_mb),
            "--seed", str(args.seed), "--timeout-s", str(int(args.timeout_per_run)),
            "--compute-nice", str(args.compute_nice)]
    if getattr(args, "trace_buckets", False):
        argv.append("--trace-buckets")
    if args.speeds:
        argv += ["--speeds", args.speeds, "--device-ms-per-sample",
                 str(args.device_ms_per_sample), "--shares", shares or "weighted",
                 "--alone-steps", "3"]
    gloo_addr = []
    if impl == "hybrid" and cross:
        for r, p in enumerate(placement):  # gloo's groups inside each site, on the host's side
            rank_env[r]["GLOO_SOCKET_IFNAME"] = by_name[p]["host_if"]
    if impl == "gloo" and cross:
        for r, p in enumerate(placement):
            rank_env[r]["TRAIN_GLOO_ADDR"] = by_name[p]["tunnel_addr"]
            # The default group (init_process_group) binds to the host's interface.
            rank_env[r]["GLOO_SOCKET_IFNAME"] = by_name[p]["host_if"]
        gloo_addr = ["--gloo-addr-from-env"]
    log(f"{name}: {impl}, ranks at {','.join(placement)}"
        + (f", riding {riding['id']}" if impl == "detwan" and cross and riding else ""))
    t0 = time.monotonic()
    lab_cpu0 = cpu_s(pids or {})
    procs = torchrun.launch(argv + gloo_addr, placement, env=extra_env, prefix=prefix,
                            master_addr=master, log_dir=run_dir, rank_env=rank_env)
    codes = torchrun.wait_all(procs, args.timeout_per_run)
    wall = time.monotonic() - t0
    lab_cpu = cpu_s(pids or {}) - lab_cpu0
    docs = []
    for r in range(len(placement)):
        f = run_dir / f"rank-{r}.json"
        if not f.exists():
            tail = (run_dir / f"rank-{r}.log").read_text(errors="replace")[-1500:]
            return {"name": name, "impl": impl, "error": f"rank {r} exit {codes[r]}: {tail}"}
        docs.append(json.loads(f.read_text()))
    steps = [max(d["step_s"][i] for d in docs) for i in range(len(docs[0]["step_s"]))]
    world = len(placement)
    res = {"name": name, "impl": impl, "placement": placement, "wall_s": wall,
           # The job's rate: the global batch times the timed steps over the slowest rank's wall
           # time across them. (The sum over steps of each step's max over ranks, kept as
           # samples_per_s_step_max, counts twice the waits of ranks whose sites run out of
           # phase, each waiting for the other every second step.)
           "samples_per_s": world * args.batch * len(steps) / max(d["timed_wall_s"] for d in docs),
           "samples_per_s_step_max": world * args.batch * len(steps) / sum(steps),
           "step_s_p50": percentile(steps, 0.5), "step_s_p99": percentile(steps, 0.99),
           "step_s_mean": sum(steps) / len(steps), "final_loss": docs[0]["loss"][-1],
           # Per rank and step (median over both): forward time has no communication in it, so
           # it shows CPU contention; cpu_s is the rank process's CPU time (all its threads).
           "forward_s_p50": percentile([v for d in docs for v in d["forward_s"]], 0.5),
           "cpu_s_per_step_p50": percentile([v for d in docs for v in d["cpu_s"]], 0.5),
           # The gateways', emulator's and agent's CPU over the whole run (start-up included),
           # per step: on a small machine it is taken from the ranks' compute.
           "lab_cpu_s_per_step": lab_cpu / (args.warmup + args.steps),
           "loss": docs[0]["loss"], "param_checksum": docs[0]["param_checksum"],
           "params": docs[0]["params"], "gradient_bytes": docs[0]["gradient_bytes"]}
    if "detwan" in docs[0]:
        res["detwan"] = docs[0]["detwan"]
    if args.trace_buckets and docs[0].get("buckets"):
        # Median over rank 0's steps: each bucket's allreduce start and end after the step's
        # start, and the end of backward.
        rows = docs[0]["buckets"]
        res["bucket_trace"] = [
            {"bucket": rows[0][i][0], "bytes": rows[0][i][1],
             "start_s": percentile([r[i][2] for r in rows], 0.5),
             "end_s": percentile([r[i][3] for r in rows], 0.5)} for i in range(len(rows[0]))]
    if args.speeds:
        res["shares"] = docs[0]["shares"]
        res["shares_mode"] = docs[0]["shares_mode"]
        # Each rank alone on its share (no communication), measured in the same run.
        res["alone_samples_per_s"] = [d["alone_samples_per_s"] for d in docs]
    log(f"  {res['samples_per_s']:.2f} samples/s, step p50 {res['step_s_p50']:.3f} s, "
        f"p99 {res['step_s_p99']:.3f} s, final loss {res['final_loss']:.4f}")
    return res


def plot(doc: dict, out: pathlib.Path) -> str | None:
    """loss.svg: every run's loss per step (gnuplot)."""
    if not shutil.which("gnuplot"):
        return None
    series = []
    for run in doc["runs"]:
        if "loss" not in run:
            continue
        f = out / f"{run['name']}.loss.dat"
        f.write_text("".join(f"{i} {v}\n" for i, v in enumerate(run["loss"])))
        series.append(f"'{f}' using 1:2 with lines title '{run['name']}'")
    if not series:
        return None
    svg = out / "loss.svg"
    script = (f"set terminal svg size 900,540; set output '{svg}'; set xlabel 'step'; "
              f"set ylabel 'training loss (rank 0, nats/char)'; set key top right; "
              f"set title 'char transformer on fortunes, same seed'; plot {', '.join(series)}")
    res = subprocess.run(["gnuplot", "-e", script], capture_output=True, text=True, timeout=60)
    return str(svg) if res.returncode == 0 else None


def fmt_ratio(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def markdown(doc: dict) -> str:
    p = doc["params"]
    lines = [f"# Cross-site training vs single site ({doc['date']})", "",
             f"Model: char transformer, {doc['model']['params']:,} parameters "
             f"({doc['model']['gradient_bytes'] / 2**20:.2f} MiB of fp32 gradients), batch "
             f"{p['batch']} x {p['ctx']} chars per rank, 4 ranks; corpus: Debian `fortunes`.",
             f"WAN: {p['delay_ns'] / 1e6:g} ms one way, {p['rate_bps'] / 1e6:g} Mbit/s link; "
             f"reservation {p['reserve_bps'] / 1e6:g} Mbit/s each way.", "",
             "| run | backend | samples/s | step p50 (s) | step p99 (s) | forward p50 (s) | "
             "CPU s/step/rank | lab CPU s/step | final loss |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["runs"]:
        if "error" in r:
            lines.append(f"| {r['name']} | {r['impl']} | error: {r['error'][:80]} | | | | | | |")
            continue
        lines.append(f"| {r['name']} | {r['impl']} | {r['samples_per_s']:.2f} | "
                     f"{r['step_s_p50']:.3f} | {r['step_s_p99']:.3f} | "
                     f"{r['forward_s_p50']:.3f} | {r['cpu_s_per_step_p50']:.3f} | "
                     f"{r['lab_cpu_s_per_step']:.3f} | "
                     f"{r['final_loss']:.4f} |")
    b = doc["bound"]
    if doc.get("weighted"):
        w, e = doc["weighted"], doc["equal"]
        lines += ["", f"Speeds {p['speeds']} (device {p['device_ms_per_sample']:g} ms per sample "
                  f"at speed 1), sites {p['site_sizes']}: weighted shares {w['shares']} "
                  f"{w['samples_per_s']:.2f} samples/s = {w['over_ideal']:.3f} of the ideal "
                  f"{doc['ideal_samples_per_s']:.2f} (each rank alone, summed); equal shares "
                  f"{e['samples_per_s']:.2f} ({e['over_ideal']:.3f}); weighted / equal "
                  f"{doc['weighted_over_equal']:.2f}."]
    lines += ["", f"Efficiency (cross-site / single-site samples/s): detwan "
              f"{fmt_ratio(doc.get('efficiency_detwan'))}, gloo {fmt_ratio(doc.get('efficiency_gloo'))}"
              + (f", hybrid {fmt_ratio(doc['efficiency_hybrid'])}" if "efficiency_hybrid" in doc
                 else "") + ".",
              f"Bound: gradient transfer at the reserved rate {b['transfer_s']:.3f} s per step "
              f"(each direction carries the gradient once) against single-site compute "
              f"{b['compute_s']:.3f} s per step: ratio {b['compute_over_transfer']:.1f}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.build_dir:
        os.environ["DETWAN_BUILD_DIR"] = str(pathlib.Path(args.build_dir).resolve())
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="detwan-train-"))
    out.mkdir(parents=True, exist_ok=True)
    impls = [i for i in args.impls.split(",") if i]
    if args.layers is None:
        args.layers = 2 if args.speeds else 4
    if args.dim is None:
        args.dim = 64 if args.speeds else 128
    sizes = [int(v) for v in args.site_sizes.split(",")]
    if len(sizes) != 2 or min(sizes) < 1 or sum(sizes) != 4:
        raise SystemExit(f"{PROG}: --site-sizes {args.site_sizes}: two sites of at least one "
                         "rank, 4 ranks in all (e.g. 2,2 or 3,1)")
    if args.speeds:
        speeds = args.speeds.split(",")
        if len(speeds) != 4 or not all(_positive(v) for v in speeds):
            raise SystemExit(f"{PROG}: --speeds {args.speeds}: four positive numbers, one per "
                             "rank (e.g. 1,1,0.5,0.25)")
    doc: dict[str, Any]  # the JSON report: values of every type
    doc = {"schema": "detwan-train-cross-site", "version": 1,
           "date": time.strftime("%Y-%m-%d"), "runs": [], "error": None,
           "params": {"delay_ns": args.delay, "rate_bps": args.rate, "reserve_bps": args.reserve,
                      "mtu": args.mtu, "steps": args.steps, "warmup": args.warmup,
                      "batch": args.batch, "ctx": 64, "layers": args.layers, "dim": args.dim,
                      "bucket_mb": args.bucket_mb, "seed": args.seed,
                      "dataplane": args.dataplane, "site_sizes": sizes,
                      "speeds": args.speeds,
                      "device_ms_per_sample": args.device_ms_per_sample if args.speeds
                      else None}}
    status = 0
    try:
        if os.geteuid() != 0:
            raise RuntimeError("must run as root (network namespaces)")
        problem = torchrun.extension_problem()
        if problem and ("detwan" in impls or "hybrid" in impls):
            raise RuntimeError(problem)
        rtt = 2 * args.delay
        queue = max(int(args.rate * rtt / 8e9), 128 << 10)
        spec = f"delay={args.delay // 1000}us,rate={args.rate}bit,queue={queue}b"
        up = ["--sites", "2", "--wan", spec, "--dataplane", args.dataplane, "--agents",
              "--mtu", str(args.mtu)]
        if args.build_dir:
            up += ["--build-dir", args.build_dir]
        log(f"tools/testbed up {' '.join(up)}")
        with measure.own_lab(*up) as st:
            sites = sorted(st["sites"], key=lambda s: s["index"])[:2]
            pids = lab_pids(st)
            names = [s["name"] for s in sites]
            url = st["agents"][0]["url"]
            with reserve.reserved_pairs(url, names, args.reserve) as made:
                riding = {"id": made[0]["id"], "host_urls": st["agents"][0]["host_urls"]}
                doc["reservation"] = reserve.summary(made[0])
                if args.pipeline:
                    doc["pipeline"] = pipeline.run(args, sites, names, riding, out)
                    if "bound_s" not in doc["pipeline"]:
                        raise RuntimeError("a pipeline run failed: see its log in the report")
                    return finish(doc, out, args, 0)
                one = [names[0]] * 4
                two = [names[0]] * sizes[0] + [names[1]] * sizes[1]
                for impl in impls:
                    doc["runs"].append(run_job(args, f"single-{impl}", impl, sites, one, out,
                                               None, pids=pids))
                for impl in impls:
                    doc["runs"].append(run_job(args, f"cross-{impl}", impl, sites, two, out,
                                               riding, pids=pids))
                if args.speeds and "detwan" in impls:
                    doc["runs"].append(run_job(args, "cross-detwan-equal", "detwan", sites, two,
                                               out, riding, pids=pids, shares="equal"))
                if args.deterministic and "detwan" in impls:
                    for k in (1, 2):
                        doc["runs"].append(run_job(args, f"cross-detwan-det{k}", "detwan", sites,
                                                   two, out, riding,
                                                   {"DETWAN_DETERMINISTIC": "1"}, pids=pids))
        summarize(doc, args)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - reported in the JSON
        doc["error"] = str(e) or type(e).__name__
        log(f"error: {doc['error']}")
        status = 130 if isinstance(e, KeyboardInterrupt) else 1
    return finish(doc, out, args, status)


def finish(doc: dict, out: pathlib.Path, args, status: int) -> int:
    doc["plot"] = plot(doc, out)
    (out / "report.json").write_text(json.dumps(doc, indent=1))
    if doc.get("bound"):
        (out / "report.md").write_text(markdown(doc))
    log(f"report in {out}")
    if args.json:
        print(json.dumps(doc, indent=1))
    return status if status else (1 if any("error" in r for r in doc["runs"]) else 0)


def summarize(doc: dict, args) -> None:
    runs = {r["name"]: r for r in doc["runs"] if "error" not in r}
    singles = [r for n, r in runs.items() if n.startswith("single-")]
    if not singles:
        raise RuntimeError("no single-site run finished")
    ref = max(singles, key=lambda r: r["samples_per_s"])
    doc["single_site_samples_per_s"] = ref["samples_per_s"]
    doc["single_site_reference"] = ref["name"]
    doc["single_site"] = {r["impl"]: {"samples_per_s": r["samples_per_s"],
                                      "step_s_p50": r["step_s_p50"],
                                      "step_s_p99": r["step_s_p99"],
                                      "final_loss": r["final_loss"]} for r in singles}
    doc["cross_site"] = {}
    for impl in ("detwan", "gloo", "hybrid"):
        r = runs.get(f"cross-{impl}")
        if r:
            doc["cross_site"][impl] = {"samples_per_s": r["samples_per_s"],
                                       "step_s_p50": r["step_s_p50"],
                                       "step_s_p99": r["step_s_p99"],
                                       "final_loss": r["final_loss"]}
            doc[f"efficiency_{impl}"] = r["samples_per_s"] / ref["samples_per_s"]
    model = singles[0]
    doc["model"] = {"params": model["params"], "gradient_bytes": model["gradient_bytes"]}
    transfer = model["gradient_bytes"] * 8 / args.reserve
    doc["bound"] = {"transfer_s": transfer, "compute_s": ref["step_s_p50"],
                    "compute_over_transfer": ref["step_s_p50"] / transfer,
                    "formula": "transfer_s = gradient_bytes * 8 / reserved rate (2 sites: each "
                               "direction carries the gradient once); compute_s = single-site "
                               "step p50"}
    if "cross-detwan" in runs and "cross-gloo" in runs:
        a, b = runs["cross-detwan"]["loss"], runs["cross-gloo"]["loss"]
        doc["loss_max_abs_diff_detwan_gloo"] = max(abs(x - y) for x, y in zip(a, b))
    weighted, equal = runs.get("cross-detwan"), runs.get("cross-detwan-equal")
    if args.speeds and weighted and equal:
        # Ideal: every rank at its own speed, nothing waiting (the sum of each rank's samples/s
        # measured alone, in the weighted run).
        ideal = sum(weighted["alone_samples_per_s"])
        doc["ideal_samples_per_s"] = ideal
        for key, r in (("weighted", weighted), ("equal", equal)):
            doc[key] = {"samples_per_s": r["samples_per_s"], "step_s_p50": r["step_s_p50"],
                        "shares": r["shares"], "over_ideal": r["samples_per_s"] / ideal}
        doc["weighted_over_equal"] = weighted["samples_per_s"] / equal["samples_per_s"]
    d1, d2 = runs.get("cross-detwan-det1"), runs.get("cross-detwan-det2")
    if d1 and d2:
        doc["deterministic_identical"] = d1["loss"] == d2["loss"] and \
            d1["param_checksum"] == d2["param_checksum"]
