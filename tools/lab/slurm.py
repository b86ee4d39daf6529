"""Slurm in the lab (`tools/testbed up --dataplane uring --agents --slurm`, docs/slurm.md).

A real Slurm 22.05 cluster (Debian's slurmctld, slurmd, munge) with one node per site, whose
jobs reserve their WAN path through the lab's detwan-agent (the SPANK plugin spank_detwan.so):
  * munged in the root namespace with a key made for this lab (RUN_DIR/slurm/munge.key, never
    /etc/munge) and its socket in RUN_DIR/slurm; Slurm finds it through AuthInfo=socket=;
  * slurmctld in the root namespace on a free port, reached by the nodes at the root end of site
    a's management veth (10.99.1.1; every other host routes that one address over its own
    management veth);
  * slurmd "site-X" in site X's host namespace (slurmd -N site-X), NodeAddr = the host's
    best-effort address 10.10.i.2: slurmd, slurmstepd and srun of different sites talk over the
    emulated WAN like the rest of the job; the root namespace reaches each through a /32 route
    over that site's management veth (it vanishes with the veth);
  * slurm.conf and plugstack.conf written into RUN_DIR/slurm; /etc/slurm/slurm.conf is made a
    symlink to it when no slurm.conf exists there, so plain `srun` finds the lab (else export
    SLURM_CONF; `status --json` prints it under slurm.conf).
`down` stops the daemons with everything else (pid files, namespace pids) and removes
RUN_DIR/slurm (key, spool, state) and the symlink. Pure functions first (tests without root),
then the process handling used by builder.py.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import time

from lab import agent
from lab.netns import LabError, ip, is_alive, process_start_time
from lab.state import RUN_DIR, file_tail, write_pid_file
from lab.topology import Site, Topology

PLUGIN = "control/slurm/spank_detwan.so"
DAEMONS = ("slurmctld", "slurmd", "munged", "sinfo", "srun")
CLUSTER = "detwan-lab"
PARTITION = "lab"
NODE_CPUS = 4            # per node (config_overrides): several small jobs may share a node
RESERVATION_DURATION = "1h"  # the plugin's duration=: the epilog terminates reservations earlier
READY_TIMEOUT_S = 60.0
ETC_CONF = pathlib.Path("/etc/slurm/slurm.conf")


def slurm_dir() -> pathlib.Path:
    return RUN_DIR / "slurm"


def conf_file() -> pathlib.Path:
    return slurm_dir() / "slurm.conf"


def plugstack_file() -> pathlib.Path:
    return slurm_dir() / "plugstack.conf"


def munge_socket() -> pathlib.Path:
    return slurm_dir() / "munge.sock"


def log_file(name: str) -> pathlib.Path:
    """slurmctld.log, slurmd-site-a.log, *-stdout.log: in RUN_DIR, kept after down like the
    other logs."""
    return RUN_DIR / f"{name}.log"


def node_name(site: Site) -> str:
    return f"site-{site.name}"


def controller_addr(topo: Topology, mgmt_net: str) -> str:
    """Where the nodes reach slurmctld: the root end of the first site's management veth."""
    return agent.mgmt_root_addr(mgmt_net, topo.sites[0])


