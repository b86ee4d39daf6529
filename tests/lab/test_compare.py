"""tools/bench/compare-allreduce: detwan vs gloo vs Open MPI allreduce over one lab path.

A short run (two small sizes, a slow short path, BBR only) checks what the harness promises,
never speed: the JSON has one row per size with every field external checks read, each tool's
figure is either a number (and then its result was checked: 0 wrong elements) or null with a
reason, the bound follows the stated formula, and nothing is left behind (no lab namespace, no
baseline or launcher process, no store directory, the allowed congestion-control list as it
was). Also the one-site mode, and the pure helpers without root.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

import labutil

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import allreduce_runs, compare  # noqa: E402

SCRIPT = labutil.REPO / "tools" / "bench" / "compare-allreduce"
PREFIX = "dwcp-"
SIZES = (1 << 20, 4 << 20)
RATE_BPS = 50_000_000
REQUIRED = ("size_bytes", "loss", "cc", "detwan_busbw", "gloo_busbw", "mpi_busbw",
            "detwan_over_gloo", "detwan_over_mpi", "detwan_time_s", "gloo_time_s", "mpi_time_s",
            "bound_time_s")
TOOLS = ("detwan", "gloo", "mpi")


def leftovers() -> list[str]:
    """Processes of ours that must be gone: the baselines, mpirun/orted of a compare run and
    anything naming a compare work directory (read only)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        cmd = " ".join(argv)
        if (pathlib.PurePath(argv[0]).name in {"gloo-allreduce", "mpi-allreduce", "mpirun", "orted"}
                or "detwan-compare-" in cmd):
            found.append(f"{pid}: {cmd[:200]}")
    return found


def compare_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def work_dirs() -> set[str]:
    return {p.name for p in pathlib.Path(tempfile.gettempdir()).glob("detwan-compare-*")}


def allowed_cc() -> str:
    return subprocess.run(["sysctl", "-n", "net.ipv4.tcp_allowed_congestion_control"],
                          capture_output=True, text=True).stdout.strip()


