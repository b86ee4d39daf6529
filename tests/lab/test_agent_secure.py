"""The agent's lab secure by default (issue 31): a reservation is authenticated and encrypted
without being asked, and its tunnel carries only its tenant.

  * `detwanctl reserve --from a --to b --rate 20mbit ... --provision --json` gives an encrypted
    tunnel (the JSON says which AEAD), both gateways hold its key and seal and open its traffic;
    `--encrypt none` exists only by name, and then every answer and the agent's log say so;
  * a co-tenant host sending into another job's tunnel: two jobs on two hosts of site a
    (10.20.1.2 and 10.20.1.3) each hold a reservation to their own host at site b; the second
    job floods the first job's destination at four times its reserved rate while the first job
    sends a known number of packets. The flood never enters the first job's tunnel (counted
    foreign_source at gateway a, dropped), the tunnel's on-time counters carry exactly the first
    job's packets, and the receiver gets every one of them.

One 2-site lab with the uring gateways and the agent (module-scoped, always torn down).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import labutil
from labutil import tb

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import gateway  # noqa: E402
from agent_lab import ctl, gw_tunnels, ping  # noqa: E402

WAN = "delay=5ms,rate=200mbit"  # no loss: every packet the gateways carry arrives
PORT = 47123

# A UDP sink in a host namespace: counts datagrams by their first 8 bytes (the sender's tag)
# and the distinct sequence numbers after them, until it has been idle for IDLE_S after the
# first datagram (or DEADLINE_S in all). Prints one JSON object.
RECEIVER = r"""
import json, socket, struct, sys, time
port, idle_s, deadline_s = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(("0.0.0.0", port))
s.settimeout(idle_s)
print("ready", flush=True)
counts, seqs, heard = {}, {}, False
end = time.monotonic() + deadline_s
while time.monotonic() < end:
    try:
        data, (source, _) = s.recvfrom(4096)
    except socket.timeout:
        if heard:
            break
        continue
    heard = True
    key = source + " " + data[:8].decode(errors="replace").strip()
    counts[key] = counts.get(key, 0) + 1
    seqs.setdefault(key, set()).add(struct.unpack("!Q", data[8:16])[0])
print(json.dumps({"packets": counts, "distinct": {k: len(v) for k, v in seqs.items()}}))
"""

# A UDP sender in a host namespace: COUNT datagrams of SIZE bytes (tag, sequence, padding)
# from SOURCE to DESTINATION:PORT at PPS packets/s (bursts of 10). Prints how many it sent.
SENDER = r"""
import socket, struct, sys, time
source, destination, port, count, pps, size, tag = sys.argv[1:8]
count, pps, size = int(count), float(pps), int(size)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
s.bind((source, 0))
pad = b"\0" * (size - 16)
start, sent = time.monotonic(), 0
while sent < count:
    for _ in range(min(10, count - sent)):
        s.sendto(tag.encode().ljust(8) + struct.pack("!Q", sent) + pad, (destination, int(port)))
        sent += 1
    wait = start + sent / pps - time.monotonic()
    if wait > 0:
        time.sleep(wait)
