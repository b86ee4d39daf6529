"""detwan-agent in the lab (`tools/testbed up --dataplane uring|dpdk --agents`).

One agent for the lab's one administrative domain ("lab"), in the root namespace, its HTTP API
on 127.0.0.1 (a free port chosen at `up` and kept across `agent lab restart`, so clients keep
their URL). Its topology is generated from the lab (docs/testbed.md, "Agents"):
  * a site per lab site, tunnel prefix 10.20.i.0/24 (the hosts' tunnel addresses live there),
    gateway = the site's detwan-gw, reached through its admin socket in the run directory;
  * a link per WAN path ("ab1", "ab2"): capacity = the path's `rate=` (1 Gbit/s without one,
    as the gateways' line rate), delay and jitter from the SPEC (uniform: jitter; normal and
    pareto-normal: 4 sigma), loss from `loss=`, the gateways' slot schedule (1 ms cycle, 100
    slots, 2 us guard), 90 % reservable;
  * each gateway's ports and peers: the WAN port of path k toward site Y is "<pair>k", the peer
    on it is "Y" for path 1 and "Y-k" beyond.
The gateways start without tunnels; the agent programs them. Pure functions first (tested
without root in tests/lab/test_agent.py), then the process handling used by builder.py/cli.py.
"""
from __future__ import annotations

import fcntl
import json
import os
import pathlib
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

from lab import gateway
from lab.netns import LabError, ip, is_alive, process_start_time
from lab.state import RUN_DIR, file_tail, write_pid_file
from lab.topology import PREFIX, Topology
from lab.units import format_duration, format_rate, parse_duration_ns, parse_fraction

AGENT_BINARY = "control/detwan-agent"
CTL_BINARY = "tools/detwanctl/detwanctl"
NAME = "lab"
RESERVABLE = "90%"
# What the lab vouches for in the bounds (docs/control.md, "Admission and bounds"): the
# gateways run SCHED_FIFO on a shared 2-vCPU machine; their release error was measured at
# p99 60-70 us (docs/benchmarks/dataplane-determinism.md), with a tail from vCPU preemption.
PLAYOUT_ERROR = "200us"
PROCESSING_DELAY = "100us"
RECONCILE_INTERVAL = "500ms"
READY_TIMEOUT_S = 30.0


# The management network: one veth per site from the root namespace (where the agent runs) into
# the site's host namespace, so jobs there can ask the agent for their reservation (the
# collective library's DETWAN_AGENT) without touching the emulated WAN. NET.i.1/30 in the root
# namespace, NET.i.2/30 in the host; nothing is routed between sites over it. NET is a 10.X /16
# no address of the root namespace uses (10.99 unless another lab holds it), so labs of other
# prefixes can run side by side.
MGMT_NETS = [f"10.{x}" for x in [99, *range(64, 99), *range(100, 128)]]


# Labs started at the same moment (several prefixes) must not pick the same management network:
# the choice is made under a lock and claimed (a file naming the claiming process) until the
# addresses exist; a claim whose process died is ignored.
MGMT_CLAIMS = pathlib.Path("/run/detwan-testbed-mgmt")


