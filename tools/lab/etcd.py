"""A static etcd cluster for the agent's replicas (`tools/testbed up --agents --agent-replicas N`).

Three members (Debian's /usr/bin/etcd, 3.4) in the root namespace, each on 127.0.0.1 with a
client and a peer port chosen free at `up`, its data directory under the run directory
(RUN_DIR/etcd/<member>, tmpfs: fsync is cheap) and its log RUN_DIR/etcd-<member>.log; an
--initial-cluster-token unique to the lab, so a member of another (or an earlier) lab can never
join. The replicas reach it as `--store etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.

A member's pid goes into its pid file and the state file at once, so `down` stops it whatever
happened; `down` also removes the data directories (state.remove_runtime_files). A member
started again keeps its data directory and rejoins the cluster (`tools/testbed etcd NAME start`).

Also here: cutting a replica off from etcd (`tools/testbed agent NAME partition|heal`). Every
replica runs in a cgroup v2 of its own (<cgroup2 mount>/<PREFIX>agent-<replica>); a partition
is an nftables rule in the root namespace (table inet <PREFIX>partition, output hook) that
drops every TCP packet from a socket of that cgroup to an etcd client port. The replica's other
traffic (its HTTP API, the gateways' admin sockets) is untouched, and so is etcd.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import secrets
import shlex
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

from lab.netns import LabError, is_alive, process_start_time
from lab.state import RUN_DIR, file_tail, write_pid_file
from lab.topology import PREFIX

ETCD_BINARY = "/usr/bin/etcd"
MEMBERS = ("etcd-1", "etcd-2", "etcd-3")
# Raft timing (ms). etcd's defaults (100 / 1000) hold on the loaded 2-vCPU machine: a shorter
# election timeout made followers start elections while the leader was merely descheduled; a
# longer one slows the agent's failover when the raft leader itself is killed. Pre-vote keeps a
# member that comes back (or was cut off) from disrupting the leader it rejoins.
HEARTBEAT_MS = 100
ELECTION_MS = 1000
READY_TIMEOUT_S = 60.0


def etcd_command(override: str | None = None) -> list[str]:
    override = override or os.environ.get("DETWAN_ETCD_CMD")
    if override:
        return shlex.split(override)
    if not os.access(ETCD_BINARY, os.X_OK):
        raise LabError(f"{ETCD_BINARY} not found: --agent-replicas needs etcd "
                       "(apt-get install etcd-server)")
    return [ETCD_BINARY]


def data_root() -> pathlib.Path:
    return RUN_DIR / "etcd"


def data_dir(name: str) -> pathlib.Path:
    return data_root() / name


def log_file(name: str) -> pathlib.Path:
    return RUN_DIR / f"{name}.log"


def pid_key(name: str) -> str:
    return name  # "etcd-1" -> RUN_DIR/etcd-1.pid


def _free_port() -> int:
    import socket  # pylint: disable=import-outside-toplevel
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan(count: int = len(MEMBERS)) -> dict:
    """The cluster's description (ports drawn free now, a fresh token); no process yet."""
    names = [f"etcd-{i}" for i in range(1, count + 1)]
    ports: set[int] = set()
    members = []
    for name in names:
        client, peer = _free_port(), _free_port()
        while client in ports or peer in ports or client == peer:
            client, peer = _free_port(), _free_port()
        ports |= {client, peer}
        members.append({"name": name, "client_port": client, "peer_port": peer,
                        "client_url": f"http://127.0.0.1:{client}",
                        "peer_url": f"http://127.0.0.1:{peer}",
                        "data_dir": str(data_dir(name)), "log": str(log_file(name)),
                        "pid": None, "pid_start_time": None, "argv": []})
    return {"token": f"{PREFIX}lab-{time.time_ns()}-{secrets.token_hex(4)}",
            "members": members}


def endpoints(cluster: dict) -> str:
    return ",".join(f"127.0.0.1:{m['client_port']}" for m in cluster["members"])


def store_url(cluster: dict) -> str:
    return "etcd://" + endpoints(cluster)


def client_ports(cluster: dict) -> list[int]:
    return [m["client_port"] for m in cluster["members"]]


