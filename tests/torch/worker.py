"""One rank of the torch backend tests (tests/torch/test_backend.py launches N of them as real
processes with torchrun-style variables: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
LOCAL_RANK, plus DETWAN_SITE). The default process group is gloo; a second group over the same
ranks uses backend "detwan", so every operation runs on both with the same inputs and gloo's
result is the reference. Writes one JSON document per rank to OUT_DIR/rank-<r>.json.

Modes:
  ops     every operation x dtype (x reduce op), detwan against gloo
  ddp     DDP for a few steps with gloo and with detwan from the same seed, plain and with the
          fp16 compression comm hook; the final parameters of both
  killed  the last rank exits after init; the others' next allreduce must raise within the
          process group timeout, naming the failed peer
  timeout the last rank stays alive but skips the allreduce; the others must raise at the
          process group timeout
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
import zlib
from datetime import timedelta

import torch
import torch.distributed as dist

import detwan.torch  # noqa: F401  registers backend "detwan"

FLOATS = {torch.float32: 2.0**-23, torch.float64: 2.0**-52, torch.float16: 2.0**-10,
          torch.bfloat16: 2.0**-7}
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]
OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "product": dist.ReduceOp.PRODUCT,
       "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


def up(t: torch.Tensor) -> torch.Tensor:
    """A copy gloo can reduce: gloo 1.13 has no bfloat16, so its reference runs in float32
    and is rounded back (down())."""
    return t.float() if t.dtype == torch.bfloat16 else t.clone()


def down(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.to(dtype)


def name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def data(case: str, rank: int, n: int, dtype: torch.dtype, op: str = "sum") -> torch.Tensor:
    """Deterministic inputs of (case, rank): every rank can rebuild any rank's tensor."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{case}#{rank}".encode()))
    if dtype in FLOATS:
        if op == "product":
            return (1.0 + 0.05 * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
        return torch.randn(n, generator=g, dtype=torch.float64).mul(10).to(dtype)
    lo, hi = (0, 9) if dtype == torch.uint8 else (-7, 8)
    if op == "product":
        lo, hi = (1, 3) if dtype == torch.uint8 else (-2, 3)
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype)


class Checker:
    def __init__(self, world: int):
        self.world = world
        self.results: list[dict] = []

    def compare(self, case: str, got: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor | None):
        """Integers and data movement exact; float reductions within the bound (elementwise)."""
        entry = {"case": case, "ok": True}
        if got.shape != ref.shape or got.dtype != ref.dtype:
            entry.update(ok=False, detail=f"shape/dtype {tuple(got.shape)} {got.dtype} vs "
                         f"{tuple(ref.shape)} {ref.dtype}")
        elif bound is None:
            bad = (got != ref).nonzero()
            if bad.numel():
                i = bad[0].tolist()
                entry.update(ok=False, detail=f"{bad.shape[0]} elements differ, first at {i}: "
                             f"{got[tuple(i)].item()} vs gloo {ref[tuple(i)].item()}")
        else:
            err = (got.double() - ref.double()).abs()
            over = err > bound
            entry["max_err"] = err.max().item() if err.numel() else 0.0
            if over.any():
                i = over.nonzero()[0].tolist()
                entry.update(ok=False, detail=f"{int(over.sum())} elements beyond the bound, "
                             f"first at {i}: {got[tuple(i)].item()} vs gloo "
                             f"{ref[tuple(i)].item()} (bound {bound[tuple(i)].item():.3g})")
        self.results.append(entry)

    def error(self, case: str, exc: BaseException):
        self.results.append({"case": case, "ok": False,
                             "detail": f"{type(exc).__name__}: {exc}"[-2000:]})


def float_bound(dtype, inputs: list[torch.Tensor], op: str, world: int):
    """|detwan - gloo| <= 2 n eps sum|x_i| (both reductions are within n eps sum|x_i| of the
    exact one, docs/pytorch.md); product: relative to prod|x_i|; min/max: exact."""
    if dtype not in FLOATS or op in ("min", "max"):
        return None
    eps = FLOATS[dtype]
    mags = torch.stack([x.double().abs() for x in inputs])
    scale = mags.prod(0) if op == "product" else mags.sum(0)
    if op == "avg":
        scale = scale / world
    return 2 * (world + 1) * eps * scale + 1e-300


