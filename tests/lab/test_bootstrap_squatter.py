"""A squatter on the collective bootstrap's port (issue 31: the rendezvous without a secret on
the wire). A 4-rank `detwan-bench allreduce` job meets at a fixed address (tcp://127.0.0.1:PORT,
DETWAN_BOOTSTRAP_SECRET) inside a namespace of its own, while a Python process
(bootstrap_squatter.py) wants its secret:

- it holds the port before rank 0: every rank fails cleanly (rank 0 cannot listen, the others
  refuse a root that cannot prove the secret) and all the squatter ever received is one 37-byte
  hello per rank: neither the secret nor any rank's addresses;
- it comes after rank 0: it cannot take the port, its own join without the secret is closed
  after the challenge, its idle connections change nothing, the job completes through the
  genuine root with every result right, and the root reports what it refused.
"""
from __future__ import annotations

import json
import os
import pathlib
import secrets
import subprocess
import sys
import time

import pytest

import labutil

NS = f"{labutil.PREFIX}bsq"
PORT = 29500
HERE = pathlib.Path(__file__).resolve().parent
SQUATTER = HERE / "bootstrap_squatter.py"
RANKS = 4


def bench_binary() -> str:
    return str(labutil.build_dir() / "tools" / "bench" / "detwan-bench")


@pytest.fixture
def namespace():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if not os.path.exists(bench_binary()):
        pytest.skip(f"{bench_binary()} is not built")
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    subprocess.run(["ip", "netns", "add", NS], check=True)
    subprocess.run(["ip", "-n", NS, "link", "set", "dev", "lo", "up"], check=True)
    yield NS
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def in_ns(*argv: str) -> list[str]:
    return ["ip", "netns", "exec", NS, *argv]


def start_squatter(mode: str, record: pathlib.Path) -> subprocess.Popen:
    p = subprocess.Popen(in_ns("/usr/bin/python3", str(SQUATTER), mode, str(PORT), str(record)),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    return p


def wait_ready(record: pathlib.Path, proc: subprocess.Popen, timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if record.exists():
            doc = json.loads(record.read_text())
            if doc.get("ready") or doc.get("error"):
                return doc
        if proc.poll() is not None:
            pytest.fail(f"squatter exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    pytest.fail("the squatter never got ready")


def start_rank(rank: int, secret: str, logs: pathlib.Path) -> subprocess.Popen:
    env = dict(os.environ, DETWAN_BOOTSTRAP_SECRET=secret, DETWAN_TIMEOUT_MS="60000")
    site = "a" if rank < RANKS // 2 else "b"
    return subprocess.Popen(
        in_ns(bench_binary(), "allreduce", "--rank", str(rank), "--nranks", str(RANKS), "--id",
              f"tcp://127.0.0.1:{PORT}", "--site", site, "-b", "8", "-e", "64K", "-f", "8",
              "-n", "2", "-w", "1", "-c", "1", "--json"),
        stdin=subprocess.DEVNULL, stdout=open(logs / f"rank-{rank}.json", "wb"),
        stderr=open(logs / f"rank-{rank}.err", "wb"), env=env)


def finish(procs: list[subprocess.Popen], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes


def rank_error(logs: pathlib.Path, rank: int) -> str:
    text = (logs / f"rank-{rank}.json").read_text(errors="replace")
    try:
        error = json.loads(text).get("error") or ""
    except json.JSONDecodeError:
        error = ""
    return error + "\n" + (logs / f"rank-{rank}.err").read_text(errors="replace")


def assert_nothing_secret(data: bytes, secret: str) -> None:
    assert secret.encode() not in data
    assert bytes.fromhex(secret) not in data
    assert b"127.0.0.1" not in data  # every rank's blob carries its endpoint addresses


@pytest.mark.netns
def test_a_squatter_before_rank_zero_learns_nothing_and_every_rank_fails_cleanly(namespace,
                                                                                 tmp_path):
    secret = secrets.token_hex(16)
    record = tmp_path / "squatter.json"
    squatter = start_squatter("listen", record)
    try:
        wait_ready(record, squatter)
        procs = [start_rank(r, secret, tmp_path) for r in range(RANKS)]
        codes = finish(procs, 90)
        # The joiners have closed their connections: the record is complete once none is open.
        deadline = time.monotonic() + 10
        doc = json.loads(record.read_text())
        while doc.get("open") and time.monotonic() < deadline:
            time.sleep(0.1)
            doc = json.loads(record.read_text())
    finally:
        squatter.terminate()
        squatter.wait(timeout=10)
    assert all(c != 0 for c in codes), codes
    assert "rank 0 starting the root" in rank_error(tmp_path, 0), rank_error(tmp_path, 0)
    for rank in range(1, RANKS):
        error = rank_error(tmp_path, rank)
        assert "does not know the job's secret (its proof does not verify)" in error, error
    captured = [bytes.fromhex(c) for c in doc["connections"]]
    assert len(captured) == RANKS - 1, len(captured)  # one per joiner, none retried
    for data in captured:
        assert len(data) == 37 and data.startswith(b"DWBH\x02"), data[:8]
        assert_nothing_secret(data, secret)


@pytest.mark.netns
def test_a_squatter_after_rank_zero_takes_nothing_and_the_job_completes(namespace, tmp_path):
    secret = secrets.token_hex(16)
    record = tmp_path / "prober.json"
    procs = [start_rank(0, secret, tmp_path)]
    prober = start_squatter("probe", record)
    try:
        doc = wait_ready(record, prober)
        assert not doc.get("error"), doc
        procs += [start_rank(r, secret, tmp_path) for r in range(1, RANKS)]
        codes = finish(procs, 120)
    finally:
        prober.terminate()
        prober.wait(timeout=10)
    for rank in range(RANKS):
        assert codes[rank] == 0, (rank, rank_error(tmp_path, rank)[-3000:])
    rows = json.loads((tmp_path / "rank-0.json").read_text())["rows"]
    assert rows and all(r["wrong"] == 0 for r in rows), rows
    # The squatter could not take the port, and its join without the secret got a challenge
    # (a nonce, a salt, a proof) and was closed: nothing secret, no rank's address.
    assert doc["bind_error"], doc
    received = bytes.fromhex(doc["received"])
    assert len(received) == 85 and received.startswith(b"DWBC\x02"), received[:8]
    assert doc["closed_by_root"], doc
    assert_nothing_secret(received, secret)
    assert doc["idle"] == 50, doc
    # The root said what it refused.
    assert "closed without proving the job's secret (1 wrong proof" in rank_error(tmp_path, 0), \
        rank_error(tmp_path, 0)[-3000:]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
