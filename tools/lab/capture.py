#!/usr/bin/python3
"""Departure capture for pacing measurements: kernel receive timestamps of the UDP/IPv4 frames
arriving on one interface, grouped by destination address and port.

Run inside a WAN namespace on the veth that faces a gateway (`ip netns exec dwtb-wan-ab-1
tools/lab/capture.py --iface dwtb-ab1-wa --duration 8`): a veth has no rate, so a frame arrives
there the instant the gateway's kernel sent it, and every flow captured on the same socket is
timed by the same clock at the same point. An AF_PACKET socket with SO_TIMESTAMPNS gives each
frame the kernel's receive timestamp (CLOCK_REALTIME), whatever the delay before this process
reads it; frames the interface sends (PACKET_OUTGOING) are skipped. Prints "listening" on
stderr once bound, stops after --duration seconds or on SIGTERM/SIGINT (then first reads what
the kernel still holds for it, so a reader that fell behind loses nothing), prints one JSON
object: {"flows": {"DST:PORT": {"t_ns": [...], "bytes": [...]}}, "kernel_drops": N,
"frames": N}, bytes being the whole Ethernet frame as captured.
"""
from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_OUTGOING = 4
ETH_HEADER_BYTES = 14


_STOP = {"requested": False}


def _stop(_signum, _frame):
    _STOP["requested"] = True  # seen within the socket timeout (0.2 s)


def capture(iface: str, duration_s: float, min_bytes: int) -> dict:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 1 << 30)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    sock.bind((iface, 0))
    sock.settimeout(0.2)
    flows: dict[str, dict[str, list[int]]] = {}
    frames = 0
    print("listening", file=sys.stderr, flush=True)
    deadline = time.monotonic() + duration_s
    draining = False
    drain_deadline = 0.0
    while True:
        if not draining and (_STOP["requested"] or time.monotonic() >= deadline):
            # Frames still queued in the socket keep their kernel timestamps: read them all
            # (bounded) before stopping, so a reader that fell behind loses nothing.
            draining = True
            sock.setblocking(False)
            drain_deadline = time.monotonic() + 60
        if draining and time.monotonic() > drain_deadline:
            break
        try:
            data, anc, _flags, addr = sock.recvmsg(128, 64)
        except (socket.timeout, BlockingIOError):
            if draining:
                break  # everything the kernel queued has been read
            continue
        if addr[2] == PACKET_OUTGOING:
            continue
        frames += 1
        # The length of the frame on the wire, not of what recvmsg copied (128 bytes).
        length = _frame_length(data)
        if length < min_bytes or len(data) < ETH_HEADER_BYTES + 28:
            continue
        if data[12:14] != b"\x08\x00" or data[ETH_HEADER_BYTES + 9] != 17:
            continue  # IPv4 UDP only
        ihl = (data[ETH_HEADER_BYTES] & 0x0F) * 4
        dst = socket.inet_ntoa(data[ETH_HEADER_BYTES + 16:ETH_HEADER_BYTES + 20])
        dport = struct.unpack_from("!H", data, ETH_HEADER_BYTES + ihl + 2)[0]
        ts = None
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", payload[:16])
                ts = sec * 1_000_000_000 + nsec
        if ts is None:
            continue
        flow = flows.setdefault(f"{dst}:{dport}", {"t_ns": [], "bytes": []})
        flow["t_ns"].append(ts)
        flow["bytes"].append(length)
    stats = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
    _packets, drops = struct.unpack("II", stats)
    sock.close()
    return {"flows": flows, "kernel_drops": drops, "frames": frames}


def _frame_length(data: bytes) -> int:
    """Ethernet header + the IPv4 total length (the frame as sent, without padding)."""
    if len(data) >= ETH_HEADER_BYTES + 4 and data[12:14] == b"\x08\x00":
        return ETH_HEADER_BYTES + struct.unpack_from("!H", data, ETH_HEADER_BYTES + 2)[0]
    return len(data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iface", required=True)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds (upper bound)")
    ap.add_argument("--min-bytes", type=int, default=0,
                    help="ignore frames shorter than this (e.g. keepalives, TCP acks)")
    args = ap.parse_args()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, _stop)
    json.dump(capture(args.iface, args.duration, args.min_bytes), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