def run_ops(rank: int, world: int, det, chk: Checker) -> None:
    n = 1000 + 37  # not a multiple of anything convenient
    for dtype in DTYPES:
        dn = name(dtype)
        for opname, op in OPS.items():
            case = f"allreduce/{opname}/{dn}"
            try:
                x = data(case, rank, n, dtype, opname)
                ours = x.clone()
                dist.all_reduce(ours, op=op, group=det)
                ref = up(x)
                if opname == "avg":  # gloo has no AVG: its SUM, divided as the library does
                    dist.all_reduce(ref, op=dist.ReduceOp.SUM)
                    ref = (ref.double() / world).to(dtype) if dtype in FLOATS else \
                        torch.div(ref, world, rounding_mode="trunc")
                else:
                    dist.all_reduce(ref, op=op)
                ref = down(ref, dtype)
                inputs = [data(case, r, n, dtype, opname) for r in range(world)]
                chk.compare(case, ours, ref, float_bound(dtype, inputs, opname, world))
            except Exception as e:  # noqa: BLE001  recorded, the run goes on
                chk.error(case, e)
        run_moves(rank, world, det, chk, dtype, n)


def run_moves(rank: int, world: int, det, chk: Checker, dtype, n: int) -> None:
    dn = name(dtype)

    def case(label, fn):
        try:
            fn(f"{label}/{dn}")
        except Exception as e:  # noqa: BLE001
            chk.error(f"{label}/{dn}", e)

    def broadcast(c):
        x = data(c, rank, n, dtype)
        ours, ref = x.clone(), up(x)
        dist.broadcast(ours, src=world - 1, group=det)
        dist.broadcast(ref, src=world - 1)
        ref = down(ref, dtype)
        chk.compare(c, ours, ref, None)

    def reduce(c):
        x = data(c, rank, n, dtype)
        ours, ref = x.clone(), up(x)
        dist.reduce(ours, dst=1 % world, op=dist.ReduceOp.SUM, group=det)
        dist.reduce(ref, dst=1 % world, op=dist.ReduceOp.SUM)
        ref = down(ref, dtype)
        if rank == 1 % world:  # only the root's result is defined
            inputs = [data(c, r, n, dtype) for r in range(world)]
            chk.compare(c, ours, ref, float_bound(dtype, inputs, "sum", world))

    def all_gather(c):
        x = data(c, rank, n, dtype)
        ours = [torch.zeros(n, dtype=dtype) for _ in range(world)]
        ref = [up(torch.zeros(n, dtype=dtype)) for _ in range(world)]
        dist.all_gather(ours, x, group=det)
        dist.all_gather(ref, up(x))
        chk.compare(c, torch.cat(ours), down(torch.cat(ref), dtype), None)

    def all_gather_into_tensor(c):
        x = data(c, rank, n, dtype)
        ours = torch.zeros(world * n, dtype=dtype)
        dist.all_gather_into_tensor(ours, x, group=det)
        ref = [up(torch.zeros(n, dtype=dtype)) for _ in range(world)]
        dist.all_gather(ref, up(x))  # gloo 1.13 has no _allgather_base
        chk.compare(c, ours, down(torch.cat(ref), dtype), None)

    def reduce_scatter(c, as_tensor):
        x = data(c, rank, world * n, dtype)
        ours = torch.zeros(n, dtype=dtype)
        if as_tensor:
            dist.reduce_scatter_tensor(ours, x, group=det)
        else:
            dist.reduce_scatter(ours, list(x.split(n)), group=det)
        ref = up(x)  # gloo 1.13 has no reduce_scatter: its allreduce, this rank's block
        dist.all_reduce(ref)
        ref = down(ref[rank * n:(rank + 1) * n], dtype)
        inputs = [data(c, r, world * n, dtype)[rank * n:(rank + 1) * n] for r in range(world)]
        chk.compare(c, ours, ref, float_bound(dtype, inputs, "sum", world))

    def all_to_all_single(c, uneven):
        if uneven:  # rank r sends (r + p + 1) rows to rank p
            sends = [rank + p + 1 for p in range(world)]
            recvs = [p + rank + 1 for p in range(world)]
            x = data(c, rank, sum(sends) * 3, dtype).reshape(-1, 3)
            ours = torch.zeros(sum(recvs), 3, dtype=dtype)
            dist.all_to_all_single(ours, x, recvs, sends, group=det)
        else:
            x = data(c, rank, world * n, dtype)
            ours = torch.zeros(world * n, dtype=dtype)
            dist.all_to_all_single(ours, x, group=det)
        if uneven:  # every rank's input is reproducible: rank p's rows for this rank
            blocks = []
            for p in range(world):
                rows = [p + q + 1 for q in range(world)]
                xp = data(c, p, sum(rows) * 3, dtype).reshape(-1, 3)
                start = sum(rows[:rank])
                blocks.append(xp[start:start + rows[rank]])
            chk.compare(c, ours, torch.cat(blocks), None)
            return
        ref = up(torch.zeros(world * n, dtype=dtype))
        dist.all_to_all_single(ref, up(x))  # gloo's
        chk.compare(c, ours, down(ref, dtype), None)

    def all_to_all(c):
        xs = [data(f"{c}/{p}", rank, n + p, dtype) for p in range(world)]
        ours = [torch.zeros(n + rank, dtype=dtype) for _ in range(world)]
        dist.all_to_all(ours, xs, group=det)
        ref = [data(f"{c}/{rank}", p, n + rank, dtype) for p in range(world)]
        chk.compare(c, torch.cat(ours), torch.cat(ref), None)

    def send_recv(c):  # a ring: send to the right, receive from the left
        x = data(c, rank, n, dtype)
        got = torch.zeros(n, dtype=dtype)
        right, left = (rank + 1) % world, (rank - 1) % world
        reqs = [dist.isend(x, right, group=det), dist.irecv(got, left, group=det)]
        for r in reqs:
            r.wait()
        chk.compare(c, got, data(c, left, n, dtype), None)

    def gather_scatter(c):
        x = data(c, rank, n, dtype)
        root = world - 1
        outs = [torch.zeros(n, dtype=dtype) for _ in range(world)] if rank == root else None
        dist.gather(x, outs, dst=root, group=det)
        if rank == root:
            chk.compare(c + "/gather", torch.cat(outs), torch.cat(
                [data(c, r, n, dtype) for r in range(world)]), None)
        got = torch.zeros(n, dtype=dtype)
        ins = [data(f"{c}/s{r}", root, n, dtype) for r in range(world)] if rank == root else None
        dist.scatter(got, ins, src=root, group=det)
        chk.compare(c + "/scatter", got, data(f"{c}/s{rank}", root, n, dtype), None)

    case("broadcast", broadcast)
    case("reduce", reduce)
    case("all_gather", all_gather)
    case("all_gather_into_tensor", all_gather_into_tensor)
    case("reduce_scatter", lambda c: reduce_scatter(c, False))
    case("reduce_scatter_tensor", lambda c: reduce_scatter(c, True))
    case("all_to_all_single", lambda c: all_to_all_single(c, False))
    case("all_to_all_single_uneven", lambda c: all_to_all_single(c, True))
    case("all_to_all", all_to_all)
    case("send_recv", send_recv)
    case("gather_scatter", gather_scatter)