print(sent)
"""


@pytest.fixture(scope="module")
def lab2(wanem_ready):
    import os
    with labutil.lab("--sites", "2", "--dataplane", "uring", "--agents", "--wan", WAN) as st:
        os.environ["DETWAN_AGENT"] = st["agents"][0]["url"]
        yield st
        os.environ.pop("DETWAN_AGENT", None)


def tunnel_stats(site: str, tunnel_id: int) -> dict:
    return gateway.find_tunnel(labutil.gw_stats(site), tunnel_id)


def reserve(*args: str) -> dict:
    return json.loads(ctl("reserve", "--from", "a", "--to", "b", "--duration", "10m",
                          "--provision", "--json", *args, check=True).stdout)


@pytest.mark.netns
def test_a_reservation_is_encrypted_without_being_asked(lab2):
    r = reserve("--rate", "20mbit")
    try:
        assert r["state"] == "provisioned" and r["dataplane"]["active"], r
        # The JSON says which AEAD, and there is nothing to warn about.
        assert r["encrypt"] == "aes-256-gcm" and r["spec"]["encrypt"] == "aes-256-gcm"
        assert r["warnings"] == []
        (key,) = r["tunnel_keys"]["keys"]
        assert "secret" not in key
        # The lab's gateways have identity keys: the key comes from X25519 exchange, named by
        # its context at the agent; both gateways derive it (the same fingerprint).
        assert r["tunnel_keys"]["key_exchange"] == "x25519"
        derived = []
        for site in ("a", "b"):
            (t,) = gw_tunnels(site)
            assert t["id"] == r["tunnel_id"] and t["auth"]["cipher"] == "aes-256-gcm", t
            assert [k["context"] for k in t["auth"]["keys"]] == [key["context"]]
            derived += [k["fingerprint"] for k in t["auth"]["keys"]]
        assert derived[0] == derived[1]
        shown = ctl("show", r["id"], check=True).stdout
        assert f"encrypt   aes-256-gcm, keys 1 ({key['context']})" in shown, shown
        # Traffic is sealed by one gateway and opened by the other, nothing refused.
        before = {s: tunnel_stats(s, r["tunnel_id"])["auth"] for s in ("a", "b")}
        b = lab2["sites"][1]
        assert ping("a", b["tunnel_addr"], count=5)
        after = {s: tunnel_stats(s, r["tunnel_id"])["auth"] for s in ("a", "b")}
        for s in ("a", "b"):
            assert after[s]["sealed_packets"] - before[s]["sealed_packets"] >= 5, (s, after)
            assert after[s]["opened_packets"] - before[s]["opened_packets"] >= 5, (s, after)
            assert sum(after[s]["drops"].values()) == 0, (s, after)
    finally:
        ctl("terminate", r["id"])


@pytest.mark.netns
def test_an_unencrypted_reservation_exists_only_by_name_and_says_so(lab2):
    r = reserve("--rate", "10mbit", "--encrypt", "none")
    try:
        assert r["encrypt"] == "none" and r["tunnel_keys"]["keys"] == []
        (warning,) = r["warnings"]
        assert warning["code"] == "unencrypted" and r["id"] in warning["message"]
        assert ctl("show", r["id"], "--json", check=True).stdout.count('"unencrypted"') == 1
        shown = ctl("show", r["id"], check=True).stdout
        assert "encrypt   NONE: the tunnel is neither authenticated nor encrypted" in shown
        (t,) = gw_tunnels("a")
        assert t.get("auth") is None, t
        log = open(lab2["agents"][0]["log"], encoding="utf-8").read()
        assert f"{r['id']} (a -> b) runs unencrypted because the request asked" in log
        line = next(x for x in log.splitlines() if f"{r['id']} (a -> b) runs unencrypted" in x)
        assert "warn" in line.lower(), line
    finally:
        ctl("terminate", r["id"])


def sink(site: str, idle_s: float = 2.0, deadline_s: float = 60.0) -> subprocess.Popen:
    p = subprocess.Popen([str(labutil.TESTBED), "exec", site, "--", "/usr/bin/python3", "-c",
                          RECEIVER, str(PORT), str(idle_s), str(deadline_s)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    return p


def sender(site: str, source: str, destination: str, count: int, pps: int, size: int,
           tag: str) -> subprocess.Popen:
    return subprocess.Popen([str(labutil.TESTBED), "exec", site, "--", "/usr/bin/python3", "-c",
                             SENDER, source, destination, str(PORT), str(count), str(pps),
                             str(size), tag],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def softnet_dropped() -> int:
    """Packets the kernel dropped because a CPU's input backlog (netdev_max_backlog) was full."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f)


def udp_receive_errors(site: str, *where: str) -> int:
    """UDP datagrams a site's host (or, with "--gw", its gateway) dropped (receive buffer full
    or bad checksum)."""
    res = tb("exec", site, *where, "--", "cat", "/proc/net/snmp", check=True)
    rows = [line.split() for line in res.stdout.splitlines() if line.startswith("Udp:")]
    return int(dict(zip(rows[0][1:], rows[1][1:]))["InErrors"])


def unresolved_discards() -> int:
    """Packets dropped while waiting for a neighbour's address (the neighbour table's statistics
    are the kernel's, shared by all namespaces)."""
    with open("/proc/net/stat/arp_cache") as f:
        rows = [line.split() for line in f]
    column = rows[0].index("unresolved_discards")
    return sum(int(row[column], 16) for row in rows[1:])


def tun_dropped(site: str) -> int:
    """Packets the kernel dropped at the gateway's TUN device (its queue to the gateway full)."""
    res = tb("exec", site, "--gw", "--", "cat",
             f"/sys/class/net/{gateway.TUN_NAME}/statistics/tx_dropped", check=True)
    return int(res.stdout.strip() or 0)


