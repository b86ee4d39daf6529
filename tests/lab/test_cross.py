"""Real cross traffic (tools/lab/cross.py, `tools/testbed cross`): the cross hosts, iperf3 TCP
(cubic and bbr) and UDP flows between them over the best-effort path 1, and their cleanup.

The first tests are pure (planning, argument parsing, iperf3 report parsing) and need no root.
One lab test brings up a lab with gateways of its own; the others share one 2-site lab whose
WAN is rate-limited (WAN below). They assert behaviour, never absolute times: the emulator's
best-effort class drops and the best-effort RTT rises as a ratio against the idle RTT measured
in the same test. The last test ends with `down` on the shared lab.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

import labutil
from labutil import tb
from lab import cross, cross_plan, cross_report, gateway
from lab.units import parse_share

netns = pytest.mark.netns
RATE_BPS = 50_000_000
WAN = f"delay=5ms,rate={RATE_BPS // 1_000_000}mbit,queue=256kb"
RAMP_S = 3.0          # TCP flows settle (slow start, BBR's startup) before measuring
MBIT = 1e6


# ------------------------------------------------------------------------ pure, no root

def test_rate_split_tcp_and_udp():
    assert cross.split_rate(75_000_000, 4, 0.5) == (9_375_000, 37_500_000)
    assert cross.split_rate(100_000_000, 4, 0.0) == (25_000_000, 0)
    assert cross.split_rate(100_000_000, 4, 1.0) == (0, 100_000_000)
    assert cross.split_rate(100_000_000, 0, 0.3) == (0, 100_000_000)  # UDP carries it all
    tcp, udp = cross.split_rate(100_000_001, 3, 0.25)
    assert 3 * tcp + udp <= 100_000_001 and 3 * tcp + udp >= 100_000_001 - 3
    with pytest.raises(ValueError):
        cross.split_rate(1_000_000, 4, 1.5)


def test_congestion_control_alternates_over_the_flows():
    assert cross.cc_per_flow(5, ("cubic", "bbr")) == ["cubic", "bbr", "cubic", "bbr", "cubic"]
    assert cross.cc_per_flow(2, ("reno",)) == ["reno", "reno"]
    with pytest.raises(ValueError):
        cross.cc_per_flow(2, ("cubic; rm",))


def test_plan_both_directions_of_every_pair_with_distinct_ports():
    groups = cross.plan(["a", "b", "c"], 75_000_000)
    assert {(g.src, g.dst) for g in groups} == {("a", "b"), ("b", "a"), ("a", "c"), ("c", "a"),
                                                ("b", "c"), ("c", "b")}
    assert len({g.port for g in groups}) == len(groups)
    for src, dst in {(g.src, g.dst) for g in groups}:
        mine = [g for g in groups if (g.src, g.dst) == (src, dst)]
        assert sum(g.offered_bps for g in mine) == 75_000_000  # per direction
        assert {(g.kind, g.cc, g.streams) for g in mine} == {("tcp", "cubic", 2),
                                                             ("tcp", "bbr", 2),
                                                             ("udp", None, 1)}
    one = cross.plan(["a", "b", "c"], 10_000_000, tcp_flows=3, pairs=["cb"],
                     both_directions=False)
    assert {(g.src, g.dst) for g in one} == {("c", "b")}
    assert [(g.cc, g.streams) for g in one if g.kind == "tcp"] == [("cubic", 2), ("bbr", 1)]
    for bad in (["ad"], ["aa"], ["abc"]):
        with pytest.raises(ValueError):
            cross.plan(["a", "b", "c"], 10_000_000, pairs=bad)
    with pytest.raises(ValueError):
        cross.plan(["a", "b"], 3_000, tcp_flows=4)  # below 1 kbit/s per flow


def test_offered_rate_from_rate_or_share_of_a_rate():
    assert cross.offered_rate_bps(rate="150mbit") == 150_000_000
    assert cross.offered_rate_bps(share="150%", of="100mbit") == 150_000_000
    assert cross.offered_rate_bps(share="0.8", of="1gbit") == 800_000_000
    assert parse_share("250%") == 2.5
    for kwargs in ({}, {"rate": "1mbit", "share": "1"}, {"share": "150%"}, {"of": "1mbit"},
                   {"rate": "fast"}, {"share": "-1", "of": "1mbit"}, {"rate": "0mbit"}):
        with pytest.raises(ValueError):
            cross.offered_rate_bps(**kwargs)


def test_iperf3_arguments():
    tcp, udp = [g for g in cross.plan(["a", "b"], 40_000_000, both_directions=False)
                if g.cc in ("bbr", None)]
    client = cross_plan.iperf3_args(tcp, "client", "10.30.2.2", None, 1472)
    assert client[:2] == ["-c", "10.30.2.2"] and ["-C", "bbr"] == client[-2:]
    assert "-t 0" in " ".join(client) and f"-b {tcp.stream_rate_bps}" in " ".join(client)
    assert "-P 2" in " ".join(client) and "-J" in client
    u = " ".join(cross_plan.iperf3_args(udp, "client", "10.30.2.2", 30, 1472))
    assert "-u -l 1472" in u and "-t 30" in u and "-b 20000000" in u and "-C" not in u
    server = cross_plan.iperf3_args(udp, "server", "10.30.2.2", 30, 1472)
    assert server[:4] == ["-s", "-1", "-B", "10.30.2.2"] and "-J" in server


def test_cli_rejects_bad_cross_arguments_before_touching_anything():
    for args in (["--share", "150%"], ["--rate", "1mbit", "--of", "1mbit"], ["--rate", "x"],
                 ["--rate", "10mbit", "--udp-fraction", "2"],
                 ["--rate", "10mbit", "--duration", "soon"],
                 ["--rate", "10mbit", "--cc", "cubic;bbr"]):
        res = tb("cross", "start", *args, timeout=30)
        assert res.returncode == 2, (args, res.stderr)
        assert "cross start" in res.stderr


def _server_doc(streams: list[tuple[int, float]], cc: str = "cubic") -> dict:
    return {"end": {"streams": [{"receiver": {"bytes": b, "seconds": s}} for b, s in streams],
                    "receiver_tcp_congestion": cc}}


def test_report_per_flow_and_totals_from_iperf3_json():
    tcp = {"id": "ab-cubic", "src": "a", "dst": "b", "kind": "tcp", "cc": "cubic",
           "streams": 2, "stream_rate_bps": 10_000_000, "port": 5301}
    client = {"end": {"sender_tcp_congestion": "cubic",
                      "streams": [{"sender": {"bytes": 1_300_000, "retransmits": 4}},
                                  {"sender": {"bytes": 700_000, "retransmits": 9}}]}}
    flows = cross_report.group_flows(tcp, _server_doc([(1_250_000, 2.0), (625_000, 2.0)]),
                                     client, wall_s=2.1)
    assert [f["id"] for f in flows] == ["ab-cubic-1", "ab-cubic-2"]
    assert flows[0]["achieved_bps"] == pytest.approx(5_000_000)
    assert flows[1]["retransmits"] == 9 and flows[1]["error"] is None
    # A duration iperf3 got wrong (hours for a run of seconds) falls back to the wall clock.
    bad = cross_report.group_flows(tcp, _server_doc([(1_000_000, 15959.2)] * 2), client, 4.0)
    assert bad[0]["seconds_from"] == "wall-clock"
    assert bad[0]["achieved_bps"] == pytest.approx(2_000_000)
    udp = {"id": "ba-udp", "src": "b", "dst": "a", "kind": "udp", "cc": None, "streams": 1,
           "stream_rate_bps": 20_000_000, "port": 5302}
    server = {"end": {"sum_received": {"bytes": 2_500_000, "seconds": 2.0, "packets": 2000,
                                       "lost_packets": 300, "lost_percent": 15.0,
                                       "jitter_ms": 0.4}}}
    (u,) = cross_report.group_flows(udp, server, None, 2.0)
    assert u["achieved_bps"] == pytest.approx(10_000_000) and u["lost_percent"] == 15.0
    assert "no sender report" in u["error"]
    t = cross_report.totals(flows + [u])
    assert t["by_kind"] == pytest.approx({"cubic": 7_500_000, "udp": 10_000_000})
    assert t["by_direction"] == pytest.approx({"ab": 7_500_000, "ba": 10_000_000})
    assert t["tcp_bps"] == pytest.approx(7_500_000) and t["flows_with_errors"] == 1
    wrong = cross_report.group_flows(tcp, _server_doc([(1, 1.0)] * 2, cc="reno"),
                                     {"end": {"sender_tcp_congestion": "reno"}}, 1.0)
    assert "reno" in wrong[0]["error"]


def test_ss_parsing_counts_data_connections_by_congestion_control():
    text = ("0 0 10.30.1.2:40000 10.30.2.2:5301\n"
            "\t ts sack bbr wscale:7,7 bytes_sent:206 bytes_acked:207 segs_out:7\n"
            "0 0 10.30.1.2:40002 10.30.2.2:5301\n"
            "\t ts sack cubic wscale:7,7 bytes_acked:4000000 cwnd:10\n"
            "0 0 10.30.1.2:40004 10.30.2.2:5302\n"
            "\t ts sack bbr wscale:7,7 bytes_acked:5000000 bbr:(bw:1Mbps)\n")
    conns = cross_report.parse_ss_ti(text, {"reno", "cubic", "bbr"})
    assert cross_report.count_cc(conns) == {"cubic": 1, "bbr": 1}  # control connection left out


# --------------------------------------------------------------------------- in a lab

def site(st: dict, name: str) -> dict:
    return next(s for s in st["sites"] if s["name"] == name)


def ping_rtts_ms(src: str, addr: str, count: int = 40, interval_s: float = 0.05) -> list[float]:
    res = tb("exec", src, "--", "ping", "-n", "-c", str(count), "-i", str(interval_s), "-W", "2",
             addr, timeout=count * interval_s + 30)
    return sorted(float(m) for m in re.findall(r"time=([\d.]+) ms", res.stdout))


def median(values: list[float]) -> float:
    return values[len(values) // 2]


def best_effort(stats: dict, direction: str) -> dict:
    return stats[direction]["best_effort"]


def iperf3_pids() -> list[int]:
    """iperf3 processes in this lab's namespaces."""
    pids = []
    for ns in labutil.namespaces():
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in out.split():
            try:
                with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
                    if f.read().strip() == "iperf3":
                        pids.append(int(pid))
            except OSError:
                pass
    return pids


