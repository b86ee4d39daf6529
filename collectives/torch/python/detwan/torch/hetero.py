"""Speed-weighted data parallelism: ranks of different speeds share one global batch.

A job whose ranks run on different accelerators gives each rank a share of the global batch in
proportion to its speed, so that every rank finishes its share at about the same time, and
averages the gradients with matching weights, so that the update is the one the same global
batch gives with equal shares:

    import detwan.torch.hetero as hetero
    shares = hetero.batch_shares(speeds, global_batch=64)       # 1,1,.5,.25: [23, 23, 12, 6]
    sampler = hetero.WeightedSampler(len(dataset), shares, rank, seed=1)
    loader = DataLoader(dataset, batch_size=shares[rank], sampler=sampler)
    model = DDP(net)
    hetero.register_weighted_hook(model, shares, rank)          # instead of DDP's mean

Each rank's loss is the mean over its own samples (the usual loss). DDP's default hook divides
the sum of the ranks' gradients by the world size: with unequal shares that over-weights the
samples of the small shares. The weighted hook multiplies each rank's gradient by
share / global_batch before the sum instead, which gives the mean over the global batch.

Speeds come from what the job knows (the planner's pool reference, a device's data sheet) or
are measured in the first steps with measure_speeds(). docs/pytorch.md, "Ranks of different
speeds", has the details and the limits.
"""
import math
from typing import Iterator, Sequence

import torch
import torch.distributed as dist

__all__ = ["batch_shares", "WeightedSampler", "WeightState", "weighted_allreduce_hook",
           "register_weighted_hook", "measure_speeds", "parse_speeds"]


def parse_speeds(text: str) -> list[float]:
    """"1,1,0.5,0.25" -> [1.0, 1.0, 0.5, 0.25]; ValueError naming the bad entry."""
    out = []
    for i, item in enumerate(text.split(",")):
        try:
            v = float(item)
        except ValueError:
            raise ValueError(f"speed {i + 1} ({item.strip()!r}) is not a number") from None
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"speed {i + 1} ({item.strip()!r}) must be a positive number")
        out.append(v)
    return out


def batch_shares(speeds: Sequence[float], global_batch: int) -> list[int]:
    """Each rank's number of samples of a global batch, in proportion to its speed: the largest
    remainder method (Hamilton; ties to the lower rank), then a rank left with none takes one
    from the largest share (ties to the lower rank), so every rank has at least one sample. The
    shares sum to global_batch. ValueError when a speed is not positive or the batch is smaller
    than the number of ranks."""
    speeds = [float(s) for s in speeds]
    if not speeds:
        raise ValueError("no speeds given")
    for i, s in enumerate(speeds):
        if not math.isfinite(s) or s <= 0:
            raise ValueError(f"rank {i}'s speed {s} must be a positive number")
    if global_batch < len(speeds):
        raise ValueError(f"a global batch of {global_batch} cannot give each of "
                         f"{len(speeds)} ranks a sample")
    total = math.fsum(speeds)
    exact = [global_batch * s / total for s in speeds]
    shares = [math.floor(e) for e in exact]
    left = global_batch - sum(shares)
    by_remainder = sorted(range(len(speeds)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in by_remainder[:left]:
        shares[i] += 1
    for i, share in enumerate(shares):
        if share == 0:
            donor = max(range(len(shares)), key=lambda j: (shares[j], -j))
            shares[donor] -= 1
            shares[i] = 1
    return shares


class WeightedSampler(torch.utils.data.Sampler):
    """The indices of this rank's share of every global batch, over an epoch's permutation of
    range(dataset_len) (the same on every rank: seeded by seed + epoch). Global batch k is
    perm[k*B : (k+1)*B] with B = sum(shares); rank r takes the slice of length shares[r] after
    the shares of the ranks before it. An incomplete last global batch is dropped, so every
    rank runs the same number of steps. Use it with DataLoader(batch_size=shares[rank])."""

    def __init__(self, dataset_len: int, shares: Sequence[int], rank: int, seed: int = 0,
                 shuffle: bool = True):
        if not 0 <= rank < len(shares):
            raise ValueError(f"rank {rank} is not one of the {len(shares)} ranks the shares "
                             "describe")
        if any(s < 1 for s in shares):
            raise ValueError(f"every share must be at least 1 sample: {list(shares)}")
        self.dataset_len = int(dataset_len)
        self.shares = [int(s) for s in shares]
        self.rank = rank
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.global_batch = sum(self.shares)
        self.offset = sum(self.shares[:rank])
        self.steps = self.dataset_len // self.global_batch
        if self.steps == 0:
            raise ValueError(f"a dataset of {self.dataset_len} samples holds no global batch of "
                             f"{self.global_batch}")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            perm = torch.randperm(self.dataset_len, generator=g).tolist()
        else:
            perm = list(range(self.dataset_len))
        mine = self.shares[self.rank]
        for k in range(self.steps):
            start = k * self.global_batch + self.offset
            yield from perm[start:start + mine]

    def __len__(self) -> int:
        return self.steps * self.shares[self.rank]


class WeightState:
    """The weighted hook's state: the group and this rank's weight share / global_batch."""

    def __init__(self, shares: Sequence[int], rank: int, group=None):
        total = sum(shares)
        if total <= 0 or not 0 <= rank < len(shares):
            raise ValueError(f"rank {rank} and shares {list(shares)} do not describe a batch")
        self.group = group
        self.weight = shares[rank] / total
        self.shares = list(shares)


def weighted_allreduce_hook(state: WeightState,
                            bucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: this rank's gradient bucket times its weight, then summed over
    the group. With each rank's loss the mean over its own samples, the result is the gradient
    of the mean loss over the global batch."""
    buf = bucket.buffer()
    buf.mul_(state.weight)
    fut = dist.all_reduce(buf, group=state.group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def register_weighted_hook(model, shares: Sequence[int], rank: int, group=None) -> WeightState:
    """Registers weighted_allreduce_hook on a DistributedDataParallel model."""
    state = WeightState(shares, rank, group)
    model.register_comm_hook(state, weighted_allreduce_hook)
    return state


def measure_speeds(samples_per_s: float, group=None) -> list[float]:
    """Every rank's measured samples/s (each rank passes its own, e.g. from its first steps
    timed without communication), gathered on every rank, normalised to the fastest = 1."""
    world = dist.get_world_size(group)
    mine = torch.tensor([float(samples_per_s)], dtype=torch.float64)
    gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    values = [t.item() for t in gathered]
    if any(not math.isfinite(v) or v <= 0 for v in values):
        raise ValueError(f"every rank must report a positive speed: {values}")
    fastest = max(values)
    return [v / fastest for v in values]
