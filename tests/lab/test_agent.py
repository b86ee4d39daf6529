"""The lab with the control agent (`tools/testbed up --dataplane uring --agents`): reservations
made through detwanctl provision tunnels on the running gateways, traffic flows through them,
release stops it; refusals name their cause; a plan over three sites is reserved and carries a
job's allreduce. Faults (paths down, kill -9, forgeries): test_agent_faults.py.

One 3-site lab with two disjoint WAN paths per pair (module-scoped, always torn down: agent_lab).
The pure part (the generated topology, the OpenAPI document) is checked first, without root.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

import labutil
from labutil import tb

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import agent, builder, gateway, topology  # noqa: E402
from agent_lab import OPENAPI, WAN, ctl, gw_tunnels, http, openapi, ping, validate  # noqa: E402

# ------------------------------------------------------------------------ the OpenAPI document

def test_openapi_document_is_openapi_3_and_lists_every_route():
    doc = openapi()
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) == {"/healthz", "/metrics", "/v1/stats", "/openapi.yaml",
                                 "/v1/topology",
                                 "/v1/paths", "/v1/reservations", "/v1/reservations/{id}",
                                 "/v1/reservations/{id}/{action}", "/v1/pools",
                                 "/v1/pools/{name}", "/v1/plan", "/v1/policy",
                                 "/v1/federation/view", "/v1/federation/segments",
                                 "/v1/federation/segments/{id}",
                                 "/v1/federation/segments/{id}/{action}",
                                 # the operator console (docs/console.md, test_console.py)
                                 "/", "/v1/whoami", "/v1/gateways",
                                 "/v1/gateways/{name}/tunnels", "/v1/calendar"}
    # Every route the agent serves (control/api/routes.h) is there, with its methods.
    assert set(doc["paths"]["/v1/reservations/{id}"]) >= {"get", "patch", "delete"}
    assert doc["paths"]["/v1/reservations/{id}/{action}"]["parameters"][1]["schema"]["enum"] == [
        "commit", "abort", "provision", "release", "terminate", "rotate-key"]
    # The request fields the parser accepts (control/api/requests.cc) are the documented ones.
    source = (labutil.REPO / "control" / "api" / "requests.cc").read_text()
    for schema in ("ReserveRequest", "PlanRequest", "PoolRequest"):
        for f in doc["components"]["schemas"][schema]["properties"]:
            assert f'"{f}"' in source, (schema, f)


# ------------------------------------------------------------------------ generation (no root)

def test_generated_topology_and_gateway_configs_are_accepted(tmp_path):
    topo = topology.build(3, 2)
    config = builder.LabConfig(sites=3, paths=2, wan_spec=WAN, dataplane="uring", agents=True)
    # The gateways' identity keys (the configurations name them) go to the test's directory.
    config.gateway = gateway.GatewayOptions(backend="uring", key_dir=tmp_path / "keys")
    config.agent_port = 7999
    config.mgmt_net = "10.99"
    config.plan_gateways(topo)
    gateway.write_tunnel_keys(config.gateway)
    text = config.agent_topology
    # Every address: the root namespace's loopback and the management network into the hosts.
    assert "listen: 0.0.0.0:7999" in text
    assert "allow: [127.0.0.0/8, 10.99.0.0/16]" in text
    assert "{name: ab2, ends: [a, b], capacity: 200mbit, delay: 5ms" in text
    assert "{name: c-2, port: ac2, gateway: c}" in text  # site a's peer c over path 2
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    cmd = agent.agent_command(labutil.build_dir())
    status, message = agent.check_topology(cmd, path)
    assert status == 0, message
    assert "3 sites, 3 gateways, 3 nodes, 6 links" in message
    for site, yaml in config.gateway_configs.items():
        assert "tunnels: []" in yaml and "admin_socket:" in yaml
        f = tmp_path / f"gw-{site}.yaml"
        f.write_text(yaml)
        status, message = gateway.check_config(gateway.gw_command(labutil.build_dir()), f)
        assert status == 0, message


@pytest.mark.netns
def test_static_tunnel_options_are_refused_with_agents(wanem_ready):
    res = tb("up", "--dataplane", "uring", "--agents", "--tunnel-rate", "10mbit")
    assert res.returncode == 2
    assert "reserved through the agent" in res.stderr
    res = tb("up", "--agents")
    assert res.returncode == 2 and "--dataplane" in res.stderr
    assert not labutil.namespaces()


# ------------------------------------------------------------------------------ the lab

@pytest.mark.netns
def test_status_lists_the_agent_and_the_gateways_start_empty(agentlab):
    a = agentlab["agents"][0]
    assert a["name"] == "lab" and a["alive"] and a["url"].startswith("http://127.0.0.1:")
    status, health = http(a["url"] + "/healthz")
    assert status == 200 and health["gateways_reachable"] == 3
    for s in agentlab["sites"]:
        assert s["gateway"]["admin_socket"].endswith(f"gw-{s['name']}.admin.sock")
        assert gw_tunnels(s["name"]) == []
    mode = os.stat(agentlab["sites"][0]["gateway"]["admin_socket"]).st_mode & 0o777
    assert mode == 0o600
    assert not ping("a", agentlab["sites"][1]["tunnel_addr"], count=1)


@pytest.mark.netns
def test_labs_starting_together_get_different_management_networks():
    """The management network is claimed under a lock until its addresses exist: a second lab
    choosing meanwhile gets another; a claim whose process died is ignored."""
    first = agent.free_mgmt_net()
    try:
        second = agent.free_mgmt_net()  # `first` is claimed by this (live) process
        agent.release_mgmt_claim(second)
        assert second != first
    finally:
        agent.release_mgmt_claim(first)
    gone = subprocess.Popen(["true"])
    gone.wait()
    (agent.MGMT_CLAIMS / first).write_text(str(gone.pid), encoding="utf-8")
    again = agent.free_mgmt_net()
    agent.release_mgmt_claim(again)
    assert again == first


@pytest.mark.netns
def test_answers_match_the_openapi_document(agentlab):
    doc = openapi()
    url = agentlab["agents"][0]["url"]
    status, health = http(url + "/healthz")
    validate(doc, "Health", health)
    status, topo = http(url + "/v1/topology")
    validate(doc, "Topology", topo)
    status, paths = http(url + "/v1/paths", "POST", '{"src":"a","dst":"b","k":2}')
    assert status == 200
    validate(doc, "PathsAnswer", paths)
    status, r = http(url + "/v1/reservations", "POST",
                     '{"src":"a","dst":"c","min_bandwidth_bps":1000000,"duration_ns":60000000000,'
                     '"provision":true}')
    assert status == 201
    validate(doc, "Reservation", r)
    status, listed = http(url + "/v1/reservations")
    for item in listed["reservations"]:
        validate(doc, "Reservation", item)
    status, error = http(url + f"/v1/reservations/{r['id']}/commit?x", "POST")
    assert status == 200  # already past commit: answered with the reservation
    status, error = http(url + "/v1/reservations/r-424242")
    assert status == 404
    validate(doc, "Error", error)
    # Compute pools and a plan (co-scheduling).
    for site in ("a", "b"):
        status, pool = http(url + "/v1/pools", "POST",
                            f'{{"name":"{site}-cpu","site":"{site}","kind":"cpu","ranks":2,'
                            '"reference":{"step_ns":1000000000,"steps":5,'
                            '"gradient_bytes":4000000,"backward_ns":600000000}}')
        assert status == 201, pool
        validate(doc, "Pool", pool)
    status, pools = http(url + "/v1/pools")
    assert {p["name"] for p in pools["pools"]} >= {"a-cpu", "b-cpu"}
    status, plan = http(url + "/v1/plan", "POST",
                        '{"gradient_bytes":4000000,"ranks":4,"step_compute_ns":1000000000,'
                        '"sites":["a","b"]}')
    assert status == 200, plan
    validate(doc, "Plan", plan)
    assert sum(p["ranks"] for p in plan["placement"]) == 4
    # With DDP-style buckets the pools' measured backward share hides part of the allreduce.
    status, overlapped = http(url + "/v1/plan", "POST",
                              '{"gradient_bytes":4000000,"ranks":4,"step_compute_ns":1000000000,'
                              '"sites":["a","b"],"placement":[{"site":"a","ranks":2},'
                              '{"site":"b","ranks":2}],"bucket_bytes":262144,'
                              '"first_bucket_bytes":1048576}')
    assert status == 200, overlapped
    validate(doc, "Plan", overlapped)
    predicted = overlapped["predicted"]
    assert predicted["buckets"] == 13 and predicted["backward_fraction"] == 0.6
    assert predicted["exposed_allreduce_ns"] < predicted["allreduce_ns"]
    status, error = http(url + "/v1/plan", "POST", '{"gradient_bytes":1,"ranks":4000}')
    assert status == 422 and error["error"]["code"] == "not_enough_compute"
    validate(doc, "Error", error)
    for site in ("a", "b"):
        assert http(url + f"/v1/pools/{site}-cpu", "DELETE")[0] == 200
    status, _ = http(url + f"/v1/reservations/{r['id']}", "DELETE")
    assert status == 200
    with urllib.request.urlopen(url + "/openapi.yaml", timeout=10) as served:
        assert served.read().decode() == OPENAPI.read_text()


@pytest.mark.netns
def test_reserve_provision_carries_traffic_and_release_stops_it(agentlab):
    b = agentlab["sites"][1]
    res = ctl("reserve", "--from", "a", "--to", "b", "--rate", "50mbit", "--max-latency", "40ms",
              "--max-latency-variation", "5ms", "--duration", "10m", "--provision", "--json",
              check=True)
    r = json.loads(res.stdout)
    assert r["state"] == "provisioned" and r["dataplane"]["active"]
    assert r["path"] == ["a", "b"] and r["links"] == ["ab1"]
    bound = r["bound"]
    assert 5_000_000 < bound["max_latency_ns"] <= 40_000_000
    assert 0 <= bound["max_latency_variation_ns"] <= 5_000_000
    tunnels = gw_tunnels("a")
    assert [t["id"] for t in tunnels] == [r["tunnel_id"]]
    assert tunnels[0]["owner"] == "agent:lab" and tunnels[0]["rate_bps"] == 50_000_000
    assert tunnels[0]["match"]["dst"] == ["10.20.2.0/24"]
    labutil.status()  # the lab is healthy with the agent
    assert ping("a", b["tunnel_addr"])
    st = json.loads(tb("gw", "b", "--", "stats", "--json", check=True).stdout)
    rx = next(t for t in st["tunnels"] if t["id"] == r["tunnel_id"])["rx"]
    assert rx["on_time"]["received_packets"] + rx["best_effort"]["received_packets"] >= 3
    # `stats --watch`: per interval what the tunnel carried, while pings cross it.
    pinger = subprocess.Popen([str(labutil.TESTBED), "exec", "a", "--", "ping", "-n", "-q", "-c",
                               "60", "-i", "0.02", b["tunnel_addr"]],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        watch = tb("gw", "a", "--", "stats", "--watch", "0.4", "--count", "2", check=True,
                   timeout=30).stdout.splitlines()
    finally:
        pinger.wait(timeout=30)
    lines = [x for x in watch if f"tunnel {r['tunnel_id']} " in x]
    assert len(lines) == 2 and lines[0].startswith("[  0.00-"), watch
    sent = [float(x.split(" tx ")[1].split()[0]) for x in lines]
    assert max(sent) > 10, watch  # ~50 pings/s cross the tunnel
    assert ctl("release", r["id"]).returncode == 0
    assert gw_tunnels("a") == [] and gw_tunnels("b") == []
    assert not ping("a", b["tunnel_addr"], count=2)
    again = json.loads(ctl("provision", r["id"], "--json", check=True).stdout)
    assert again["dataplane"]["active"]
    assert ping("a", b["tunnel_addr"])
    assert ctl("terminate", r["id"]).returncode == 0
    assert gw_tunnels("a") == []


@pytest.mark.netns
def test_refusals_exit_non_zero_with_the_cause(agentlab):
    res = ctl("reserve", "--from", "a", "--to", "c", "--rate", "500mbit", "--duration", "10m",
              "--json")
    assert res.returncode == 1
    error = json.loads(res.stdout)["error"]
    assert error["code"] == "no_capacity" and "reservable" in error["message"]
    res = ctl("reserve", "--from", "a", "--to", "c", "--rate", "5mbit", "--max-latency", "2ms",
              "--duration", "10m", "--json")
    assert res.returncode == 1
    error = json.loads(res.stdout)["error"]
    assert error["code"] == "latency_below_propagation" and error["field"] == "max_latency_ns"
    assert "5ms" in error["message"]
    status, body = http(os.environ["DETWAN_AGENT"] + "/v1/reservations", "POST",
                        '{"src":"a","dst":"c","min_bandwidth_bps":1000000,"duration_ns":60000000000,'
                        '"colour":"red"}')
    assert status == 400 and body["error"]["field"] == "colour"
    assert ctl("reserve", "--from", "a", "--to", "z", "--rate", "1mbit", "--duration", "1m"
               ).returncode == 2


@pytest.mark.netns
def test_two_disjoint_paths_and_a_reservation_on_path_two(agentlab):
    res = ctl("paths", "--from", "b", "--to", "c", "--rate", "20mbit", "--k", "2", "--json",
              check=True)
    paths = json.loads(res.stdout)["paths"]
    assert [p["links"] for p in paths] == [["bc1"], ["bc2"]] or \
        [p["links"] for p in paths] == [["bc2"], ["bc1"]]
    # Fill path 1 (150 Mbit/s takes 82 of its 90 reservable slots): the next goes over path 2.
    first = json.loads(ctl("reserve", "--from", "b", "--to", "c", "--rate", "150mbit",
                           "--duration", "10m", "--commit", "--src-prefix", "10.20.2.2/32",
                           "--dst-prefix", "10.20.3.2/32", "--json", check=True).stdout)
    second = json.loads(ctl("reserve", "--from", "b", "--to", "c", "--rate", "100mbit",
                            "--duration", "10m", "--provision", "--src-prefix", "10.20.2.3/32",
                            "--dst-prefix", "10.20.3.3/32", "--json", check=True).stdout)
    assert first["links"] != second["links"]
    on_b = {t["id"]: t for t in gw_tunnels("b")}
    assert on_b[second["tunnel_id"]]["peer"] in ("c", "c-2")
    for r in (first, second):
        ctl("terminate", r["id"], check=True)


@pytest.mark.netns
def test_a_plan_over_three_sites_is_reserved_and_carries_the_jobs_allreduce(agentlab):
    """Co-scheduling through the whole stack: pools of 2 ranks in a, b and c; a 6-rank job fits
    on no fewer than three sites, so `detwanctl plan --reserve` holds a reservation for every
    pair at one rate; provisioned, they carry an allreduce of 2 ranks per site (results exact,
    path: tunnel); terminated, the links' bookings return to zero."""
    url = agentlab["agents"][0]["url"]
    for site in ("a", "b", "c"):
        ctl("pool", "register", "--name", f"{site}-plan", "--site", site, "--kind", "cpu",
            "--ranks", "2", check=True)
    held: list[str] = []
    try:
        res = ctl("plan", "--gradient-bytes", "4m", "--ranks", "6", "--step-compute", "1s",
                  "--reserve", "--request-id", "lab-three-sites", "--json", check=True)
        plan = json.loads(res.stdout)
        assert sorted((p["site"], p["ranks"]) for p in plan["placement"]) == [
            ("a", 2), ("b", 2), ("c", 2)]
        pairs = sorted((r["from"], r["to"]) for r in plan["reservations"])
        assert pairs == [("a", "b"), ("a", "c"), ("b", "c")]
        assert len({r["rate_bps"] for r in plan["reservations"]}) == 1
        held = [r["id"] for r in plan["reserved"]]
        assert len(held) == 3 and all(r["state"] == "held" for r in plan["reserved"])
        for rid in held:
            ctl("commit", rid, check=True)
            assert json.loads(ctl("provision", rid, "--json", check=True).stdout)[
                "dataplane"]["active"]
        env = dict(os.environ, DETWAN_BUILD_DIR=str(labutil.build_dir()))
        run = subprocess.run(
            [str(labutil.build_dir() / "tools/bench/detwan-bench"), "allreduce", "--lab",
             "--no-setup", "--sites", "3", "--ranks-per-site", "2", "--json", "--reservation",
             ",".join(held), "-b", "256K", "-e", "256K", "-n", "5", "-w", "1", "-c", "1"],
            capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL)
        assert run.returncode == 0, run.stderr[-4000:]
        doc = json.loads(run.stdout)
        assert doc["lab"]["path"] == "tunnel"
        assert doc["rows"] and all(row["wrong"] == 0 for row in doc["rows"]), doc["rows"]
    finally:
        for rid in held:
            ctl("terminate", rid)
        for site in ("a", "b", "c"):
            ctl("pool", "remove", f"{site}-plan")
    status, topo = http(url + "/v1/topology")
    assert status == 200
    booked = [d["reserved_bps_now"] for link in topo["links"] for d in link["directions"]]
    assert booked and all(b == 0 for b in booked), topo["links"]


