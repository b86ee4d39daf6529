"""detwan-gw in the lab (`tools/testbed up --dataplane uring|dpdk`): one gateway per site.

This module starts, checks, restarts and reads the gateways (used by builder.py); what each one
is told -- tunnels, slots, bounds, the YAML -- is lab.gateway_config, re-exported here so that
callers name one module (docs/testbed.md, "Gateways").
"""
from __future__ import annotations

import json
import os
import pathlib
import shlex
import signal
import subprocess
import time

# Re-exported (__all__ below): callers name lab.gateway for both sides.
from lab.gateway_config import (
    AEAD_TAG_BYTES, BACKENDS, BOUND_MARGIN_NS, CIPHERS, CONTROL, CYCLE_NS,
    DEFAULT_CIPHER, DEFAULT_LINE_RATE_BPS, DEFAULT_RT_PRIORITY, DEFAULT_TUNNEL_RATE,
    ENCAP_OVERHEAD_BYTES, ETHERNET_OVERHEAD_BYTES, GUARD_NS, KEY_DIR, METRICS_PORT,
    PLAIN_TUN_MTU_BYTES,
    POLICER_BURST_NS, RESERVED_QUEUE, SLOT_COUNT, TIMING_MODES, TUN_MTU_BYTES, TUN_NAME,
    TUNNEL_DSCP, TUNNEL_PORT, WAN_MTU_BYTES, admin_socket, auth_lines, default_bound_ns,
    dpdk_section, draw_identity_keys, draw_tunnel_keys, GatewayOptions, identity_file, guaranteed_rate_bps, key_file,
    line_rate_bps, max_frame_bytes, path_delay_range_ns, peer_name, plan_tunnels,
    policer_burst_bytes, render_agent_config, render_config, slot_list, slots_for_rate,
    spec_tokens, tunnel_id, TunnelPlan, uring_shard_lines, wan_port_name, with_prio_dscp,
    write_tunnel_keys)
from lab.netns import LabError, is_alive, process_start_time, run
from lab.state import RUN_DIR, file_tail, write_pid_file
from lab.topology import Site, Topology
from lab.units import format_duration, format_rate  # re-exported: gateway.format_*

# The public names: this module's own, then those of lab.gateway_config and lab.units that it
# re-exports (callers name lab.gateway for both sides; pyflakes counts them used through this).
__all__ = [
    "GW_BINARY", "READY_TIMEOUT_S", "NFT_TABLE", "DPDK_RUN_DIR", "config_file", "log_file",
    "pid_key", "gw_command", "check_config", "drop_kernel_tunnel_port", "start",
    "make_realtime", "stats", "wait_ready", "log_tail", "remove_dpdk_runtime_dirs",
    "find_tunnel", "tunnel_counters", "restart",
    "admin_socket", "AEAD_TAG_BYTES", "auth_lines", "BACKENDS", "BOUND_MARGIN_NS", "CIPHERS",
    "CONTROL", "CYCLE_NS", "default_bound_ns", "DEFAULT_CIPHER", "DEFAULT_LINE_RATE_BPS",
    "DEFAULT_RT_PRIORITY", "DEFAULT_TUNNEL_RATE", "dpdk_section", "draw_identity_keys",
    "draw_tunnel_keys", "ENCAP_OVERHEAD_BYTES", "ETHERNET_OVERHEAD_BYTES", "format_duration",
    "format_rate", "GatewayOptions", "guaranteed_rate_bps", "GUARD_NS", "identity_file",
    "KEY_DIR", "key_file", "line_rate_bps", "max_frame_bytes", "METRICS_PORT",
    "path_delay_range_ns", "peer_name", "PLAIN_TUN_MTU_BYTES", "plan_tunnels",
    "policer_burst_bytes", "POLICER_BURST_NS", "render_agent_config", "render_config",
    "RESERVED_QUEUE", "SLOT_COUNT", "slot_list", "slots_for_rate", "spec_tokens",
    "TIMING_MODES", "TUN_MTU_BYTES", "TUN_NAME", "TUNNEL_DSCP", "tunnel_id", "TUNNEL_PORT",
    "TunnelPlan", "uring_shard_lines", "WAN_MTU_BYTES", "wan_port_name", "with_prio_dscp",
    "write_tunnel_keys",
]

GW_BINARY = "dataplane/daemon/detwan-gw"
READY_TIMEOUT_S = 60.0
NFT_TABLE = "dwtb_gw"
DPDK_RUN_DIR = pathlib.Path("/var/run/dpdk")


# ------------------------------------------------------------------------ files and commands

def config_file(site: Site) -> pathlib.Path:
    return RUN_DIR / f"gw-{site.name}.yaml"


def log_file(site: Site) -> pathlib.Path:
    return RUN_DIR / f"gw-{site.name}.log"


def pid_key(site: Site) -> str:
    return f"gw-{site.name}"


def gw_command(build: pathlib.Path, override: str | None = None) -> list[str]:
    """--gw-cmd / $DETWAN_GW_CMD, else the built binary."""
    override = override or os.environ.get("DETWAN_GW_CMD")
    if override:
        return shlex.split(override)
    binary = build / GW_BINARY
    if not os.access(binary, os.X_OK):
        raise LabError(f"{binary} not found or not executable: build it first "
                       f"(ninja -C {build} {GW_BINARY}), or pass --build-dir")
    return [str(binary)]


