"""STAMP interoperability with an independent implementation: scapy's STAMP decoder
(scapy.contrib.stamp, RFC 8762 / RFC 8972 layouts). No root needed: plain UDP on 127.0.0.1.

(a) detwan-perf stamp-reflect answers scapy-built sender packets correctly;
(b) detwan-perf stamp measures against a tiny reflector that answers with scapy-built packets;
(c) the reflector's stateful mode numbers each session from 0.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import threading
import time

import pytest

import labutil

stamp = pytest.importorskip("scapy.contrib.stamp",
                            reason="scapy (python3-scapy) is not installed")
Sender = stamp.STAMPSessionSenderTestUnauthenticated
Reflector = stamp.STAMPSessionReflectorTestUnauthenticated
ErrorEstimate = stamp.ErrorEstimate

NTP_UNIX_OFFSET_S = 2208988800


def perf_binary() -> str:
    path = labutil.build_dir() / "tools" / "perf" / "detwan-perf"
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built: run ninja -C {labutil.build_dir()} "
                    "tools/perf/detwan-perf (or set DETWAN_BUILD_DIR)")
    return str(path)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ntp_now() -> float:
    """Now as scapy's TimeStampField takes it: NTP seconds (since 1900) as a float."""
    return time.time() + NTP_UNIX_OFFSET_S