@netns
def test_with_gateways_cross_traffic_stays_best_effort(wanem_ready):
    """With --dataplane the cross prefixes stay kernel-routed over path 1: the flows run, and
    the emulator sees them in best effort, not in the tunnel's reserved class. (Runs before the
    module's lab is created: it needs a lab of its own.)"""
    if not os.access(labutil.gw_binary(), os.X_OK):
        pytest.skip(f"{labutil.gw_binary()} is not built")
    with labutil.lab("--dataplane", "uring", "--tunnel-rate", "20mbit", "--wan", WAN) as st:
        b = site(st, "b")
        route = tb("exec", "a", "--gw", "--", "ip", "route", "get", b["cross_addr"], check=True)
        assert f"dev {labutil.PREFIX}ab1-a" in route.stdout
        tun = tb("exec", "a", "--gw", "--", "ip", "route", "get", b["tunnel_addr"], check=True)
        assert f"dev {gateway.TUN_NAME}" in tun.stdout
        before = labutil.measure.wanem_stats("ab")
        with cross.running(RATE_BPS, tcp_flows=2, pairs=["ab"], both_directions=False) as h:
            time.sleep(2.0)
        after = labutil.measure.wanem_stats("ab")
        flows = h.final_report["flows"]
        assert len(flows) == 3 and iperf3_pids() == []
        assert all(f["error"] is None and f["achieved_bps"] > 0 for f in flows), flows

        def delta(cls: str) -> int:
            return after["ab"][cls]["offered_packets"] - before["ab"][cls]["offered_packets"]
        # The reserved class carries only the gateways' own tunnel traffic meanwhile.
        assert delta("best_effort") > 1000 and delta("reserved") < 0.05 * delta("best_effort")


