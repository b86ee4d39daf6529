"""The hybrid process groups (detwan.torch.hybrid): gloo inside each site, detwan between the
sites' leaders, on 3 + 1 ranks and on 2 + 2 (tests/torch/hybrid_worker.py): exact integer
allreduces, only the leaders in the detwan group, a clear error for an op that does not compose
site by site, and DDP with the hybrid hook training to gloo's parameters; and the same as the
default group of init_process_group("detwan") with DETWAN_INTRA_BACKEND=gloo."""
import pathlib

import pytest

from rank_cases import assert_every_rank_ok, run_cases

HERE = pathlib.Path(__file__).resolve().parent


@pytest.mark.parametrize("sites", [["a", "a", "a", "b"], ["a", "b", "a", "b"]],
                         ids=["3+1", "2+2-interleaved"])
def test_hybrid_groups_match_gloo(tmp_path, sites):
    # DETWAN_INTRA_BACKEND names gloo as the sites' library; the detwan group of the leaders in
    # the same processes keeps its own transport (it once failed: "unknown backend gloo").
    cases = run_cases(HERE / "hybrid_worker.py", tmp_path, sites,
                      env={"DETWAN_INTRA_BACKEND": "gloo"})
    assert sorted(cases) == ["all_reduce/max", "all_reduce/sum", "bad_op", "ddp_matches_gloo",
                             "groups"]
    assert_every_rank_ok(cases, len(sites))
    # Exactly one leader per site is in the detwan group.
    leaders = [r for r in cases["groups"] if r["inter_size"]]
    assert len(leaders) == len(set(sites)), cases["groups"]


@pytest.mark.parametrize("sites", [["a", "a", "a", "b"], ["a", "b", "b", "a"]],
                         ids=["3+1", "2+2-interleaved"])
def test_init_process_group_detwan_with_a_site_library_is_hybrid(tmp_path, sites):
    """init_process_group("detwan") + DETWAN_INTRA_BACKEND=gloo: the default group is hybrid;
    every operation it offers is exact against arithmetic, broadcast from every root, DDP trains
    to gloo's parameters, an operation it does not offer raises naming it."""
    cases = run_cases(HERE / "hybrid_worker.py", tmp_path, sites, args=["default_group"],
                      env={"DETWAN_INTRA_BACKEND": "gloo"})
    assert "pg/hybrid" in cases and "pg/ddp_matches_gloo" in cases, sorted(cases)
    assert len([c for c in cases if c.startswith("pg/broadcast/")]) == len(sites)
    assert_every_rank_ok(cases, len(sites))


def test_device_tensors_are_staged_through_pinned_host_memory(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine: the staged path of detwan.torch.hybrid "
                    "(device -> pinned host -> detwan -> device) cannot run here")
    sites = ["a", "b"]
    cases = run_cases(HERE / "hybrid_worker.py", tmp_path, sites, args=["cuda"])
    assert sorted(cases) == ["cuda_staged"]
    assert_every_rank_ok(cases, len(sites))
