"""Attack suite (issue 31, item 9): a spoofed detwan-perf hello turns the server into no
reflector.

Four namespaces on one bridge (in the server's namespace): the server (10.231.0.1), a genuine
client (.2), an attacker (.3) and a victim (.4, a UDP socket that counts what reaches it). The
attacker (tests/lab/perf_attacker.py, raw socket) sends hellos whose source is the victim's
address:
  (a) in its own session, with that session's id and token: the server must refuse them
      (not the control connection's address) and refuse to start a stream nobody valid asked
      for;
  (b) into the genuine client's session, whose id and UDP port it learned (here: from the
      server's log), with a guessed token: refused (token).
The victim receives nothing from the server (a datagram the test sends it from the server's
namespace at the end proves the path works), the server's --json counters show each refusal
by reason, and the genuine client's reverse stream arrives complete.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

import labutil

PREFIX = labutil.PREFIX
NS = {role: f"{PREFIX}ph{role[0]}" for role in ("server", "client", "attacker", "victim")}
ADDR = {"server": "10.231.0.1", "client": "10.231.0.2", "attacker": "10.231.0.3",
        "victim": "10.231.0.4"}
PORT = 5301
VICTIM_PORT = 40000
SPOOFED_OWN = 20     # hellos of (a)
SPOOFED_GUESS = 50   # hellos of (b)
HELPER = str(labutil.REPO / "tests" / "lab" / "perf_attacker.py")
PYTHON = "/usr/bin/python3"


def perf_binary() -> str:
    path = labutil.build_dir() / "tools" / "perf" / "detwan-perf"
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built: run ninja -C {labutil.build_dir()} "
                    "tools/perf/detwan-perf (or set DETWAN_BUILD_DIR)")
    return str(path)


def sh(*args: str) -> None:
    res = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: {res.stderr.strip()}")


def in_ns(role: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", NS[role], *args]


def helper(role: str, *args: str, timeout: float = 30) -> dict:
    res = subprocess.run(in_ns(role, PYTHON, HELPER, *args), capture_output=True, text=True,
                         timeout=timeout, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def remove_namespaces() -> None:
    for ns in NS.values():
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


@pytest.fixture
def bridge_lab():
    remove_namespaces()
    try:
        for ns in NS.values():
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "dev", "lo", "up")
        server = NS["server"]
        sh("ip", "-n", server, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", server, "addr", "add", f"{ADDR['server']}/24", "dev", "br0")
        sh("ip", "-n", server, "link", "set", "dev", "br0", "up")
        for role in ("client", "attacker", "victim"):
            inner, outer = f"ph{role[0]}0", f"ph{role[0]}1"
            sh("ip", "link", "add", inner, "netns", NS[role], "type", "veth", "peer", "name",
               outer, "netns", server)
            sh("ip", "-n", server, "link", "set", "dev", outer, "master", "br0", "up")
            sh("ip", "-n", NS[role], "addr", "add", f"{ADDR[role]}/24", "dev", inner)
            sh("ip", "-n", NS[role], "link", "set", "dev", inner, "up")
        yield
    finally:
        remove_namespaces()


class PerfServer:
    """`detwan-perf server -v --json` in the server's namespace; its log is kept as it comes."""

    def __init__(self):
        self.proc = subprocess.Popen(
            in_ns("server", perf_binary(), "server", "-B", ADDR["server"], "-p", str(PORT), "-v",
                  "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL)
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.wait_for(r"listening on")

    def _read(self):
        for line in self.proc.stderr:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout_s: float = 10) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                for line in self.lines:
                    m = re.search(pattern, line)
                    if m:
                        return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        with self.lock:
            raise AssertionError(f"no server log line matching {pattern!r}: {self.lines}")

    def stop(self) -> dict:
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=15)
        self.reader.join(timeout=5)
        assert self.proc.returncode == 0, self.lines
        return json.loads(out.strip().splitlines()[-1])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.mark.netns
def test_spoofed_perf_hello_reflects_nothing(bridge_lab):
    perf = perf_binary()
    victim = subprocess.Popen(in_ns("victim", PYTHON, HELPER, "victim", ADDR["victim"],
                                    str(VICTIM_PORT)),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    server = PerfServer()
    client = None
    try:
        assert json.loads(victim.stdout.readline()) == {"ready": True}

        # (a) The attacker's own session, its hellos sent from the victim's address.
        own = helper("attacker", "own-session", ADDR["server"], str(PORT), ADDR["victim"],
                     str(VICTIM_PORT), str(SPOOFED_OWN))
        assert "session" in own, own
        assert own["start_answer"].get("type") == "error", own
        assert "no UDP hello" in own["start_answer"].get("message", ""), own

        # (b) The genuine client's session, its id and UDP port known to the attacker.
        client = subprocess.Popen(
            in_ns("client", perf, "client", ADDR["server"], "-p", str(PORT), "--reverse", "-t",
                  "2", "--pps", "200", "-i", "0", "--json"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        accepted = server.wait_for(r"session (\d+): accepted stream reverse from "
                                   + re.escape(ADDR["client"]) + r":\d+, udp port (\d+)")
        helper("attacker", "spoof", ADDR["server"], accepted.group(2), accepted.group(1),
               ADDR["victim"], str(VICTIM_PORT), str(SPOOFED_GUESS))
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, err
        doc = json.loads(out)
        reverse = doc["reverse"]
        assert reverse["sent"] == 2 * 200
        assert reverse["received"] == reverse["sent"]  # a lossless bridge: nothing went astray
        assert reverse["lost"] == 0

        # The path from the server to the victim works: this datagram is the victim's only one.
        helper("server", "send", ADDR["victim"], str(VICTIM_PORT))
        counters = server.stop()
    finally:
        server.kill()
        if client is not None and client.poll() is None:
            client.kill()
        victim.stdin.close()
        seen = json.loads(victim.stdout.readline() or "{}")
        victim.wait(timeout=10)

    # Exactly one datagram, the test's own from the server's namespace: nothing of the server's.
    assert seen["datagrams"] == 1, seen
    assert seen["from"][0].startswith(ADDR["server"] + ":"), seen
    refused = counters["refused_hellos"]
    assert refused["source"] == SPOOFED_OWN, counters
    assert refused["token"] == SPOOFED_GUESS, counters
    assert refused["total"] == SPOOFED_OWN + SPOOFED_GUESS, counters
    assert counters["sessions_served"] == 1, counters   # the genuine client
    assert counters["rejected_requests"] == 1, counters  # the attacker's start
