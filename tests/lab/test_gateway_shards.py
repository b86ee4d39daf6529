"""The lab with gateways spread over two cores (`tools/testbed up --dataplane dpdk|uring
--gw-shards 2`): dpdk on lcores 0 and 1 (dpdk.lcores), uring on two threads (gateway.shards: 2,
WAN sockets steered by tunnel id in one reuseport group, a two-queue TUN device). Three sites, so
that each gateway's two tunnels belong to different shards (tunnel id mod 2: 12 -> shard 0, 13
and 23 -> shard 1). Pings cross every tunnel through detwan-gw's whole path (TUN, dispatch to
the owner where the packet was read by the other shard, slots, WAN, the far gateway's shards),
and `detwan-gw stats` answers for the whole gateway. Correctness only, never speed.
"""
from __future__ import annotations

import os
import sys

import pytest

import labutil

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import gateway, reserve  # noqa: E402

WAN = "delay=5ms,jitter=500us,rate=100mbit"


gw_stats = labutil.gw_stats


ping = labutil.ping_replies


def need_gateway(dataplane: str) -> None:
    if not os.access(labutil.gw_binary(), os.X_OK):
        pytest.fail(f"{labutil.gw_binary()} is not built: run ninja -C {labutil.build_dir()}")
    if dataplane == "dpdk" and not labutil.gw_built_with_dpdk():
        pytest.skip("detwan-gw was built without DPDK (libdpdk-dev not found by meson)")


# What each backend logs when it starts its shards.
STARTED = {"dpdk": "2 shards on lcores 0, 1", "uring": "2 shards on threads pinned to"}


@pytest.mark.netns
@pytest.mark.parametrize("dataplane", ["dpdk", "uring"])
def test_two_shards_carry_every_tunnel_and_answer_for_the_whole_gateway(wanem_ready, dataplane):
    need_gateway(dataplane)
    with labutil.lab("--sites", "3", "--dataplane", dataplane, "--gw-shards", "2",
                     "--wan", WAN) as st:
        sites = {s["name"]: s for s in st["sites"]}
        for s in st["sites"]:
            log = open(s["gateway"]["log"], encoding="utf-8").read()
            assert STARTED[dataplane] in log, log[-2000:]
        # a -> b over tunnel 12 (shard 0 everywhere), a -> c over 13 and b -> c over 23 (shard 1).
        for src, dst in (("a", "b"), ("a", "c"), ("b", "c")):
            replies = ping(src, sites[dst]["tunnel_addr"], 40)
            assert replies >= 20, f"{src} -> {dst}: {replies} of 40 replies"
        for site, tunnels in (("a", (12, 13)), ("b", (12, 23)), ("c", (13, 23))):
            stats = gw_stats(site)
            assert stats["shards"] == 2
            for tunnel_id in tunnels:
                counters = gateway.tunnel_counters(stats, tunnel_id)
                assert counters["tx_sent"] >= 20, (site, tunnel_id, counters)
                assert counters["rx_released"] >= 20, (site, tunnel_id, counters)
            # Both peers are up on the shard that leads each and reported as such.
            assert all(p["state"] == "up" for p in stats["peers"]), stats["peers"]
            # Prometheus merged over the shards: each tunnel's counter from its owner.
            res = labutil.tb("gw", site, "--", "stats", "--prometheus", timeout=20)
            assert res.returncode == 0, res.stderr
            assert "\ndetwan_gw_shards 2\n" in res.stdout, res.stdout[:2000]
            if dataplane == "uring":  # the backend's own counters, one entry per shard
                backend = stats["backend_shards"]
                assert [b["shard"] for b in backend] == [0, 1], backend
                assert all(b["dispatch_dropped"] == 0 for b in backend), backend
            for tunnel_id in tunnels:
                sent = [line for line in res.stdout.splitlines() if line.startswith(
                    f'detwan_gw_tunnel_tx_sent_packets_total{{tunnel="{tunnel_id}"')]
                assert sent and all(float(line.split()[-1]) >= 20 for line in sent), (
                    site, tunnel_id, sent)
    for s in st["sites"]:  # `down` stopped every gateway
        assert not labutil.pid_alive(s["gateway"]["pid"]), s["gateway"]


@pytest.mark.netns
def test_collectives_ride_reservations_on_both_shards_of_uring_gateways(wanem_ready):
    """The whole stack over sharded io_uring gateways: the agent provisions a reservation between
    the sites at run time, a 4-rank allreduce job runs through it, the reservation ends; then a
    second one (the agent's next tunnel id: the other shard) carries a second job. Every byte is
    checked, each tunnel carried its job, and no shard dropped a packet it had to hand over."""
    need_gateway("uring")
    with labutil.lab("--sites", "2", "--dataplane", "uring", "--gw-shards", "2", "--agents",
                     "--wan", "delay=5ms,rate=100mbit") as st:
        url = st["agents"][0]["url"]
        ids = []
        for _ in range(2):
            with reserve.reserved_pairs(url, ["a", "b"], 20_000_000) as made:
                r = made[0]
                tid = r["tunnel_id"]
                ids.append(tid)
                before = {s: gateway.tunnel_counters(gw_stats(s), tid) for s in ("a", "b")}
                job = labutil.allreduce_job(["--reservation", r["id"], "-b", "1M", "-e", "1M",
                                             "-n", "2", "-w", "1", "-c", "1"])
                rc, doc, err = labutil.finish_job(job, 600)
                assert rc == 0, err[-4000:]
                assert doc["lab"]["path"] == "tunnel" and doc["reservation"] == r["id"], doc
                assert doc["rows"] and all(row["wrong"] == 0 for row in doc["rows"]), doc["rows"]
                for s in ("a", "b"):
                    after = gateway.tunnel_counters(gw_stats(s), tid)
                    sent = after["tx_sent"] - before[s]["tx_sent"]
                    released = after["rx_released"] - before[s]["rx_released"]
                    # 1 MiB allreduces (2 + 1 warm-up + the check) cross the WAN both ways.
                    assert sent > 2 * (1 << 20) // gateway.TUN_MTU_BYTES, (s, tid, sent)
                    assert released > 2 * (1 << 20) // gateway.TUN_MTU_BYTES, (s, tid, released)
        assert {i % 2 for i in ids} == {0, 1}, ids  # tunnel id mod 2 picks the shard
        for s in ("a", "b"):
            backend = gw_stats(s)["backend_shards"]
            assert [b["shard"] for b in backend] == [0, 1], backend
            assert all(b["dispatch_dropped"] == 0 and b["dispatch_no_buffer"] == 0
                       for b in backend), backend
