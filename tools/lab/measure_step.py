#!/usr/bin/python3
"""Measures a compute pool's reference step: the PyTorch model of tools/bench/train-cross-site
(tools/lab/train_worker.py: a character-level transformer on Debian's fortunes) trained for a
few steps on ONE process, no communication: forward + backward + optimizer step, the time per
step after warm-up. Prints one JSON line, what `detwanctl pool register --measure` sends as the
pool's reference:

  {"step_ns": N, "steps": S, "gradient_bytes": G, "model": "char-transformer-4x128",
   "measured_unix_ns": T, "backward_ns": B}

backward_ns: the median backward pass, the part of a step during which a data-parallel
framework allreduces gradient buckets (the planner's overlap, docs/control.md).

The same model options as train_worker (--layers --dim --heads --ctx --batch) so that a training
run's compute per step can be predicted from it; --threads as the ranks run (train_worker uses
1). Usage: tools/lab/measure_step.py [--steps 5] [--warmup 2] [...]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train_worker import CharTransformer, corpus  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = corpus()
    model = CharTransformer(args.layers, args.dim, args.heads, args.ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    params = sum(q.numel() for q in model.parameters())
    times, backward = [], []
    for step in range(args.warmup + args.steps):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        starts = torch.randint(0, data.numel() - args.ctx - 1, (args.batch,), generator=g)
        x = torch.stack([data[s:s + args.ctx] for s in starts.tolist()])
        y = torch.stack([data[s + 1:s + 1 + args.ctx] for s in starts.tolist()])
        t0 = time.perf_counter_ns()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        t1 = time.perf_counter_ns()
        loss.backward()
        t2 = time.perf_counter_ns()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter_ns() - t0)
            backward.append(t2 - t1)
    print(json.dumps({"step_ns": int(statistics.median(times)), "steps": args.steps,
                      "gradient_bytes": params * 4,
                      "model": f"char-transformer-{args.layers}x{args.dim}",
                      "measured_unix_ns": time.time_ns(),
                      "backward_ns": int(statistics.median(backward))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