def free_mgmt_net() -> str:
    """The first of MGMT_NETS without an address in the root namespace nor a live claim;
    claimed for this process until release_mgmt_claim()."""
    MGMT_CLAIMS.mkdir(parents=True, exist_ok=True)
    with open(MGMT_CLAIMS / ".lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                             timeout=10).stdout
        used = {".".join(f.split("/")[0].split(".")[:2]) for line in out.splitlines()
                for f in line.split()[3:4]}
        for claim in MGMT_CLAIMS.glob("10.*"):
            try:
                pid = int(claim.read_text(encoding="utf-8").strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid > 0 and is_alive(pid):
                used.add(claim.name)
            else:
                claim.unlink(missing_ok=True)
        for net in MGMT_NETS:
            if net not in used:
                (MGMT_CLAIMS / net).write_text(str(os.getpid()), encoding="utf-8")
                return net
    raise LabError("no free 10.X/16 for the agent's management network")


def release_mgmt_claim(net: str) -> None:
    """Once the management addresses exist (they mark the network used), or the lab is gone."""
    claim = MGMT_CLAIMS / net
    try:
        if claim.read_text(encoding="utf-8").strip() == str(os.getpid()):
            claim.unlink()
    except OSError:
        pass


def mgmt_root_addr(net: str, site) -> str:
    return f"{net}.{site.index}.1"


def mgmt_host_addr(net: str, site) -> str:
    return f"{net}.{site.index}.2"


def mgmt_ifs(site) -> tuple[str, str]:
    """(root-namespace end, host-namespace end), within IFNAMSIZ."""
    return f"{PREFIX}{site.name}-m", f"{PREFIX}{site.name}-mh"


def host_url(net: str, site, port: int) -> str:
    """The agent's URL as seen from the site's host namespace."""
    return f"http://{mgmt_root_addr(net, site)}:{port}"


def create_management(topo: Topology, net: str) -> None:
    """The management veths (see MGMT_NETS). Removed with the host namespaces by `down`."""
    for s in topo.sites:
        root_if, host_if = mgmt_ifs(s)
        ip("link", "add", root_if, "type", "veth", "peer", "name", host_if, "netns", s.host_ns)
        ip("addr", "add", f"{mgmt_root_addr(net, s)}/30", "dev", root_if)
        ip("link", "set", root_if, "up")
        ip("addr", "add", f"{mgmt_host_addr(net, s)}/30", "dev", host_if, ns=s.host_ns)
        ip("link", "set", host_if, "up", ns=s.host_ns)
    release_mgmt_claim(net)


# One agent per administrative domain: the lab's single domain "lab", or with --owners one per
# owner (tools/lab/federation.py), each with its own files named after its domain.
def topology_file(name: str = NAME) -> pathlib.Path:
    return RUN_DIR / f"agent-{name}.yaml"


def journal_file(name: str = NAME) -> pathlib.Path:
    return RUN_DIR / f"agent-{name}.db"


def log_file(name: str = NAME) -> pathlib.Path:
    return RUN_DIR / f"agent-{name}.log"


def pid_key(name: str = NAME) -> str:
    return f"agent-{name}"


def link_fields(spec: str) -> dict[str, str]:
    """capacity, delay, jitter and loss of a WAN path for the agent, from its SPEC."""
    tokens = gateway.spec_tokens(spec)
    low, high = gateway.path_delay_range_ns(spec)
    delay = parse_duration_ns(tokens.get("delay", "0"))
    jitter = max(high - delay, delay - low)
    loss = tokens.get("loss", "0")
    return {"capacity": format_rate(gateway.line_rate_bps(spec)),
            "delay": format_duration(delay), "jitter": format_duration(jitter),
            "loss": f"{parse_fraction(loss):.6g}" if loss not in ("", "0") else "0"}


def render_topology(topo: Topology, spec_for, port: int, mtu: int = gateway.WAN_MTU_BYTES,
                    mgmt_net: str = MGMT_NETS[0], public_keys: dict[str, str] | None = None) -> str:
    """The agent's topology file for this lab (the format of control/model/topology.h);
    `public_keys` (site name -> base64) registers the gateways' identity keys."""
    lines = [
        "# detwan-agent of the lab, written by tools/testbed up --agents (tools/lab/agent.py)",
        f"domain: {NAME}",
        "agent:",
        f"  name: {NAME}",
        f"  listen: 0.0.0.0:{port}",
        f"  allow: [127.0.0.0/8, {mgmt_net}.0.0/16]",
        f"  journal: {journal_file()}",
        "  hold_timeout: 60s",
        f"  reconcile_interval: {RECONCILE_INTERVAL}",
        "  provision_wait: 10s",
        "sites:",
    ]
    for s in topo.sites:
        lines.append(f"  - {{name: {s.name}, gateway: {s.name}, "
                     f"tunnel_prefixes: [{s.tunnel_prefix}]}}")
    lines.append("gateways:")
    for s in topo.sites:
        mine = [p for p in topo.paths if s in (p.a, p.b)]
        lines += [f"  - name: {s.name}",
                  f"    site: {s.name}",
                  f"    admin_socket: {gateway.admin_socket(s)}",
                  f"    playout_error: {PLAYOUT_ERROR}",
                  f"    processing_delay: {PROCESSING_DELAY}",
                  *([f'    public_key: "{public_keys[s.name]}"']
                    if public_keys and s.name in public_keys else []),
                  "    ports: [" + ", ".join(
                      f"{{name: {gateway.wan_port_name(p)}, link: {gateway.wan_port_name(p)}}}"
                      for p in mine) + "]",
                  "    peers: [" + ", ".join(
                      f"{{name: {gateway.peer_name(p, s)}, port: {gateway.wan_port_name(p)}, "
                      f"gateway: {p.peer(s).name}}}" for p in mine) + "]"]
    lines.append("links:")
    for p in topo.paths:
        f = link_fields(spec_for(p))
        lines.append(f"  - {{name: {gateway.wan_port_name(p)}, ends: [{p.a.name}, {p.b.name}], "
                     f"capacity: {f['capacity']}, delay: {f['delay']}, jitter: {f['jitter']}, "
                     f"loss: {f['loss']}, reservable: {RESERVABLE}, "
                     f"mtu: {mtu}, cycle: {format_duration(gateway.CYCLE_NS)}, "
                     f"slots: {gateway.SLOT_COUNT}, guard: {format_duration(gateway.GUARD_NS)}}}")
    return "\n".join(lines) + "\n"


def free_port() -> int:
    """A TCP port nobody listens on now on 127.0.0.1 (the agent binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def url_of(port: int) -> str:
    return f"http://127.0.0.1:{port}"


# ------------------------------------------------------------------------ files and commands

def binary(build: pathlib.Path, relative: str, override_env: str, override: str | None = None):
    override = override or os.environ.get(override_env)
    if override:
        return shlex.split(override)
    path = build / relative
    if not os.access(path, os.X_OK):
        raise LabError(f"{path} not found or not executable: build it first "
                       f"(ninja -C {build} {relative}), or pass --build-dir")
    return [str(path)]


def agent_command(build: pathlib.Path, override: str | None = None) -> list[str]:
    return binary(build, AGENT_BINARY, "DETWAN_AGENT_CMD", override)


def ctl_command(build: pathlib.Path) -> list[str]:
    return binary(build, CTL_BINARY, "DETWAN_CTL_CMD")


def check_topology(cmd: list[str], path: pathlib.Path) -> tuple[int, str]:
    """`detwan-agent check --topology FILE`: (exit status, its message)."""
    try:
        res = subprocess.run([*cmd, "check", "--topology", str(path)], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"cannot run '{' '.join(cmd)} check': {e}") from e
    return res.returncode, (res.stderr.strip() or res.stdout.strip())


def start(cmd: list[str], name: str = NAME) -> dict:
    """Starts the agent of domain `name` (root namespace); returns its state record."""
    return start_argv([*cmd, "run", "--topology", str(topology_file(name))], name)


def start_argv(argv: list[str], name: str, preexec=None) -> dict:
    """Starts `argv` as the agent (or replica) `name`: log agent-<name>.log, pid file
    agent-<name>.pid (written before this returns); `preexec` runs in the child before exec
    (a replica joins its cgroup there)."""
    with open(log_file(name), "a", encoding="utf-8") as log:
        log.write("$ " + shlex.join(argv) + "\n")
        log.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=preexec)
    start_time = process_start_time(proc.pid)
    write_pid_file(pid_key(name), proc.pid, start_time)
    return {"pid": proc.pid, "pid_start_time": start_time, "argv": argv,
            "started_unix_ns": time.time_ns()}


def tls_context(ca: str | None):
    """For an https agent: verify it against its owner's CA (None: plain http)."""
    if not ca:
        return None
    import ssl  # pylint: disable=import-outside-toplevel
    return ssl.create_default_context(cafile=ca)


def get_json(url: str, path: str, timeout_s: float = 5.0, ca: str | None = None,
             token: str | None = None) -> dict:
    request = urllib.request.Request(url + path)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout_s, context=tls_context(ca)) as answer:
        return json.loads(answer.read().decode())


def wait_ready(record: dict, url: str, gateways: int, timeout_s: float = READY_TIMEOUT_S,
               name: str = NAME, ca: str | None = None) -> None:
    """Polls (bounded) until /healthz answers and every gateway has been reached once (the
    reconciler's first pass has run); fails early with the end of the log if the agent exits."""
    deadline = time.monotonic() + timeout_s
    problem = "no answer yet"
    while time.monotonic() < deadline:
        if not is_alive(record["pid"], record["pid_start_time"]):
            raise LabError(f"detwan-agent {name} exited during start-up:\n"
                           + file_tail(log_file(name)))
        try:
            health = get_json(url, "/healthz", timeout_s=2, ca=ca)
            if health.get("gateways_reachable") == gateways:
                return
            problem = f"{health.get('gateways_reachable')} of {gateways} gateways reached"
        except (OSError, ValueError, urllib.error.URLError) as e:
            problem = str(e)
        time.sleep(0.05)
    raise LabError(f"detwan-agent {name} not ready within {timeout_s:.0f} s ({problem}):\n"
                   + file_tail(log_file(name)))


def stop(record: dict, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> bool:
    """Sends `sig` to the agent and waits (bounded) until it is gone. True if it was running."""
    pid, start_time = record.get("pid"), record.get("pid_start_time")
    if not pid or not is_alive(pid, start_time):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and is_alive(pid, start_time):
        time.sleep(0.02)
    if is_alive(pid, start_time):
        os.kill(pid, signal.SIGKILL)
    return True


# ------------------------------------------------------- replicas on etcd (--agent-replicas N)
# N detwan-agent processes of the one domain "lab", named lab-1..lab-N, each on its own port
# and with its own log and pid file, sharing the topology file and a store key; they elect one
# leader through an etcd lease (tools/lab/etcd.py runs the cluster). The leader serves the API
# and programs the gateways; a follower's /healthz says who leads, every other route answers
# 503 not_leader.

def replica_names(count: int) -> list[str]:
    return [f"{NAME}-{i}" for i in range(1, count + 1)]


def store_key_file(name: str = NAME) -> pathlib.Path:
    """The key that seals the domain's values in etcd (32 random bytes, 0600, one per domain)."""
    return RUN_DIR / f"agent-{name}.store.key"


def write_store_key(path: pathlib.Path) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))


