"""tools/testbed behaviour on one 3-site, 2-path lab (module-scoped, always torn down)."""
from __future__ import annotations

import json

import pytest

import labutil
from labutil import tb

pytestmark = pytest.mark.netns
WAN = "delay=1ms"


@pytest.fixture(scope="module")
def lab3(wanem_ready):
    with labutil.lab("--sites", "3", "--paths", "2", "--wan", WAN,
                     "--wan-path", "2=delay=2ms") as st:
        yield st


def site(st: dict, name: str) -> dict:
    return next(s for s in st["sites"] if s["name"] == name)


def ping(src: str, addr: str, attempts: int = 3, gw: bool = False) -> bool:
    for _ in range(attempts):
        args = ["exec", src, *(["--gw"] if gw else []), "--", "ping", "-n", "-q", "-c", "1",
                "-W", "1", addr]
        if tb(*args, timeout=10).returncode == 0:
            return True
    return False


def test_status_json_describes_the_lab(lab3):
    st = labutil.status()
    assert st["healthy"] is True and st["phase"] == "up"
    assert [s["name"] for s in st["sites"]] == ["a", "b", "c"]
    for s in st["sites"]:
        for key in ("name", "host_ns", "best_effort_addr", "tunnel_addr", "gateway_ns"):
            assert s[key], key
        assert s["host_ns"] in labutil.namespaces() and s["gateway_ns"] in labutil.namespaces()
    assert sorted((p["pair"], p["index"]) for p in st["paths"]) == [
        ("ab", 1), ("ab", 2), ("ac", 1), ("ac", 2), ("bc", 1), ("bc", 2)]
    for p in st["paths"]:
        assert p["alive"] and p["control_socket_present"] and labutil.pid_alive(p["pid"])
        assert p["spec"] == (WAN if p["index"] == 1 else "delay=2ms")
        assert p["wan_ns"] in labutil.namespaces()
    human = tb("status")
    assert human.returncode == 0 and "healthy" in human.stdout


def test_every_host_reaches_both_addresses_of_every_other_site(lab3):
    failures = [f"{x['name']} -> {y[key]}"
                for x in lab3["sites"] for y in lab3["sites"] if x is not y
                for key in ("best_effort_addr", "tunnel_addr")
                if not ping(x["name"], y[key])]
    assert not failures


def test_best_effort_uses_path_1_and_path_2_is_a_disjoint_working_path(lab3):
    for p in lab3["paths"]:
        a, b = p["sites"]
        route = tb("exec", a, "--gw", "--", "ip", "route", "get",
                        site(lab3, b)["tunnel_addr"], check=True).stdout
        assert f"dev {lab3['prefix']}{p['pair']}1-{a}" in route
        assert ping(a, p["gateway_addrs"][b], gw=True), f"path {p['key']} does not forward"
    # The two paths of a pair are separate namespaces, emulators and veths.
    keys = {(p["wan_ns"], p["pid"], p["control_socket"]) for p in lab3["paths"]}
    assert len(keys) == len(lab3["paths"])


def test_second_up_is_refused_and_leaves_the_lab_alone(lab3):
    res = tb("up", "--sites", "2")
    assert res.returncode != 0
    assert "already up" in res.stderr and "down first" in res.stderr
    assert labutil.status()["healthy"] is True


def test_exec_runs_in_the_site_host_and_passes_the_exit_code(lab3):
    assert tb("exec", "c", "--", "sh", "-c", "exit 7").returncode == 7
    addrs = tb("exec", "b", "--", "ip", "-o", "-4", "addr", "show", check=True).stdout
    assert "10.10.2.2/24" in addrs and "10.20.2.2/32" in addrs
    res = tb("exec", "d", "--", "true")  # no site d in a 3-site lab
    assert res.returncode == 125 and "does not exist" in res.stderr


def test_wanem_forwards_to_the_path_control_socket(lab3):
    res = tb("wanem", "ab", "2", "--", "stats", "--json", check=True)
    json.loads(res.stdout)
    res = tb("wanem", "ad", "1", "--", "stats")
    assert res.returncode == 125 and "no WAN path" in res.stderr


def test_runtime_change_takes_effect(lab3, probe_bin):
    b = site(lab3, "b")
    before = labutil.probe("a", b, pps=1000, count=300)
    assert 1_000_000 <= before["owd_ns"]["p50"] <= 1_500_000
    tb("wanem", "ab", "1", "--", "set", "delay=20ms", check=True)
    try:
        after = labutil.probe("a", b, pps=1000, count=300, port=47001)
        assert 20_000_000 <= after["owd_ns"]["p50"] <= 20_500_000
        assert after["lost"] == 0
    finally:
        tb("wanem", "ab", "1", "--", "set", WAN, check=True)


def test_link_down_and_up_via_control(lab3):
    b = site(lab3, "b")
    tb("wanem", "ab", "1", "--", "link", "down", check=True)
    try:
        res = tb("exec", "a", "--", "ping", "-n", "-q", "-c", "3", "-i", "0.2", "-W", "1",
                      b["best_effort_addr"])
        assert res.returncode != 0, "ping crossed a link that is down"
        assert ping("a", site(lab3, "c")["best_effort_addr"])  # other pairs unaffected
        assert ping("a", "10.102.12.2", gw=True)                # and so is path 2
    finally:
        tb("wanem", "ab", "1", "--", "link", "up", check=True)
    assert ping("a", b["best_effort_addr"], attempts=5)