def run_extras(rank: int, world: int, det, chk: Checker) -> None:
    # Non-contiguous tensors are staged and copied back.
    try:
        x = data("strided", rank, 64, torch.float64).reshape(8, 8).t()
        ours, ref = x.clone().t().t(), x.clone()  # ours keeps the transposed strides
        assert not ours.is_contiguous()
        dist.all_reduce(ours, group=det)
        dist.all_reduce(ref)
        chk.compare("allreduce/non_contiguous/float64", ours.contiguous(), ref,
                    float_bound(torch.float64, [data("strided", r, 64, torch.float64)
                                                .reshape(8, 8).t() for r in range(world)],
                                "sum", world))
    except Exception as e:  # noqa: BLE001
        chk.error("allreduce/non_contiguous/float64", e)
    # Several operations in flight, completed in order through their futures.
    try:
        xs = [data(f"async{i}", rank, 4096, torch.float32) for i in range(8)]
        works = [dist.all_reduce(x, group=det, async_op=True) for x in xs]
        futs = [w.get_future() for w in works]
        torch.futures.wait_all(futs)
        for i, (w, x) in enumerate(zip(works, xs)):
            assert w.is_completed() and w.is_success(), f"work {i} not complete after its future"
            ref = data(f"async{i}", rank, 4096, torch.float32)
            dist.all_reduce(ref)
            chk.compare(f"async/{i}/float32", x, ref, float_bound(
                torch.float32, [data(f"async{i}", r, 4096, torch.float32)
                                for r in range(world)], "sum", world))
    except Exception as e:  # noqa: BLE001
        chk.error("async/float32", e)
    # Bad arguments raise at once, naming the problem.
    for label, fn in (
        ("bad/dtype_bool", lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool), group=det)),
        ("bad/op_band", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32),
                                                op=dist.ReduceOp.BAND, group=det)),
    ):
        try:
            fn()
            chk.results.append({"case": label, "ok": False, "detail": "did not raise"})
        except RuntimeError as e:
            msg = str(e)
            ok = "detwan" in msg and ("dtype" in msg or "reduce op" in msg)
            chk.results.append({"case": label, "ok": ok, "detail": msg[:300]})
    try:
        dist.barrier(group=det)
        chk.results.append({"case": "barrier", "ok": True})
    except Exception as e:  # noqa: BLE001
        chk.error("barrier", e)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 10))

    def forward(self, x):
        return self.body(x)


