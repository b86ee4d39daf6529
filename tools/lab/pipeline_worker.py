"""One stage of `tools/bench/train-cross-site --pipeline`: the character-level transformer of
train_worker.py cut in two (stage 0: embedding and the first half of the blocks; stage 1: the
rest, the head and the loss), one rank per stage, activations and their gradients by
send/recv between the stages (through the reservation when the stages are in different sites).

Schedule (GPipe with the last stage eager): stage 0 runs the forward pass of every micro-batch
and sends each activation as soon as it is computed, then runs their backward passes in order as
the gradients come back; stage 1 runs each micro-batch's forward and backward as soon as its
activation arrives and sends the activation's gradient back at once. Receives are posted ahead,
so transfers overlap compute. Each stage's compute stands for a device (--device-ms-per-sample
at speed 1, a third in forward, two thirds in backward; the host computes and then waits for the
rest, as train_worker.EmulatedDevice). Writes rank-<r>.json: step times, the stage's compute
time per step (device time), bytes per activation.
"""
import argparse
import importlib
import json
import os
import pathlib
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train_worker import CharTransformer, corpus  # noqa: E402


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", required=True, choices=("detwan", "gloo"))
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--micro-batches", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=4, help="sequences per micro-batch")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--device-ms-per-sample", type=float, default=20.0,
                   help="device time per sample and stage")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout-s", type=float, default=600)
    return p.parse_args(argv)


class Stage(torch.nn.Module):
    def __init__(self, full: CharTransformer, stage: int):
        super().__init__()
        half = len(full.blocks) // 2
        self.stage = stage
        if stage == 0:
            self.tok, self.pos = full.tok, full.pos
            self.blocks = torch.nn.Sequential(*list(full.blocks)[:half])
        else:
            self.blocks = torch.nn.Sequential(*list(full.blocks)[half:])
            self.ln, self.head = full.ln, full.head

    def forward(self, x):
        if self.stage == 0:
            return self.blocks(self.tok(x) + self.pos[:, :x.shape[1]])
        return self.head(self.ln(self.blocks(x)))


class Device:
    """Waits for what is left of a part's device time after the host computed it."""

    def __init__(self, s_per_sample: float):
        self.s_per_sample = s_per_sample
        self.busy_s = 0.0

    def run(self, fn, samples: int, share: float):
        t0 = time.perf_counter()
        out = fn()
        target = samples * self.s_per_sample * share
        left = t0 + target - time.perf_counter()
        if left > 0:
            time.sleep(left)
        self.busy_s += max(target, time.perf_counter() - t0)
        return out


def main(argv=None) -> int:
    args = parse(argv)
    torch.set_num_threads(1)
    if args.backend == "detwan":
        importlib.import_module("detwan.torch")  # registers the backend
    dist.init_process_group(args.backend, timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 2:
        raise SystemExit(f"a two-stage pipeline runs on 2 ranks, not {world}")
    torch.manual_seed(args.seed)
    stage = Stage(CharTransformer(args.layers, args.dim, args.heads, args.ctx), rank)
    opt = torch.optim.AdamW(stage.parameters(), lr=3e-3)
    data = corpus()
    device = Device(args.device_ms_per_sample / 1000.0)
    m, mb = args.micro_batches, args.micro_batch
    act_shape = (mb, args.ctx, args.dim)
    step_s, busy_s, losses = [], [], []
    for step in range(args.warmup + args.steps):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        starts = torch.randint(0, data.numel() - args.ctx - 1, (m * mb,), generator=g).tolist()
        x = torch.stack([data[s:s + args.ctx] for s in starts]).view(m, mb, args.ctx)
        y = torch.stack([data[s + 1:s + 1 + args.ctx] for s in starts]).view(m, mb, args.ctx)
        t0 = time.perf_counter()
        busy0 = device.busy_s
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        # A communicator runs a rank's sends and receives in the order they are posted (the
        # detwan backend's executor, as NCCL's stream): every receive is posted after the sends
        # it must not hold up. Stage 0 sends every activation before it posts any receive.
        if rank == 0:
            outs, sends = [], []
            for i in range(m):
                out = device.run(lambda: stage(x[i]), mb, 1 / 3)
                outs.append(out)
                sends.append(dist.isend(out.detach().contiguous(), dst=1))
            grads = [torch.empty(act_shape) for _ in range(m)]
            recvs = [dist.irecv(grads[i], src=1) for i in range(m)]
            for i in range(m):
                recvs[i].wait()
                device.run(lambda: outs[i].backward(grads[i]), mb, 2 / 3)
            for s in sends:
                s.wait()
        else:
            # Two activations received ahead; the gradient of micro-batch i is posted after the
            # receive of activation i + 1, which stage 0 sends without waiting for anything.
            acts = [torch.empty(act_shape) for _ in range(m)]
            recvs = [dist.irecv(acts[i], src=0) for i in range(min(2, m))]
            sends = []
            for i in range(m):
                recvs[i].wait()
                act = acts[i].requires_grad_()

                def fwd_bwd():
                    loss = torch.nn.functional.cross_entropy(
                        stage(act).reshape(-1, 256), y[i].reshape(-1)) / m
                    loss.backward()
                    return loss.item()
                step_loss += device.run(fwd_bwd, mb, 1.0)
                sends.append(dist.isend(act.grad.contiguous(), dst=0))
                if i + 2 < m:
                    recvs.append(dist.irecv(acts[i + 2], src=0))
            for s in sends:
                s.wait()
        opt.step()
        if step >= args.warmup:
            step_s.append(time.perf_counter() - t0)
            busy_s.append(device.busy_s - busy0)
        losses.append(step_loss)
    doc = {"rank": rank, "backend": args.backend, "site": os.environ.get("DETWAN_SITE", ""),
           "step_s": step_s, "device_busy_s": busy_s, "loss": losses,
           "micro_batches": m, "micro_batch": mb,
           "activation_bytes": mb * args.ctx * args.dim * 4}
    pathlib.Path(args.out, f"rank-{rank}.json").write_text(json.dumps(doc))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