def member_argv(cmd: list[str], cluster: dict, m: dict) -> list[str]:
    initial = ",".join(f"{x['name']}={x['peer_url']}" for x in cluster["members"])
    return [*cmd, "--name", m["name"], "--data-dir", m["data_dir"],
            "--listen-client-urls", m["client_url"], "--advertise-client-urls", m["client_url"],
            "--listen-peer-urls", m["peer_url"], "--initial-advertise-peer-urls", m["peer_url"],
            "--initial-cluster", initial, "--initial-cluster-state", "new",
            "--initial-cluster-token", cluster["token"],
            "--heartbeat-interval", str(HEARTBEAT_MS), "--election-timeout", str(ELECTION_MS),
            "--pre-vote=true", "--logger", "zap", "--log-level", "warn", "--enable-v2=false"]


def find(cluster: dict, name: str) -> dict:
    for m in cluster.get("members", []):
        if m["name"] == name:
            return m
    raise LabError(f"no etcd member '{name}' (members: "
                   f"{', '.join(m['name'] for m in cluster.get('members', [])) or 'none'})")


def start_member(m: dict, argv: list[str] | None = None) -> dict:
    """Starts (or starts again, with the same argv and data directory) one member; updates and
    returns its record. The pid is on record before this returns."""
    argv = argv or m["argv"]
    pathlib.Path(m["data_dir"]).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(m["log"], "a", encoding="utf-8") as log:
        log.write("$ " + shlex.join(argv) + "\n")
        log.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    start_time = process_start_time(proc.pid)
    write_pid_file(pid_key(m["name"]), proc.pid, start_time)
    m.update({"pid": proc.pid, "pid_start_time": start_time, "argv": argv,
              "started_unix_ns": time.time_ns()})
    return m


def start(cmd: list[str], cluster: dict, save=lambda: None) -> None:
    """Starts every member (save() after each, so its pid is on record) and waits until each
    answers healthy."""
    data_root().mkdir(mode=0o700, parents=True, exist_ok=True)
    for m in cluster["members"]:
        start_member(m, member_argv(cmd, cluster, m))
        save()
    wait_healthy(cluster["members"])


def alive(m: dict) -> bool:
    return bool(m.get("pid")) and is_alive(m["pid"], m.get("pid_start_time"))


def _post(url: str, path: str, body: dict, timeout_s: float) -> dict:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as answer:
        return json.loads(answer.read().decode())


def health(m: dict, timeout_s: float = 2.0) -> tuple[bool, str]:
    """(healthy, why not): GET /health answers {"health": "true"} (the member has a raft
    leader and no alarm)."""
    try:
        with urllib.request.urlopen(m["client_url"] + "/health", timeout=timeout_s) as answer:
            doc = json.loads(answer.read().decode())
    except urllib.error.HTTPError as e:
        try:
            doc = json.loads(e.read().decode())
        except ValueError:
            return False, f"HTTP {e.code}"
    except (OSError, ValueError) as e:
        return False, str(e)
    return (doc.get("health") == "true"), json.dumps(doc)


def member_status(m: dict, timeout_s: float = 2.0) -> dict | None:
    """etcd's maintenance status of one member (member_id, leader, raftIndex, ...) or None."""
    try:
        return _post(m["client_url"], "/v3/maintenance/status", {}, timeout_s)
    except (OSError, ValueError):
        return None


def wait_healthy(members: list[dict], timeout_s: float = READY_TIMEOUT_S) -> None:
    """Bounded: every member answers healthy; a member that exits fails at once with its log."""
    deadline = time.monotonic() + timeout_s
    pending = list(members)
    why = "no answer yet"
    while pending and time.monotonic() < deadline:
        for m in list(pending):
            if not alive(m):
                raise LabError(f"etcd member {m['name']} exited during start-up:\n"
                               + file_tail(pathlib.Path(m["log"])))
            ok, why = health(m)
            if ok:
                pending.remove(m)
        if pending:
            time.sleep(0.1)
    if pending:
        m = pending[0]
        raise LabError(f"etcd member {m['name']} not healthy within {timeout_s:.0f} s ({why}):\n"
                       + file_tail(pathlib.Path(m["log"])))


