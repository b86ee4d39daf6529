"""Command line of tools/testbed: up, down, status, exec, wanem, gw, agent, cross (in
cross_cli.py).

Exit codes: 0 success; 1 the lab could not be built/removed or no lab is up; 2 bad usage, a bad
SPEC or a gateway configuration detwan-gw refuses; 3 (`status`) a lab exists but is degraded (an
emulator or a gateway died, a namespace is missing); `exec`, `wanem` and `gw` pass the command's
exit code through and use 125 for their own errors.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import sys
import tempfile
import time

from lab import (agent, builder, cross_cli, etcd, federation, gateway, netns, slurm, state,
                 topology, wanem)
from lab.netns import LabError

PROG = "tools/testbed"
EXIT_TOOL_ERROR = 125
MIN_MTU_BYTES = 576    # IPv4 minimum; also the transport's lower limit
MAX_MTU_BYTES = 9216   # largest jumbo frame veth and common switches take
MAX_AGENT_REPLICAS = 5


USAGE = {
    "exec": f"usage: {PROG} exec SITE [--gw] -- CMD...\n"
            "  runs CMD in SITE's host namespace (gateway namespace with --gw); CMD's exit code\n"
            "  is passed through (125: exec itself failed)",
    "wanem": f"usage: {PROG} wanem PAIR K -- SUBCOMMAND [ARGS...]\n"
             "  runs detwan-wanem SUBCOMMAND --control <socket of path K of PAIR> ARGS\n"
             "  e.g. wanem ab 1 -- stats --json; wanem ab 1 -- set loss=1%;\n"
             "       wanem ab 1 -- link down",
    "gw": f"usage: {PROG} gw SITE -- ARGS...\n"
          "  runs detwan-gw ARGS in SITE's gateway namespace (lab up with --dataplane), where\n"
          "  its default control socket reaches that site's gateway\n"
          "  e.g. gw a -- stats --json; gw b -- stats --prometheus",
}


class Interrupted(Exception):
    pass


def err(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr)


def _require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("must run as root (network namespaces)")


# ---------------------------------------------------------------------------------------- up

def _path_spec(text: str) -> tuple[int, str]:
    k, eq, spec = text.partition("=")
    if not eq or not k.isdigit():
        raise argparse.ArgumentTypeError(f"'{text}': expected K=SPEC (e.g. 2=delay=20ms)")
    return int(k), spec


def add_up_parser(sub) -> None:
    p = sub.add_parser("up", help="build the lab")
    p.add_argument("--sites", type=int, default=2, help="number of sites, 2..4 (default 2)")
    p.add_argument("--paths", type=int, default=1,
                   help="disjoint WAN paths per site pair, 1 or 2 (default 1)")
    p.add_argument("--wan", default="", metavar="SPEC",
                   help="detwan-wanem SPEC for both directions of every WAN path")
    p.add_argument("--wan-path", action="append", type=_path_spec, default=[], metavar="K=SPEC",
                   help="SPEC for path K of every pair (overrides --wan); repeatable")
    p.add_argument("--mtu", type=int, default=1500, metavar="BYTES",
                   help="IP MTU of every link, e.g. 9000 for jumbo frames (default 1500; not "
                   "with --dataplane, whose gateways are configured for 1500)")
    p.add_argument("--seed", type=int, default=1,
                   help="emulator seeds are SEED, SEED+2, ... in path order (each emulator uses "
                   "seed and seed+1 for its two directions; seed= in a SPEC wins) (default 1)")
    p.add_argument("--build-dir",
                   help="meson build dir (default $DETWAN_BUILD_DIR, else <repo>/build)")
    p.add_argument("--wanem-cmd", help="emulator command instead of the built detwan-wanem "
                   "(also $DETWAN_WANEM_CMD); for development only")
    p.add_argument("--wanem-opt", action="append", default=[], metavar="OPT",
                   help="extra option for every `detwan-wanem run`, e.g. --wanem-opt=--busy-poll "
                   "(repeatable)")
    p.add_argument("--no-ping-check", action="store_true",
                   help="skip the reachability check (for SPECs that drop everything)")
    g = p.add_argument_group("gateways (docs/testbed.md, \"Gateways\")")
    g.add_argument("--dataplane", choices=gateway.BACKENDS,
                   help="run detwan-gw with this backend in every gateway namespace, with a "
                   "tunnel between each pair of sites over path 1 that carries the hosts' "
                   "tunnel addresses; adds prio-dscp=46 and prio-queue=256kb to every SPEC "
                   "that does not set them")
    g.add_argument("--tunnel-rate", metavar="RATE",
                   help=f"reserved rate of every tunnel (default {gateway.DEFAULT_TUNNEL_RATE})")
    g.add_argument("--bound", metavar="DURATION",
                   help="on-time delivery bound of every tunnel (default: the path's delay + its "
                   "largest jitter (uniform: jitter; normal/pareto-normal: 4 x jitter) + 3ms; "
                   "0 = deliver on receipt)")
    g.add_argument("--timing", choices=gateway.TIMING_MODES,
                   help="how the gateways wait for their next deadline (default low-cpu)")
    g.add_argument("--shaper-rate", metavar="RATE",
                   help="space each tunnel's frames at this rate (>= --tunnel-rate) instead of "
                   "sending them back to back inside its slots")
    g.add_argument("--encrypt", choices=gateway.CIPHERS, metavar="CIPHER",
                   help="cipher of every static tunnel, under a random key per tunnel drawn for "
                   f"this lab (default {gateway.DEFAULT_CIPHER}); 'none' runs them "
                   "unauthenticated, for benchmarks of the unencrypted path only (with "
                   "--agents every reservation says its own: detwanctl reserve --encrypt)")
    g.add_argument("--no-encrypt", dest="encrypt", action="store_const", const="none",
                   help="the same as --encrypt none")
    g.add_argument("--tunnel-slots", type=int, metavar="N",
                   help=f"every tunnel owns slots 0..N-1 of the {gateway.SLOT_COUNT} of its WAN "
                   "port (default: the fewest that carry --tunnel-rate, plus one)")
    g.add_argument("--gw-rt-priority", type=int, metavar="N",
                   help=f"run the gateways SCHED_FIFO at priority N, 0 = normal scheduling "
                   f"(default {gateway.DEFAULT_RT_PRIORITY} with --timing low-cpu, 0 with busy)")
    g.add_argument("--gw-shards", type=int, metavar="N",
                   help="run every gateway as N shards (tunnel id mod N picks a tunnel's shard): "
                   "dpdk, on lcores 0..N-1 (dpdk.lcores); uring, N threads (gateway.shards)")
    g.add_argument("--gw-wake", choices=("batched", "exact"),
                   help="how low-cpu gateways wake: batched (default: a slot window's frames, "
                   "the on-time packets due together and the arrivals until then at once) or "
                   "exact (once per frame, release and arrival; for A/B benchmarks)")
    g.add_argument("--gw-cmd", help="gateway command instead of the built detwan-gw "
                   "(also $DETWAN_GW_CMD); for development only")
    g.add_argument("--agents", action="store_true",
                   help="start the gateways without tunnels and run detwan-agent for the lab "
                   "(127.0.0.1, a free port; `status` shows its url): tunnels are reserved "
                   "through it (detwanctl)")
    g.add_argument("--owners", metavar="SITE:DOMAIN,...",
                   help="with --agents: sites of different owners, e.g. a:x,b:y,c:z — an agent "
                   "per owner with its own CA, certificate and tokens, reserving across owners "
                   "over mutual TLS (docs/federation.md, docs/testbed.md 'Owners')")
    g.add_argument("--wan-owner", metavar="DOMAIN", default="",
                   help="with --owners: the WAN links belong to this carrier domain, or W,V: two "
                   "carriers in a row, each owning half of every path (default: each link to "
                   "the owner of its first site)")
    g.add_argument("--agent-replicas", type=int, default=1, metavar="N",
                   help="with --agents: N replicas of the lab's agent (lab-1..lab-N, each on its "
                   "own port) on a 3-member etcd cluster, one of them leader; 1 (the default) is "
                   "the single agent with its SQLite journal (docs/testbed.md, 'Agent replicas "
                   "on etcd')")
    g.add_argument("--agent-cmd", help="agent command instead of the built detwan-agent "
                   "(also $DETWAN_AGENT_CMD); for development only")
    g.add_argument("--slurm", action="store_true",
                   help="with --agents: run Slurm (slurmctld, a slurmd per site, munged) whose "
                   "jobs reserve their WAN path through the agent (srun --detwan-rate=50mbit; "
                   "docs/slurm.md)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the summary")


def cmd_up(args) -> int:
    try:
        topo = topology.build(args.sites, args.paths)
    except ValueError as e:
        err(str(e))
        return 2
    path_specs = dict(args.wan_path)
    for k in path_specs:
        if not 1 <= k <= args.paths:
            err(f"--wan-path {k}=...: this lab has paths 1..{args.paths}")
            return 2
    gw_only = [name for name, value in (("--tunnel-rate", args.tunnel_rate),
                                        ("--bound", args.bound), ("--timing", args.timing),
                                        ("--shaper-rate", args.shaper_rate),
                                        ("--tunnel-slots", args.tunnel_slots),
                                        ("--encrypt", args.encrypt),
                                        ("--gw-rt-priority", args.gw_rt_priority),
                                        ("--gw-shards", args.gw_shards),
                                        ("--gw-wake", args.gw_wake),
                                        ("--gw-cmd", args.gw_cmd),
                                        ("--agents", args.agents or None),
                                        ("--agent-cmd", args.agent_cmd),
                                        ("--slurm", args.slurm or None)) if value is not None]
    if args.agents:
        static = [name for name, value in (("--tunnel-rate", args.tunnel_rate),
                                            ("--bound", args.bound),
                                            ("--shaper-rate", args.shaper_rate),
                                            ("--tunnel-slots", args.tunnel_slots),
                                            ("--encrypt", args.encrypt))
                  if value is not None]
        if static:
            err(f"{', '.join(static)} shape the static tunnels; with --agents every tunnel is "
                "reserved through the agent (detwanctl reserve --rate ...)")
            return 2
    if (args.owners or args.wan_owner) and not args.agents:
        err("--owners/--wan-owner need --agents (each owner runs its agent): "
            "up --sites 3 --dataplane uring --agents --owners a:x,b:y,c:z")
        return 2
    if args.wan_owner and not args.owners:
        err("--wan-owner needs --owners (the sites' owners)")
        return 2
    if args.agent_replicas != 1:
        if not 2 <= args.agent_replicas <= MAX_AGENT_REPLICAS:
            err(f"--agent-replicas {args.agent_replicas}: must be 1 (one agent, SQLite journal) "
                f"or 2..{MAX_AGENT_REPLICAS}")
            return 2
        if not args.agents:
            err("--agent-replicas needs --agents (the replicas are the lab's agent): "
                "up --dataplane uring --agents --agent-replicas 3")
            return 2
        if args.owners:
            err("--agent-replicas is refused with --owners: replicas on etcd exist for the "
                "lab's single domain only (one agent per owner with --owners)")
            return 2
        if args.slurm:
            err("--agent-replicas is refused with --slurm: the Slurm plugin is configured with "
                "one agent URL")
            return 2
    if args.slurm and not args.agents:
        err("--slurm needs --agents (Slurm jobs reserve their WAN path through the agent): "
            "up --dataplane uring --agents --slurm")
        return 2
    if not MIN_MTU_BYTES <= args.mtu <= MAX_MTU_BYTES:
        err(f"--mtu {args.mtu}: must be in [{MIN_MTU_BYTES}, {MAX_MTU_BYTES}]")
        return 2
    if args.mtu != 1500 and args.dataplane and not args.agents:
        err(f"--mtu {args.mtu}: the static tunnels of --dataplane are planned for MTU 1500 "
            f"(TUN {gateway.TUN_MTU_BYTES}, {gateway.PLAIN_TUN_MTU_BYTES} with --encrypt none); "
            "add --agents (its gateways follow --mtu), or leave --mtu out")
        return 2
    if gw_only and not args.dataplane:
        err(f"{', '.join(gw_only)} configure the gateways: add --dataplane uring|dpdk")
        return 2
    build = wanem.build_dir(args.build_dir)
    cmd = wanem.wanem_command(build, args.wanem_cmd)
    # Every SPEC is checked before anything is created.
    for label, spec in [("--wan", args.wan)] + [(f"--wan-path {k}", s)
                                                  for k, s in path_specs.items()]:
        if spec:
            problem = wanem.check_spec(cmd, spec)
            if problem:
                err(f"bad {label} SPEC '{spec}': {problem}")
                return 2
    config = builder.LabConfig(sites=args.sites, paths=args.paths, wan_spec=args.wan,
                               path_specs=path_specs, seed=args.seed, mtu_bytes=args.mtu,
                               build_dir=build,
                               wanem_cmd=cmd, wanem_run_args=args.wanem_opt,
                               check_reachability=not args.no_ping_check)
    if args.dataplane:
        status = _prepare_gateways(args, config, topo, build)
        if status:
            return status
    if args.slurm:
        problem = slurm.check_prerequisites(build)
        if problem:
            err(f"--slurm: {problem}")
            return 1
        config.slurm = True
    _require_root()
    log = (lambda _m: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    with state.locked():
        existing = builder.existing_lab()
        if existing:
            err(f"a lab is already up ({existing}); run {PROG} down first")
            return 1
        t0 = time.monotonic()
        try:
            lab = builder.up(config, log)
        except Exception as e:  # noqa: BLE001 - whatever went wrong, clean up
            if isinstance(e, Interrupted):
                err("up interrupted")
            elif isinstance(e, LabError):
                err(f"up failed: {e}")
            else:
                err(f"up failed: {type(e).__name__}: {e}")
            with _signals_ignored():
                try:
                    builder.down(log)
                    err("removed everything this up had made")
                except LabError as e2:
                    err(f"cleanup after the failed up also failed: {e2}; run {PROG} down")
            return 1
    print(f"lab is up: {len(topo.sites)} sites, {len(topo.paths)} WAN paths "
          f"({time.monotonic() - t0:.1f} s)")
    _print_status(lab.to_state(), sys.stdout)
    return 0


def _prepare_gateways(args, config: builder.LabConfig, topo, build) -> int:
    """--dataplane: plans the tunnels, renders every gateway's configuration and validates it
    with `detwan-gw --check-config` before anything is created. 0, or the exit status."""
    config.dataplane = args.dataplane
    config.gateway = gateway.GatewayOptions(
        backend=args.dataplane, tunnel_rate=args.tunnel_rate or gateway.DEFAULT_TUNNEL_RATE,
        bound=args.bound, timing=args.timing or "low-cpu", shaper_rate=args.shaper_rate,
        slots=args.tunnel_slots, rt_priority=args.gw_rt_priority, shards=args.gw_shards or 1,
        wake=args.gw_wake or "batched",
        encrypt=args.encrypt or gateway.DEFAULT_CIPHER)
    if args.gw_shards is not None and (args.dataplane not in ("dpdk", "uring")
                                       or not 1 <= args.gw_shards <= 8):
        err(f"--gw-shards {args.gw_shards}: needs --dataplane dpdk or uring and 1..8 shards")
        return 2
    if args.gw_rt_priority is not None and not 0 <= args.gw_rt_priority <= 99:
        err(f"--gw-rt-priority {args.gw_rt_priority}: must be in [0, 99]")
        return 2
    config.gw_cmd = gateway.gw_command(build, args.gw_cmd)
    if args.agents:
        config.agents = True
        config.agent_cmd = agent.agent_command(build, args.agent_cmd)
        config.agent_replicas = args.agent_replicas
        if args.agent_replicas > 1:
            try:
                config.etcd_cmd = etcd.etcd_command()
            except LabError as e:
                err(str(e))
                return 1
        if args.owners:
            try:
                config.owners = federation.parse_owners(args.owners, args.wan_owner, topo)
            except LabError as e:
                err(str(e))
                return 2
    try:
        config.plan_gateways(topo)
    except ValueError as e:
        err(str(e))
        return 2
    # With --owners the domains' files name certificates made at `up` (the agents check their
    # own topology when they start: a refusal fails `up` with the agent's message).
    if args.agents and config.owners is None:
        with tempfile.TemporaryDirectory(prefix="dwtb-agent-check-") as tmp:
            path = os.path.join(tmp, "agent.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(config.agent_topology)
            status, message = agent.check_topology(config.agent_cmd, pathlib.Path(path))
            if status != 0:
                err(f"the agent's topology is refused by detwan-agent check (exit {status}): "
                    f"{message}")
                return 2 if status == 2 else 1
    with tempfile.TemporaryDirectory(prefix="dwtb-gw-check-") as tmp:
        # The configurations name their key files: checked against copies in tmp (a lab that is
        # up keeps its own), then rendered again for the run directory with the same keys.
        config.gateway.key_dir = pathlib.Path(tmp) / "keys"
        config.plan_gateways(topo)
        gateway.write_tunnel_keys(config.gateway)
        for site, text in config.gateway_configs.items():
            gw_file = pathlib.Path(tmp) / f"gw-{site}.yaml"
            gw_file.write_text(text, encoding="utf-8")
            status, message = gateway.check_config(config.gw_cmd, gw_file)
            if status != 0:
                err(f"the configuration of gateway {site} is refused by detwan-gw --check-config "
                    f"(exit {status}): {message}")
                return 2 if status == 2 else 1
    config.gateway.key_dir = gateway.KEY_DIR
    config.plan_gateways(topo)
    return 0


# -------------------------------------------------------------------------------------- down

def cmd_down(args) -> int:
    _require_root()
    log = (lambda _m: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    with state.locked(), _signals_ignored():
        anything = builder.down(log)
    print("lab removed" if anything else "no lab to remove")
    return 0


# ------------------------------------------------------------------------------------ status

def live_status() -> dict | None:
    st = state.read()
    if st is None:
        return None
    present = set(netns.list_namespaces())
    missing = [ns for ns in st.get("namespaces", []) if ns not in present]
    healthy = st.get("phase") == "up" and not missing
    for p in st.get("paths", []):
        pid = p.get("pid")
        p["alive"] = bool(pid) and netns.is_alive(pid, p.get("pid_start_time"))
        p["control_socket_present"] = os.path.exists(p.get("control_socket", ""))
        healthy = healthy and p["alive"]
    for s in st.get("sites", []):
        gw = s.get("gateway")
        if gw:
            pid = gw.get("pid")
            gw["alive"] = bool(pid) and netns.is_alive(pid, gw.get("pid_start_time"))
            healthy = healthy and gw["alive"]
    for a in st.get("agents", []):
        pid = a.get("pid")
        a["alive"] = bool(pid) and netns.is_alive(pid, a.get("pid_start_time"))
        healthy = healthy and a["alive"]
        if a.get("replica"):
            # Its role as it says (None: no answer, e.g. stopped); a short query each.
            h = agent.health(a["url"], timeout_s=1.0) if a["alive"] else None
            a["role"] = None if h is None else h.get("role")
            a["leader"] = None if h is None else h.get("leader")
    if st.get("etcd"):
        st["etcd"]["members"] = etcd.live(st["etcd"])
        healthy = healthy and all(m["alive"] for m in st["etcd"]["members"])
    for d in ((st.get("slurm") or {}).get("daemons") or {}).values():
        d["alive"] = bool(d.get("pid")) and netns.is_alive(d["pid"], d.get("pid_start_time"))
        healthy = healthy and d["alive"]
    st["missing_namespaces"] = missing
    st["healthy"] = healthy
    return st


def _print_status(st: dict, out) -> None:
    print(f"phase: {st.get('phase')}", file=out)
    print("sites:", file=out)
    for s in st.get("sites", []):
        print(f"  {s['name']}: host {s['host_ns']}  best-effort {s['best_effort_addr']}  "
              f"tunnel {s['tunnel_addr']}  gateway {s['gateway_ns']} ({s['gateway_addr']})",
              file=out)
        if s.get("cross_ns"):
            print(f"      cross host {s['cross_ns']} {s['cross_addr']}", file=out)
        gw = s.get("gateway")
        if gw:
            alive = gw.get("alive")
            health = "" if alive is None else ("  alive" if alive else "  DEAD")
            print(f"      detwan-gw {gw['backend']} ({gw['timing']}) pid {gw.get('pid')}{health}"
                  f"  config {gw['config']}  log {gw['log']}  control {gw['control']}", file=out)
    for a in st.get("agents", []):
        alive = a.get("alive")
        health = "" if alive is None else ("  alive" if alive else "  DEAD")
        if a.get("replica"):
            role = f"  {a['role'] or 'no answer'}" if "role" in a else ""
            cut = "  PARTITIONED from etcd" if a.get("partitioned") else ""
            print(f"agent {a['name']} (replica of {a['domain']}): {a['url']}  pid "
                  f"{a.get('pid')}{health}{role}{cut}  log {a['log']}", file=out)
        else:
            print(f"agent {a['name']}: {a['url']}  pid {a.get('pid')}{health}  topology "
                  f"{a['topology']}  journal {a['journal']}  log {a['log']}", file=out)
    ec = st.get("etcd")
    if ec:
        print(f"etcd: {ec['store']}  (agent replicas: --agent {','.join(st.get('agent_urls', []))}"
              f"; store key {st['agents'][0].get('store_key') if st.get('agents') else '?'})",
              file=out)
        for m in ec.get("members", []):
            alive = m.get("alive")
            health = "" if alive is None else ("  alive" if alive else "  DEAD")
            extra = "" if alive is None else (("  healthy" if m.get("healthy") else "  UNHEALTHY")
                                              + ("  raft leader" if m.get("raft_leader") else ""))
            print(f"  {m['name']}: {m['client_url']}  peer {m['peer_url']}  pid "
                  f"{m.get('pid')}{health}{extra}  data {m['data_dir']}  log {m['log']}",
                  file=out)
    sl = st.get("slurm")
    if sl:
        link = "  (/etc/slurm/slurm.conf links to it)" if sl.get("etc_slurm_conf_link") else ""
        print(f"slurm: SLURM_CONF={sl['conf']}{link}  partition {sl['partition']}  nodes "
              + ", ".join(f"{n} (site {s})" for s, n in sl.get("nodes", {}).items()), file=out)
        for name, d in sl.get("daemons", {}).items():
            alive = d.get("alive")
            health = "" if alive is None else ("  alive" if alive else "  DEAD")
            print(f"      {name} pid {d.get('pid')}{health}  log {d.get('log')}", file=out)
    if st.get("tunnels"):
        print("tunnels:", file=out)
        for t in st["tunnels"]:
            print(f"  {t['id']}: {'-'.join(t['sites'])} over path {t['path']}  rate "
                  f"{gateway.format_rate(t['rate_bps'])}  slots {t['slots']} of "
                  f"{gateway.SLOT_COUNT} at {gateway.format_rate(t['line_rate_bps'])}  bound "
                  f"{gateway.format_duration(t['bound_ns'])}  "
                  f"{'UNENCRYPTED' if t.get('encrypt') == 'none' else t.get('encrypt')}",
                  file=out)
    print("WAN paths:", file=out)
    for p in st.get("paths", []):
        alive = p.get("alive")
        health = "" if alive is None else ("  alive" if alive else "  DEAD")
        print(f"  {p['pair']} {p['index']}: {p['wan_ns']}  pid {p.get('pid')}{health}  "
              f"gw {p['gateway_addrs']}  spec '{p['spec']}'", file=out)
        print(f"      control {p['control_socket']}  log {p['log']}", file=out)


def cmd_status(args) -> int:
    st = live_status()
    if st is None:
        left = netns.list_namespaces()
        if left:
            err(f"no lab state in {state.state_path()}, but leftover namespaces exist "
                f"({', '.join(left)}); run {PROG} down")
        else:
            err(f"no lab is up (run {PROG} up)")
        return 1
    if args.json:
        json.dump(st, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        _print_status(st, sys.stdout)
        if st["missing_namespaces"]:
            print(f"missing namespaces: {', '.join(st['missing_namespaces'])}")
        print("healthy" if st["healthy"] else "DEGRADED")
    return 0 if st["healthy"] else 3


# ------------------------------------------------------------------------------ exec, wanem

def _split_command(argv: list[str], what: str) -> tuple[list[str], list[str]]:
    if "--" not in argv:
        raise LabError(f"usage: {PROG} {what} -- CMD...")
    i = argv.index("--")
    if i + 1 >= len(argv):
        raise LabError(f"usage: {PROG} {what} -- CMD... (no command given)")
    return argv[:i], argv[i + 1:]


def cmd_exec(argv: list[str]) -> int:
    head, command = _split_command(argv, "exec SITE [--gw]")
    gw = "--gw" in head
    head = [h for h in head if h != "--gw"]
    if len(head) != 1:
        raise LabError(f"usage: {PROG} exec SITE [--gw] -- CMD...")
    site = head[0]
    if len(site) != 1 or site not in topology.SITE_NAMES:
        raise LabError(f"unknown site '{site}' (sites are a..d)")
    s = topology.Site(site, topology.SITE_NAMES.index(site) + 1)
    ns = s.gateway_ns if gw else s.host_ns
    if ns not in netns.list_namespaces():
        raise LabError(f"namespace {ns} does not exist: is the lab up with site {site}?")
    sys.stdout.flush()
    os.execvp("ip", ["ip", "netns", "exec", ns, *command])
    return EXIT_TOOL_ERROR  # not reached


def cmd_wanem(argv: list[str]) -> int:
    head, args = _split_command(argv, "wanem PAIR K")
    if len(head) != 2 or not head[1].isdigit():
        raise LabError(f"usage: {PROG} wanem PAIR K -- ARGS (e.g. wanem ab 1 -- stats --json)")
    st = state.read()
    if st is None:
        raise LabError(f"no lab is up (run {PROG} up)")
    pair = "".join(sorted(head[0].replace("-", "")))
    for p in st.get("paths", []):
        if p["pair"] == pair and p["index"] == int(head[1]):
            cmd = st.get("wanem_cmd") or []
            # Subcommand first, then its control socket, then the caller's arguments.
            argv2 = [*cmd, args[0], "--control", p["control_socket"], *args[1:]]
            sys.stdout.flush()
            os.execvp(argv2[0], argv2)
    known = ", ".join(f"{p['pair']} {p['index']}" for p in st.get("paths", []))
    raise LabError(f"no WAN path '{head[0]} {head[1]}' (paths: {known})")


def cmd_agent(args) -> int:
    """agent NAME kill|start|restart|stop|cont|status|partition|heal: kill = SIGKILL (a crash:
    nothing cleaned up), start = run it again with the same topology, port and journal (a
    replica: the same argv), restart = SIGTERM then start, stop = SIGSTOP (a hung agent: its
    sockets stay open, nothing answers), cont = SIGCONT; partition/heal (replicas only): cut the
    replica off from etcd and back."""
    _require_root()
    with state.locked():
        st = state.read()
        if st is None:
            raise LabError(f"no lab is up (run {PROG} up --dataplane uring --agents)")
        records = st.get("agents", [])
        rec = next((a for a in records if a.get("name") == args.name), None)
        if rec is None:
            raise LabError(f"no agent '{args.name}' (agents: "
                           f"{', '.join(a.get('name', '?') for a in records) or 'none: up --agents'})")
        alive = bool(rec.get("pid")) and netns.is_alive(rec["pid"], rec.get("pid_start_time"))
        if args.action == "status":
            role = ""
            if rec.get("replica"):
                h = agent.health(rec["url"], timeout_s=2.0) if alive else None
                role = f" {h.get('role') if h else 'no answer'}" + \
                    (" PARTITIONED from etcd" if rec.get("partitioned") else "")
            print(f"agent {rec['name']}: {rec['url']} pid {rec.get('pid')} "
                  f"{'alive' if alive else 'not running'}{role}")
            return 0 if alive else 3
        if args.action in ("partition", "heal"):
            return _partition(st, rec, args.action == "partition")
        if args.action in ("stop", "cont"):
            if not alive:
                raise LabError(f"agent '{args.name}' is not running")
            os.kill(rec["pid"], signal.SIGSTOP if args.action == "stop" else signal.SIGCONT)
            print(f"agent {args.name}: {'stopped (SIGSTOP)' if args.action == 'stop' else 'continued'}")
            return 0
        if args.action in ("kill", "restart"):
            if not alive:
                if args.action == "kill":
                    raise LabError(f"agent '{args.name}' is not running")
            else:
                agent.stop(rec, signal.SIGKILL if args.action == "kill" else signal.SIGTERM)
            print(f"agent {args.name}: {'killed (SIGKILL)' if args.action == 'kill' else 'stopped'}")
        if args.action in ("start", "restart"):
            if args.action == "start" and alive:
                raise LabError(f"agent '{args.name}' is already running (pid {rec['pid']})")
            if rec.get("replica"):
                # The same argv, in its cgroup again; ready once it answers as leader or
                # follower (the gateways are the leader's business).
                cgroup = rec.get("cgroup")
                if cgroup:
                    os.makedirs(cgroup, exist_ok=True)
                started = agent.start_argv(rec["argv"], rec["name"], etcd.enter_cgroup(cgroup))
                rec.update(started)
                state.write(st)
                role = agent.wait_replica_answers(started, rec["url"], rec["name"])
                print(f"agent {args.name}: running, pid {started['pid']}, {rec['url']}, {role}")
            else:
                started = agent.start(st.get("agent_cmd") or [], rec["name"])
                rec.update(started)
                state.write(st)
                agent.wait_ready(started, rec["url"],
                                 rec.get("gateways", len(st.get("sites", []))),
                                 name=rec["name"], ca=rec.get("ca"))
                print(f"agent {args.name}: running, pid {started['pid']}, {rec['url']}")
        state.write(st)
    return 0


def _partition(st: dict, rec: dict, cut: bool) -> int:
    """agent REPLICA partition|heal: the nftables rules are rewritten for every replica marked
    partitioned in the state (tools/lab/etcd.py, apply_partitions)."""
    if not rec.get("replica") or not st.get("etcd"):
        raise LabError(f"agent '{rec['name']}' is not a replica on etcd: partition|heal need "
                       f"{PROG} up ... --agents --agent-replicas 3")
    problem = etcd.partition_problem()
    if problem or not rec.get("cgroup"):
        raise LabError(f"cannot partition replicas on this host: "
                       f"{problem or 'the replica has no cgroup of its own'}")
    rec["partitioned"] = cut
    cut_off = {a["name"]: a["cgroup"] for a in st.get("agents", []) if a.get("partitioned")}
    etcd.apply_partitions(cut_off, etcd.client_ports(st["etcd"]))
    state.write(st)
    print(f"agent {rec['name']}: " + ("cut off from etcd (TCP to ports "
                                       + ",".join(str(p) for p in etcd.client_ports(st["etcd"]))
                                       + " dropped)" if cut else "reaches etcd again"))
    return 0


def cmd_etcd(args) -> int:
    """etcd MEMBER kill|start|restart|stop|cont|status: a member of the replicas' etcd cluster;
    start runs it again with the same argv and data directory (it rejoins) and waits until it
    answers healthy."""
    _require_root()
    with state.locked():
        st = state.read()
        if st is None or not st.get("etcd"):
            raise LabError(f"no lab with etcd is up (run {PROG} up --dataplane uring --agents "
                           "--agent-replicas 3)")
        m = etcd.find(st["etcd"], args.name)
        alive = etcd.alive(m)
        if args.action == "status":
            (live,) = [x for x in etcd.live({"members": [m]})]
            print(f"etcd {m['name']}: {m['client_url']} pid {m.get('pid')} "
                  f"{'alive' if alive else 'not running'}"
                  + (("  healthy" if live["healthy"] else "  unhealthy")
                     + ("  raft leader" if live["raft_leader"] else "") if alive else ""))
            return 0 if alive and live["healthy"] else 3
        if args.action in ("stop", "cont"):
            if not alive:
                raise LabError(f"etcd member '{args.name}' is not running")
            os.kill(m["pid"], signal.SIGSTOP if args.action == "stop" else signal.SIGCONT)
            print(f"etcd {args.name}: "
                  f"{'stopped (SIGSTOP)' if args.action == 'stop' else 'continued'}")
            return 0
        if args.action in ("kill", "restart"):
            if not alive and args.action == "kill":
                raise LabError(f"etcd member '{args.name}' is not running")
            etcd.stop_member(m, signal.SIGKILL if args.action == "kill" else signal.SIGTERM)
            print(f"etcd {args.name}: "
                  f"{'killed (SIGKILL)' if args.action == 'kill' else 'stopped'}")
        if args.action in ("start", "restart"):
            if args.action == "start" and alive:
                raise LabError(f"etcd member '{args.name}' is already running (pid {m['pid']})")
            etcd.start_member(m)
            state.write(st)
            etcd.wait_healthy([m])
            print(f"etcd {args.name}: running, pid {m['pid']}, {m['client_url']}, healthy")
        state.write(st)
    return 0


def cmd_gateway(args) -> int:
    """gateway SITE kill|stop|start|restart|status: the site's detwan-gw (tools/lab/gateway.py
    restart()). A restarted gateway has its configuration file's tunnels (with --agents: none,
    until the agent re-programs it)."""
    _require_root()
    with state.locked():
        st = state.read()
        if st is None or not st.get("gw_cmd"):
            raise LabError(f"no lab with gateways is up (run {PROG} up --dataplane uring)")
        rec = next((s for s in st.get("sites", []) if s.get("name") == args.site), None)
        if rec is None or not rec.get("gateway"):
            raise LabError(f"unknown site '{args.site}' (sites: "
                           f"{', '.join(s.get('name', '?') for s in st.get('sites', []))})")
        gw = rec["gateway"]
        site = topology.Site(rec["name"], rec["index"])
        alive = bool(gw.get("pid")) and netns.is_alive(gw["pid"], gw.get("pid_start_time"))
        if args.action == "status":
            print(f"gateway {args.site}: pid {gw.get('pid')} {'alive' if alive else 'not running'}")
            return 0 if alive else 3
        gw.update(gateway.restart(st["gw_cmd"], site, gw, args.action))
        state.write(st)
        print(f"gateway {args.site}: " + ("killed (SIGKILL)" if args.action == "kill" else
                                          "stopped" if args.action == "stop" else
                                          f"running, pid {gw['pid']}"))
    return 0


def cmd_gw(argv: list[str]) -> int:
    head, args = _split_command(argv, "gw SITE")
    st = state.read()
    if st is None:
        raise LabError(f"no lab is up (run {PROG} up --dataplane uring)")
    if len(head) != 1:
        raise LabError(USAGE["gw"].splitlines()[0])
    site = next((s for s in st.get("sites", []) if s.get("name") == head[0]), None)
    if site is None:
        raise LabError(f"unknown site '{head[0]}' (sites: "
                       f"{', '.join(s.get('name', '?') for s in st.get('sites', []))})")
    if not site.get("gateway") or not st.get("gw_cmd"):
        raise LabError("this lab has no gateways: bring it up with --dataplane uring|dpdk")
    argv2 = ["ip", "netns", "exec", site["gateway_ns"], *st["gw_cmd"], *args]
    sys.stdout.flush()
    os.execvp(argv2[0], argv2)
    return EXIT_TOOL_ERROR  # not reached


# -------------------------------------------------------------------------------------- main

class _signals_ignored:
    """Cleanup must not be cut short by a second Ctrl-C or a SIGTERM."""

    def __enter__(self):
        self.saved = {s: signal.signal(s, signal.SIG_IGN)
                      for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def __exit__(self, *exc):
        for s, h in self.saved.items():
            signal.signal(s, h)


def _raise_interrupted(signum, _frame):
    raise Interrupted(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _raise_interrupted)
    parser = argparse.ArgumentParser(prog=PROG, description="detwan multi-site WAN lab "
                                     "(network namespaces + detwan-wanem); see docs/testbed.md")
    sub = parser.add_subparsers(dest="command", required=True)
    add_up_parser(sub)
    p = sub.add_parser("down", help="remove the lab (idempotent; works after crashes)")
    p.add_argument("-q", "--quiet", action="store_true")
    p = sub.add_parser("status", help="describe the lab")
    p.add_argument("--json", action="store_true")
    sub.add_parser("exec", help="SITE [--gw] -- CMD...: run CMD in SITE's host (or gateway) ns")
    sub.add_parser("wanem", help="PAIR K -- ARGS: detwan-wanem ARGS --control <path's socket>")
    sub.add_parser("gw", help="SITE -- ARGS: detwan-gw ARGS in SITE's gateway namespace")
    p = sub.add_parser("agent",
                       help="NAME kill|start|restart|stop|cont|status|partition|heal: the lab's "
                       "detwan-agent (or one replica of it)")
    p.add_argument("name", help="the agent's name (status --json lists it; 'lab', or a "
                   "replica's: 'lab-1')")
    p.add_argument("action", choices=("kill", "start", "restart", "stop", "cont", "status",
                                      "partition", "heal"))
    p = sub.add_parser("etcd", help="MEMBER kill|start|restart|stop|cont|status: a member of the "
                       "agent replicas' etcd cluster")
    p.add_argument("name", help="the member's name (etcd-1, etcd-2, etcd-3)")
    p.add_argument("action", choices=("kill", "start", "restart", "stop", "cont", "status"))
    p = sub.add_parser("gateway", help="SITE kill|stop|start|restart|status: a site's detwan-gw")
    p.add_argument("site")
    p.add_argument("action", choices=("kill", "stop", "start", "restart", "status"))
    cross_cli.add_parser(sub)
    try:
        # exec/wanem take raw argv: everything after `--` belongs to the command.
        if argv and argv[0] in ("exec", "wanem", "gw"):
            rest = argv[1:]
            if rest in ([], ["-h"], ["--help"]):
                print(USAGE[argv[0]])
                return 0 if rest else 2
            return {"exec": cmd_exec, "wanem": cmd_wanem, "gw": cmd_gw}[argv[0]](rest)
        args = parser.parse_args(argv)
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status, "agent": cmd_agent,
                "gateway": cmd_gateway, "etcd": cmd_etcd,
                "cross": cross_cli.cmd_cross}[args.command](args)
    except LabError as e:
        err(str(e))
        return EXIT_TOOL_ERROR if argv and argv[0] in ("exec", "wanem", "gw") else 1
    except Interrupted:
        err("interrupted")
        return 130
