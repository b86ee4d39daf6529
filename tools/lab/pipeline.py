"""`tools/bench/train-cross-site --pipeline`: a two-stage pipeline across sites.

tools/lab/pipeline_worker.py (stage 0 in site a, stage 1 in site b; activations and their
gradients by send/recv over detwan, riding the job's reservation) against the same pipeline
with both stages in site a, same run. The bound: a pipeline that hides every transfer behind
compute still pays the stage boundary once per wave, forward and backward, so

    bound_s = single-site step + 2 x (one-way delay + activation bytes x 8 / reserved rate)

and the report gives the cross-site step, the single-site step (the compute-only reference:
its stages are microseconds apart), the bubble (cross - single) and the bound.
"""
from __future__ import annotations

import json
import pathlib
import sys
import time

from lab import torchrun
from lab.transport import percentile

WORKER = pathlib.Path(__file__).resolve().parent / "pipeline_worker.py"


def log(msg: str) -> None:
    print(f"[train-cross-site] {msg}", file=sys.stderr, flush=True)


def run_one(args, name: str, sites: list[dict], placement: list[str], out: pathlib.Path,
            riding: dict | None) -> dict:
    run_dir = out / name
    run_dir.mkdir(parents=True, exist_ok=True)
    by_name = {s["name"]: s for s in sites}
    cross = len(set(placement)) > 1
    rank_env = []
    for p in placement:
        e = {"DETWAN_MTU": str(args.mtu - 28 - 40)}
        if cross and riding:
            e["DETWAN_RESERVATION"] = riding["id"]
            e["DETWAN_AGENT"] = riding["host_urls"][p]
        rank_env.append(e)
    argv = [str(WORKER), "--backend", "detwan", "--out", str(run_dir), "--steps",
            str(args.steps), "--warmup", str(args.warmup), "--micro-batches",
            str(args.micro_batches), "--device-ms-per-sample", str(args.device_ms_per_sample),
            "--seed", str(args.seed), "--timeout-s", str(int(args.timeout_per_run))]
    prefix = [["ip", "netns", "exec", by_name[p]["host_ns"]] for p in placement]
    master = by_name[placement[0]]["best_effort_addr"] if cross else "127.0.0.1"
    log(f"{name}: detwan pipeline, stages at {','.join(placement)}")
    t0 = time.monotonic()
    procs = torchrun.launch(argv, placement, prefix=prefix, master_addr=master,
                            log_dir=run_dir, rank_env=rank_env)
    codes = torchrun.wait_all(procs, args.timeout_per_run)
    docs = []
    for r in range(len(placement)):
        f = run_dir / f"rank-{r}.json"
        if not f.exists():
            tail = (run_dir / f"rank-{r}.log").read_text(errors="replace")[-1500:]
            return {"name": name, "error": f"rank {r} exit {codes[r]}: {tail}"}
        docs.append(json.loads(f.read_text()))
    steps = [max(d["step_s"][i] for d in docs) for i in range(len(docs[0]["step_s"]))]
    res = {"name": name, "placement": placement, "wall_s": time.monotonic() - t0,
           "step_s_p50": percentile(steps, 0.5), "step_s_p99": percentile(steps, 0.99),
           "device_busy_s_p50": [percentile(d["device_busy_s"], 0.5) for d in docs],
           "activation_bytes": docs[0]["activation_bytes"],
           "micro_batches": docs[0]["micro_batches"], "loss": docs[1]["loss"]}
    log(f"  step p50 {res['step_s_p50']:.3f} s, p99 {res['step_s_p99']:.3f} s")
    return res


def run(args, sites: list[dict], names: list[str], riding: dict, out: pathlib.Path) -> dict:
    single = run_one(args, "pipeline-single", sites, [names[0]] * 2, out, None)
    cross = run_one(args, "pipeline-cross", sites, [names[0], names[1]], out, riding)
    doc = {"single": single, "cross": cross,
           "formula": "bound_s = single-site step + 2 x (one-way delay + activation bytes x 8 / "
                      "reserved rate)"}
    if "error" in single or "error" in cross:
        return doc
    boundary_s = args.delay / 1e9 + single["activation_bytes"] * 8 / args.reserve
    doc["bound_s"] = single["step_s_p50"] + 2 * boundary_s
    doc["bubble_s"] = cross["step_s_p50"] - single["step_s_p50"]
    doc["cross_over_bound"] = cross["step_s_p50"] / doc["bound_s"]
    doc["cross_over_single"] = cross["step_s_p50"] / single["step_s_p50"]
    log(f"pipeline: single {single['step_s_p50']:.3f} s, cross {cross['step_s_p50']:.3f} s, "
        f"bound {doc['bound_s']:.3f} s ({doc['cross_over_bound']:.3f}x)")
    return doc
