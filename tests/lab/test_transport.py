"""`detwan-bench transport --lab`: a short detwan transfer and iperf3 TCP over one lab path.

The run builds its own 2-site lab (rate, RTT, loss on the path), so the test checks what the
harness promises: the JSON carries every field external checks read, detwan delivered every byte
exactly (the receiver checks each message's pattern and counts wrong bytes), the payload limit
follows from the measured header, the TCP baselines ran with the algorithm asked for, and
nothing is left behind (no lab namespace, no benchmark process), also when the detwan side
fails. Correctness only, never speed.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import labutil

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import transport  # noqa: E402

BACKEND = os.environ.get("DETWAN_BENCH_BACKEND", "udp")
REQUIRED = ("path_rate_bps", "payload_limit_bps", "goodput_bps", "tcp_cubic_goodput_bps",
            "tcp_bbr_goodput_bps", "loss", "rtt_ns", "size_bytes", "goodput_over_payload_limit",
            "goodput_over_tcp_bbr", "goodput_over_tcp_cubic", "cpu_s_per_gb", "retransmissions",
            "wrong_bytes", "header_bytes")
SIZE = 20 * 1000 * 1000
RATE = 50_000_000
RTT_NS = 10_000_000


def bench_binary() -> pathlib.Path:
    return labutil.build_dir() / transport.BENCH_BINARY


def bench_processes() -> list[str]:
    """Command lines of running detwan-bench transport send/recv processes (read only)."""
    return labutil.bench_processes((b"recv", b"send"))


@pytest.fixture(scope="module")
def bench(wanem_ready):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    binary = bench_binary()
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is not built: run ninja -C {labutil.build_dir()} "
                    "tools/bench/detwan-bench")
    return str(binary)


def run_lab(binary: str, *extra: str, timeout: float = 400) -> tuple[int, dict, str]:
    env = dict(os.environ, DETWAN_BUILD_DIR=str(labutil.build_dir()))
    res = subprocess.run([binary, "transport", "--lab", *extra, "--json"], capture_output=True,
                         text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON (exit {res.returncode}): {res.stdout[-1000:]} {res.stderr[-3000:]}")
    return res.returncode, doc, res.stderr


@pytest.mark.netns
def test_short_lossy_transfer_is_exact_and_compared_with_tcp(bench):
    info = json.loads(subprocess.run([bench, "transport", "info", "--json", "--backend", BACKEND],
                                     capture_output=True, text=True, timeout=60).stdout)
    if BACKEND == "udp" and not info["backend_usable"]:
        pytest.skip(f"udp transport backend unusable in this build: {info['reason']}")
    code, doc, err = run_lab(bench, "--rate", "50mbit", "--rtt", "10ms", "--loss", "1%",
                             "--size", str(SIZE), "--message-size", "1m", "--backend", BACKEND,
                             "--tcp-seconds", "3")
    assert code == 0, (doc.get("error"), err[-3000:])
    for key in REQUIRED:
        assert key in doc, key
    assert doc["error"] is None
    assert doc["path_rate_bps"] == RATE and doc["rtt_ns"] == RTT_NS and doc["loss"] == 0.01
    assert doc["size_bytes"] == SIZE
    # Byte-exact delivery: every message arrived, the right size, every byte as sent.
    recv = doc["detwan"]["recv"]
    assert doc["wrong_bytes"] == 0
    assert recv["messages_received"] == recv["messages"] == 20
    assert recv["bytes_received"] == SIZE
    assert recv["size_mismatches"] == 0 and recv["wrong_messages"] == 0
    assert doc["goodput_bps"] > 0
    # 1 % loss each way on ~14k datagrams: a reliable protocol must have retransmitted (or
    # rebuilt from FEC) some; a TCP stand-in reports none and is not held to it.
    if BACKEND == "udp":
        assert doc["retransmissions"] > 0
        assert doc["header_source"] == "measured"
    # The limit follows from the header the binary reported: Ethernet frames of MTU + 14 bytes,
    # MTU - 28 - header payload bytes each.
    h = doc["header_bytes"]
    assert 16 <= h <= 200
    assert doc["payload_limit_bps"] == pytest.approx(RATE * (1500 - 28 - h) / 1514)
    assert doc["goodput_over_payload_limit"] == pytest.approx(
        doc["goodput_bps"] / doc["payload_limit_bps"])
    assert doc["cpu_s_per_gb"] > 0
    for cc in ("cubic", "bbr"):
        tcp = doc["tcp"][cc]
        assert tcp["error"] is None, tcp
        assert tcp["cc"] == cc  # iperf3 reports the algorithm the kernel actually ran
        assert doc[f"tcp_{cc}_goodput_bps"] > 0
        assert doc[f"goodput_over_tcp_{cc}"] == pytest.approx(
            doc["goodput_bps"] / doc[f"tcp_{cc}_goodput_bps"])
    assert labutil.namespaces() == []
    assert bench_processes() == []


@pytest.mark.netns
def test_failed_transfer_still_cleans_up(bench):
    # An unknown backend fails both detwan ends at once; the run must still report (exit 1,
    # JSON with the error) and remove the lab it built.
    code, doc, _ = run_lab(bench, "--rate", "50mbit", "--rtt", "10ms", "--size", "1m",
                           "--backend", "no-such-backend", "--tcp", "none", timeout=200)
    assert code == 1
    assert "no-such-backend" in doc["error"]
    assert doc["wrong_bytes"] is None and doc["goodput_bps"] is None
    assert labutil.namespaces() == []
    assert bench_processes() == []


def test_payload_limit_and_lab_spec_arithmetic():
    # No root: the quantities the harness parses and the SPEC it builds.
    assert transport.parse_size_bytes("1g") == 1 << 30
    assert transport.parse_size_bytes("4m") == 4 << 20
    assert transport.parse_size_bytes("20000000") == 20_000_000
    assert transport.parse_rate_bps("200mbit") == 200_000_000
    assert transport.parse_duration_ns("40ms") == 40_000_000
    assert transport.parse_fraction("0.1%") == pytest.approx(0.001)
    spec = transport.wan_spec(200_000_000, 40_000_000, 0.01, 1_000_000)
    assert spec == "delay=20000us,rate=200000000bit,queue=1000000b,loss=1%"
    back = transport.spec_values("delay=20ms,loss=1%,rate=200mbit,queue=1000000b")
    assert back == {"rate_bps": 200_000_000, "rtt_ns": 40_000_000, "loss": 0.01}
