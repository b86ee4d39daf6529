"""A job's transport endpoint under attack (issue 31, items 4 and 9).

`detwan-bench transport recv --listen 127.0.0.1:PORT --key-file K` is the endpoint an attacker
may reach. From a raw UDP socket it gets a forged HELLO (the sealed format, a MAC made up) and a
forged DATA of 1,472 bytes naming an 8 GiB message, each several times. Before the fix the two
grew a receiver by 8 GiB within 24 s. Now: its resident memory (/proc/PID/status VmRSS, before
and after) grows by less than a few MiB, the forged HELLO gets no answer, its endpoint counters
show the drops, and a genuine sender holding the key afterwards transfers a message that the
receiver checks byte for byte."""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import time

import pytest

import labutil

BENCH = labutil.build_dir() / "tools" / "bench" / "detwan-bench"
MAX_RSS_GROWTH_KIB = 4 * 1024
SIZE = 16 << 20


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def forged_hello(connection_id: int) -> bytes:
    """A version-3 HELLO (docs/transport.md "Wire format"): right layout, made-up MAC."""
    header = struct.pack(">HBBBBQQI", 0xD7A9, 3, 1, 0, 0, connection_id, 1_000_000, 0)
    body = struct.pack(">QBHB", 1 << 22, 3, 1408, 1) + os.urandom(16) + os.urandom(16)
    return header + body


def forged_data(connection_id: int, message_bytes: int, segment_bytes: int = 1408) -> bytes:
    """A DATA (short form) of 1,472 bytes naming a message of `message_bytes`."""
    last_index = message_bytes // segment_bytes
    indices = (0 << 28) | last_index
    header = (bytes([0xA0]) + struct.pack(">III", connection_id & 0xFFFFFFFF, 1000, 5)
              + struct.pack(">I", 0) + indices.to_bytes(7, "big"))
    return header + b"\x42" * (1472 - len(header) - 16) + os.urandom(16)


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "job.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(os.urandom(32).hex() + "\n")
    return str(path)


@pytest.mark.skipif(not BENCH.exists(), reason=f"{BENCH} not built")
def test_forged_hello_and_huge_data_move_nothing_and_genuine_traffic_passes(key_file):
    port = free_udp_port()
    address = f"127.0.0.1:{port}"
    recv = subprocess.Popen([str(BENCH), "transport", "recv", "--listen", address, "--key-file",
                             key_file, "--json", "--accept-timeout", "60", "--timeout", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    send = None
    try:
        line = recv.stderr.readline()
        assert "listening" in line, line
        time.sleep(0.2)  # let the endpoint settle before the baseline
        rss_before = vm_rss_kib(recv.pid)

        attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        attacker.settimeout(0.5)
        connection_id = int.from_bytes(os.urandom(8), "big") | 1
        for _ in range(5):
            attacker.sendto(forged_hello(connection_id), ("127.0.0.1", port))
            attacker.sendto(forged_data(connection_id, 8 << 30), ("127.0.0.1", port))
        answered = True
        try:
            attacker.recvfrom(2048)
        except socket.timeout:
            answered = False
        assert not answered, "the endpoint answered a forged HELLO"
        time.sleep(2)  # the old receiver needed 24 s to grow by 8 GiB; 2 s showed gigabytes
        rss_after = vm_rss_kib(recv.pid)
        assert rss_after - rss_before < MAX_RSS_GROWTH_KIB, (rss_before, rss_after)

        send = subprocess.run([str(BENCH), "transport", "send", address, "--size", str(SIZE),
                               "--message-size", "1m", "--key-file", key_file, "--json"],
                              capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert send.returncode == 0, send.stderr[-2000:]
        out, err = recv.communicate(timeout=60)
        assert recv.returncode == 0, err[-2000:]
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    doc = json.loads(out)
    assert doc["error"] is None
    assert doc["security"] == "authenticate"
    assert doc["bytes_received"] == SIZE
    assert doc["wrong_bytes"] == 0 and doc["wrong_messages"] == 0
    endpoint = doc["endpoint"]
    assert endpoint["dropped_auth"] >= 5            # the forged HELLOs
    assert endpoint["dropped_unknown_connection"] >= 5  # the forged DATA
    assert endpoint["connections_accepted"] == 1    # the genuine sender only
    assert doc["stats"]["dropped_auth"] == 0
