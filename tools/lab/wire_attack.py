#!/usr/bin/python3
"""An attacker on the WAN path, for the lab's attack tests (tests/lab/test_attack_tunnel.py).

Run inside a namespace that sees the tunnel's datagrams and owns the address it spoofs (a
gateway's namespace: `ip netns exec dwtb-b-gw tools/lab/wire_attack.py ...`):

  capture --src IP:PORT --dst IP:PORT --duration S --out FILE
      records the UDP payloads (detwan tunnel packets) from SRC to DST that reach the namespace's
      interfaces for S seconds (an AF_PACKET socket on all of them; frames the namespace sends
      are skipped). A frame the kernel handed over as a UDP GSO/GRO run is cut back into its
      datagrams by walking the tunnel headers (40 bytes, payload length at offset 10). Writes a
      JSON list of hex strings to FILE; prints "listening" on stderr once bound.
  send --src IP:PORT --dst IP:PORT --in FILE [--gap-us N]
      sends each recorded payload as one UDP datagram from SRC (an address of this namespace)
      to DST through a raw socket: the spoofed source of a reflection or a replay.
"""
from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
TUNNEL_HEADER_BYTES = 40
MAGIC = 0xDE7A


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def split_run(payload: bytes) -> list[bytes]:
    """The tunnel packets of one UDP payload (one datagram, or a GSO/GRO run of several)."""
    out = []
    at = 0
    while at + TUNNEL_HEADER_BYTES <= len(payload):
        magic, = struct.unpack_from("!H", payload, at)
        if magic != MAGIC:
            break
        length, = struct.unpack_from("!H", payload, at + 10)
        end = at + TUNNEL_HEADER_BYTES + length
        if end > len(payload):
            break
        out.append(payload[at:end])
        at = end
    return out


def capture(src: tuple[str, int], dst: tuple[str, int], duration_s: float) -> list[bytes]:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.settimeout(0.1)
    src_ip, dst_ip = socket.inet_aton(src[0]), socket.inet_aton(dst[0])
    print("listening", file=sys.stderr, flush=True)
    packets: list[bytes] = []
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        try:
            frame, addr = sock.recvfrom(1 << 17)
        except socket.timeout:
            continue
        if addr[2] == PACKET_OUTGOING or len(frame) < 14 + 20 + 8:
            continue
        if struct.unpack_from("!H", frame, 12)[0] != 0x0800:
            continue
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != socket.IPPROTO_UDP or ip[12:16] != src_ip or ip[16:20] != dst_ip:
            continue
        sport, dport = struct.unpack_from("!HH", ip, ihl)
        if sport != src[1] or dport != dst[1]:
            continue
        total = struct.unpack_from("!H", ip, 2)[0]
        # A GSO run's IP total length may be 0 or stale: take what the frame holds.
        udp_payload = ip[ihl + 8:] if total in (0, len(ip)) or total > len(ip) else \
            ip[ihl + 8:total]
        packets.extend(split_run(udp_payload))
    return packets


def send(src: tuple[str, int], dst: tuple[str, int], payloads: list[bytes], gap_us: int) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    sock.bind((src[0], 0))
    for p in payloads:
        udp = struct.pack("!HHHH", src[1], dst[1], 8 + len(p), 0) + p  # checksum 0: none (IPv4)
        sock.sendto(udp, (dst[0], 0))
        if gap_us:
            time.sleep(gap_us / 1e6)
    return len(payloads)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--src", required=True)
    c.add_argument("--dst", required=True)
    c.add_argument("--duration", type=float, required=True)
    c.add_argument("--out", required=True)
    s = sub.add_parser("send")
    s.add_argument("--src", required=True)
    s.add_argument("--dst", required=True)
    s.add_argument("--in", dest="infile", required=True)
    s.add_argument("--gap-us", type=int, default=200)
    args = parser.parse_args(argv)
    if args.cmd == "capture":
        packets = capture(_endpoint(args.src), _endpoint(args.dst), args.duration)
        with open(args.out, "w", encoding="ascii") as f:
            json.dump([p.hex() for p in packets], f)
        print(f"captured {len(packets)}", file=sys.stderr)
        return 0
    with open(args.infile, encoding="ascii") as f:
        payloads = [bytes.fromhex(h) for h in json.load(f)]
    print(f"sent {send(_endpoint(args.src), _endpoint(args.dst), payloads, args.gap_us)}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
