"""First packets after silence: how soon traffic flows through a newly provisioned tunnel.

  first_packet.py send --to ADDR --port P [--interval-us 500] [--seconds S]
      sends a UDP datagram every interval, each carrying its CLOCK_REALTIME send time (ns,
      8 bytes big-endian), until S seconds passed or it is killed;
  first_packet.py recv --bind ADDR --port P [--gap-ms 100] [--seconds S]
      prints one JSON line {"first_ns": T, "sent_ns": S} for the first datagram after at least
      gap-ms of silence (and for the very first one): T is the kernel's receive timestamp
      (SO_TIMESTAMPNS, CLOCK_REALTIME), S the sender's stamp. Prints "listening" on stderr once
      bound.
All lab namespaces share one clock, so T - S is the one-way delay. Used by
tools/bench/agent-provisioning. Every loop is bounded by --seconds.
"""
from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def send(args) -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    interval = args.interval_us * 1000
    deadline = time.monotonic_ns() + int(args.seconds * 1e9)
    next_ns = time.monotonic_ns()
    while time.monotonic_ns() < deadline:
        try:
            s.sendto(struct.pack("!Q", time.time_ns()) + bytes(56), (args.to, args.port))
        except OSError:
            pass  # no route / unreachable while no tunnel exists: keep going
        next_ns += interval
        delay = (next_ns - time.monotonic_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
        else:
            next_ns = time.monotonic_ns()
    return 0


def recv(args) -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind((args.bind, args.port))
    s.settimeout(0.2)
    print("listening", file=sys.stderr, flush=True)
    gap_ns = args.gap_ms * 1_000_000
    last_ns = None
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        try:
            data, ancillary, _flags, _addr = s.recvmsg(2048, socket.CMSG_SPACE(16))
        except socket.timeout:
            continue
        arrival = time.time_ns()
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
                sec, nsec = struct.unpack("qq", payload[:16])
                arrival = sec * 1_000_000_000 + nsec
        if len(data) < 8:
            continue
        if last_ns is None or arrival - last_ns >= gap_ns:
            sent = struct.unpack("!Q", data[:8])[0]
            print(json.dumps({"first_ns": arrival, "sent_ns": sent}), flush=True)
        last_ns = arrival
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("send")
    p.add_argument("--to", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--interval-us", type=int, default=500)
    p.add_argument("--seconds", type=float, default=600)
    p = sub.add_parser("recv")
    p.add_argument("--bind", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--gap-ms", type=int, default=100)
    p.add_argument("--seconds", type=float, default=600)
    args = ap.parse_args()
    return send(args) if args.mode == "send" else recv(args)


if __name__ == "__main__":
    sys.exit(main())
