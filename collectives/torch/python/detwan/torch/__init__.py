"""torch.distributed backend "detwan".

    import detwan.torch                      # registers the backend
    torch.distributed.init_process_group("detwan")   # env:// (RANK, WORLD_SIZE, MASTER_ADDR, ...)

The process group is a C++ extension (detwan.torch._C.ProcessGroupDetwan) over the detwan
collective library. Rank 0 starts the library's bootstrap and publishes its id in the process
group's store; the rest of the configuration comes from the environment like any detwan job:
DETWAN_SITE (the rank's site), DETWAN_RESERVATION + DETWAN_AGENT (ride a WAN reservation),
DETWAN_WAN_RATE, DETWAN_ALGO, DETWAN_DETERMINISTIC, ... (docs/collectives.md). The process
group's timeout is every operation's timeout. With DETWAN_INTRA_BACKEND naming a torch backend
(gloo, nccl, ...) the group is hybrid: that backend inside each site, detwan between the sites'
leaders (detwan.torch.hybrid_pg). docs/pytorch.md has the details.
"""
from __future__ import annotations

import datetime
import os

import torch  # noqa: F401  (registers torch's C++ types the extension derives from)
import torch.distributed as dist

from detwan.torch._C import ProcessGroupDetwan
from detwan.torch import hybrid_pg

__all__ = ["ProcessGroupDetwan", "BACKEND"]

BACKEND = "detwan"


def _create_process_group(store, rank: int, world_size: int, timeout: datetime.timedelta):
    intra = os.environ.get("DETWAN_INTRA_BACKEND", "")
    if hybrid_pg.names_a_site_library(intra):  # gloo, nccl, ...: the sites keep their own
        return hybrid_pg.HybridProcessGroup(store, rank, world_size, timeout, intra)
    return ProcessGroupDetwan(store, rank, world_size, timeout)


def _register() -> None:
    if BACKEND.upper() in dist.Backend._plugins:  # imported twice (e.g. reloaded)
        return
    dist.Backend.register_backend(BACKEND, _create_process_group)


_register()