@pytest.mark.netns
def test_modify_reprograms_the_tunnel_and_refuses_what_does_not_fit(agentlab):
    r = json.loads(ctl("reserve", "--from", "a", "--to", "c", "--rate", "20mbit", "--duration",
                       "10m", "--max-latency", "30ms", "--provision", "--json", check=True).stdout)
    m = json.loads(ctl("modify", r["id"], "--rate", "60mbit", "--json", check=True).stdout)
    assert m["version"] == 2 and m["min_bandwidth_bps"] == 60_000_000
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rates = [t["rate_bps"] for t in gw_tunnels("a") if t["id"] == r["tunnel_id"]]
        if rates == [60_000_000]:
            break
        time.sleep(0.1)
    assert rates == [60_000_000]
    res = ctl("modify", r["id"], "--rate", "400mbit", "--json")
    assert res.returncode == 1
    assert json.loads(ctl("show", r["id"], "--json").stdout)["min_bandwidth_bps"] == 60_000_000
    ctl("terminate", r["id"], check=True)


@pytest.mark.netns
def test_hold_times_out_and_request_ids_are_idempotent(agentlab):
    held = json.loads(ctl("reserve", "--from", "b", "--to", "a", "--rate", "1mbit", "--duration",
                          "10m", "--hold", "1s", "--request-id", "job-7", "--json",
                          check=True).stdout)
    again = json.loads(ctl("reserve", "--from", "b", "--to", "a", "--rate", "1mbit", "--duration",
                           "10m", "--hold", "1s", "--request-id", "job-7", "--json",
                           check=True).stdout)
    assert again["id"] == held["id"]
    other = ctl("reserve", "--from", "b", "--to", "a", "--rate", "2mbit", "--duration", "10m",
                "--request-id", "job-7", "--json")
    assert other.returncode == 1
    assert json.loads(other.stdout)["error"]["code"] == "idempotency_conflict"
    deadline = time.monotonic() + 10
    state = held["state"]
    while time.monotonic() < deadline and state == "held":
        time.sleep(0.2)
        state = json.loads(ctl("show", held["id"], "--json").stdout)["state"]
    shown = json.loads(ctl("show", held["id"], "--json").stdout)
    assert shown["state"] == "terminated" and shown["reason"] == "hold_timeout"
    late = ctl("commit", held["id"], "--json")
    assert late.returncode == 1 and json.loads(late.stdout)["error"]["code"] == "hold_expired"




