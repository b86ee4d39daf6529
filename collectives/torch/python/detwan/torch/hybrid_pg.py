"""init_process_group("detwan") with DETWAN_INTRA_BACKEND naming a site's own library.

    DETWAN_SITE=a DETWAN_INTRA_BACKEND=gloo ...    # per rank, with the usual RANK, WORLD_SIZE, ...
    import detwan.torch
    dist.init_process_group("detwan")              # a HybridProcessGroup
    model = DDP(model)                              # buckets: gloo inside, detwan across

The default group is then hybrid: inside each site the site's backend (gloo here; nccl, or any
backend registered with torch, where present), between sites one detwan group of the sites'
leaders (the lowest rank of each site) riding the job's reservation. An allreduce is the site's
reduction, the leaders' allreduce, the leader's broadcast back (as detwan.torch.hybrid's
HybridGroups, which does the same over groups of an existing default group). Every operation
runs on one thread of the group in issue order -- the same on every rank -- and completes a
Work the caller (or DDP) waits on.

Operations: allreduce (SUM, MIN, MAX, PRODUCT; AVG = SUM / world, floating types), broadcast from
any rank, allgather (exact: each rank's bytes in its slot of a zeroed buffer, summed as uint8),
barrier -- what DDP and the usual training loop call. Others (reduce, gather, scatter, all_to_all,
send/recv) raise "... does not support ..." naming this group: create a plain detwan group for
them (dist.new_group(backend="detwan")). Device tensors: the leaders' step stages them through
pinned host memory. docs/pytorch.md, "A site's own library inside the site".
"""
import os
import queue
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from torch._C._distributed_c10d import _create_work_from_future as _work_from_future

from detwan.torch._C import ProcessGroupDetwan
from detwan.torch.hybrid import on_host

__all__ = ["HybridProcessGroup", "names_a_site_library"]

# DETWAN_INTRA_BACKEND values that are the collective library's own transports
# (collectives/comm/config.cc); anything else names a torch backend for the sites.
_TRANSPORTS = ("shm", "tcp", "udp", "loopback", "verbs")


def names_a_site_library(value: str) -> bool:
    return bool(value) and value.split(":", 1)[0] not in _TRANSPORTS


def _intra_group(backend: str, store, rank: int, size: int, timeout: timedelta):
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, size, timeout)
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, opts)
    creator = dist.Backend._plugins.get(backend.upper())
    if creator is None:
        raise ValueError(f"DETWAN_INTRA_BACKEND={backend}: not gloo, nccl or a backend "
                         f"registered with torch.distributed")
    return creator(store, rank, size, timeout)


