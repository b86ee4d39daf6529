"""`detwan-bench COLLECTIVE --lab` and `--local`: the nccl-tests-style sweep of the collective
library, over a 2-site lab (2 ranks per site, each site's ranks in its host namespace, the WAN
path through detwan-wanem) and as 4 ranks on this host.

Checks what the harness promises: the JSON carries every field external checks read, every
row's result was checked and nothing was wrong (allreduce and allgather), and nothing is left
behind (no rank process, no lab namespace). Small sizes at 50 mbit / 10 ms keep it quick.
Correctness only, never speed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import labutil

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import collectives, topology  # noqa: E402

BENCH_BINARY = "tools/bench/detwan-bench"
TOP = ("schema", "version", "collective", "nranks", "sites", "ranks_per_site", "backend", "path",
       "rows", "error")
ROW = ("size_bytes", "count", "type", "redop", "root", "time_us", "algbw_GBps", "busbw_GBps",
       "wrong", "algorithm", "chunk_bytes")
SWEEP = ["-b", "8", "-e", "4M", "-f", "8", "-n", "2", "-w", "1", "-c", "1"]
SIZES = [8, 64, 512, 4096, 32768, 262144, 2097152]
RATE = 50_000_000
RTT_NS = 10_000_000


def bench_binary() -> str:
    return str(labutil.build_dir() / BENCH_BINARY)


def rank_processes() -> list[str]:
    """Command lines of running detwan-bench ranks (read only)."""
    return labutil.bench_processes((b"--rank",))


def lab_namespaces() -> list[str]:
    """Namespaces of the lab prefix in use (DETWAN_TESTBED_PREFIX lets this run beside
    another lab)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.strip() and line.startswith(topology.PREFIX)]


def run_json(args: list[str], timeout: float) -> tuple[int, dict, str]:
    env = dict(os.environ, DETWAN_BUILD_DIR=str(labutil.build_dir()))
    res = subprocess.run([bench_binary(), *args, "--json"], capture_output=True, text=True,
                         timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON (exit {res.returncode}): {res.stdout[-1000:]} {res.stderr[-3000:]}")
    return res.returncode, doc, res.stderr


def check_doc(doc: dict, collective: str, nranks: int, sites: int, sizes: list[int]) -> None:
    for key in TOP:
        assert key in doc, key
    assert doc["schema"] == "detwan-bench-collective" and doc["version"] == 1
    assert doc["error"] is None, doc["error"]
    assert doc["collective"] == collective
    assert doc["nranks"] == nranks and doc["sites"] == sites
    assert doc["ranks_per_site"] == nranks // sites
    assert set(doc["backend"]) >= {"intra", "inter"}
    assert len(doc["rows"]) == len(sizes)
    for row, size in zip(doc["rows"], sizes):
        for key in ROW:
            assert key in row, key
        assert row["wrong"] == 0, row
        assert row["type"] == "float"
        assert row["time_us"] > 0
        assert row["algorithm"] in ("ring", "hd", "tree", "hier"), row
        # The size column as nccl-tests prints it (allgather: the whole output).
        if collective == "allreduce":
            assert row["size_bytes"] == size and row["count"] == size // 4
            assert row["busbw_GBps"] == pytest.approx(
                row["algbw_GBps"] * 2 * (nranks - 1) / nranks)
        else:
            assert row["count"] == size // 4 // nranks
            assert row["size_bytes"] == row["count"] * nranks * 4
            assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * (nranks - 1) / nranks)
        assert row["algbw_GBps"] == pytest.approx(row["size_bytes"] / 1e3 / row["time_us"])


@pytest.fixture(scope="module")
def bench():
    binary = bench_binary()
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is not built: run ninja -C {labutil.build_dir()} "
                    "tools/bench/detwan-bench")
    return binary


@pytest.fixture(scope="module")
def lab_bench(bench, wanem_ready):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if lab_namespaces():
        pytest.fail(f"a lab is already up ({', '.join(lab_namespaces())}): tools/testbed down")
    yield bench
    if lab_namespaces():
        labutil.tb("down", "-q")


def test_local_four_ranks_two_sites(bench):
    code, doc, err = run_json(["allreduce", "--local", "4", "--sites", "2", *SWEEP, "--timeout",
                               "300"], timeout=360)
    assert code == 0, (doc.get("error"), err[-3000:])
    check_doc(doc, "allreduce", 4, 2, SIZES)
    assert doc["path"] is None
    assert rank_processes() == []


def test_local_failure_is_reported_and_cleaned_up(bench):
    # Every rank refuses an unknown inter-site backend at init: the launcher must still print
    # one JSON object naming the problem, exit non-zero and leave no rank behind.
    code, doc, _ = run_json(["allreduce", "--local", "2", "--sites", "2", "-b", "8", "-e", "8",
                             "--inter-backend", "no-such-backend", "--timeout", "120"],
                            timeout=180)
    assert code != 0
    assert doc["error"], doc
    assert rank_processes() == []


