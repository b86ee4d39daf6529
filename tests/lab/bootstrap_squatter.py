"""A process that wants the collective bootstrap's secret, for test_bootstrap_squatter.py.

    bootstrap_squatter.py listen PORT RECORD   squat on 127.0.0.1:PORT before rank 0: answer each
                                               connection's first 37 bytes with a challenge whose
                                               nonce, salt and proof are random (it cannot make
                                               the proof), record every byte each connection
                                               sends
    bootstrap_squatter.py probe PORT RECORD    once the genuine root is up: try to take its port,
                                               join without the secret (hello, a made-up proof),
                                               then hold 50 idle connections; record what came back

RECORD is written as JSON ({"connections": [hex, ...]} / {"bind_error": ..., "received": hex,
"closed_by_root": bool, "idle": n}) and rewritten as it grows; the process runs until SIGTERM
or 120 s. Every loop is bounded."""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time

HELLO_BYTES = 37
CHALLENGE_BYTES = 85
LIFETIME_S = 120.0


def write(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def listen(port: int, record: str) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    received: list[bytearray] = []  # per connection, in order of arrival
    open_conns: dict[socket.socket, int] = {}
    answered: set[int] = set()
    write(record, {"ready": True, "connections": [], "open": 0})
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([server, *open_conns], [], [], 0.2)
        for s in ready:
            if s is server:
                c, _ = server.accept()
                open_conns[c] = len(received)
                received.append(bytearray())
                continue
            i = open_conns[s]
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                del open_conns[s]
                s.close()
                continue
            received[i] += data
            if len(received[i]) >= HELLO_BYTES and i not in answered:
                # A well-formed challenge whose proof it cannot make.
                s.sendall(b"DWBC\x02" + os.urandom(CHALLENGE_BYTES - 5))
                answered.add(i)
        write(record, {"ready": True, "connections": [bytes(r).hex() for r in received],
                       "open": len(open_conns)})


def probe(port: int, record: str) -> None:
    doc: dict = {"received": "", "closed_by_root": False, "idle": 0, "bind_error": None}
    deadline = time.monotonic() + 30
    joiner = None
    while time.monotonic() < deadline:  # the genuine root may not be up yet
        try:
            joiner = socket.create_connection(("127.0.0.1", port), timeout=2)
            break
        except OSError:
            time.sleep(0.02)
    if joiner is None:
        doc["error"] = "the root never came up"
        write(record, doc)
        return
    try:  # a squatter that comes second cannot take the port
        taker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taker.bind(("127.0.0.1", port))
        taker.listen(1)
        doc["bind_error"] = None
    except OSError as e:
        doc["bind_error"] = e.strerror
    joiner.sendall(b"DWBH\x02" + os.urandom(32))
    received = bytearray()
    joiner.settimeout(10)
    try:
        while len(received) < CHALLENGE_BYTES:
            chunk = joiner.recv(CHALLENGE_BYTES - len(received))
            if not chunk:
                break
            received += chunk
        joiner.sendall(b"DWBP\x02" + os.urandom(32))  # a proof it cannot make
        doc["closed_by_root"] = joiner.recv(65536) == b""
    except OSError as e:
        doc["closed_by_root"] = "reset" in str(e).lower()
    doc["received"] = bytes(received).hex()
    idle = []
    for _ in range(50):
        try:
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            break
    doc["idle"] = len(idle)
    doc["ready"] = True
    write(record, doc)
    end = time.monotonic() + LIFETIME_S
    while time.monotonic() < end:
        time.sleep(0.2)


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    mode, port, record = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "listen":
        listen(port, record)
    elif mode == "probe":
        probe(port, record)
    else:
        raise SystemExit(f"unknown mode {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