# ------------------------------------------------------------------------ metrics (issue 35)

def test_dashboard_checker_finds_a_name_no_exposition_has():
    """The check below could fail: a query naming a metric that does not exist is reported."""
    import metrics_check
    assert metrics_check.metric_names(
        'histogram_quantile(0.99, sum by (instance, le) (rate(x_seconds_bucket{a="b"}[5m])))'
        ' / on(instance) y_total') == {"x_seconds_bucket", "y_total"}
    assert metrics_check.unknown_dashboard_metrics(set())  # nothing known: everything missing


@pytest.mark.netns
def test_gateway_metrics_over_http_windows_and_dashboards(agentlab):
    """Each gateway serves /metrics over HTTP to its own LAN only; the exposition parses with the
    official Prometheus client and has histogram buckets for the tunnel's delay; stats --json
    has the windowed percentiles; every query of docs/grafana/ names a real series."""
    import metrics_check
    b = agentlab["sites"][1]
    r = json.loads(ctl("reserve", "--from", "a", "--to", "b", "--rate", "20mbit", "--duration",
                       "10m", "--provision", "--json", check=True).stdout)
    try:
        assert ping("a", b["tunnel_addr"], count=20)

        def scrape(site: str, host: str) -> subprocess.CompletedProcess:
            code = ("import sys, urllib.request\n"
                    f"r = urllib.request.urlopen('http://{host}:{gateway.METRICS_PORT}/metrics',"
                    " timeout=10)\n"
                    "sys.stdout.write(r.headers['Content-Type'] + '\\n' + r.read().decode())")
            return tb("exec", site, "--", "/usr/bin/python3", "-c", code, timeout=60)

        lan_b = "10.10.2.1"  # gateway b's LAN address (tools/lab/topology.py)
        got = scrape("b", lan_b)
        assert got.returncode == 0, got.stderr
        content_type, text = got.stdout.split("\n", 1)
        assert content_type.startswith("text/plain; version=0.0.4")
        fams = metrics_check.families(text)
        version = subprocess.run([str(labutil.build_dir() / "dataplane/daemon/detwan-gw"),
                                  "--version"], capture_output=True, text=True).stdout.split()[-1]
        info = [s for s in fams["detwan_build_info"].samples]
        assert info[0].labels == {"program": "detwan-gw", "version": version}
        delay = fams["detwan_gw_tunnel_rx_wan_delay_seconds"]
        assert delay.type == "histogram"
        tunnel = str(r["tunnel_id"])
        mine = [s for s in delay.samples if s.labels.get("tunnel") == tunnel]
        buckets = [s for s in mine if s.name.endswith("_bucket")]
        counts = [s for s in mine if s.name.endswith("_count")]
        assert len(buckets) == 2 * 17 and sum(s.value for s in counts) >= 20  # the pings
        inf = sum(s.value for s in buckets if s.labels["le"] == "+Inf")
        assert inf == sum(s.value for s in counts)
        # From site a's LAN (routed to b's gateway as best effort): outside b's allow-list, the
        # connection is closed unanswered and counted.
        refused = scrape("a", lan_b)
        assert refused.returncode != 0
        time.sleep(1.1)  # past min_interval: a fresh build
        again = metrics_check.families(scrape("b", lan_b).stdout.split("\n", 1)[1])
        outcomes = {s.labels["outcome"]: s.value
                    for s in again["detwan_gw_http_connections"].samples
                    if s.name.endswith("_total")}
        assert outcomes["refused_address"] >= 1 and outcomes["accepted"] >= 2
        # stats --json: the recent past of the same histogram.
        st = json.loads(tb("gw", "b", "--", "stats", "--json", check=True).stdout)
        t = next(x for x in st["tunnels"] if x["id"] == r["tunnel_id"])
        assert t["auth"] is not None and t["auth"]["cipher"]  # encrypted, as users run it
        windows = t["rx"]["windows"]
        def seen(window: str) -> int:
            return sum(windows[c]["wan_delay_ns"][window]["count"]
                       for c in ("on_time", "best_effort"))
        # The pings took ~20 s (one a second): the last 10 s hold some, 5 min all of them.
        assert 0 < seen("10s") < 20 <= seen("5m") == seen("1m")
        for c in ("on_time", "best_effort"):
            w = windows[c]["wan_delay_ns"]["5m"]
            assert w["span_ns"] > 0 and w["count"] >= windows[c]["wan_delay_ns"]["10s"]["count"]
        # Every dashboard query names a series one of these real expositions has.
        known = metrics_check.series_names(text)
        known |= metrics_check.series_names(scrape("a", "10.10.1.1").stdout.split("\n", 1)[1])
        with urllib.request.urlopen(agentlab["agents"][0]["url"] + "/metrics", timeout=10) as a:
            agent_text = a.read().decode()
        agent_fams = metrics_check.families(agent_text)
        assert agent_fams["detwan_agent_http_request_seconds"].type == "histogram"
        known |= metrics_check.series_names(agent_text)
        assert metrics_check.unknown_dashboard_metrics(known) == []
        # The agent's stats are its exposition's counters from the same lists (agent_counters.h).
        status, stats = http(agentlab["agents"][0]["url"] + "/v1/stats")
        assert status == 200
        validate(openapi(), "Stats", stats)
        assert stats["counters"]["admitted"]["reserve"] >= 1
        assert sum(g["applies"] for g in stats["gateways"]) >= 2  # the reservation's two ends
        for g in stats["gateways"]:
            assert g["passes"] >= 1, g
            assert (f'detwan_agent_gateway_applies_total{{gateway="{g["name"]}"}}'
                    in agent_text), g["name"]
    finally:
        ctl("terminate", r["id"])
