"""Speed-weighted data parallelism (detwan.torch.hetero): shares of a global batch by speed, the
sampler that hands them out, and the weighted comm hook through the "detwan" backend on an
uneven 3 + 1 layout in deterministic mode (tests/torch/hetero_worker.py): to the last bit equal
to equal shares of the same global batch and to one process computing all of it."""
from __future__ import annotations

import pathlib
import sys

import pytest

from lab import torchrun as launch
from rank_cases import assert_every_rank_ok, run_cases

sys.path.insert(0, launch.python_path())
hetero = pytest.importorskip("detwan.torch.hetero", reason="the torch package is not built")

HERE = pathlib.Path(__file__).resolve().parent


@pytest.mark.parametrize("speeds,batch,want", [
    ([1, 1, 0.5, 0.25], 24, [9, 9, 4, 2]),
    ([1, 1, 0.5, 0.25], 32, [12, 11, 6, 3]),     # remainders .64 .64 .82 .91
    ([1, 1, 1, 1], 16, [4, 4, 4, 4]),
    ([1, 0.5, 0.25, 0.25], 16, [8, 4, 2, 2]),
    ([3, 1], 8, [6, 2]),
    ([1, 1, 1], 10, [4, 3, 3]),                 # ties go to the lower rank
    ([1, 1e-6], 4, [3, 1]),                     # a very slow rank still gets one sample
    ([1, 1e-6, 1e-6, 1], 4, [1, 1, 1, 1]),
])
def test_batch_shares_follow_speed_and_sum_to_the_batch(speeds, batch, want):
    got = hetero.batch_shares(speeds, batch)
    assert got == want
    assert sum(got) == batch


@pytest.mark.parametrize("speeds,batch,message", [
    ([1, 0], 8, "rank 1's speed 0.0 must be a positive number"),
    ([1, -2], 8, "must be a positive number"),
    ([1, 1, 1], 2, "cannot give each of 3 ranks a sample"),
    ([], 8, "no speeds"),
])
def test_bad_shares_name_the_problem(speeds, batch, message):
    with pytest.raises(ValueError, match=message):
        hetero.batch_shares(speeds, batch)


def test_parse_speeds_names_the_bad_entry():
    assert hetero.parse_speeds("1,1,0.5,0.25") == [1.0, 1.0, 0.5, 0.25]
    with pytest.raises(ValueError, match=r"speed 3 \('x'\) is not a number"):
        hetero.parse_speeds("1,1,x")
    with pytest.raises(ValueError, match=r"speed 2 \('0'\) must be a positive"):
        hetero.parse_speeds("1,0")


def test_the_sampler_splits_every_global_batch_by_share_without_overlap():
    shares = [4, 1, 1]
    samplers = [hetero.WeightedSampler(100, shares, r, seed=4) for r in range(3)]
    per_rank = [list(s) for s in samplers]
    assert [len(p) for p in per_rank] == [len(s) for s in samplers] == [64, 16, 16]  # 16 steps
    union = []
    for step in range(16):
        batch = []
        for r, share in enumerate(shares):
            batch += per_rank[r][step * share:(step + 1) * share]
        union.append(batch)
    flat = [i for b in union for i in b]
    assert len(set(flat)) == len(flat) == 96  # disjoint; the incomplete last batch is dropped
    # Equal shares of the same seed see the same global batches (as sets, step by step).
    equal = [list(hetero.WeightedSampler(100, [2] * 3, r, seed=4)) for r in range(3)]
    for step in range(16):
        same = [i for r in range(3) for i in equal[r][step * 2:(step + 1) * 2]]
        assert sorted(same) == sorted(union[step])
    samplers[0].set_epoch(1)
    assert list(samplers[0]) != per_rank[0]  # a new permutation per epoch
    with pytest.raises(ValueError, match="holds no global batch of 6"):
        hetero.WeightedSampler(5, shares, 0)
    with pytest.raises(ValueError, match="rank 3 is not one of the 3 ranks"):
        hetero.WeightedSampler(100, shares, 3)


def test_weighted_ddp_is_the_global_batch_update_to_the_last_bit(tmp_path):
    sites = ["a", "a", "a", "b"]
    cases = run_cases(HERE / "hetero_worker.py", tmp_path, sites,
                      env={"DETWAN_DETERMINISTIC": "1"})
    assert sorted(cases) == sorted([
        "exact/weighted_equals_equal_shares", "exact/weighted_equals_one_process",
        "exact/default_mean_differs", "float/weighted_near_equal_shares",
        "float/default_mean_far_off", "float/deterministic_repeat_identical",
        "measure_speeds", "measure_speeds_refuses_zero"])
    assert_every_rank_ok(cases, len(sites))