def render_conf(topo: Topology, mgmt_net: str, ctld_port: int, slurmd_port: int,
                hostname: str) -> str:
    """slurm.conf of the lab: no cgroups, no accounting, everything under RUN_DIR."""
    d = slurm_dir()
    lines = [
        "# Slurm of the detwan lab, written by tools/testbed up --slurm (tools/lab/slurm.py)",
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost={hostname}({controller_addr(topo, mgmt_net)})",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool-%n",
        f"SlurmctldPidFile={d}/slurmctld.pid",
        f"SlurmdPidFile={d}/slurmd-%n.pid",
        f"SlurmctldLogFile={log_file('slurmctld')}",
        f"SlurmdLogFile={RUN_DIR}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"PlugStackConfig={plugstack_file()}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides",
        # The job's epilog (the plugin's release) runs on every node of the allocation.
        "PrologFlags=Alloc",
        "ReturnToService=2",
        "JobRequeue=0",
        "KillOnBadExit=1",
        "KillWait=2",
        "OverTimeLimit=0",
        "InactiveLimit=0",
        "MinJobAge=600",
    ]
    for s in topo.sites:
        lines.append(f"NodeName={node_name(s)} NodeAddr={s.best_effort_addr} CPUs={NODE_CPUS} "
                     "State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def render_plugstack(build: pathlib.Path, topo: Topology, mgmt_net: str, agent_port: int,
                     tls: tuple[str, str] | None = None) -> str:
    """One `required` line: the plugin and its arguments (docs/slurm.md, "plugstack.conf").
    `tls` (CA file, token file): the agent at `agent_port` is an owner's HTTPS agent -- with
    --owners, the aggregator every node asks, so the plugin runs unchanged across owners."""
    sites = ",".join(f"{node_name(s)}:{s.name}" for s in topo.sites)
    scheme = "https" if tls else "http"
    agents = ",".join(
        f"{s.name}={scheme}://{agent.mgmt_root_addr(mgmt_net, s)}:{agent_port}" for s in topo.sites)
    # agent=: the agent as srun in the root namespace reaches it (an srun that made its own
    # allocation terminates the job's reservations itself when it ends).
    trust = f" agent_ca={tls[0]} token_file={tls[1]}" if tls else ""
    return ("# detwan SPANK plugin (docs/slurm.md), written by tools/testbed up --slurm\n"
            f"required {build / PLUGIN} detwanctl={build / agent.CTL_BINARY} sites={sites} "
            f"agent={scheme}://127.0.0.1:{agent_port} agents={agents}{trust} "
            f"duration={RESERVATION_DURATION} timeout=30\n")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def check_prerequisites(build: pathlib.Path) -> str | None:
    """Why --slurm cannot run here (None: it can). Checked before anything is created."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        return (f"{', '.join(missing)} not found: install Debian's slurmctld, slurmd, "
                "slurm-client and munge (tools/install-deps)")
    if not (build / PLUGIN).exists():
        return (f"{build / PLUGIN} not built: install libslurm-dev (tools/install-deps), then "
                f"meson configure {build} -Dslurm=enabled && ninja -C {build}")
    if not os.access(build / agent.CTL_BINARY, os.X_OK):
        return f"{build / agent.CTL_BINARY} not built (ninja -C {build})"
    return None


def client_env() -> dict[str, str]:
    """The environment for Slurm clients (srun, sbatch, sinfo) of this lab."""
    return dict(os.environ, SLURM_CONF=str(conf_file()))


# ------------------------------------------------------------------------ processes and files

def _start(name: str, argv: list[str], ns: str | None = None, log: str | None = None) -> dict:
    """Starts a daemon in the foreground (its own session); stdout and stderr go to
    NAME-stdout.log (munged logs there; slurmctld and slurmd write their own log, `log`)."""
    full = (["ip", "netns", "exec", ns] if ns else []) + argv
    with open(log_file(name + "-stdout"), "a", encoding="utf-8") as out:
        out.write("$ " + " ".join(full) + "\n")
        out.flush()
        proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    start_time = process_start_time(proc.pid)
    write_pid_file(name, proc.pid, start_time)
    return {"pid": proc.pid, "pid_start_time": start_time, "argv": full,
            "log": str(log_file(log or name + "-stdout")), "started_unix_ns": time.time_ns()}


def _make_key(path: pathlib.Path) -> None:
    """A munge key for this lab only: 1024 random bytes, readable by root alone."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(1024))


def write_files(topo: Topology, conf: str, plugstack: str) -> None:
    d = slurm_dir()
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    d.chmod(0o711)  # munged wants its socket's directory searchable by all; the key is 0400
    (d / "state").mkdir(mode=0o700)
    for s in topo.sites:  # SlurmdSpoolDir=.../spool-%n: slurmd wants it before it starts
        (d / f"spool-{node_name(s)}").mkdir(mode=0o700)
    _make_key(d / "munge.key")
    conf_file().write_text(conf, encoding="utf-8")
    plugstack_file().write_text(plugstack, encoding="utf-8")
    # Nothing here uses cgroups (proctrack/linuxproc, task/none), but slurmd 22.05 loads a
    # cgroup plugin at start, and its autodetection fails on the fresh /sys that `ip netns exec`
    # mounts (no /sys/fs/cgroup): naming one skips it; cgroup/v1's init touches nothing.
    (d / "cgroup.conf").write_text("# written by tools/testbed up --slurm\n"
                                   "CgroupPlugin=cgroup/v1\n", encoding="utf-8")


def install_conf_link() -> bool:
    """/etc/slurm/slurm.conf -> the lab's, when there is none (or a dangling one of ours)."""
    if ETC_CONF.is_symlink() and str(os.readlink(ETC_CONF)).startswith(str(RUN_DIR)):
        ETC_CONF.unlink()
    if ETC_CONF.exists() or ETC_CONF.is_symlink() or not ETC_CONF.parent.is_dir():
        return False
    ETC_CONF.symlink_to(conf_file())
    return True


def add_routes(topo: Topology, mgmt_net: str) -> None:
    """Root namespace -> each node (its best-effort address, over the site's management veth);
    every host -> the controller address (over its own management veth)."""
    ctl = controller_addr(topo, mgmt_net)
    for s in topo.sites:
        root_if, host_if = agent.mgmt_ifs(s)
        ip("route", "add", f"{s.best_effort_addr}/32", "via", agent.mgmt_host_addr(mgmt_net, s),
           "dev", root_if)
        if ctl != agent.mgmt_root_addr(mgmt_net, s):
            ip("route", "add", f"{ctl}/32", "via", agent.mgmt_root_addr(mgmt_net, s), "dev",
               host_if, ns=s.host_ns)


