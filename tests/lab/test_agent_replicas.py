"""The agent on etcd (issue 36): `tools/testbed up --dataplane uring --agents --agent-replicas 3`
runs three replicas of the lab's agent (lab-1..lab-3) on a 3-member etcd cluster. Exactly one is
leader; detwanctl given every replica's URL reaches it whichever comes first; followers hold the
state warm; the leader killed in the middle of a burst of reservations loses none that were
acknowledged and books none twice, its successor loading through its warm copy
(the journal in etcd replays without over-booking) while a provisioned tunnel keeps forwarding;
a hung (SIGSTOP) leader is replaced and, continued, refuses writes as a follower; one etcd member
down does not stop reservations and rejoins; a leader cut off from etcd steps down.

One 2-site lab (module-scoped, always torn down). Before and after every test the lab is put
back to three running replicas, three etcd members and no partition (`restored`). Every wait is
bounded polling; the assertions are about states, counts and ids, never durations.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

import labutil
from labutil import tb

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import agent, etcd  # noqa: E402

WAN = "delay=5ms,rate=200mbit"
REPLICAS = 3
UP_TIMEOUT_S = 300
FAILOVER_TIMEOUT_S = 90      # generous: lease TTL 3 s, but the machine is loaded
# Refusals: the request itself was wrong or does not fit; the client must not retry them as they
# are (docs/control.md "Refusals", control-api.yaml Error.code). Anything else a reserve may
# meet during a failover is the agent being unavailable.
REFUSALS = {"invalid_body", "invalid_field", "unknown_site", "same_site", "not_found",
            "wrong_state", "hold_expired", "idempotency_conflict", "no_path", "no_capacity",
            "no_slots", "too_few_disjoint_paths", "latency_below_propagation",
            "latency_unachievable", "latency_variation_unachievable", "loss_unachievable",
            "prefix_conflict", "no_tunnel_id", "method_not_allowed", "body_too_large",
            "not_encrypted", "rotation_in_progress", "unauthorized", "forbidden"}


# ------------------------------------------------------------------------------ no root

def test_replica_options_are_refused_where_they_cannot_apply():
    res = tb("up", "--agent-replicas", "3")
    assert res.returncode == 2 and "--agent-replicas needs --agents" in res.stderr
    res = tb("up", "--dataplane", "uring", "--agents", "--agent-replicas", "3",
             "--owners", "a:x,b:y")
    assert res.returncode == 2 and "refused with --owners" in res.stderr
    res = tb("up", "--dataplane", "uring", "--agents", "--agent-replicas", "0")
    assert res.returncode == 2 and "--agent-replicas 0" in res.stderr


def test_warm_sync_period_is_checked_before_etcd_is_contacted(tmp_path):
    key = tmp_path / "store.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    base = [str(labutil.build_dir() / agent.AGENT_BINARY), "run", "--topology",
            str(labutil.REPO / "packaging" / "etc" / "topology.yaml.sample"),
            "--store", "etcd://127.0.0.1:1", "--store-key", str(key), "--replica", "r1",
            "--advertise", "http://127.0.0.1:1"]
    for bad, says in (("50ms", "0 (no warm copy) or at least 100ms"),
                      ("1x", "unknown duration unit")):
        res = subprocess.run([*base, "--warm-sync", bad], capture_output=True, text=True,
                             timeout=60, stdin=subprocess.DEVNULL)
        assert res.returncode == 2 and "--warm-sync" in res.stderr and says in res.stderr, \
            (bad, res.returncode, res.stderr)


def test_etcd_members_are_a_static_cluster_of_their_own(tmp_path):
    cluster = etcd.plan()
    names = [m["name"] for m in cluster["members"]]
    assert names == ["etcd-1", "etcd-2", "etcd-3"]
    ports = [p for m in cluster["members"] for p in (m["client_port"], m["peer_port"])]
    assert len(set(ports)) == 6
    assert etcd.store_url(cluster) == "etcd://" + ",".join(
        f"127.0.0.1:{m['client_port']}" for m in cluster["members"])
    argv = etcd.member_argv(["etcd"], cluster, cluster["members"][1])
    joined = " ".join(argv)
    assert f"--initial-cluster-token {cluster['token']}" in joined
    assert "--initial-cluster etcd-1=http://127.0.0.1:" in joined
    assert "--initial-cluster-state new" in joined
    assert etcd.plan()["token"] != cluster["token"]  # unique per lab
    argv = agent.replica_argv(["detwan-agent"], "lab-2", 7801, "etcd://x", tmp_path / "k")
    assert argv[1:] == ["run", "--topology", str(agent.topology_file()), "--listen",
                        "0.0.0.0:7801", "--store", "etcd://x", "--store-key",
                        str(tmp_path / "k"), "--replica", "lab-2", "--advertise",
                        "http://127.0.0.1:7801", "--lease-ttl", agent.LEASE_TTL]


# ------------------------------------------------------------------------------ helpers

def store_supported() -> bool:
    res = subprocess.run([str(labutil.build_dir() / agent.AGENT_BINARY), "run", "--help"],
                         capture_output=True, text=True, timeout=30)
    return "--store" in res.stdout + res.stderr


def http(url: str, method: str = "GET", body: str | None = None,
         timeout_s: float = 30) -> tuple[int, dict, dict]:
    """(status, JSON body or {}, headers)."""
    req = urllib.request.Request(url, method=method, data=body.encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, json.loads(r.read().decode() or "{}"), dict(r.headers)
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        try:
            doc = json.loads(text)
        except ValueError:
            doc = {"raw": text}
        return e.code, doc, dict(e.headers)


def error_code(doc: dict) -> str | None:
    """The error's code, whether the agent wrote {"error": "code"} or {"error": {"code": ..}}."""
    e = doc.get("error")
    return e.get("code") if isinstance(e, dict) else e