# The leader's etcd lease: a dead or cut-off leader is replaced within it. Passed explicitly so
# the lab does not depend on the agent's default.
LEASE_TTL = "3s"


def replica_argv(cmd: list[str], replica: str, port: int, store: str, key: pathlib.Path,
                 lease_ttl: str | None = LEASE_TTL) -> list[str]:
    return [*cmd, "run", "--topology", str(topology_file()), "--listen", f"0.0.0.0:{port}",
            "--store", store, "--store-key", str(key), "--replica", replica,
            "--advertise", url_of(port), *(["--lease-ttl", lease_ttl] if lease_ttl else [])]


def health(url: str, timeout_s: float = 2.0) -> dict | None:
    """/healthz of an agent or replica (None: no answer)."""
    try:
        return get_json(url, "/healthz", timeout_s=timeout_s)
    except (OSError, ValueError, urllib.error.URLError):
        return None


def wait_replica_answers(record: dict, url: str, name: str,
                         timeout_s: float = READY_TIMEOUT_S) -> str:
    """Polls (bounded) until the replica's /healthz answers with role leader or follower;
    returns the role. Fails early with the end of its log if it exits."""
    deadline = time.monotonic() + timeout_s
    problem = "no answer yet"
    while time.monotonic() < deadline:
        if not is_alive(record["pid"], record["pid_start_time"]):
            raise LabError(f"detwan-agent replica {name} exited during start-up:\n"
                           + file_tail(log_file(name)))
        h = health(url)
        if h is not None and h.get("role") in ("leader", "follower"):
            return h["role"]
        problem = "no answer" if h is None else f"/healthz answered {json.dumps(h)[:200]}"
        time.sleep(0.05)
    raise LabError(f"detwan-agent replica {name} not answering within {timeout_s:.0f} s "
                   f"({problem}):\n" + file_tail(log_file(name)))