def live(cluster: dict) -> list[dict]:
    """For `status`: each member's record with alive, healthy and raft_leader (whether it is
    the raft leader now), from a short query of every member."""
    out = []
    for m in cluster.get("members", []):
        rec = dict(m)
        rec["alive"] = alive(m)
        rec["healthy"] = rec["alive"] and health(m, timeout_s=2.0)[0]
        st = member_status(m, timeout_s=2.0) if rec["alive"] else None
        rec["raft_leader"] = bool(st and st.get("leader") == st.get("header", {}).get("member_id"))
        rec["raft_index"] = int(st.get("raftIndex", 0)) if st else None
        out.append(rec)
    return out


def stop_member(m: dict, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> bool:
    pid, start_time = m.get("pid"), m.get("pid_start_time")
    if not pid or not is_alive(pid, start_time):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and is_alive(pid, start_time):
        time.sleep(0.02)
    if is_alive(pid, start_time):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return True


def remove_files() -> None:
    """The members' data directories (`down`, after the processes are gone)."""
    shutil.rmtree(data_root(), ignore_errors=True)


# --------------------------------------------------------------------- partitions (cgroup v2)

NFT_TABLE = PREFIX.replace("-", "_") + "partition"   # dwtb_partition


def cgroup2_mount() -> pathlib.Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on
    a hybrid host), None without one."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[2] == "cgroup2":
                    return pathlib.Path(fields[1])
    except OSError:
        pass
    return None


def cgroup_name(replica: str) -> str:
    return f"{PREFIX}agent-{replica}"


def cgroup_dir(replica: str) -> pathlib.Path | None:
    root = cgroup2_mount()
    return None if root is None else root / cgroup_name(replica)


def make_cgroup(replica: str) -> pathlib.Path | None:
    """The replica's own cgroup (None when the host has no cgroup v2: no partitions then)."""
    path = cgroup_dir(replica)
    if path is None:
        return None
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return None
    return path


def enter_cgroup(path: str | None):
    """A preexec_fn: the child joins the cgroup before it execs (every socket it makes is then
    the cgroup's, which is what the partition rule matches)."""
    if not path:
        return None

    def enter():
        with open(os.path.join(path, "cgroup.procs"), "w", encoding="utf-8") as f:
            f.write("0")
    return enter


def remove_cgroups() -> None:
    """`down`: every replica cgroup of this prefix (their processes are gone by then)."""
    root = cgroup2_mount()
    if root is None:
        return
    for path in root.glob(f"{PREFIX}agent-*"):
        with contextlib.suppress(OSError):
            path.rmdir()


def partition_problem() -> str | None:
    """Why partitions cannot work here, or None."""
    if cgroup2_mount() is None:
        return "no cgroup v2 hierarchy is mounted"
    if shutil.which("nft") is None:
        return "nft (nftables) is not installed"
    return None


def _nft(script: str) -> None:
    res = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True,
                         timeout=20)
    if res.returncode != 0:
        raise LabError(f"nft refused the partition rules: {res.stderr.strip()}")


def apply_partitions(partitioned: dict[str, str], ports: list[int]) -> None:
    """Makes the rules exactly `partitioned` (replica -> its cgroup directory): one drop rule
    per replica for TCP to the etcd client ports; no table when nobody is partitioned."""
    remove_partitions()
    if not partitioned:
        return
    root = cgroup2_mount()
    if root is None:
        raise LabError(partition_problem() or "no cgroup v2")
    port_set = ", ".join(str(p) for p in sorted(ports))
    rules = []
    for replica, path in sorted(partitioned.items()):
        rel = pathlib.Path(path).relative_to(root)
        # nft resolves the path under /sys/fs/cgroup; the level counts from the v2 root.
        nft_path = os.path.relpath(path, "/sys/fs/cgroup")
        rules.append(f'    socket cgroupv2 level {len(rel.parts)} "{nft_path}" '
                     f'tcp dport {{ {port_set} }} counter drop comment "{replica}"')
    _nft(f"table inet {NFT_TABLE} {{\n  chain out {{\n"
         "    type filter hook output priority filter; policy accept;\n"
         + "\n".join(rules) + "\n  }\n}\n")


def remove_partitions() -> None:
    if shutil.which("nft") is None:
        return
    subprocess.run(["nft", "delete", "table", "inet", NFT_TABLE], capture_output=True,
                   timeout=20, check=False)