@pytest.mark.netns
@pytest.mark.parametrize("collective,mtu,inter", [("allreduce", 1500, ""),
                                                  ("allgather", 1500, "udp:threads=2"),
                                                  ("allreduce", 9000, "")])
def test_lab_two_sites_two_ranks_each(lab_bench, collective, mtu, inter):
    # MTU 9000: the lab's links carry jumbo frames and the ranks' datagrams fill them.
    # udp:threads=2: each rank's inter-site endpoint runs two progress threads (lanes).
    code, doc, err = run_json([collective, "--lab", "--sites", "2", "--ranks-per-site", "2",
                               "--rate", "50mbit", "--rtt", "10ms", "--mtu", str(mtu), *SWEEP,
                               "--timeout", "400", *(["--inter-backend", inter] if inter else [])],
                              timeout=600)
    assert code == 0, (doc.get("error"), err[-3000:])
    check_doc(doc, collective, 4, 2, SIZES)
    if inter:
        assert doc["backend"]["inter"] == inter, doc["backend"]
    assert doc["path"] == {"rate_bps": RATE, "rtt_ns": RTT_NS, "loss": 0.0, "mtu_bytes": mtu}
    assert doc["lab"]["reused"] is False
    assert lab_namespaces() == []
    assert rank_processes() == []


@pytest.mark.netns
def test_lab_table_streams_with_every_row_checked(lab_bench):
    env = dict(os.environ, DETWAN_BUILD_DIR=str(labutil.build_dir()))
    res = subprocess.run([lab_bench, "allreduce", "--lab", "--sites", "2", "--ranks-per-site",
                          "2", "--rate", "50mbit", "--rtt", "10ms", "-b", "8", "-e", "64k",
                          "-f", "8", "-n", "2", "-w", "1", "-c", "1"], capture_output=True,
                         text=True, timeout=600, env=env, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    rows = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [8, 64, 512, 4096, 32768]
    assert all(r[8] == "0" for r in rows), res.stdout  # the #wrong column
    assert "# Out of bounds values : 0 OK" in res.stdout
    assert any(line.startswith("# lab: 2 sites x 2 ranks") for line in lines)
    assert lab_namespaces() == []
    assert rank_processes() == []


def test_lab_rank_commands():
    # No root: the ranks are numbered site by site, all meet at rank 0's address in site a.
    args = collectives.parser().parse_args(["allreduce", "--sites", "2", "--ranks-per-site",
                                            "2", "-b", "8", "-e", "64M", "-f", "4", "-c", "1"])
    st = {"sites": [{"name": "b", "index": 2, "best_effort_addr": "10.10.2.2"},
                    {"name": "a", "index": 1, "best_effort_addr": "10.10.1.2"}]}
    plan = collectives.rank_plan(st, 2, 2)
    assert [(e["rank"], e["site"]["name"]) for e in plan] == [(0, "a"), (1, "a"), (2, "b"),
                                                             (3, "b")]
    cmd = collectives.rank_command(args, "/x/detwan-bench", plan, plan[3], 50_000_000, True)
    assert cmd[1:5] == ["exec", "b", "--", "/x/detwan-bench"]
    tail = cmd[5:]
    assert tail[0] == "allreduce"
    for flag, value in (("--rank", "3"), ("--nranks", "4"), ("--id", "tcp://10.10.1.2:5500"),
                        ("--site", "b"), ("--wan-rate", "50000000bit"), ("--minbytes", "8"),
                        ("--maxbytes", "64M"), ("--stepfactor", "4"), ("--check", "1")):
        assert tail[tail.index(flag) + 1] == value, flag
    assert tail[-1] == "--json"
    with pytest.raises(collectives.BenchError):
        collectives.rank_plan(st, 3, 1)
    # Uneven sites: 3 ranks in a, 1 in b, still numbered site by site.
    uneven = collectives.parser().parse_args(["allreduce", "--site-sizes", "3,1"])
    assert uneven.site_sizes == [3, 1]
    plan = collectives.rank_plan(st, 2, 2, uneven.site_sizes)
    assert [(e["rank"], e["site"]["name"]) for e in plan] == [(0, "a"), (1, "a"), (2, "a"),
                                                             (3, "b")]
    assert collectives.rank_command(args, "/x/b", plan, plan[3], None, False)[2] == "b"
    with pytest.raises(collectives.BenchError, match="--site-sizes gives 3 sites"):
        collectives.rank_plan(st, 2, 2, [1, 1, 1])
    for bad in ("3,0", "a,b", ""):
        with pytest.raises(SystemExit):
            collectives.parser().parse_args(["allreduce", "--site-sizes", bad])
