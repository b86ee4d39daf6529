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


def train(rank: int, groups) -> list:
    torch.manual_seed(11 + rank)  # DDP's broadcast must unify the parameters
    model = DDP(Net(), bucket_cap_mb=0.001)  # several buckets, several hooks in flight
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


def run_cuda(rank: int, world: int) -> list:
    """A CUDA tensor through the staged path (one rank per site: the leaders' step only)."""
    groups = hybrid.HybridGroups.from_env(timeout=timedelta(seconds=60))
    t = (torch.arange(4096, dtype=torch.float32) + rank).cuda()
    groups.all_reduce(t)
    torch.cuda.synchronize()
    expect = torch.arange(4096, dtype=torch.float32) * world + sum(range(world))
    return [{"case": "cuda_staged", "ok": torch.equal(t.cpu(), expect)}]


def body(doc: dict, rank: int, world: int) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    cuda = len(sys.argv) > 2 and sys.argv[2] == "cuda"
    doc["results"] = run_cuda(rank, world) if cuda else run(rank, world)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(write_rank_doc(sys.argv[1], body))