def run_compare(*extra: str, timeout: float = 600) -> tuple[int, dict, str]:
    env = dict(os.environ, DETWAN_BUILD_DIR=str(labutil.build_dir()),
               DETWAN_TESTBED_PREFIX=PREFIX, DETWAN_TESTBED_RUN_DIR="/run/detwan-testbed-cp")
    res = subprocess.run([str(SCRIPT), "--json", *extra], capture_output=True, text=True,
                         timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON (exit {res.returncode}): {res.stdout[-1000:]} {res.stderr[-3000:]}")
    return res.returncode, doc, res.stderr


def check_tool_columns(row: dict) -> None:
    for tool in TOOLS:
        busbw = row[f"{tool}_busbw"]
        if busbw is None:
            assert row[f"{tool}_time_s"] is None
            reason = row.get(f"{tool}_reason")
            assert isinstance(reason, str) and reason, f"{tool} null without a reason: {row}"
        else:
            assert isinstance(busbw, float) and busbw > 0, row
            assert row[f"{tool}_time_s"] > 0, row
            assert row[f"{tool}_wrong"] == 0, f"{tool} reduced wrongly: {row}"
    for other in ("gloo", "mpi"):
        d, o = row["detwan_busbw"], row[f"{other}_busbw"]
        expected = d / o if d is not None and o else None
        assert row[f"detwan_over_{other}"] == pytest.approx(expected) if expected else \
            row[f"detwan_over_{other}"] is None


@pytest.fixture(scope="module")
def root_and_tools():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if not os.environ.get("DETWAN_WANEM_CMD") and not os.access(labutil.wanem_binary(), os.X_OK):
        pytest.fail(f"{labutil.wanem_binary()} is not built: run ninja -C {labutil.build_dir()}")
    if compare_namespaces():
        pytest.fail(f"a compare lab is already up ({compare_namespaces()}): "
                    f"DETWAN_TESTBED_PREFIX={PREFIX} tools/testbed down")


@pytest.mark.netns
def test_two_sites_rows_are_numbers_or_reasons_and_nothing_is_left(root_and_tools):
    dirs_before, allowed_before = work_dirs(), allowed_cc()
    rc, doc, err = run_compare("--sizes", "1M,4M", "--rate", "50mbit", "--rtt", "10ms",
                               "--cc", "bbr", "--loss", "0", "-n", "2", "-w", "1",
                               "--timeout-per-run", "120")
    assert doc["error"] is None, err[-3000:]
    assert rc == 0, err[-3000:]
    assert "size_bytes * 8 / rate_bps" in doc["bound_formula"]
    assert doc["path"]["rate_bps"] == RATE_BPS and doc["path"]["rtt_ns"] == 10_000_000
    rows = doc["rows"]
    assert [r["size_bytes"] for r in rows] == list(SIZES)
    for row in rows:
        for key in REQUIRED:
            assert key in row, f"{key} missing from {row}"
        assert row["loss"] == 0 and row["cc"] == "bbr" and row["sites"] == 2
        assert row["ranks"] == 4
        assert row["bound_time_s"] == pytest.approx(row["size_bytes"] * 8 / RATE_BPS)
        check_tool_columns(row)
    # gloo and Open MPI are installed on the lab machines: both must really have run.
    if (labutil.build_dir() / allreduce_runs.GLOO_BINARY).exists():
        assert all(r["gloo_busbw"] is not None for r in rows), rows
        assert all(r["cc_seen"]["gloo"] in ([], ["bbr"]) for r in rows), rows
    if (labutil.build_dir() / allreduce_runs.MPI_BINARY).exists():
        assert all(r["mpi_busbw"] is not None for r in rows), rows
    assert not compare_namespaces()
    assert not leftovers(), leftovers()
    assert work_dirs() <= dirs_before
    assert allowed_cc() == allowed_before


@pytest.mark.netns
def test_timeout_is_null_with_reason_and_cleans_up(root_and_tools):
    """A run far longer than its budget (64 MiB over 5 Mbit/s with 1 s allowed) is killed."""
    rc, doc, err = run_compare("--sizes", "64M", "--rate", "5mbit", "--rtt", "10ms",
                               "--cc", "bbr", "--loss", "0", "-n", "1", "-w", "0",
                               "--timeout-per-run", "1")
    assert doc["error"] is None, err[-3000:]
    (row,) = doc["rows"]
    for tool in TOOLS:
        assert row[f"{tool}_busbw"] is None
        assert row[f"{tool}_reason"], row
    # Killed by the harness, or gloo's own timeout (set to the same budget) fired first.
    assert any(w in row["gloo_reason"].lower() for w in ("timeout", "timed out", "not built"))
    assert not compare_namespaces()
    assert not leftovers(), leftovers()


@pytest.mark.netns
def test_one_site_rows(root_and_tools):
    rc, doc, err = run_compare("--one-site", "2", "--sizes", "1M", "-n", "2", "-w", "1",
                               "--timeout-per-run", "120")
    assert doc["error"] is None, err[-3000:]
    (row,) = doc["rows"]
    assert row["sites"] == 1 and row["ranks"] == 2 and row["bound_time_s"] is None
    check_tool_columns(row)
    assert not leftovers(), leftovers()


def test_sizes_and_rows_without_root():
    args = compare.parser().parse_args(["-b", "1M", "-e", "16M", "-f", "4"])
    assert compare.sizes_of(args) == [1 << 20, 4 << 20, 16 << 20]
    args = compare.parser().parse_args(["--sizes", "64M,1G", "--loss", "0.1%,0"])
    assert compare.sizes_of(args) == [64 << 20, 1 << 30] and args.losses == [0.001, 0.0]
    det = allreduce_runs.result({"busbw_GBps": 0.03, "time_us": 2e6, "wrong": 0}, None)
    gloo = allreduce_runs.result({"busbw_GBps": 0.01, "time_us": 6e6, "wrong": 0}, None)
    mpi = allreduce_runs.result(None, "mpirun failed")
    row = compare.make_row(1 << 20, 0.0, "bbr", 2, 4, det, gloo, mpi, 0.5, {})
    assert row["detwan_over_gloo"] == pytest.approx(3.0)
    assert row["detwan_over_mpi"] is None and row["mpi_reason"] == "mpirun failed"
    assert row["detwan_over_bound"] == pytest.approx(4.0)
    assert allreduce_runs.parse_row({"rows": [{"size_bytes": 8, "wrong": 2, "time_us": 1}]}, 8)[0] is None