def check_config(cmd: list[str], path: pathlib.Path) -> tuple[int, str]:
    """`detwan-gw --check-config FILE`: (exit status, its message)."""
    try:
        res = subprocess.run([*cmd, "--check-config", str(path)], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"cannot run '{' '.join(cmd)} --check-config': {e}") from e
    return res.returncode, (res.stderr.strip() or res.stdout.strip())


def drop_kernel_tunnel_port(site: Site, topo: Topology, all_paths: bool = False) -> None:
    """dpdk backend: drop tunnel frames in the kernel at the WAN veths' ingress hook.

    net_af_packet reads the veth through a packet socket, and packet taps see every frame before
    the netdev ingress hook, so the gateway still gets them; the kernel, which has the port's
    address but no socket on it, no longer answers with ICMP port unreachable."""
    chains = []
    paths = [p for p in topo.paths if site in (p.a, p.b) and (all_paths or p.index == 1)]
    for p in paths:
        dev = p.gateway_if(site)
        chains.append(
            f"  chain in_{dev.replace('-', '_')} {{\n"
            f"    type filter hook ingress device \"{dev}\" priority 0; policy accept;\n"
            f"    ip daddr {p.gateway_addr(site)} udp dport {TUNNEL_PORT} counter drop\n"
            f"  }}\n")
    ruleset = f"table netdev {NFT_TABLE} {{\n" + "".join(chains) + "}\n"
    try:
        res = subprocess.run(["ip", "netns", "exec", site.gateway_ns, "nft", "-f", "-"],
                             input=ruleset, capture_output=True, text=True, timeout=20)
    except FileNotFoundError as e:
        raise LabError("nft not found: the dpdk backend needs nftables (tools/install-deps)") \
            from e
    if res.returncode != 0:
        raise LabError(f"nft in {site.gateway_ns} failed: {res.stderr.strip()}")


def start(cmd: list[str], site: Site, rt_priority: int = 0) -> dict:
    """Starts detwan-gw in the site's gateway namespace; returns its state record. The
    SCHED_FIFO priority (rt_priority > 0) is applied by make_realtime() once it is ready, not
    at exec: DPDK's EAL waits for the control threads it creates by spinning, and a real-time
    spinner on a 2-vCPU machine starves them (seen: 30 s and more of start-up, two gateways
    at once never ready)."""
    argv = ["ip", "netns", "exec", site.gateway_ns, *cmd, "run", "--config",
            str(config_file(site))]
    with open(log_file(site), "w", encoding="utf-8") as log:
        log.write("$ " + shlex.join(argv) + "\n")
        log.flush()
        # `ip netns exec` and chrt exec the command, so this pid is the gateway's own.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    start_time = process_start_time(proc.pid)
    write_pid_file(pid_key(site), proc.pid, start_time)
    return {"pid": proc.pid, "pid_start_time": start_time, "argv": argv,
            "started_unix_ns": time.time_ns(), "rt_priority": rt_priority}


def make_realtime(site: Site, record: dict) -> None:
    """Every thread of the ready gateway to SCHED_FIFO record["rt_priority"] (0: left as is)."""
    prio = record.get("rt_priority", 0)
    if prio <= 0:
        return
    res = run(["chrt", "--fifo", "--all-tasks", "--pid", str(prio), str(record["pid"])],
              check=False)
    if res.returncode != 0:
        raise LabError(f"chrt --fifo {prio} for detwan-gw of site {site.name} failed: "
                       f"{(res.stderr or res.stdout).strip()}")


def stats(cmd: list[str], site: Site, timeout_s: float = 10) -> dict:
    """`detwan-gw stats --json` in the site's gateway namespace."""
    try:
        res = run([*cmd, "stats", "--json"], ns=site.gateway_ns, check=False, timeout=timeout_s)
    except LabError as e:
        raise LabError(f"detwan-gw stats for site {site.name}: {e}") from e
    if res.returncode != 0:
        raise LabError(f"detwan-gw stats for site {site.name} failed (exit {res.returncode}): "
                       f"{(res.stderr or res.stdout).strip()}")
    return json.loads(res.stdout)


def wait_ready(cmd: list[str], site: Site, record: dict,
               timeout_s: float = READY_TIMEOUT_S) -> None:
    """Polls (bounded) until the gateway answers `stats` and its TUN device is up; fails early
    with the end of its log if it exits."""
    deadline = time.monotonic() + timeout_s
    problem = "no answer yet"
    while time.monotonic() < deadline:
        if not is_alive(record["pid"], record["pid_start_time"]):
            raise LabError(f"detwan-gw of site {site.name} exited during start-up:\n"
                           + log_tail(site))
        try:
            # The daemon answers on its control socket once its dataplane is up; DPDK's EAL
            # may take seconds to get there (a fresh VM faults in its --no-huge memory slowly).
            res = run([*cmd, "stats", "--json"], ns=site.gateway_ns, check=False,
                      timeout=max(1.0, min(5.0, deadline - time.monotonic())))
        except LabError as e:
            problem = str(e)
            continue
        if res.returncode == 0:
            link = run(["ip", "-o", "link", "show", "dev", TUN_NAME], ns=site.gateway_ns,
                       check=False)
            if link.returncode == 0 and ",UP" in link.stdout:
                return
            problem = f"TUN device {TUN_NAME} not up"
        else:
            problem = (res.stderr or res.stdout).strip() or f"stats exited {res.returncode}"
        time.sleep(0.05)
    raise LabError(f"detwan-gw of site {site.name} not ready within {timeout_s:.0f} s "
                   f"({problem}):\n" + log_tail(site))