def start_munged() -> dict:
    d = slurm_dir()
    rec = _start("munged", ["munged", "--foreground", f"--socket={munge_socket()}",
                            f"--key-file={d / 'munge.key'}", f"--pid-file={d / 'munged.pid'}",
                            f"--seed-file={d / 'munged.seed'}", "--num-threads=2"])
    deadline = time.monotonic() + 10
    while not munge_socket().exists():
        if not is_alive(rec["pid"], rec["pid_start_time"]):
            raise LabError("munged exited during start-up:\n" + file_tail(log_file("munged-stdout")))
        if time.monotonic() > deadline:
            raise LabError(f"munged did not create {munge_socket()} within 10 s")
        time.sleep(0.02)
    return rec


def start_slurmctld() -> dict:
    return _start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf_file())], log="slurmctld")


def start_slurmd(site: Site) -> dict:
    name = node_name(site)
    return _start(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(conf_file())],
                  ns=site.host_ns, log=f"slurmd-{name}")


def node_states() -> dict[str, str]:
    res = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                         timeout=20, env=client_env(), stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise OSError(res.stderr.strip() or f"sinfo exited {res.returncode}")
    return dict(line.split(None, 1) for line in res.stdout.splitlines() if line.strip())


def wait_ready(topo: Topology, records: dict[str, dict], timeout_s: float = READY_TIMEOUT_S):
    """Polls (bounded) until every node is idle; fails early, with its log, if a daemon exits."""
    deadline = time.monotonic() + timeout_s
    problem = "no answer yet"
    while time.monotonic() < deadline:
        for name, rec in records.items():
            if not is_alive(rec["pid"], rec["pid_start_time"]):
                raise LabError(f"{name} exited during start-up:\n" + file_tail(
                    pathlib.Path(rec["log"])) + "\n" + file_tail(log_file(name + "-stdout")))
        try:
            states = node_states()
            want = {node_name(s) for s in topo.sites}
            if want <= set(states) and all(states[n] == "idle" for n in want):
                return
            problem = "nodes " + ", ".join(f"{n} {states.get(n, 'missing')}" for n in sorted(want))
        except (OSError, ValueError, subprocess.TimeoutExpired) as e:
            problem = str(e)
        time.sleep(0.2)
    raise LabError(f"Slurm not ready within {timeout_s:.0f} s ({problem}); logs: "
                   f"{log_file('slurmctld')}, {RUN_DIR}/slurmd-site-*.log")


# ---------------------------------------------------------------- the step of `up`, the record

def start(lab) -> None:
    """The step start_slurm of `up` (lab: builder.Lab): configuration, munge key, routes,
    munged, slurmctld and one slurmd per site; waits until every node is idle. Pids go on record
    at once, so `down` stops them after any failure."""
    if not lab.config.slurm:
        return
    net, port = lab.config.mgmt_net, lab.config.agent_port
    build = lab.config.build_dir or pathlib.Path(".")
    tls = None
    if lab.config.owners is not None:
        # Across owners every node asks one agent, the first site's owner's (it aggregates
        # across the others), as that owner's tenant `<d>-job1`.
        d = lab.config.owners.site_domain[lab.topo.sites[0].name]
        files = lab.config.domain_files()[d]
        port, tls = files.port, (str(files.ca), str(files.tenant_token(f"{d}-job1")))
    write_files(lab.topo, render_conf(lab.topo, net, free_port(), free_port(),
                            socket.gethostname().split(".")[0]),
                render_plugstack(build, lab.topo, net, port, tls))
    add_routes(lab.topo, net)
    lab.slurm_daemons["munged"] = start_munged()
    lab.save()
    lab.slurm_daemons["slurmctld"] = start_slurmctld()
    lab.save()
    for s in lab.topo.sites:
        lab.slurm_daemons[f"slurmd-{node_name(s)}"] = start_slurmd(s)
        lab.save()
    wait_ready(lab.topo, lab.slurm_daemons)
    lab.slurm_conf_link = install_conf_link()
    lab.save()


def record(lab) -> dict | None:
    """`status --json` slurm: what clients need and every daemon's record (None without)."""
    if not lab.config.slurm:
        return None
    return {"conf": str(conf_file()), "plugstack": str(plugstack_file()),
            "munge_socket": str(munge_socket()), "partition": PARTITION,
            "etc_slurm_conf_link": lab.slurm_conf_link,
            "nodes": {s.name: node_name(s) for s in lab.topo.sites},
            "daemons": lab.slurm_daemons}


def remove_files() -> None:
    """Key, spool, state and configuration (the daemons are stopped already); the symlink."""
    if ETC_CONF.is_symlink() and str(os.readlink(ETC_CONF)).startswith(str(RUN_DIR)):
        ETC_CONF.unlink()
    if slurm_dir().exists():
        shutil.rmtree(slurm_dir(), ignore_errors=True)