def wait_one_leader(replicas: list[tuple[str, dict, str]], gateways: int,
                    timeout_s: float = 60.0) -> str:
    """Polls (bounded) until exactly one replica reports role leader and has reached every
    gateway, and every other one answers as a follower; returns the leader's name.
    `replicas`: (name, record, url). A replica that exits fails at once with its log."""
    deadline = time.monotonic() + timeout_s
    problem = "no answer yet"
    while time.monotonic() < deadline:
        roles: dict[str, str | None] = {}
        leader_health: dict = {}
        for name, record, url in replicas:
            if not is_alive(record["pid"], record["pid_start_time"]):
                raise LabError(f"detwan-agent replica {name} exited during start-up:\n"
                               + file_tail(log_file(name)))
            h = health(url) or {}  # {}: no answer
            roles[name] = h.get("role")
            if roles[name] == "leader":
                leader_health = h
        leaders = [n for n, r in roles.items() if r == "leader"]
        if len(leaders) == 1 and all(r == "follower" for n, r in roles.items()
                                     if n != leaders[0]):
            if leader_health.get("gateways_reachable") == gateways:
                return leaders[0]
            problem = (f"leader {leaders[0]} reached {leader_health.get('gateways_reachable')} "
                       f"of {gateways} gateways")
        else:
            problem = "roles " + ", ".join(f"{n}: {r}" for n, r in roles.items())
        time.sleep(0.1)
    raise LabError(f"the agent's replicas did not settle on one leader within {timeout_s:.0f} s "
                   f"({problem}):\n" + "\n".join(f"{n}:\n{file_tail(log_file(n), 6)}"
                                                 for n, _, _ in replicas))
