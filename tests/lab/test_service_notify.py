"""detwan-agent under a service manager (Type=notify, packaging/systemd): started with
NOTIFY_SOCKET and a watchdog, it says READY=1 once it listens, pings WATCHDOG=1 while it runs
and says STOPPING=1 on SIGTERM; on SIGHUP (ExecReload) it reads its tokens file again. A datagram
socket stands in for systemd (hermetic: no namespaces, no systemd)."""
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

BUILD = pathlib.Path(os.environ.get("DETWAN_BUILD_DIR",
                                    pathlib.Path(__file__).resolve().parents[2] / "build"))
AGENT = BUILD / "control" / "detwan-agent"

TOPOLOGY = """domain: notify-test
agent:
  name: notify
  journal: {journal}
sites:
  - {{name: a, gateway: gw-a, tunnel_prefixes: [10.20.1.0/24]}}
  - {{name: b, gateway: gw-b, tunnel_prefixes: [10.20.2.0/24]}}
gateways:
  - {{name: gw-a, site: a, admin_socket: /nonexistent/gw-a, ports: [{{name: ab, link: ab}}],
     peers: [{{name: b, port: ab, gateway: gw-b}}]}}
  - {{name: gw-b, site: b, admin_socket: /nonexistent/gw-b, ports: [{{name: ab, link: ab}}],
     peers: [{{name: a, port: ab, gateway: gw-a}}]}}
links:
  - {{name: ab, ends: [a, b], capacity: 200mbit, delay: 5ms}}
"""


def receive_until(sock: socket.socket, want: str, timeout_s: float) -> list[str]:
    got = []
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        sock.settimeout(max(0.05, end - time.monotonic()))
        try:
            got.append(sock.recv(4096).decode())
        except socket.timeout:
            break
        if any(want in m for m in got):
            break
    return got


def test_the_agent_tells_its_service_manager_ready_watchdog_and_stopping(tmp_path):
    if not AGENT.exists():
        pytest.skip(f"{AGENT} is not built")
    topology = tmp_path / "topology.yaml"
    topology.write_text(TOPOLOGY.format(journal=tmp_path / "journal.db"))
    notify = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    env = dict(os.environ, NOTIFY_SOCKET=str(notify), WATCHDOG_USEC="400000")
    proc = subprocess.Popen([str(AGENT), "run", "--topology", str(topology), "--listen",
                             "127.0.0.1:0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        ready = receive_until(sock, "READY=1", 20)
        assert any(m.startswith("READY=1\nSTATUS=domain notify-test: listening on http://127.0.0.1:")
                   for m in ready), ready
        pings = receive_until(sock, "never", 1.0)  # 0.4 s watchdog: a ping every 0.2 s
        assert pings.count("WATCHDOG=1") >= 3, pings
        proc.send_signal(signal.SIGTERM)
        stopping = receive_until(sock, "STOPPING=1", 10)
        assert any(m.startswith("STOPPING=1") for m in stopping), stopping
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()


def status_of(url: str, token: str) -> int:
    req = urllib.request.Request(url + "/v1/topology", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_sighup_puts_the_new_tokens_in_force_and_keeps_them_on_a_bad_file(tmp_path):
    if not AGENT.exists():
        pytest.skip(f"{AGENT} is not built")
    tokens = tmp_path / "tokens"
    tokens.write_text("read old-token-0123456789\n")
    tokens.chmod(0o600)
    topology = tmp_path / "topology.yaml"
    topology.write_text(TOPOLOGY.format(journal=tmp_path / "journal.db").replace(
        "  name: notify\n", f"  name: notify\n  tokens_file: {tokens}\n"))
    notify = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    env = dict(os.environ, NOTIFY_SOCKET=str(notify))
    proc = subprocess.Popen([str(AGENT), "run", "--topology", str(topology), "--listen",
                             "127.0.0.1:0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        ready = receive_until(sock, "READY=1", 20)
        url = next(m for m in ready if m.startswith("READY=1")).split("listening on ")[1].strip()
        assert status_of(url, "old-token-0123456789") == 200
        assert status_of(url, "new-token-0123456789") == 401
        # Revoke the old token, add a new one; systemd hears RELOADING=1 then READY=1.
        tokens.write_text("read new-token-0123456789\n")
        proc.send_signal(signal.SIGHUP)
        got = receive_until(sock, "last reload", 10)
        assert any(m.startswith("RELOADING=1") for m in got), got
        assert any("last reload: reloaded" in m and "1 tokens" in m for m in got), got
        assert status_of(url, "new-token-0123456789") == 200
        assert status_of(url, "old-token-0123456789") == 401
        # A file that does not parse: refused, the tokens in force stay.
        tokens.write_text("bogus line\n")
        proc.send_signal(signal.SIGHUP)
        got = receive_until(sock, "last reload", 10)
        assert any("last reload: reload refused" in m for m in got), got
        assert status_of(url, "new-token-0123456789") == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        log = proc.stdout.read()
        assert "SIGHUP: reloaded" in log and "SIGHUP: reload refused" in log, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()