@pytest.mark.netns
def test_a_co_tenant_cannot_ride_another_jobs_tunnel(lab2):
    a, b = lab2["sites"]
    # Job 1 (the victim) on a's host 10.20.1.2 to b's 10.20.2.2; job 2 on a's second host
    # 10.20.1.3 to b's 10.20.2.3. Two reservations between the same sites, one tunnel each.
    victim = reserve("--rate", "20mbit", "--src-prefix", f"{a['tunnel_addr']}/32",
                     "--dst-prefix", f"{b['tunnel_addr']}/32")
    other = reserve("--rate", "20mbit", "--src-prefix", f"{a['cotenant_addr']}/32",
                    "--dst-prefix", f"{b['cotenant_addr']}/32")
    try:
        vid, oid = victim["tunnel_id"], other["tunnel_id"]
        assert victim["dataplane"]["active"] and other["dataplane"]["active"]
        on_a = {t["id"]: t for t in gw_tunnels("a")}
        assert on_a[vid]["match"]["src"] == [f"{a['tunnel_addr']}/32"]
        assert on_a[oid]["match"]["src"] == [f"{a['cotenant_addr']}/32"]
        before = {s: {t: tunnel_stats(s, t) for t in (vid, oid)} for s in ("a", "b")}
        drops_before = labutil.gw_stats("a")["drops"]["foreign_source"]
        tun_before = tun_dropped("a")
        backlog_before, udp_errors_before = softnet_dropped(), udp_receive_errors("b")
        gw_udp_errors_before = udp_receive_errors("b", "--gw")
        neighbour_before = unresolved_discards()
        # The receiver waits out an idle gap of 8 s: job 2 starts only after the flood ends, and a
        # loaded machine may take seconds to start its sender.
        rx = sink("b", idle_s=8.0)
        # Job 2 floods job 1's destination: 1,000-byte datagrams at 10,000/s (80 Mbit/s, four
        # times job 1's reservation) for 2 s; job 1 sends 3,000 datagrams of 200 bytes at
        # 1,500/s meanwhile (about 4 Mbit/s with the gateways' overhead), then job 2 its own 200.
        flood = sender("a", a["cotenant_addr"], b["tunnel_addr"], 20_000, 10_000, 1000, "flood")
        time.sleep(0.2)
        job1 = sender("a", a["tunnel_addr"], b["tunnel_addr"], 3_000, 1_500, 200, "victim")
        assert job1.wait(timeout=60) == 0, job1.stderr.read()
        assert flood.wait(timeout=60) == 0, flood.stderr.read()
        job2 = sender("a", a["cotenant_addr"], b["cotenant_addr"], 200, 1_000, 200, "job2")
        assert job2.wait(timeout=60) == 0, job2.stderr.read()
        assert int(flood.stdout.read()) == 20_000 and int(job1.stdout.read()) == 3_000
        out, err = rx.communicate(timeout=90)
        got = json.loads(out)
        after = {s: {t: tunnel_stats(s, t) for t in (vid, oid)} for s in ("a", "b")}
        drops = labutil.gw_stats("a")["drops"]["foreign_source"] - drops_before
        tun_lost = tun_dropped("a") - tun_before
        backlog_lost = softnet_dropped() - backlog_before
        udp_errors = udp_receive_errors("b") - udp_errors_before
        gw_udp_errors = udp_receive_errors("b", "--gw") - gw_udp_errors_before
        neighbour_lost = unresolved_discards() - neighbour_before
    finally:
        for r in (victim, other):
            ctl("terminate", r["id"])

    def delta(site, tunnel, *path):
        x, y = before[site][tunnel], after[site][tunnel]
        for key in path:
            x, y = x[key], y[key]
        return y - x

    # The victim's traffic lost nothing, and the flood reached no one at b.
    victim_key = f"{a['tunnel_addr']} victim"
    diagnosis = (got, f"dropped at a's TUN queue: {tun_lost}, at a full CPU backlog: "
                 f"{backlog_lost}, by b's UDP receive: {udp_errors}, by b's gateway's UDP receive: "
                 f"{gw_udp_errors}, waiting for a neighbour's address: {neighbour_lost}",
                 {"a tx": after["a"][vid]["tx"], "b rx": after["b"][vid]["rx"]},
                 {"a tx before": before["a"][vid]["tx"], "b rx before": before["b"][vid]["rx"]})
    if got["packets"].get(victim_key) != 3_000:
        print(json.dumps(diagnosis, indent=1))  # pytest shortens the assertion's message
    assert got["packets"].get(victim_key) == 3_000, diagnosis
    assert got["distinct"][victim_key] == 3_000, got
    assert not any(k.endswith(" flood") for k in got["packets"]), got
    assert got["packets"].get(f"{a['cotenant_addr']} job2") == 200, got  # job 2's own tunnel works
    # The victim's tunnel carried exactly the victim's packets, in its slots, both ends.
    assert delta("a", vid, "tx", "sent_on_time_packets") == 3_000
    assert delta("a", vid, "tx", "sent_best_effort_packets") == 0
    assert delta("b", vid, "rx", "accepted_on_time_packets") == 3_000
    assert delta("a", vid, "tx", "scheduler", "dropped", "policed") == 0
    # The flood was counted at gateway a under foreign_source, on the victim's tunnel (whose
    # destination it aimed at), except what the kernel dropped before the gateway read it.
    assert delta("a", vid, "tx", "foreign_source_dropped_packets") == drops
    assert drops + tun_lost >= 20_000 and drops >= 15_000, (drops, tun_lost)
    assert delta("a", oid, "tx", "sent_on_time_packets") == 200  # job 2's own packets only
    assert delta("a", oid, "tx", "foreign_source_dropped_packets") == 0
    # Nothing foreign came out of either tunnel at b.
    for t in (vid, oid):
        assert delta("b", t, "rx", "foreign_inner_packets") == 0