@pytest.fixture(scope="module")
def xlab(wanem_ready):
    with labutil.lab("--wan", WAN) as st:
        yield st


@pytest.fixture
def no_cross(xlab):
    """Whatever a test started is stopped, also when it fails."""
    yield
    if "cross" in (labutil.status() or {}):
        tb("cross", "stop", timeout=60)
    assert iperf3_pids() == []


@netns
def test_cross_hosts_are_wired_and_routed_over_path_1(xlab, no_cross):
    p = labutil.PREFIX
    for i, s in enumerate(xlab["sites"], start=1):
        assert s["cross_ns"] == f"{p}{s['name']}-xh" and s["cross_addr"] == f"10.30.{i}.2"
        assert s["cross_ns"] in labutil.namespaces()
        ns = s["cross_ns"]
        run = lambda *cmd: subprocess.run(["ip", "netns", "exec", ns, *cmd],  # noqa: E731
                                          capture_output=True, text=True, check=True).stdout
        assert run("cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6").strip() == "1"
        feats = run("ethtool", "-k", s["cross_if"])
        assert re.search(r"generic-segmentation-offload: off", feats)
        assert "PERMANENT" in run("ip", "neigh", "show", "dev", s["cross_if"])
    a, b = site(xlab, "a"), site(xlab, "b")
    route = tb("exec", "a", "--gw", "--", "ip", "route", "get", b["cross_addr"], check=True)
    assert f"dev {p}ab1-a" in route.stdout  # kernel-routed best effort over path 1
    res = subprocess.run(["ip", "netns", "exec", a["cross_ns"], "ping", "-n", "-c", "2", "-W",
                          "2", b["cross_addr"]], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    human = tb("status", check=True).stdout
    assert f"cross host {a['cross_ns']} {a['cross_addr']}" in human


@netns
def test_cross_traffic_saturates_best_effort_with_cubic_bbr_and_udp(xlab, no_cross):
    b = site(xlab, "b")
    idle = ping_rtts_ms("a", b["best_effort_addr"])
    assert len(idle) >= 30
    offered = cross.offered_rate_bps(share="150%", of=f"{RATE_BPS}bit")
    handle = cross.start(offered)
    try:
        st = cross.status(handle)
        assert st["running"] and len(st["groups"]) == 6
        time.sleep(RAMP_S)
        before, t0 = labutil.measure.wanem_stats("ab"), time.monotonic()
        loaded = ping_rtts_ms("a", b["best_effort_addr"])
        after, t1 = labutil.measure.wanem_stats("ab"), time.monotonic()
        in_use = cross.status(handle)["cc_in_use"]
        assert cross.status(handle)["running"]
    finally:
        report = cross.stop(handle)
    print(json.dumps({"idle_rtt_ms_p50": median(idle), "loaded_rtt_ms_p50": median(loaded),
                      "totals": report["totals"],
                      "flows": [(f["id"], round(f["achieved_bps"] / MBIT, 2))
                                for f in report["flows"]]}, indent=1))
    # Both directions of the best-effort class are saturated: frames dropped for a full
    # queue, and the link forwards close to its rate.
    for d in ("ab", "ba"):
        drops = best_effort(after, d)["dropped"]["queue_full"] - \
            best_effort(before, d)["dropped"]["queue_full"]
        sent = best_effort(after, d)["forwarded_bytes"] - best_effort(before, d)["forwarded_bytes"]
        assert drops > 0, f"{d}: no queue_full drops under 150% load"
        assert sent * 8 / (t1 - t0) >= 0.6 * RATE_BPS, f"{d}: best effort not saturated"
    # ... so best effort queues behind the cross traffic (the idle RTT is ~10 ms + noise; a
    # full 256 KiB queue at 50 Mbit/s adds up to ~42 ms each way).
    assert len(loaded) >= 10
    assert median(loaded) >= 1.5 * median(idle), (idle, loaded)
    # Cubic and BBR both ran: in the kernel (ss -ti in the sending cross hosts) and in iperf3.
    for ns, counts in in_use.items():
        assert counts.get("cubic", 0) >= 1 and counts.get("bbr", 0) >= 1, (ns, counts)
    tcp = [f for f in report["flows"] if f["kind"] == "tcp"]
    assert {f["cc_reported"] for f in tcp} == {"cubic", "bbr"}
    assert len(tcp) == 8 and len(report["flows"]) == 10
    # Every flow got through, and stop left nothing behind.
    for f in report["flows"]:
        assert f["error"] is None and f["achieved_bps"] > 0, f
    udp = [f for f in report["flows"] if f["kind"] == "udp"]
    assert all(f["lost_packets"] > 0 for f in udp), "unresponsive UDP above the rate must lose"
    assert report["survivors"] == [] and iperf3_pids() == []
    assert not any(labutil.pid_alive(p) for p in handle.pids())
    assert "cross" not in labutil.status()
    assert not list(labutil.RUN_DIR.glob("cross-*.pid"))


@netns
def test_cli_start_status_stop(xlab, no_cross):
    res = tb("cross", "start", "--share", "150%", "--of", "50mbit", "--tcp-flows", "2",
             "--one-way", "--duration", "60s", "--json", check=True, timeout=60)
    started = json.loads(res.stdout)
    assert started["rate_bps"] == 75_000_000 and started["duration_s"] == 60
    assert {g["id"] for g in started["groups"]} == {"ab-cubic", "ab-bbr", "ab-udp"}
    st = json.loads(tb("cross", "status", "--json", check=True).stdout)
    assert st["running"] and all(g["client"]["alive"] and g["server"]["alive"]
                                 for g in st["groups"])
    assert labutil.status()["cross"]["rate_bps"] == 75_000_000  # in the run state
    again = tb("cross", "start", "--rate", "1mbit", timeout=60)
    assert again.returncode == 1 and "already running" in again.stderr
    time.sleep(1.0)
    human = tb("cross", "stop", check=True, timeout=60).stdout
    assert "achieved" in human and "total" in human
    assert iperf3_pids() == []
    res = tb("cross", "status")
    assert res.returncode == 1 and "no cross traffic" in res.stdout
    res = tb("cross", "stop")
    assert res.returncode == 1 and "no cross traffic is running" in res.stderr


@netns
def test_down_stops_cross_traffic_and_removes_the_cross_hosts(xlab):
    """Runs last in this module: it takes the module's lab down."""
    tb("cross", "start", "--rate", "20mbit", "--tcp-flows", "2", check=True, timeout=60)
    pids = [g[role]["pid"] for g in cross.status()["groups"] for role in ("server", "client")]
    assert pids and all(labutil.pid_alive(p) for p in pids)
    cross_ns = [s["cross_ns"] for s in xlab["sites"]]
    assert tb("down", "-q").returncode == 0
    assert not any(labutil.pid_alive(p) for p in pids)
    assert not set(cross_ns) & set(labutil.namespaces())
    assert labutil.namespaces() == []
    assert not list(labutil.RUN_DIR.glob("cross-*.pid"))
    if os.path.exists(labutil.RUN_DIR / "state.json"):
        pytest.fail("down left the state file")