def error_leader(doc: dict) -> str | None:
    """The leader's URL a 503 not_leader names (in the error object, or beside it)."""
    e = doc.get("error")
    return (e.get("leader") if isinstance(e, dict) else None) or doc.get("leader")


def replicas(st: dict) -> dict[str, dict]:
    return {a["name"]: a for a in st["agents"]}


def agent_list(st: dict, first: str | None = None) -> str:
    """Every replica's URL for detwanctl --agent, `first` (a replica name) first."""
    recs = replicas(st)
    order = sorted(recs, key=lambda n: (n != first, n))
    return ",".join(recs[n]["url"] for n in order)


def ctl(agents: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(labutil.build_dir() / agent.CTL_BINARY), "--agent", agents, *args],
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def ctl_json(agents: str, *args: str) -> dict:
    res = ctl(agents, *args, "--json")
    assert res.returncode == 0, f"detwanctl {' '.join(args)}: {res.returncode}\n" \
                                f"{res.stdout}\n{res.stderr}"
    return json.loads(res.stdout)


def health(url: str) -> dict | None:
    return agent.health(url, timeout_s=3.0)


def wait_leader(st: dict, exclude: set[str] = frozenset(),
                timeout_s: float = FAILOVER_TIMEOUT_S) -> str:
    """Bounded: among the replicas not in `exclude`, exactly one reports leader and has reached
    every gateway, every other one reports follower naming it. Its name."""
    recs = {n: r for n, r in replicas(st).items() if n not in exclude}
    deadline = time.monotonic() + timeout_s
    seen = {}
    while time.monotonic() < deadline:
        seen = {n: health(r["url"]) for n, r in recs.items()}
        leaders = [n for n, h in seen.items() if h and h.get("role") == "leader"]
        if len(leaders) == 1:
            lead = leaders[0]
            followers_agree = all(
                h and h.get("role") == "follower" and (h.get("leader") or {}).get("replica") == lead
                for n, h in seen.items() if n != lead)
            if followers_agree and seen[lead].get("gateways_reachable") == len(st["sites"]):
                return lead
        time.sleep(0.2)
    raise AssertionError(f"no single leader among {sorted(recs)} within {timeout_s} s: {seen}")


