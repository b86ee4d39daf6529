#!/usr/bin/python3
"""The attacker and the victim of tests/lab/test_attack_perf_hello.py, run inside their network
namespaces (`ip netns exec NS /usr/bin/python3 perf_attacker.py MODE ...`). Every wait is
bounded; each mode prints one JSON line on stdout.

  victim ADDR PORT          binds ADDR:PORT (UDP), prints {"ready": true}, counts datagrams until
                            stdin closes (or 60 s), then prints {"datagrams": N, "from": [...]}
  own-session SERVER PORT VICTIM_ADDR VICTIM_PORT COUNT
                            opens its own detwan-perf session (a reverse stream) from this
                            namespace's address, sends COUNT UDP hellos carrying that session's
                            id and token with the victim's address as source (raw socket), then
                            asks the server to start; prints the session, the UDP port and the
                            server's answer to the start
  spoof SERVER UDP_PORT SESSION VICTIM_ADDR VICTIM_PORT COUNT
                            COUNT hellos naming SESSION with a random (wrong) token, from the
                            victim's address; prints {"sent": COUNT}
  send ADDR PORT            one datagram to ADDR:PORT from this namespace (a reachability check)
"""
from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys
import time

MAGIC = 0x44575046  # "DWPF"
KIND_HELLO = 1
PROTOCOL_VERSION = 2


def hello(session: int, seq: int, token_high: int, token_low: int) -> bytes:
    """A detwan-perf hello (docs/perf.md, "Test packets"): 48 bytes, big-endian."""
    return struct.pack("!IBBHIIQqQQ", MAGIC, 1, KIND_HELLO, 0, session, 0, seq,
                       time.time_ns(), token_high, token_low)


def spoofed_udp(src: str, sport: int, dst: str, dport: int, payload: bytes) -> bytes:
    """IPv4 + UDP with any source address; the kernel fills the IP checksum and id (IP_HDRINCL).
    UDP checksum 0: none (allowed over IPv4)."""
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    return ip + udp


def send_spoofed(server: str, udp_port: int, session: int, victim: str, victim_port: int,
                 count: int, token: tuple[int, int]) -> None:
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    try:
        for seq in range(count):
            raw.sendto(spoofed_udp(victim, victim_port, server, udp_port,
                                   hello(session, seq, *token)), (server, 0))
            time.sleep(0.002)
    finally:
        raw.close()


def read_line(sock: socket.socket, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no control line from the server")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"the server closed the connection after {data!r}")
        data += chunk
    return json.loads(data.split(b"\n", 1)[0])


def own_session(server: str, port: int, victim: str, victim_port: int, count: int) -> dict:
    spec = {"mode": "stream", "direction": "reverse", "schedule": "periodic", "pps": 1000,
            "bitrate_bps": 0, "burst_packets": 1, "size_bytes": 1200,
            "duration_ns": 5_000_000_000, "bound_ns": 0, "interval_ns": 0, "dscp": -1,
            "seed": 1, "want_packets": False}
    with socket.create_connection((server, port), timeout=5) as control:
        control.sendall(json.dumps({"type": "hello", "version": PROTOCOL_VERSION, "spec": spec,
                                    "linger_ns": 0}).encode() + b"\n")
        accept = read_line(control, 5)
        if accept.get("type") != "accept":
            return {"accept": accept}
        token = bytes.fromhex(accept["token"])
        send_spoofed(server, accept["udp_port"], accept["session"], victim, victim_port, count,
                     (int.from_bytes(token[:8], "big"), int.from_bytes(token[8:], "big")))
        control.sendall(json.dumps({"type": "start", "start_ns": time.time_ns()}).encode() + b"\n")
        try:
            answer = read_line(control, 5)
        except (ConnectionError, TimeoutError) as e:
            answer = {"error": str(e)}
        return {"session": accept["session"], "udp_port": accept["udp_port"],
                "start_answer": answer}


def victim(addr: str, port: int) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((addr, port))
    print(json.dumps({"ready": True}), flush=True)
    count, sources = 0, set()
    deadline = time.monotonic() + 60
    stdin = sys.stdin.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sock, stdin], [], [], 0.5)
        if sock in ready:
            _, source = sock.recvfrom(65536)
            count += 1
            sources.add(f"{source[0]}:{source[1]}")
        if stdin in ready and not os.read(stdin, 4096):
            # Stdin closed: take what is still queued, then report.
            sock.setblocking(False)
            try:
                while True:
                    _, source = sock.recvfrom(65536)
                    count += 1
                    sources.add(f"{source[0]}:{source[1]}")
            except BlockingIOError:
                pass
            break
    return {"datagrams": count, "from": sorted(sources)}


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "victim":
        result = victim(argv[1], int(argv[2]))
    elif mode == "own-session":
        result = own_session(argv[1], int(argv[2]), argv[3], int(argv[4]), int(argv[5]))
    elif mode == "spoof":
        count = int(argv[6])
        wrong = struct.unpack("!QQ", os.urandom(16))
        send_spoofed(argv[1], int(argv[2]), int(argv[3]), argv[4], int(argv[5]), count, wrong)
        result = {"sent": count}
    elif mode == "send":
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"reachability check", (argv[1], int(argv[2])))
        result = {"sent": 1}
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
