"""One rank of tools/bench/train-cross-site: a small character-level transformer language model
trained with DDP on the text of Debian's `fortunes` package (/usr/share/games/fortunes; no
download at run time). An ordinary torch.distributed script: torchrun's variables (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus DETWAN_SITE and, to ride a reservation,
DETWAN_RESERVATION and DETWAN_AGENT.

Every rank draws its own batches from a generator seeded by (seed, rank, step), so every run
with the same seed and world size sees the same data whatever the backend or placement. Writes
one JSON per rank: the time of each step, rank 0's loss per step, a parameter checksum.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import pathlib
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

CORPUS_DIR = pathlib.Path("/usr/share/games/fortunes")


def corpus() -> torch.Tensor:
    """The fortune files' text (not the .dat indexes, the .u8 duplicates or the offensive set),
    as bytes: a byte-level vocabulary of 256."""
    files = sorted(p for p in CORPUS_DIR.iterdir()
                   if p.is_file() and p.suffix not in (".dat", ".u8") and not p.is_symlink())
    if not files:
        raise SystemExit(f"no corpus in {CORPUS_DIR}: install the Debian package 'fortunes'")
    data = b"".join(p.read_bytes() for p in files)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int, ctx: int):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))
        mask = torch.triu(torch.full((ctx, ctx), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        h = self.ln1(x)
        t = x.shape[1]
        a, _ = self.attn(h, h, h, attn_mask=self.mask[:t, :t], need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class CharTransformer(torch.nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, ctx: int, vocab: int = 256):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.zeros(1, ctx, dim))
        self.blocks = torch.nn.Sequential(*[Block(dim, heads, ctx) for _ in range(layers)])
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, :idx.shape[1]]
        return self.head(self.ln(self.blocks(x)))


def timing_hook(trace: list, group, weight: float | None = None):
    """DDP's default allreduce (sum, then / world) with each bucket's start and end times; with
    `weight`, the weighted average of detwan.torch.hetero (times weight, then sum)."""
    def hook(state, bucket):
        t0 = time.perf_counter()
        buf = bucket.buffer()
        if weight is not None:
            buf.mul_(weight)
        fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
        world = dist.get_world_size(group)

        def done(f):
            trace.append((bucket.index(), buf.numel() * 4, t0, time.perf_counter()))
            return f.value()[0] if weight is not None else f.value()[0].div_(world)
        return fut.then(done)
    return hook


class EmulatedDevice:
    """A rank's compute stands for an accelerator's (--device-ms-per-sample, --speeds): a step
    on n samples takes n x ms_per_sample / speed of device time, a third in forward and two
    thirds in backward spread evenly over the model's blocks (so DDP's buckets become ready
    through backward as on a real device). The host computes the real gradients and then
    sleeps for what is left of each part's device time: the rank waits instead of burning a
    core, and the network stack keeps the CPU. Limits: where the host's own compute of a part
    takes longer than its device time, the part takes the host's time (keep the model small);
    sleeps are only as precise as the scheduler (~0.1 ms)."""

    def __init__(self, ms_per_sample: float, speed: float, blocks):
        self.s_per_sample = ms_per_sample / 1000.0 / speed
        self.blocks = list(blocks)
        self.samples = 0
        self.bwd_start = 0.0
        self.host_s = 0.0   # real compute per step (forward + backward), for the report
        self.slept_s = 0.0
        for i, block in enumerate(self.blocks):
            block.register_full_backward_hook(self._after_block(len(self.blocks) - 1 - i))

    def _sleep_until(self, t: float) -> None:
        left = t - time.perf_counter()
        if left > 0:
            time.sleep(left)
            self.slept_s += left

    def forward(self, model, x):
        self.samples = x.shape[0]
        t0 = time.perf_counter()
        out = model(x)
        self._sleep_until(t0 + self.samples * self.s_per_sample / 3)
        return out

    def start_backward(self) -> None:
        self.bwd_start = time.perf_counter()

    def _after_block(self, done_index: int):
        def hook(module, grad_in, grad_out):
            share = (done_index + 1) / len(self.blocks)
            self._sleep_until(self.bwd_start + share * self.samples * self.s_per_sample * 2 / 3)
        return hook


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", required=True)
    p.add_argument("--out", required=True, help="directory for rank-<r>.json")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3, help="steps not timed")
    p.add_argument("--batch", type=int, default=16, help="sequences per rank per step")
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bucket-mb", type=float, default=1.0,
                   help="DDP gradient bucket size (small buckets overlap backward)")
    p.add_argument("--fp16-hook", action="store_true", help="fp16 gradient compression hook")
    p.add_argument("--gloo-addr", help="gloo: bind its device to this address (the tunnel's)")
    p.add_argument("--gloo-addr-from-env", action="store_true",
                   help="gloo: the address is in TRAIN_GLOO_ADDR (one per rank)")
    p.add_argument("--timeout-s", type=float, default=600)
    p.add_argument("--trace-buckets", action="store_true",
                   help="record each gradient bucket's allreduce start and end per step")
    p.add_argument("--speeds", help="accelerator emulation: each rank's speed, e.g. "
                   "1,1,0.5,0.25 (with --device-ms-per-sample)")
    p.add_argument("--device-ms-per-sample", type=float, default=0.0,
                   help="device time per sample at speed 1 (0: no emulation, host compute only)")
    p.add_argument("--shares", choices=("equal", "weighted"), default="equal",
                   help="each rank's share of the global batch (world x --batch): equal, or by "
                   "speed with the weighted gradient average (detwan.torch.hetero)")
    p.add_argument("--alone-steps", type=int, default=0,
                   help="steps each rank first runs alone (no communication) to measure its "
                   "own samples/s")
    p.add_argument("--compute-nice", type=int, default=0,
                   help="nice value of the training (main) thread only, set after the process "
                   "group's threads exist: communication threads then win the CPU when "
                   "compute oversubscribes it")
    return p.parse_args(argv)


def init(args) -> dist.ProcessGroup | None:
    if args.gloo_addr_from_env:
        args.gloo_addr = os.environ["TRAIN_GLOO_ADDR"]
    timeout = timedelta(seconds=args.timeout_s)
    if args.backend == "gloo" and args.gloo_addr:
        # gloo picks its address from the hostname; bind it to the one given instead.
        dist.init_process_group("gloo", timeout=timeout)
        opts = dist.ProcessGroupGloo._Options()
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=args.gloo_addr)]
        opts._timeout = timeout
        store = dist.PrefixStore("train-gloo", dist.distributed_c10d._get_default_store())
        return dist.ProcessGroupGloo(store, dist.get_rank(), dist.get_world_size(), opts)
    if args.backend == "detwan":
        importlib.import_module("detwan.torch")  # registers the backend
    # hybrid: a gloo default group; the hybrid groups (gloo per site, detwan between the
    # sites' leaders) are made in main() and carry the gradients through their comm hook.
    dist.init_process_group("gloo" if args.backend == "hybrid" else args.backend,
                            timeout=timeout)
    return None  # the default group


def alone_rate(args, data, speed: float, n: int, rank: int) -> float:
    """This rank's samples/s on its own share with no communication: a copy of the model (not
    the DDP one) on the same emulated device, timed over --alone-steps after one warm-up."""
    net = CharTransformer(args.layers, args.dim, args.heads, args.ctx)
    device = (EmulatedDevice(args.device_ms_per_sample, speed, net.blocks)
              if args.device_ms_per_sample > 0 else None)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed + 77 * rank)
    total = 0.0
    for step in range(1 + args.alone_steps):
        starts = torch.randint(0, data.numel() - args.ctx - 1, (n,), generator=g).tolist()
        x = torch.stack([data[s:s + args.ctx] for s in starts])
        y = torch.stack([data[s + 1:s + 1 + args.ctx] for s in starts])
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = device.forward(net, x) if device else net(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, 256), y.reshape(-1))
        if device:
            device.start_backward()
        loss.backward()
        opt.step()
        if step > 0:
            total += time.perf_counter() - t0
    return n * args.alone_steps / total


def main(argv=None) -> int:
    args = parse(argv)
    torch.set_num_threads(1)
    group = init(args)
    rank, world = dist.get_rank(), dist.get_world_size()
    data = corpus()
    torch.manual_seed(args.seed)
    # DDP's first bucket is 1 MiB whatever bucket_cap_mb says (torch's documented knob below):
    # a small model's whole gradient would then be one bucket, ready only at the end of
    # backward, with nothing of its WAN transfer overlapped. Every bucket is --bucket-mb here.
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.bucket_mb * 2**20)
    model = DDP(CharTransformer(args.layers, args.dim, args.heads, args.ctx),
                process_group=group, bucket_cap_mb=args.bucket_mb)
    trace: list = []
    if args.trace_buckets and args.shares != "weighted" and args.backend != "hybrid":
        model.register_comm_hook(None, timing_hook(trace, group))
    if args.fp16_hook:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(group, default_hooks.fp16_compress_hook)
    if args.compute_nice:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), args.compute_nice)
    if args.shares == "weighted" and args.fp16_hook:
        raise SystemExit("--shares weighted has a comm hook of its own: not with --fp16-hook")
    if args.speeds or args.shares == "weighted":
        from detwan.torch import hetero  # the package: built with the backend
    speeds = hetero.parse_speeds(args.speeds) if args.speeds else [1.0] * world
    if len(speeds) != world:
        raise SystemExit(f"--speeds has {len(speeds)} entries for {world} ranks")
    global_batch = world * args.batch
    shares = (hetero.batch_shares(speeds, global_batch) if args.shares == "weighted"
              else [args.batch] * world)
    mine = shares[rank]
    if args.backend == "hybrid":
        from detwan.torch import hybrid
        groups = hybrid.HybridGroups.from_env(timedelta(seconds=args.timeout_s))
        hybrid.register_hybrid_hook(model, groups, shares[rank] / global_batch
                                    if args.shares == "weighted" else None)
    elif args.shares == "weighted" and args.trace_buckets:
        model.register_comm_hook(None, timing_hook(trace, group, shares[rank] / global_batch))
    elif args.shares == "weighted":
        hetero.register_weighted_hook(model, shares, rank, group=group)
    device = (EmulatedDevice(args.device_ms_per_sample, speeds[rank], model.module.blocks)
              if args.device_ms_per_sample > 0 else None)
    alone = alone_rate(args, data, speeds[rank], mine, rank) if args.alone_steps else None
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    step_s, losses, forward_s, cpu_s, buckets = [], [], [], [], []
    for step in range(args.warmup + args.steps):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        starts = torch.randint(0, data.numel() - args.ctx - 1, (mine,), generator=g)
        x = torch.stack([data[s:s + args.ctx] for s in starts.tolist()])
        y = torch.stack([data[s + 1:s + 1 + args.ctx] for s in starts.tolist()])
        t0 = time.perf_counter()
        c0 = time.process_time()
        trace.clear()
        opt.zero_grad(set_to_none=True)
        out = device.forward(model, x) if device else model(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, 256), y.reshape(-1))
        t1 = time.perf_counter()
        if device:
            device.start_backward()
        loss.backward()  # DDP allreduces the gradient buckets as they become ready
        t_bwd = time.perf_counter()
        opt.step()
        dt = time.perf_counter() - t0
        if step == args.warmup:
            timed_from = t0
        if step >= args.warmup:
            step_s.append(dt)
            if args.trace_buckets:
                buckets.append([(i, b, round(s0 - t0, 4), round(s1 - t0, 4))
                                for i, b, s0, s1 in trace] + [("backward_end", 0, 0,
                                                                round(t_bwd - t0, 4))])
            # Forward involves no communication: where it grows, the CPU is shared.
            forward_s.append(t1 - t0)
            cpu_s.append(time.process_time() - c0)
        losses.append(loss.item())
    # This rank's wall time over the timed steps (data preparation between steps included):
    # the job runs as fast as its slowest rank's.
    timed_wall_s = time.perf_counter() - timed_from
    # Steps are synchronised by the allreduce: every rank's clock says the same, but the
    # slowest rank's view is the job's; the report takes the max over ranks per step.
    checksum = math.fsum(p.detach().double().sum().item() for p in model.parameters())
    doc = {"rank": rank, "world": world, "backend": args.backend,
           "site": os.environ.get("DETWAN_SITE", ""), "params": params,
           "gradient_bytes": params * 4, "batch_per_rank": args.batch, "ctx": args.ctx,
           "step_s": step_s, "timed_wall_s": timed_wall_s, "forward_s": forward_s, "buckets": buckets, "cpu_s": cpu_s, "loss": losses, "param_checksum": checksum,
           "corpus_bytes": data.numel(), "speeds": speeds, "shares": shares,
           "global_batch": global_batch, "shares_mode": args.shares,
           "alone_samples_per_s": alone,
           "device_slept_s": device.slept_s if device else 0.0}
    if args.backend == "detwan":
        pg = group or dist.distributed_c10d._get_default_group()
        doc["detwan"] = {"config": pg.describe(), "plan": pg.plan(params * 4)}
    pathlib.Path(args.out, f"rank-{rank}.json").write_text(json.dumps(doc))
    dist.barrier(group=group)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