def log_tail(site: Site, lines: int = 15) -> str:
    return file_tail(log_file(site), lines)


def remove_dpdk_runtime_dirs() -> None:
    """EAL runtime directories (--file-prefix dwtb-<site>) left by the lab's gateways."""
    if not DPDK_RUN_DIR.is_dir():
        return
    for d in DPDK_RUN_DIR.glob("dwtb-*"):
        subprocess.run(["rm", "-rf", "--", str(d)], check=False, timeout=20)


def find_tunnel(stats_json: dict, tunnel: int) -> dict:
    """The entry of `tunnels` with this id in `detwan-gw stats --json`."""
    for t in stats_json.get("tunnels", []):
        if t.get("id") == tunnel:
            return t
    raise KeyError(f"tunnel {tunnel} not in the gateway's stats "
                   f"(tunnels: {[t.get('id') for t in stats_json.get('tunnels', [])]})")


def tunnel_counters(stats_json: dict, tunnel: int) -> dict:
    """The counters of one tunnel from `detwan-gw stats --json` (schema in docs/gateway-stats.md,
    "Statistics"), flattened for tests and benchmarks:
      tx_sent        data packets sent into the tunnel (tx.sent_on_time + sent_best_effort)
      tx_frames_offered / tx_frames_sent / tx_dropped   the tunnel's slot scheduler
                     (tx.scheduler), which also carries the peer's control packets
      rx_received / rx_released / rx_late / rx_dropped   on-time playout (rx.on_time): data
      one_way_delay_ns, wan_delay_ns, playout_error_ns, lateness_ns   its histogram summaries
    plus the raw entry under "raw"."""
    t = find_tunnel(stats_json, tunnel)
    tx, sched = t["tx"], t["tx"].get("scheduler") or {}
    playout = t["rx"]["on_time"]
    return {
        "tx_sent": tx["sent_on_time_packets"] + tx["sent_best_effort_packets"],
        "tx_frames_offered": sched.get("offered_packets", 0),
        "tx_frames_sent": sched.get("sent_packets", 0),
        "tx_dropped": sum((sched.get("dropped") or {}).values()),
        "rx_received": playout["received_packets"],
        "rx_released": playout["released_packets"],
        "rx_late": playout["late_packets"],
        "rx_dropped": sum(playout["dropped"].values()),
        "one_way_delay_ns": playout["one_way_delay_ns"],
        "wan_delay_ns": playout["wan_delay_ns"],
        "playout_error_ns": playout["playout_error_ns"],
        "lateness_ns": playout["lateness_ns"],
        "raw": t,
    }


def restart(cmd: list[str], site: Site, record: dict, action: str) -> dict:
    """`tools/testbed gateway SITE kill|stop|start|restart` on a running lab's gateway:
    kill = SIGKILL (a crash), stop = SIGTERM, start = run it again with its configuration file
    (tunnels added at run time are gone: an agent re-programs them), restart = SIGTERM then
    start. Waits (bounded) for the old process to exit and the new one to answer; the old
    io_uring instance releases its sockets a moment after exit, so a start that finds its
    control socket still bound ("in use") is retried briefly, as a service manager would.
    Returns the new process fields of the state record (or {} after kill/stop)."""
    alive = bool(record.get("pid")) and is_alive(record["pid"], record.get("pid_start_time"))
    if action in ("kill", "stop", "restart") and alive:
        os.kill(record["pid"], signal.SIGKILL if action == "kill" else signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and is_alive(record["pid"], record["pid_start_time"]):
            time.sleep(0.02)
        if is_alive(record["pid"], record["pid_start_time"]):
            raise LabError(f"detwan-gw of site {site.name} (pid {record['pid']}) did not exit "
                           "within 10 s of SIGTERM")
    elif action in ("kill", "stop"):
        raise LabError(f"detwan-gw of site {site.name} is not running")
    if action in ("kill", "stop"):
        return {"pid": None, "pid_start_time": None}
    if action == "start" and alive:
        raise LabError(f"detwan-gw of site {site.name} is already running (pid {record['pid']})")
    for attempt in range(100):
        new = start(cmd, site, record.get("rt_priority", 0))
        try:
            wait_ready(cmd, site, new)
            break
        except LabError as e:
            if "in use" not in str(e) or attempt == 99:
                raise
            time.sleep(0.05)
    make_realtime(site, new)
    return {k: new[k] for k in ("pid", "pid_start_time", "started_unix_ns")}