def train(group, rank: int, steps: int, hook) -> list[torch.Tensor]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(1234 + rank)  # different init per rank: DDP's broadcast must unify it
    model = DDP(Net(), process_group=group, bucket_cap_mb=0.01)  # several buckets
    if hook == "fp16":
        model.register_comm_hook(group, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(99 + rank)
    for _ in range(steps):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def run_ddp(rank: int, world: int, det, chk: Checker) -> None:
    for hook in ("none", "fp16"):
        case = f"ddp/{hook}"
        try:
            ref = train(None, rank, 5, hook)
            ours = train(det, rank, 5, hook)
            eps = 2.0**-10 if hook == "fp16" else 2.0**-23
            worst = 0.0
            ok = True
            for a, b in zip(ours, ref):
                err = (a - b).abs().max().item()
                scale = max(b.abs().max().item(), 1.0)
                worst = max(worst, err / scale)
                # Reduction order differs from gloo's: a few ulps per step, five steps.
                if err > 64 * eps * scale:
                    ok = False
            chk.results.append({"case": case, "ok": ok, "max_rel_err": worst})
        except Exception as e:  # noqa: BLE001
            chk.error(case, e)


def run_killed(rank: int, world: int, det, chk: Checker) -> None:
    dist.barrier(group=det)
    if rank == world - 1:
        time.sleep(1.0)  # the others leave the barrier first (its last messages are delivered)
        os._exit(0)  # vanishes without a word
    t0 = time.monotonic()
    try:
        for _ in range(1000):
            x = torch.ones(1 << 16)
            dist.all_reduce(x, group=det)
        chk.results.append({"case": "killed", "ok": False, "detail": "no error raised"})
    except RuntimeError as e:
        chk.results.append({"case": "killed", "ok": True, "message": str(e)[:1000],
                            "raised_after_s": time.monotonic() - t0})


def run_timeout(rank: int, world: int, det, chk: Checker) -> None:
    """The last rank stays alive but never joins the allreduce: the others must raise when the
    process group's timeout (TEST_PG_TIMEOUT_S) expires, not wait for ever."""
    dist.barrier(group=det)
    if rank == world - 1:
        time.sleep(float(os.environ["TEST_PG_TIMEOUT_S"]) * 3)
        chk.results.append({"case": "timeout", "ok": True, "absent": True})
        return
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1024), group=det)
        chk.results.append({"case": "timeout", "ok": False, "detail": "no error raised"})
    except RuntimeError as e:
        chk.results.append({"case": "timeout", "ok": True, "message": str(e)[:1000],
                            "raised_after_s": time.monotonic() - t0})


def main() -> int:
    mode, out_dir = sys.argv[1], sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = timedelta(seconds=float(os.environ.get("TEST_PG_TIMEOUT_S", "120")))
    torch.set_num_threads(1)
    chk = Checker(world)
    doc = {"rank": rank, "world": world, "site": os.environ.get("DETWAN_SITE", "")}
    try:
        dist.init_process_group("gloo", timeout=timeout)  # env:// from the torchrun variables
        det = dist.new_group(backend="detwan", timeout=timeout)
        doc["describe"] = det.describe()
        if mode == "ops":
            run_ops(rank, world, det, chk)
            run_extras(rank, world, det, chk)
        elif mode == "ddp":
            run_ddp(rank, world, det, chk)
        elif mode == "killed":
            run_killed(rank, world, det, chk)
        elif mode == "timeout":
            run_timeout(rank, world, det, chk)
        else:
            raise SystemExit(f"unknown mode {mode}")
    except Exception as e:  # noqa: BLE001
        doc["fatal"] = traceback.format_exc()[-3000:]
        chk.error("fatal", e)
    doc["results"] = chk.results
    with open(os.path.join(out_dir, f"rank-{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f)
    if mode in ("killed", "timeout"):
        # Stay until every survivor has its error: a survivor that left at once would be the
        # next failed peer in the others' messages.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
                os.path.exists(os.path.join(out_dir, f"rank-{r}.json")) for r in range(world - 1)):
            time.sleep(0.1)
        os._exit(0)  # the process group cannot finish with a member gone
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