class HybridProcessGroup(dist.ProcessGroup):
    """The default group of a hybrid job (see the module's docstring)."""

    def __init__(self, store, rank: int, world: int, timeout: timedelta, intra_backend: str):
        super().__init__(rank, world)
        site = os.environ.get("DETWAN_SITE", "")
        if not site:
            raise ValueError("DETWAN_SITE is not set: a hybrid group needs each rank's site")
        store.set(f"detwan-hybrid/site/{rank}", site)
        self.sites = [store.get(f"detwan-hybrid/site/{r}").decode() for r in range(world)]
        self.rank_, self.world = rank, world
        self.site_names = list(dict.fromkeys(self.sites))
        self.site_ranks = [r for r in range(world) if self.sites[r] == site]
        self.leaders = [self.sites.index(name) for name in self.site_names]
        self.is_leader = rank == self.site_ranks[0]
        self.intra_backend = intra_backend
        self.intra = _intra_group(intra_backend,
                                  dist.PrefixStore(f"detwan-hybrid/intra/{site}", store),
                                  self.site_ranks.index(rank), len(self.site_ranks), timeout)
        self.inter = (ProcessGroupDetwan(dist.PrefixStore("detwan-hybrid/inter", store),
                                         self.leaders.index(rank), len(self.leaders), timeout)
                      if self.is_leader else None)
        self._queue: "queue.Queue" = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="detwan-hybrid-pg", daemon=True)
        self._thread.start()

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "detwan-hybrid"

    def describe(self) -> str:
        return (f"hybrid: site {self.sites[self.rank_]} ranks {self.site_ranks} by "
                f"{self.intra_backend}, leaders {self.leaders} by detwan")

    # ---- the ordered thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            fn, future = self._queue.get()
            try:
                future.set_result(fn())
            except Exception as e:  # noqa: BLE001 - handed to the caller through the Work
                future.set_exception(e)

    def _submit(self, fn):
        future: torch.futures.Future = torch.futures.Future()
        self._queue.put((fn, future))
        # A C++ Work around the future: torch (DDP's Reducer, C++ helpers) waits on it without
        # calling back into Python, which a Python subclass of Work would need (and which
        # finds nothing once the Python object is gone).
        return _work_from_future(future)

    # ---- the three steps ------------------------------------------------------------------

    def _intra_all_reduce(self, t: torch.Tensor, op) -> None:
        if len(self.site_ranks) > 1:
            self.intra.allreduce([t], dist.AllreduceOptions() if op is None else _ar(op)).wait()

    def _intra_broadcast(self, t: torch.Tensor, local_root: int) -> None:
        if len(self.site_ranks) > 1:
            opts = dist.BroadcastOptions()
            opts.rootRank = local_root
            self.intra.broadcast([t], opts).wait()

    def _inter(self, t: torch.Tensor, call) -> None:
        if self.inter is None or len(self.leaders) < 2:
            return
        on_host(t, lambda host: call([host]).wait())  # device tensors staged (module doc)

    def _all_reduce(self, t: torch.Tensor, op) -> None:
        self._intra_all_reduce(t, op)
        self._inter(t, lambda ts: self.inter.allreduce(ts, _ar(op)))
        self._intra_broadcast(t, 0)

    # ---- torch.distributed.ProcessGroup ---------------------------------------------------

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if len(tensors) != 1:
            raise ValueError(f"detwan-hybrid allreduce: one tensor per call, got {len(tensors)}")
        t = tensors[0]
        avg = op == dist.ReduceOp.AVG
        if avg and not t.is_floating_point():
            raise ValueError(f"detwan-hybrid allreduce: AVG of {t.dtype} (floating types only)")
        if not avg and op not in (dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
                                  dist.ReduceOp.PRODUCT):
            raise ValueError(f"detwan-hybrid allreduce composes SUM, AVG, MIN, MAX and PRODUCT "
                             f"site by site, not {op}")

        def run():
            self._all_reduce(t, dist.ReduceOp.SUM if avg else op)
            if avg:
                t.div_(self.world)
            return tensors
        return self._submit(run)

    def broadcast(self, tensors, opts):
        root = opts.rootRank
        if len(tensors) != 1 or not 0 <= root < self.world:
            raise ValueError(f"detwan-hybrid broadcast: one tensor and a root in [0, {self.world})"
                             f", got {len(tensors)} tensor(s) and root {root}")
        t = tensors[0]
        root_site = self.sites[root]
        mine = self.sites[self.rank_]

        def run():
            if mine == root_site:  # the root's site first: its leader then has the data
                self._intra_broadcast(t, self.site_ranks.index(root))
            bopts = dist.BroadcastOptions()
            bopts.rootRank = self.site_names.index(root_site)
            self._inter(t, lambda ts: self.inter.broadcast(ts, bopts))
            if mine != root_site:
                self._intra_broadcast(t, 0)
            return tensors
        return self._submit(run)

    def allgather(self, outputs, inputs, opts=None):
        if len(inputs) != 1 or len(outputs) != 1 or len(outputs[0]) != self.world:
            raise ValueError(f"detwan-hybrid allgather: one input and {self.world} outputs")
        src = inputs[0].contiguous()
        nbytes = src.numel() * src.element_size()

        def run():
            flat = torch.zeros(self.world * nbytes, dtype=torch.uint8, device=src.device)
            flat[self.rank_ * nbytes:(self.rank_ + 1) * nbytes] = src.view(-1).view(torch.uint8)
            self._all_reduce(flat, dist.ReduceOp.SUM)  # one non-zero term per byte: exact
            for r, out in enumerate(outputs[0]):
                out.copy_(flat[r * nbytes:(r + 1) * nbytes].view(src.dtype).view(out.shape))
            return outputs
        return self._submit(run)

    def barrier(self, opts=None):
        def run():
            self._all_reduce(torch.zeros(1), dist.ReduceOp.SUM)
            return []
        return self._submit(run)


def _ar(op) -> dist.AllreduceOptions:
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    return opts
