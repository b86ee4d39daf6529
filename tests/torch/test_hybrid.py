"""The hybrid process groups (detwan.torch.hybrid): gloo inside each site, detwan between the
sites' leaders, on 3 + 1 ranks and on 2 + 2 (tests/torch/hybrid_worker.py): exact integer
allreduces, only the leaders in the detwan group, a clear error for an op that does not compose
site by site, and DDP with the hybrid hook training to gloo's parameters."""
import json
import pathlib

import pytest

from lab import torchrun as launch

HERE = pathlib.Path(__file__).resolve().parent


@pytest.mark.parametrize("sites", [["a", "a", "a", "b"], ["a", "b", "a", "b"]],
                         ids=["3+1", "2+2-interleaved"])
def test_hybrid_groups_match_gloo(tmp_path, sites):
    procs = launch.launch([str(HERE / "hybrid_worker.py"), str(tmp_path)], sites,
                          log_dir=tmp_path)
    codes = launch.wait_all(procs, 240)
    cases: dict = {}
    for rank in range(len(sites)):
        path = tmp_path / f"rank-{rank}.json"
        log = (tmp_path / f"rank-{rank}.log").read_text(errors="replace")[-3000:]
        assert path.exists(), f"rank {rank} wrote no result (exit {codes[rank]}):\n{log}"
        doc = json.loads(path.read_text())
        assert "fatal" not in doc, f"rank {rank} failed:\n{doc['fatal']}"
        for r in doc["results"]:
            cases.setdefault(r["case"], []).append(r)
    assert sorted(cases) == ["all_reduce/max", "all_reduce/sum", "bad_op", "ddp_matches_gloo",
                             "groups"]
    for case, got in cases.items():
        assert len(got) == len(sites), f"{case}: {len(got)} ranks reported it"
        bad = [r for r in got if not r["ok"]]
        assert not bad, f"{case}: {bad[0]}"
    # Exactly one leader per site is in the detwan group.
    leaders = [r for r in cases["groups"] if r["inter_size"]]
    assert len(leaders) == len(set(sites)), cases["groups"]


def test_device_tensors_are_staged_through_pinned_host_memory(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine: the staged path of detwan.torch.hybrid "
                    "(device -> pinned host -> detwan -> device) cannot run here")
    sites = ["a", "b"]
    procs = launch.launch([str(HERE / "hybrid_worker.py"), str(tmp_path), "cuda"], sites,
                          log_dir=tmp_path)
    codes = launch.wait_all(procs, 240)
    for rank in range(len(sites)):
        path = tmp_path / f"rank-{rank}.json"
        assert path.exists(), f"rank {rank} wrote no result (exit {codes[rank]})"
        doc = json.loads(path.read_text())
        assert "fatal" not in doc, doc["fatal"]
        assert all(r["ok"] for r in doc["results"]), doc["results"]
