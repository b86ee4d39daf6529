"""torch.distributed backend "detwan" against gloo, with real processes (tests/torch/worker.py):
4 ranks on this host in 2 sites of 2 (DETWAN_SITE a, a, b, b: shared memory inside a site, UDP
channels between sites). Every operation and dtype is compared with gloo's result on the same
inputs (integers and data movement exact; float reductions within 2 (n+1) eps sum|x_i|, see
docs/pytorch.md); DDP trains to the same parameters as with gloo, plain and with the fp16
compression hook; all of it one operation at a time and with 3 in flight (DETWAN_INFLIGHT_OPS); a rank that vanishes makes the others raise, naming it, within the timeout."""
from __future__ import annotations

import json
import re
import pathlib
import sys

import pytest

from lab import torchrun as launch

HERE = pathlib.Path(__file__).resolve().parent
SITES = ["a", "a", "b", "b"]
DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64"]
FAMILIES = [f"allreduce/{op}" for op in ("sum", "avg", "product", "min", "max")] + [
    "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all_single", "all_to_all_single_uneven", "all_to_all",
    "send_recv", "gather_scatter/gather", "gather_scatter/scatter"]


def run(mode: str, tmp: pathlib.Path, timeout_s: float, env: dict | None = None) -> list[dict]:
    procs = launch.launch([str(HERE / "worker.py"), mode, str(tmp)], SITES, env=env,
                          log_dir=tmp)
    codes = launch.wait_all(procs, timeout_s)
    docs = []
    for rank in range(len(SITES)):
        path = tmp / f"rank-{rank}.json"
        if not path.exists():
            docs.append({"rank": rank, "missing": True, "exit": codes[rank],
                         "log": (tmp / f"rank-{rank}.log").read_text(errors="replace")[-3000:]})
            continue
        docs.append(json.loads(path.read_text()))
    return docs


def results(docs: list[dict], case: str) -> list[dict]:
    out = []
    for d in docs:
        if d.get("missing"):
            pytest.fail(f"rank {d['rank']} wrote no result (exit {d['exit']}):\n{d['log']}")
        if "fatal" in d:
            pytest.fail(f"rank {d['rank']} failed:\n{d['fatal']}")
        out += [r for r in d["results"] if r["case"] == case]
    return out


# Each op family runs twice: one operation at a time (the default), and with 3 in flight
# (DETWAN_INFLIGHT_OPS=3: the async cases, DDP's buckets cross on several lanes at once).
LANES = {"serial": None, "inflight3": {"DETWAN_INFLIGHT_OPS": "3"}}


@pytest.fixture(scope="module", params=list(LANES))
def ops(tmp_path_factory, request):
    return run("ops", tmp_path_factory.mktemp(f"ops-{request.param}"), 300, LANES[request.param])


@pytest.mark.parametrize("family", FAMILIES)
def test_op_against_gloo(ops, family):
    for dtype in DTYPES:
        got = results(ops, f"{family}/{dtype}" if "/" not in family or family.startswith(
            "allreduce") else f"{family.split('/')[0]}/{dtype}/{family.split('/')[1]}")
        assert got, f"{family} {dtype}: no rank reported it"
        bad = [r for r in got if not r["ok"]]
        assert not bad, f"{family} {dtype}: {bad[0].get('detail')}"


def test_non_contiguous_async_and_barrier(ops):
    for case in ["allreduce/non_contiguous/float64", "barrier"] + [
            f"async/{i}/float32" for i in range(8)]:
        got = results(ops, case)
        assert len(got) == len(SITES), f"{case}: {len(got)} ranks reported it"
        assert all(r["ok"] for r in got), f"{case}: {[r for r in got if not r['ok']][0]}"


@pytest.mark.parametrize("case", ["bad/dtype_bool", "bad/op_band"])
def test_bad_arguments_raise_naming_the_problem(ops, case):
    got = results(ops, case)
    assert len(got) == len(SITES)
    assert all(r["ok"] for r in got), got[0]["detail"]


@pytest.mark.parametrize("hook", ["none", "fp16"])
def test_ddp_matches_gloo(ddp, hook):
    got = results(ddp, f"ddp/{hook}")
    assert len(got) == len(SITES)
    assert all(r["ok"] for r in got), f"DDP ({hook}) parameters differ from gloo's: {got}"


@pytest.fixture(scope="module", params=list(LANES))
def ddp(tmp_path_factory, request):
    return run("ddp", tmp_path_factory.mktemp(f"ddp-{request.param}"), 300, LANES[request.param])


def test_killed_rank_makes_the_others_raise_naming_it(tmp_path):
    # Peer liveness 2 s, process group timeout 30 s: the survivors must raise well before it.
    docs = run("killed", tmp_path, 120, env={"DETWAN_PEER_TIMEOUT_MS": "2000",
                                              "TEST_PG_TIMEOUT_S": "30"})
    dead = len(SITES) - 1
    named = {}
    for d in docs[:dead]:
        got = results([d], "killed")
        assert got and got[0]["ok"], f"rank {d['rank']}: {got}"
        assert got[0]["raised_after_s"] < 30, got[0]
        m = re.search(r"failed peer: rank (\d+)", got[0]["message"])
        assert m, f"rank {d['rank']}'s error names no failed peer: {got[0]['message']}"
        named[d["rank"]] = int(m.group(1))
    # A rank that gives up closes its channels, so a rank further away may name it rather than
    # the vanished one (docs/pytorch.md): every chain of blame must end at the dead rank.
    assert dead in named.values(), named
    for rank in named:
        seen, r = set(), rank
        while r != dead:
            assert r in named and r not in seen, f"blame from rank {rank} never reaches {dead}: " \
                f"{named}"
            seen.add(r)
            r = named[r]




def test_process_group_timeout_is_honoured(tmp_path):
    # A rank that is alive (its channels answer) but never joins: only the process group's
    # timeout (4 s here; peer liveness stays at its 10 s default) can end the others' wait.
    docs = run("timeout", tmp_path, 120, env={"TEST_PG_TIMEOUT_S": "4"})
    absent = len(SITES) - 1
    messages = []
    for d in docs[:absent]:
        got = results([d], "timeout")
        assert got and got[0]["ok"], f"rank {d['rank']}: {got}"
        assert 3.5 < got[0]["raised_after_s"] < 9.5, got[0]
        messages.append(got[0]["message"])
    # The first survivor to time out closes its channels, so another one whose deadline is
    # the same instant may report that close instead of its own timeout.
    assert any("timed out" in m for m in messages), messages


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
