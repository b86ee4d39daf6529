"""One rank of tests/torch/test_hetero.py: speed-weighted DDP (detwan.torch.hetero) over the
"detwan" backend, against the same global batch with equal shares and against one process
computing the whole global batch. Writes OUT_DIR/rank-<r>.json with one result per case.

Cases:
  exact/*  a float64 linear model on small integer data, shares 8,4,2,2 of 16 and lr 2^-6: every
           product and sum is exact, so the weighted update must equal the equal-share update
           and the one-process reference to the last bit, and DDP's default mean (sum / world)
           on the same unequal shares must not.
  float/*  an MLP in float32 on random data, speeds 1,1,0.5,0.25 (shares from batch_shares):
           weighted within a few ulps of equal shares, the default mean far off, and two
           weighted runs in deterministic mode (DETWAN_DETERMINISTIC=1) bit-identical.
"""
from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import detwan.torch  # noqa: F401  registers backend "detwan"
from detwan.torch import hetero
from rank_cases import write_rank_doc


def dataset(n: int, features: int, exact: bool, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    if exact:
        x = torch.randint(-2, 3, (n, features), generator=g).double()
        y = torch.randint(-3, 4, (n, 1), generator=g).double()
    else:
        x = torch.randn(n, features, generator=g)
        y = torch.randint(0, 10, (n,), generator=g)
    return x, y


def model(exact: bool) -> torch.nn.Module:
    torch.manual_seed(7)  # same init everywhere (DDP would broadcast rank 0's anyway)
    if exact:
        m = torch.nn.Linear(6, 1, bias=False).double()
        with torch.no_grad():
            m.weight.copy_(torch.tensor([[1.0, -1.0, 2.0, 0.0, -2.0, 1.0]], dtype=torch.float64))
        return m
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def loss_fn(exact: bool, out, y):
    if exact:
        return torch.nn.functional.mse_loss(out, y)  # mean over this rank's samples
    return torch.nn.functional.cross_entropy(out, y)


def train(det, rank: int, shares, hook: str, exact: bool, steps: int) -> list[torch.Tensor]:
    """hook: 'weighted' (hetero's), 'mean' (DDP's default: sum / world) or 'local' (no DDP:
    this process alone on every global batch, the reference)."""
    x, y = dataset(256, 6 if exact else 16, exact)
    net = model(exact)
    lr = 2.0**-6 if exact else 0.05
    if hook == "local":
        shares_used, me = [sum(shares)], 0
        m = net
    else:
        shares_used, me = shares, rank
        m = DDP(net, process_group=det, bucket_cap_mb=0.001 if not exact else 25)
        if hook == "weighted":
            hetero.register_weighted_hook(m, shares, rank, group=det)
    sampler = hetero.WeightedSampler(len(x), shares_used, me, seed=3)
    idx = list(sampler)
    mine = shares_used[me]
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    for step in range(steps):
        batch = idx[step * mine:(step + 1) * mine]
        opt.zero_grad()
        loss_fn(exact, m(x[batch]), y[batch]).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


def same_bits(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a, b))


def max_rel(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(((p - q).abs().max() / q.abs().max().clamp(min=1.0)).item() for p, q in zip(a, b))


def run(det, rank: int, world: int) -> list[dict]:
    out = []
    # Exact arithmetic: shares and weights powers of two, integer data, float64.
    shares = [8, 4, 2, 2]
    weighted = train(det, rank, shares, "weighted", True, 3)
    equal = train(det, rank, [4] * world, "mean", True, 3)
    local = train(det, rank, shares, "local", True, 3)
    naive = train(det, rank, shares, "mean", True, 3)
    out.append({"case": "exact/weighted_equals_equal_shares", "ok": same_bits(weighted, equal)})
    out.append({"case": "exact/weighted_equals_one_process", "ok": same_bits(weighted, local)})
    out.append({"case": "exact/default_mean_differs", "ok": not same_bits(naive, local),
                "max_rel": max_rel(naive, local)})
    # Floats: speeds 1,1,0.5,0.25.
    fshares = hetero.batch_shares([1, 1, 0.5, 0.25], 24)
    w1 = train(det, rank, fshares, "weighted", False, 4)
    w2 = train(det, rank, fshares, "weighted", False, 4)
    fequal = train(det, rank, [6] * world, "mean", False, 4)
    fnaive = train(det, rank, fshares, "mean", False, 4)
    err = max_rel(w1, fequal)
    out.append({"case": "float/weighted_near_equal_shares", "ok": err < 64 * 2.0**-23,
                "max_rel": err, "shares": fshares})
    naive_err = max_rel(fnaive, fequal)
    out.append({"case": "float/default_mean_far_off", "ok": naive_err > 100 * max(err, 2.0**-23),
                "max_rel": naive_err})
    out.append({"case": "float/deterministic_repeat_identical", "ok": same_bits(w1, w2)})
    # Measured speeds: every rank's own rate gathered over the detwan group, fastest = 1.
    speeds = hetero.measure_speeds(10.0 * (rank + 1), group=det)
    want = [(r + 1) / world for r in range(world)]
    out.append({"case": "measure_speeds", "ok": speeds == want, "speeds": speeds})
    try:
        hetero.measure_speeds(0.0 if rank == 0 else 1.0, group=det)
        out.append({"case": "measure_speeds_refuses_zero", "ok": False, "detail": "no error"})
    except ValueError as e:
        out.append({"case": "measure_speeds_refuses_zero", "ok": "positive speed" in str(e),
                    "detail": str(e)})
    return out


def body(doc: dict, rank: int, world: int) -> None:
    timeout = timedelta(seconds=120)
    dist.init_process_group("gloo", timeout=timeout)
    det = dist.new_group(backend="detwan", timeout=timeout)
    doc["describe"] = det.describe()
    doc["results"] = run(det, rank, world)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(write_rank_doc(sys.argv[1], body))
