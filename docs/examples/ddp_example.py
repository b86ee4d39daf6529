#!/usr/bin/python3
"""A minimal DDP job on the detwan backend (docs/pytorch.md).

From a build tree, 4 ranks on this host in 2 sites:

    export PYTHONPATH=$PWD/build/collectives/torch/python
    for r in 0 1 2 3; do
      RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
      DETWAN_SITE=$([ $r -lt 2 ] && echo a || echo b) python3 docs/examples/ddp_example.py &
    done; wait

or with torchrun (one site per node): `torchrun --nproc-per-node 2 ... ddp_example.py` with
DETWAN_SITE set per node. To ride a WAN reservation add DETWAN_AGENT and DETWAN_RESERVATION.
"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import detwan.torch  # noqa: F401  registers the backend "detwan"


def main() -> None:
    dist.init_process_group("detwan")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for step in range(20):
        x = torch.randn(64, 16, generator=g)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()  # gradients are averaged over the ranks by detwan allreduces
        opt.step()
        if rank == 0 and step % 5 == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
