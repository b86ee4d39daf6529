"""One rank of tests/torch/test_hybrid.py: detwan.torch.hybrid (the site's own backend, gloo,
inside each site; detwan between the sites' leaders) against plain gloo on the same inputs.
Writes OUT_DIR/rank-<r>.json with one result per case."""
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from detwan.torch import hybrid
from rank_cases import write_rank_doc


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                        torch.nn.Linear(32, 10))

    def forward(self, x):
        return self.body(x)


def train(rank: int, groups, process_group=None) -> list:
    torch.manual_seed(11 + rank)  # DDP's broadcast must unify the parameters
    # several buckets, several hooks in flight
    model = DDP(Net(), bucket_cap_mb=0.001, process_group=process_group)
    if groups is not None:
        hybrid.register_hybrid_hook(model, groups)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(5 + rank)
    for _ in range(4):
        x = torch.randn(8, 16, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def run(rank: int, world: int) -> list:
    out = []
    groups = hybrid.HybridGroups.from_env(timeout=timedelta(seconds=60))
    n_sites = len(groups.site_names)
    inter_size = dist.get_world_size(groups.inter) if groups.inter is not None else 0
    out.append({"case": "groups", "ok": (inter_size == n_sites) == groups.is_leader
                and dist.get_world_size(groups.intra) == len(groups.site_ranks),
                "describe": groups.describe(), "inter_size": inter_size})
    for op, want in (("sum", sum(r + 1 + i for r in range(world) for i in [0])),
                     ("max", world)):
        t = torch.arange(1000, dtype=torch.int64) * 3 + rank + 1
        groups.all_reduce(t, dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        base = torch.arange(1000, dtype=torch.int64) * 3
        expect = base * world + want if op == "sum" else base + want
        out.append({"case": f"all_reduce/{op}", "ok": torch.equal(t, expect)})
    try:
        groups.all_reduce(torch.ones(4), dist.ReduceOp.AVG)
        out.append({"case": "bad_op", "ok": False, "detail": "no error"})
    except ValueError as e:
        out.append({"case": "bad_op", "ok": "SUM, MIN, MAX and PRODUCT" in str(e),
                    "detail": str(e)})
    ours = train(rank, groups)
    ref = train(rank, None)  # DDP over the default group: plain gloo
    err = max(((a - b).abs().max() / b.abs().max().clamp(min=1.0)).item()
              for a, b in zip(ours, ref))
    out.append({"case": "ddp_matches_gloo", "ok": err < 64 * 2.0**-23, "max_rel": err})
    return out


def run_default_group(rank: int, world: int) -> list:
    """init_process_group("detwan") with DETWAN_INTRA_BACKEND=gloo: the default group itself is
    hybrid (detwan.torch.hybrid_pg)."""
    from detwan.torch.hybrid_pg import HybridProcessGroup
    pg = dist.distributed_c10d._get_default_group()
    out = [{"case": "pg/hybrid", "ok": isinstance(pg, HybridProcessGroup)
            and (pg.inter is not None) == pg.is_leader, "describe": getattr(pg, "describe",
                                                                           lambda: "")()}]
    base = torch.arange(1000, dtype=torch.int64) * 3
    t = base + rank + 1
    dist.all_reduce(t)
    out.append({"case": "pg/all_reduce/sum", "ok": torch.equal(t, base * world
                                                             + world * (world + 1) // 2)})
    t = base + rank + 1
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out.append({"case": "pg/all_reduce/max", "ok": torch.equal(t, base + world)})
    f = torch.full((64,), float(rank))
    dist.all_reduce(f, op=dist.ReduceOp.AVG)
    out.append({"case": "pg/all_reduce/avg", "ok": torch.allclose(
        f, torch.full((64,), (world - 1) / 2))})
    for root in range(world):  # every root: leaders and not, every site
        b = torch.arange(100, dtype=torch.float64) + (rank == root) * (root + 1) * 1000
        dist.broadcast(b, src=root)
        out.append({"case": f"pg/broadcast/{root}",
                    "ok": torch.equal(b, torch.arange(100, dtype=torch.float64)
                                      + (root + 1) * 1000)})
    objs: list = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "x": -0.0 if rank % 2 else 1.5})
    out.append({"case": "pg/all_gather_object",
                "ok": objs == [{"rank": r, "x": -0.0 if r % 2 else 1.5} for r in range(world)]})
    dist.barrier()
    try:
        dist.reduce(torch.ones(2), dst=0)
        out.append({"case": "pg/unsupported", "ok": False, "detail": "no error"})
    except RuntimeError as e:
        out.append({"case": "pg/unsupported", "ok": "detwan-hybrid" in str(e)
                    and "reduce" in str(e), "detail": str(e)})
    gloo = dist.new_group(backend="gloo")
    ours = train(rank, None)
    ref = train(rank, None, process_group=gloo)
    err = max(((a - b).abs().max() / b.abs().max().clamp(min=1.0)).item()
              for a, b in zip(ours, ref))
    out.append({"case": "pg/ddp_matches_gloo", "ok": err < 64 * 2.0**-23, "max_rel": err})
    return out


def run_cuda(rank: int, world: int) -> list:
    """A CUDA tensor through the staged path (one rank per site: the leaders' step only)."""
    groups = hybrid.HybridGroups.from_env(timeout=timedelta(seconds=60))
    t = (torch.arange(4096, dtype=torch.float32) + rank).cuda()
    groups.all_reduce(t)
    torch.cuda.synchronize()
    expect = torch.arange(4096, dtype=torch.float32) * world + sum(range(world))
    return [{"case": "cuda_staged", "ok": torch.equal(t.cpu(), expect)}]


def body(doc: dict, rank: int, world: int) -> None:
    mode = sys.argv[2] if len(sys.argv) > 2 else "groups"
    if mode == "default_group":
        import detwan.torch  # noqa: F401  registers "detwan"
        dist.init_process_group("detwan", timeout=timedelta(seconds=60))
        doc["results"] = run_default_group(rank, world)
        dist.barrier()
        dist.destroy_process_group()
        return
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    doc["results"] = run_cuda(rank, world) if mode == "cuda" else run(rank, world)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(write_rank_doc(sys.argv[1], body))