class RunningReflector:
    """`detwan-perf stamp-reflect` on 127.0.0.1; stop() ends it with SIGINT and returns its
    --json counters."""

    def __init__(self, *extra: str):
        self.port = free_udp_port()
        self.proc = subprocess.Popen(
            [perf_binary(), "stamp-reflect", "-B", "127.0.0.1", "-p", str(self.port), "--json",
             *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        # Ready once it says it listens (bounded wait).
        deadline = time.monotonic() + 10
        seen = b""
        while b"listening" not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.kill()
                raise AssertionError(f"stamp-reflect did not start: {seen!r}")
            ready, _, _ = select.select([self.proc.stderr], [], [], left)
            if ready:
                seen += os.read(self.proc.stderr.fileno(), 4096)

    def stop(self) -> dict:
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=10)
        assert self.proc.returncode == 0, out
        return json.loads(out)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def exchange(sock: socket.socket, port: int, packet: bytes) -> bytes:
    sock.sendto(packet, ("127.0.0.1", port))
    sock.settimeout(3)
    data, _ = sock.recvfrom(65536)
    return data


def test_reflector_answers_scapy_sender_packets():
    refl = RunningReflector()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sent_ts = ntp_now()
            req = Sender(seq=1234, ts=sent_ts, ssid=4321,
                         err_estimate=ErrorEstimate(S=0, Z=0, scale=10, multiplier=3))
            raw_req = bytes(req)
            assert len(raw_req) == 44
            data = exchange(sock, refl.port, raw_req)
            assert len(data) == 44
            rep = Reflector(data)
            assert rep.seq == 1234  # stateless: the sender's number
            assert rep.seq_sender == 1234
            assert rep.ssid == 4321
            assert data[28:36] == raw_req[4:12]  # sender timestamp echoed bit for bit
            assert data[36:38] == raw_req[12:14]  # sender error estimate echoed
            assert rep.err_estimate_sender.scale == 10
            assert rep.err_estimate_sender.multiplier == 3
            assert rep.ttl_sender == 64  # Linux default TTL, read from the received packet
            assert rep.err_estimate.Z == 0  # NTP timestamps
            assert rep.err_estimate.multiplier >= 1
            assert float(rep.ts_rx) >= float(rep.ts_sender)
            assert float(rep.ts) >= float(rep.ts_rx)
            assert abs(float(rep.ts_rx) - ntp_now()) < 5

            # Larger packet: same size back. A reply is never larger than its request: a
            # 14-byte TWAMP Light packet would need 44 back, so it gets nothing (counted); a
            # 41-byte one gets the reflector packet's 41 bytes.
            big = bytes(Sender(seq=7, ts=ntp_now(), ssid=4321)) + bytes(56)
            assert len(exchange(sock, refl.port, big)) == 100
            sock.sendto(raw_req[:14], ("127.0.0.1", refl.port))
            data = exchange(sock, refl.port, raw_req[:41])
            assert len(data) == 41  # the first reply on the socket: none came for 14 bytes
            assert Reflector(data + bytes(3)).seq_sender == 1234
            sock.sendto(b"\x01\x02\x03", ("127.0.0.1", refl.port))  # garbage: ignored
            assert Reflector(exchange(sock, refl.port, raw_req)).seq == 1234
        counters = refl.stop()
        assert counters["received"] == 6
        assert counters["reflected"] == 4
        assert counters["malformed"]["too_short"] == 1
        assert counters["refused_short"] == 1
        assert counters["twamp_light"] == 1
    finally:
        refl.kill()


def test_reflector_answers_short_packets_only_when_asked():
    """--answer-short: RFC 8762 4.6's base packet for a 14-byte TWAMP Light request."""
    refl = RunningReflector("--answer-short")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            raw_req = bytes(Sender(seq=99, ts=ntp_now(), ssid=1))
            data = exchange(sock, refl.port, raw_req[:14])
            assert len(data) == 44
            assert Reflector(data).seq_sender == 99
        counters = refl.stop()
        assert counters["refused_short"] == 0
        assert counters["twamp_light"] == 1
    finally:
        refl.kill()


class ScapyReflector(threading.Thread):
    """A minimal stateless STAMP reflector whose replies scapy builds."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stopping = threading.Event()
        self.answered = 0

    def run(self):
        while not self.stopping.is_set():
            try:
                data, peer = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            rx = ntp_now()
            req = Sender(data[:44])
            rep = Reflector(seq=req.seq, ssid=req.ssid, ts_rx=rx, seq_sender=req.seq,
                            err_estimate=ErrorEstimate(S=0, Z=0, scale=20, multiplier=1),
                            err_estimate_sender=req.err_estimate, ttl_sender=255)
            rep.ts = ntp_now()
            out = bytearray(bytes(rep))
            # The sender's timestamp goes back bit for bit (a float round trip would round it).
            out[28:36] = data[4:12]
            out += data[44:]  # symmetric size
            self.answered += 1  # before sending: the sender may finish as soon as it arrives
            self.sock.sendto(bytes(out), peer)

    def close(self):
        self.stopping.set()
        self.join(timeout=5)
        self.sock.close()


def test_sender_measures_against_scapy_reflector():
    refl = ScapyReflector()
    refl.start()
    try:
        res = subprocess.run(
            [perf_binary(), "stamp", "127.0.0.1", "-p", str(refl.port), "-c", "20", "-i", "0.01",
             "--ssid", "99", "--json"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["schema"] == "detwan-perf-stamp"
        assert doc["sent"] == 20
        assert doc["received"] == 20
        assert doc["lost"] == 0
        assert doc["ssid"] == 99
        assert doc["forward_lost"] is None  # the scapy reflector is stateless
        assert doc["rtt_ns"]["count"] == 20
        assert doc["rtt_ns"]["min"] > 0
        # Scale 20, multiplier 1: 2^-12 s = 244140 ns.
        assert doc["reflector_error_estimate_ns"] == 244140
        assert doc["reflector_synchronized"] is False
        assert refl.answered == 20
    finally:
        refl.close()


def test_no_reflector_is_a_clear_failure():
    port = free_udp_port()
    res = subprocess.run([perf_binary(), "stamp", "127.0.0.1", "-p", str(port), "-c", "2",
                          "-i", "0.01", "--timeout", "0.3"],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert res.returncode == 1
    assert f"no reflection from 127.0.0.1:{port} within 0.3 s" in res.stderr


def test_stateful_reflector_numbers_sessions_from_zero():
    refl = RunningReflector("--stateful")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
            for i, seq in enumerate([10, 20, 30]):
                req = bytes(Sender(seq=seq, ts=ntp_now(), ssid=5))
                rep = Reflector(exchange(a, refl.port, req))
                assert rep.seq == i
                assert rep.seq_sender == seq
            # Another source port is another session; so is another SSID.
            assert Reflector(exchange(b, refl.port, bytes(Sender(seq=40, ssid=5)))).seq == 0
            assert Reflector(exchange(a, refl.port, bytes(Sender(seq=50, ssid=6)))).seq == 0
            assert Reflector(exchange(a, refl.port, bytes(Sender(seq=60, ssid=5)))).seq == 3
        counters = refl.stop()
        assert counters["stateful"] is True
        assert counters["reflected"] == 6
        assert sorted(s["packets"] for s in counters["sessions"]) == [1, 1, 4]
    finally:
        refl.kill()