def metric(url: str, name: str) -> float | None:
    """One sample of `name` in a replica's /metrics (None: absent or not answered)."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=3) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait_role(url: str, role: str, timeout_s: float = FAILOVER_TIMEOUT_S) -> dict:
    deadline = time.monotonic() + timeout_s
    h = None
    while time.monotonic() < deadline:
        h = health(url)
        if h and h.get("role") == role:
            return h
        time.sleep(0.2)
    raise AssertionError(f"{url} did not report role {role} within {timeout_s} s: {h}")


def process_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def restore(st: dict) -> None:
    """Three running replicas, three etcd members, no partition, one leader."""
    live = labutil.status()
    for a in live["agents"]:
        if a.get("partitioned"):
            tb("agent", a["name"], "heal", check=True)
        if a.get("pid") and process_state(a["pid"]) == "T":
            tb("agent", a["name"], "cont", check=True)
        if not a.get("alive"):
            tb("agent", a["name"], "start", check=True, timeout=180)
    for m in (live.get("etcd") or {}).get("members", []):
        if not m.get("alive"):
            tb("etcd", m["name"], "start", check=True, timeout=180)
        elif process_state(m["pid"]) == "T":
            tb("etcd", m["name"], "cont", check=True)
    wait_leader(st)


def reserve_args(rate: str, *extra: str) -> list[str]:
    return ["reserve", "--from", "a", "--to", "b", "--rate", rate, *extra]


# ------------------------------------------------------------------------------ the lab

@pytest.fixture(scope="module")
def replab(wanem_ready):
    assert store_supported(), "this build's detwan-agent has no --store"
    try:
        res = tb("up", "-q", "--sites", "2", "--dataplane", "uring", "--agents",
                 "--agent-replicas", str(REPLICAS), "--wan", WAN, timeout=UP_TIMEOUT_S)
        if res.returncode != 0:
            pytest.fail(f"up exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
        yield labutil.status()
    finally:
        # down removes everything of the replicas too: processes, etcd's data, cgroups, rules.
        res = tb("down", "-q", timeout=180)
        assert res.returncode == 0, f"down failed: {res.stderr}"
        assert labutil.namespaces() == []
        assert not list(labutil.RUN_DIR.glob("*.pid"))
        assert not (labutil.RUN_DIR / "etcd").exists()
        assert not list(labutil.RUN_DIR.glob("agent-*.store.key"))
        cg = etcd.cgroup2_mount()
        assert cg is None or not list(cg.glob(f"{labutil.PREFIX}agent-*"))
        assert subprocess.run(["nft", "list", "table", "inet", etcd.NFT_TABLE],
                              capture_output=True).returncode != 0


@pytest.fixture
def restored(replab):
    restore(replab)
    yield replab
    restore(replab)


@pytest.mark.netns
def test_one_leader_and_the_replica_list_reaches_it(restored):
    st = restored
    leader = wait_leader(st)
    recs = replicas(st)
    assert sorted(recs) == ["lab-1", "lab-2", "lab-3"]
    assert len({r["url"] for r in recs.values()}) == REPLICAS
    # status: every replica with its role, the etcd members with one raft leader.
    live = labutil.status()
    assert {a["name"]: a["role"] for a in live["agents"]} == {
        n: ("leader" if n == leader else "follower") for n in recs}
    members = live["etcd"]["members"]
    assert [m["name"] for m in members] == ["etcd-1", "etcd-2", "etcd-3"]
    assert all(m["alive"] and m["healthy"] for m in members)
    assert sum(m["raft_leader"] for m in members) == 1
    assert live["agent_urls"] == [recs[n]["url"] for n in sorted(recs)]
    text = tb("status").stdout
    assert f"agent {leader} (replica of lab)" in text and "etcd-3: http://127.0.0.1:" in text
    assert tb("agent", leader, "status").stdout.strip().endswith("leader")
    assert tb("etcd", "etcd-1", "status").returncode == 0
    # A follower: /healthz names the leader; everything else is 503 not_leader, retry in 1 s.
    follower = next(n for n in sorted(recs) if n != leader)
    h = health(recs[follower]["url"])
    assert h["role"] == "follower" and h["replica"] == follower
    assert h["leader"] == {"replica": leader, "url": recs[leader]["url"]}
    assert "gateways_reachable" not in h
    status, body, headers = http(recs[follower]["url"] + "/v1/reservations")
    assert status == 503 and error_code(body) == "not_leader", body
    assert error_leader(body) == recs[leader]["url"], body
    assert headers.get("Retry-After") == "1"
    # detwanctl with a follower first reaches the leader; the tunnel carries traffic.
    r = ctl_json(agent_list(st, first=follower),
                 *reserve_args("20mbit", "--duration", "10m", "--provision"))
    b = st["sites"][1]
    try:
        assert r["state"] == "provisioned" and r["dataplane"]["active"], r
        tunnels = labutil.gw_stats("a")["tunnels"]
        assert [t["id"] for t in tunnels] == [r["tunnel_id"]]
        assert labutil.ping_replies("a", b["tunnel_addr"], 20) == 20
        rx = next(t for t in labutil.gw_stats("b")["tunnels"] if t["id"] == r["tunnel_id"])["rx"]
        assert rx["on_time"]["received_packets"] + rx["best_effort"]["received_packets"] >= 20
        # Every follower holds the state warm (its copy synced since): the reservation's row.
        for n in recs:
            if n == leader:
                continue
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                    (metric(recs[n]["url"], "detwan_agent_warm_rows") or 0) >= 1):
                time.sleep(0.2)
            assert (metric(recs[n]["url"], "detwan_agent_warm_rows") or 0) >= 1, n
            assert (metric(recs[n]["url"], "detwan_agent_warm_syncs_total") or 0) >= 1, n
    finally:
        assert ctl(agent_list(st, first=follower), "terminate", r["id"]).returncode == 0


@pytest.mark.netns
def test_leader_killed_during_a_burst_loses_no_acknowledged_reservation(restored):
    st = restored
    recs = replicas(st)
    leader = wait_leader(st)
    b = st["sites"][1]
    urls = agent_list(st, first=leader)
    # A tunnel provisioned before the kill, pinged through the whole burst.
    tunnel = ctl_json(urls, *reserve_args("10mbit", "--duration", "30m", "--provision"))
    assert tunnel["dataplane"]["active"], tunnel
    pings = 1500  # 30 s at 20 ms: outlasts the kill (checked below)
    pinger = subprocess.Popen([str(labutil.TESTBED), "exec", "a", "--", "ping", "-n", "-q",
                               "-c", str(pings), "-i", "0.02", "-W", "2", b["tunnel_addr"]],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threads, per_thread = 8, 13
    # Disjoint future windows (2 min apart, 1 min long): every request fits whatever the slots;
    # a request the agent books twice would show up as two reservations in one window.
    base = int(time.time()) + 3 * 3600
    run_tag = f"burst-{os.getpid()}-{base}"
    acked: dict[str, str] = {}      # request id -> reservation id
    failed: dict[str, tuple] = {}   # request id -> (exit code, error code, stderr)
    lock = threading.Lock()
    enough = threading.Event()
    killed = {}

    def client(t: int) -> None:
        for k in range(per_thread):
            i = t * per_thread + k
            rid = f"{run_tag}-{i}"
            res = ctl(urls, *reserve_args("1mbit", "--start", f"@{base + 120 * i}",
                                          "--duration", "1m", "--commit", "--request-id", rid),
                      "--json")
            try:
                doc = json.loads(res.stdout) if res.stdout.strip() else {}
            except ValueError:
                doc = {}
            with lock:
                if res.returncode == 0:
                    acked[rid] = doc["id"]
                    if len(acked) >= 20:
                        enough.set()
                else:
                    failed[rid] = (res.returncode, error_code(doc), res.stderr.strip()[-300:])

    def killer() -> None:
        if enough.wait(timeout=600):
            killed["pinging"] = pinger.poll() is None
            killed["acked_before"] = len(acked)
            killed["result"] = tb("agent", leader, "kill")

    workers = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
    kill_thread = threading.Thread(target=killer)
    kill_thread.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=900)
    enough.set()
    kill_thread.join(timeout=120)
    total = threads * per_thread
    assert not any(w.is_alive() for w in workers), "a client hung"
    assert "result" in killed and killed["result"].returncode == 0, killed
    assert killed["acked_before"] < total  # the kill fell inside the burst
    assert len(acked) + len(failed) == total
    # A new leader, elected among the two others.
    new = wait_leader(st, exclude={leader})
    assert new != leader
    # It loaded through its warm copy (what changed since its last sync), not everything.
    log_text = (labutil.RUN_DIR / f"agent-{new}.log").read_text(errors="replace")
    terms = [line for line in log_text.splitlines() if f"replica {new}: leading term" in line]
    assert terms and "(warm copy: " in terms[-1], terms[-1:]
    print(f"burst: {len(acked)} acknowledged ({killed['acked_before']} before the kill of "
          f"{leader}), {len(failed)} failed: {sorted({f[1] or '?' for f in failed.values()})}; "
          f"new leader {new}")
    # What failed failed as unavailability (retryable), never as a refusal.
    assert all(code not in REFUSALS and rc == 1 for rc, code, _ in failed.values()), failed
    # The same requests again (same request ids): each lands once, acknowledged.
    new_urls = agent_list(st, first=new)
    for rid in sorted(failed):
        i = int(rid.rsplit("-", 1)[1])
        res = ctl(new_urls, *reserve_args("1mbit", "--start", f"@{base + 120 * i}",
                                          "--duration", "1m", "--commit", "--request-id", rid),
                  "--json")
        assert res.returncode == 0, (rid, res.stdout, res.stderr)
        acked[rid] = json.loads(res.stdout)["id"]
    # Every acknowledged reservation exists once on the new leader; none was booked twice.
    status, listing, _ = http(recs[new]["url"] + "/v1/reservations")
    assert status == 200, listing
    ids = [r["id"] for r in listing["reservations"]]
    assert len(ids) == len(set(ids))
    assert len(set(acked.values())) == total
    assert set(acked.values()) <= set(ids)
    burst = [r for r in listing["reservations"]
             if r.get("spec", {}).get("start_unix_ns", 0) >= base * 1_000_000_000]
    assert len(burst) == total, sorted(r["id"] for r in burst)
    for r in burst:
        if "client_request_id" in r:
            assert acked[r["client_request_id"]] == r["id"]
    # The journal in etcd replays without over-booking.
    check = subprocess.run([str(labutil.build_dir() / agent.AGENT_BINARY), "journal-check",
                            "--topology", recs[new]["topology"], "--store", recs[new]["store"],
                            "--store-key", recs[new]["store_key"]],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    # The tunnel provisioned before the kill forwarded every ping meanwhile.
    out, _ = pinger.communicate(timeout=120)
    assert killed["pinging"], "the ping ended before the kill: make it longer"
    summary = next(line for line in out.splitlines() if "received" in line)
    assert int(summary.split(",")[1].split()[0]) == pings, out
    assert ctl(new_urls, "terminate", tunnel["id"]).returncode == 0
    # The killed replica, started again, follows.
    tb("agent", leader, "start", check=True, timeout=180)
    assert wait_leader(st) == new


@pytest.mark.netns
def test_stopped_leader_is_replaced_and_then_refuses_writes(restored):
    st = restored
    recs = replicas(st)
    old = wait_leader(st)
    tb("agent", old, "stop", check=True)
    try:
        new = wait_leader(st, exclude={old})
        assert new != old
    finally:
        tb("agent", old, "cont", check=True)
    h = wait_role(recs[old]["url"], "follower")
    assert (h.get("leader") or {}).get("replica") == new, h
    status, body, headers = http(recs[old]["url"] + "/v1/reservations", "POST",
                                 '{"src":"a","dst":"b","min_bandwidth_bps":1000000,'
                                 '"duration_ns":60000000000}')
    assert status == 503 and error_code(body) == "not_leader", (status, body)
    assert error_leader(body) == recs[new]["url"] and headers.get("Retry-After") == "1"
    assert wait_leader(st) == new  # the old one did not take over again
    r = ctl_json(agent_list(st, first=old), *reserve_args("1mbit", "--duration", "1m"))
    assert ctl(agent_list(st, first=new), "terminate", r["id"]).returncode == 0


@pytest.mark.netns
def test_one_etcd_member_down_reserves_still_succeed_and_it_rejoins(restored):
    st = restored
    urls = agent_list(st)
    # The raft leader: the harder member to lose.
    (victim,) = [m["name"] for m in labutil.status()["etcd"]["members"] if m["raft_leader"]]
    tb("etcd", victim, "kill", check=True)
    made = []
    try:
        live = labutil.status()
        assert not next(m for m in live["etcd"]["members"] if m["name"] == victim)["alive"]
        assert tb("status").returncode == 3  # degraded
        # The first reserve may meet the re-election (same request id until it lands)...
        # Disjoint future windows: reservations of one site pair must not overlap in time
        # (prefix_conflict).
        base = int(time.time()) + 24 * 3600  # after the burst test's windows
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        rid = f"etcd-down-{os.getpid()}-{time.time_ns()}"
        while True:
            res = ctl(urls, *reserve_args("1mbit", "--start", f"@{base}", "--duration", "1m",
                                          "--request-id", rid), "--json")
            if res.returncode == 0 or time.monotonic() > deadline:
                break
            assert error_code(json.loads(res.stdout or "{}")) not in REFUSALS, res.stdout
            time.sleep(0.5)
        assert res.returncode == 0, res.stdout + res.stderr
        made.append(json.loads(res.stdout)["id"])
        # ... the next ones succeed at once on the two members left.
        for i in range(1, 4):
            made.append(ctl_json(urls, *reserve_args("1mbit", "--start", f"@{base + 120 * i}",
                                                     "--duration", "1m"))["id"])
        assert len(set(made)) == 4
    finally:
        tb("etcd", victim, "start", check=True, timeout=180)
    # It rejoins: healthy, and it catches up with the raft index the others had when it was
    # started again (they go on applying entries meanwhile: lease grants, renewals' checkpoints).
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    target = None
    while True:
        members = labutil.status()["etcd"]["members"]
        me = next(m for m in members if m["name"] == victim)
        others = [m["raft_index"] for m in members if m["name"] != victim]
        if target is None and others and all(i is not None for i in others):
            target = max(others)
        if (me["alive"] and me["healthy"] and target is not None
                and (me["raft_index"] or 0) >= target):
            break
        assert time.monotonic() < deadline, (
            f"{victim} did not rejoin: alive {me['alive']}, healthy {me['healthy']}, raft index "
            f"{me['raft_index']} (the others' was {target}, now {others})")
        time.sleep(0.5)
    assert tb("status").returncode == 0
    for rid in made:
        assert ctl(urls, "terminate", rid).returncode == 0


@pytest.mark.netns
def test_leader_cut_off_from_etcd_steps_down(restored):
    problem = etcd.partition_problem()
    if problem:
        pytest.skip(f"cannot partition a replica here: {problem}")
    st = restored
    recs = replicas(st)
    old = wait_leader(st)
    tb("agent", old, "partition", check=True)
    try:
        assert replicas(labutil.status())[old]["partitioned"]
        new = wait_leader(st, exclude={old})
        assert new != old
        # The cut-off one stops leading (it cannot renew its lease) and refuses writes.
        wait_role(recs[old]["url"], "follower")
        status, body, _ = http(recs[old]["url"] + "/v1/reservations", "POST",
                               '{"src":"a","dst":"b","min_bandwidth_bps":1000000,'
                               '"duration_ns":60000000000}')
        assert status == 503, (status, body)
        r = ctl_json(agent_list(st, first=old), *reserve_args("1mbit", "--duration", "1m"))
    finally:
        tb("agent", old, "heal", check=True)
    assert not replicas(labutil.status())[old]["partitioned"]
    h = wait_role(recs[old]["url"], "follower")
    assert wait_leader(st) == new, h
    assert ctl(agent_list(st, first=new), "terminate", r["id"]).returncode == 0
