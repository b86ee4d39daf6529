"""A site's own collective library inside the site, detwan between sites.

Each site keeps the backend it has (gloo on CPU sites; NCCL or a vendor's library where
present) for the traffic that never leaves it, and only one rank per site — its leader, the
lowest rank of the site — crosses the WAN, through detwan and the job's reservation:

    import detwan.torch.hybrid as hybrid
    dist.init_process_group("gloo")                     # the default group: any backend
    groups = hybrid.HybridGroups.from_env()             # DETWAN_INTRA_BACKEND (default gloo)
    groups.all_reduce(tensor)                           # a collective call ...
    hybrid.register_hybrid_hook(model, groups)          # ... or DDP's gradient averaging

An allreduce is three steps: the site's sum by the intra-site backend, the sites' sums
allreduced among the leaders by detwan (their group has one rank per site, so the leader's
channels get the site's whole share of the reservation), and the result broadcast from the
leader by the intra-site backend. Every rank must create HybridGroups at the same point (it
creates process groups, a collective act), after init_process_group; a rank's site is its
DETWAN_SITE. docs/pytorch.md, "A site's own library inside the site", has the details.
"""
import os
import queue
import threading
from datetime import timedelta
from typing import Optional, Sequence

import torch
import torch.distributed as dist

import detwan.torch  # noqa: F401  registers backend "detwan"

__all__ = ["HybridGroups", "hybrid_allreduce_hook", "register_hybrid_hook", "on_host"]


class HybridGroups:
    """The process groups of a hybrid job: `intra` (this rank's site, the site's backend) and
    `inter` (the sites' leaders, detwan; None on the other ranks)."""

    def __init__(self, sites: Sequence[str], intra_backend: str = "gloo",
                 timeout: Optional[timedelta] = None):
        world, rank = dist.get_world_size(), dist.get_rank()
        if len(sites) != world:
            raise ValueError(f"{len(sites)} sites given for {world} ranks")
        kwargs = {"timeout": timeout} if timeout else {}
        self.rank = rank
        self.world = world
        self.sites = list(sites)
        self.site = self.sites[rank]
        self.site_names = list(dict.fromkeys(self.sites))  # order of first appearance
        self.intra_backend = intra_backend
        self.intra = None
        self.site_ranks: list[int] = []
        # new_group is collective over the whole world: every rank creates every site's group,
        # in the same order, and keeps its own.
        for name in self.site_names:
            ranks = [r for r in range(world) if self.sites[r] == name]
            group = dist.new_group(ranks, backend=intra_backend, **kwargs)
            if name == self.site:
                self.intra, self.site_ranks = group, ranks
        self.leaders = [next(r for r in range(world) if self.sites[r] == name)
                        for name in self.site_names]
        self.leader = self.site_ranks[0]
        self.is_leader = rank == self.leader
        inter = dist.new_group(self.leaders, backend="detwan", **kwargs)
        self.inter = inter if self.is_leader else None

    @classmethod
    def from_env(cls, timeout: Optional[timedelta] = None) -> "HybridGroups":
        """Every rank's site from its DETWAN_SITE (gathered over the default group); the
        intra-site backend from DETWAN_INTRA_BACKEND (default gloo)."""
        site = os.environ.get("DETWAN_SITE", "")
        if not site:
            raise ValueError("DETWAN_SITE is not set: a hybrid group needs each rank's site")
        sites: list = [None] * dist.get_world_size()
        dist.all_gather_object(sites, site)
        return cls(sites, os.environ.get("DETWAN_INTRA_BACKEND", "gloo"), timeout)

    def describe(self) -> str:
        return (f"hybrid: site {self.site} ranks {self.site_ranks} by {self.intra_backend}, "
                f"leaders {self.leaders} by detwan")

    def all_reduce(self, tensor: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
        """In place, like dist.all_reduce (SUM, MIN, MAX, PRODUCT: what composes site by
        site); blocks until done."""
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
                      dist.ReduceOp.PRODUCT):
            raise ValueError(f"a hybrid allreduce composes SUM, MIN, MAX and PRODUCT, not {op}")
        if len(self.site_ranks) > 1:
            dist.all_reduce(tensor, op=op, group=self.intra)
        if self.inter is not None and len(self.leaders) > 1:
            on_host(tensor, lambda t: dist.all_reduce(t, op=op, group=self.inter))
        if len(self.site_ranks) > 1:
            dist.broadcast(tensor, src=self.leader, group=self.intra)
        return tensor


def on_host(tensor: torch.Tensor, call) -> None:
    """Runs call(t) (a detwan operation, which takes CPU tensors) on `tensor`, or, for a device
    tensor, on a copy in pinned host memory: device -> host, call, host -> device. The copies are
    asynchronous on the tensor's stream; the host copy is complete before detwan reads it."""
    if tensor.device.type == "cpu":
        call(tensor)
        return
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    torch.cuda.current_stream(tensor.device).synchronize()
    call(host)
    tensor.copy_(host, non_blocking=True)


class _HookState:
    """One thread runs the hook's allreduces in the order DDP issues the buckets (the same on
    every rank), so the collective calls of the three groups never interleave differently."""

    def __init__(self, groups: HybridGroups, weight: Optional[float]):
        self.groups = groups
        self.weight = weight
        self.work: "queue.Queue" = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="detwan-hybrid", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            buf, fut = self.work.get()
            try:
                self.groups.all_reduce(buf)
                if self.weight is None:
                    buf.div_(self.groups.world)
                fut.set_result(buf)
            except Exception as e:  # noqa: BLE001 - handed to DDP through the future
                fut.set_exception(e)


def hybrid_allreduce_hook(state: _HookState,
                          bucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: the bucket averaged over the world (or, with a weight,
    weighted as detwan.torch.hetero's hook) by the hybrid allreduce."""
    buf = bucket.buffer()
    if state.weight is not None:
        buf.mul_(state.weight)
    fut: torch.futures.Future = torch.futures.Future()
    state.work.put((buf, fut))
    return fut


def register_hybrid_hook(model, groups: HybridGroups, weight: Optional[float] = None):
    """Registers hybrid_allreduce_hook on a DistributedDataParallel model. weight: this rank's
    share / global batch for speed-weighted shares (detwan.torch.hetero); None = the mean."""
    state = _HookState(groups, weight)
    model.register_comm_hook(state, hybrid_allreduce_hook)
    return state
