"""detwan-probe on loopback (no namespaces needed): its accounting is checked exactly with
hand-made packets, then one real send/recv run."""
from __future__ import annotations

import json
import socket
import struct
import subprocess
import time

import pytest

from labutil import wait_for_line

MAGIC = 0x44575042


def data(run_id: int, seq: int, tx_ns: int, size: int = 64) -> bytes:
    head = struct.pack(">IBBHQQq", MAGIC, 1, 0, 0, run_id, seq, tx_ns)
    return head + bytes(size - len(head))


def fin(run_id: int, sent: int, first_ns: int, last_ns: int) -> bytes:
    return struct.pack(">IBBHQQqq", MAGIC, 1, 1, 0, run_id, sent, first_ns, last_ns)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_receiver(probe_bin, port: int, *extra: str, duration: str = "10") -> subprocess.Popen:
    recv = subprocess.Popen([str(probe_bin), "recv", "--bind", "127.0.0.1", "--port", str(port),
                             "--duration", duration, "--linger", "0.1", "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_line(recv, "listening", 10)
    return recv


def finish(recv: subprocess.Popen) -> dict:
    try:
        out, err = recv.communicate(timeout=15)
    finally:
        if recv.poll() is None:
            recv.kill()
    assert recv.returncode == 0, err
    return json.loads(out)


def test_probe_accounting_is_exact(probe_bin):
    port = free_udp_port()
    recv = start_receiver(probe_bin, port)
    run_id = 0x1122334455667788
    now = time.time_ns()
    # Sequence 0..11 sent; arrivals: 0 1 2 5 4 4 8 9 (4 is late and duplicated).
    # Missing: 3 | 6 7 | 10 11  -> 5 lost in 3 bursts (lengths 1, 2, 2).
    packets = [data(run_id, s, now - 1_000_000) for s in (0, 1, 2, 5, 4, 4, 8, 9)]
    packets += [b"\x00" * 10,                                  # too short
                 b"XXXX" + bytes(60),                          # wrong magic
                 data(run_id, 1 << 40, now),                   # absurd sequence number
                 data(0x99, 7, now)]                           # another sender's run
    packets.append(fin(run_id, 12, now - 2_000_000, now - 1_000_000))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for p in packets:
            s.sendto(p, ("127.0.0.1", port))
    r = finish(recv)
    assert r["sent"] == 12 and r["sent_known"] == "fin"
    assert r["received"] == 7
    assert r["lost"] == 5
    assert r["duplicates"] == 1
    assert r["reordered"] == 1
    assert r["malformed"] == 3
    assert r["foreign"] == 1
    assert r["loss_bursts"]["count"] == 3
    assert r["loss_bursts"]["max_len"] == 2
    assert r["loss_bursts"]["mean_len"] == pytest.approx(5 / 3, abs=1e-3)
    assert r["loss_bursts"]["lengths"] == {"1": 1, "2": 2}
    # one-way delays were stamped ~1 ms before sending
    assert 1_000_000 <= r["owd_ns"]["min"] < 1_000_000_000


def test_probe_without_fin_uses_count(probe_bin):
    port = free_udp_port()
    recv = start_receiver(probe_bin, port, "--count", "10", duration="1")
    now = time.time_ns()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for seq in (0, 1, 2, 3, 4, 5):
            s.sendto(data(7, seq, now), ("127.0.0.1", port))
    r = finish(recv)
    assert r["sent"] == 10 and r["sent_known"] == "count"
    assert r["received"] == 6 and r["lost"] == 4
    assert r["loss_bursts"] == {"count": 1, "mean_len": 4.0, "max_len": 4, "lengths": {"4": 1}}


def test_probe_send_recv_loopback(probe_bin):
    port = free_udp_port()
    recv = start_receiver(probe_bin, port)
    sent = subprocess.run([str(probe_bin), "send", "--to", "127.0.0.1", "--port", str(port),
                           "--pps", "5000", "--count", "2500", "--size", "200", "--json"],
                          capture_output=True, text=True, timeout=30)
    assert sent.returncode == 0, sent.stderr
    r = finish(recv)
    s = json.loads(sent.stdout)
    assert s["sent"] == 2500 and s["send_errors"] == 0
    # Absolute deadlines keep the average rate exact even when single wake-ups are late: the
    # span from the first send to the last is the nominal 2499 / 5000 s give or take one late
    # wake-up (the first's or the last's), never the sum of them. A loaded machine can make
    # the first wake-up late by milliseconds, so the bound is the sender's own measured worst
    # lateness (plus 1 ms for the clock reads between the deadline check and the stamp).
    # Relative deadlines (sleep 1/pps after each send) would add every late wake-up up.
    nominal_span_ns = 2499 * 1_000_000_000 // 5000
    late_max_ns = s["wake_late_ns"]["max"]
    assert abs(s["tx_span_ns"] - nominal_span_ns) <= late_max_ns + 1_000_000, s
    assert r["received"] == 2500 and r["lost"] == 0 and r["duplicates"] == 0
    assert r["owd_ns"]["count"] == 2500
    assert 0 < r["owd_ns"]["p50"] < 5_000_000  # loopback: microseconds, loosely bounded
    assert r["ipdv_ns"]["count"] == 2499
