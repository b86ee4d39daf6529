"""Bringing a lab up and down.

`up` is an ordered list of steps (STEPS); each step takes the Lab and does one thing. A feature
adds fields to LabConfig and inserts its steps here (the gateways of --dataplane: the routes in
configure_routes and the step start_gateways, code in gateway.py); `down` removes by prefix.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from typing import Callable

from lab import agent, cross, etcd, federation, gateway, netns, slurm, state, topology, wanem
from lab.netns import LabError, ip, run, sysctl
from lab.topology import Site, Topology, WanPath, mac_for

PING_ATTEMPTS = 30          # per target; each attempt waits at most PING_WAIT_S
PING_WAIT_S = 1
OFFLOAD_FEATURES = ["gro", "off", "gso", "off", "tso", "off", "tx", "off"]


@dataclasses.dataclass
class LabConfig:
    sites: int = 2
    paths: int = 1
    wan_spec: str = ""
    path_specs: dict[int, str] = dataclasses.field(default_factory=dict)  # k -> SPEC override
    seed: int = 1
    mtu_bytes: int = 1500  # IP MTU of every veth (the emulators size their buffers from it)
    build_dir: pathlib.Path | None = None
    wanem_cmd: list[str] = dataclasses.field(default_factory=list)
    wanem_run_args: list[str] = dataclasses.field(default_factory=list)  # extra `run` options
    check_reachability: bool = True
    # --dataplane uring|dpdk: a detwan-gw per site and a tunnel per pair of sites (None: none).
    dataplane: str | None = None
    gateway: gateway.GatewayOptions = dataclasses.field(default_factory=gateway.GatewayOptions)
    gw_cmd: list[str] = dataclasses.field(default_factory=list)
    gateway_configs: dict[str, str] = dataclasses.field(default_factory=dict)  # site -> YAML
    # --agents: detwan-agent programs the gateways' tunnels (tools/lab/agent.py).
    agents: bool = False
    agent_cmd: list[str] = dataclasses.field(default_factory=list)
    agent_port: int = 0
    mgmt_net: str = ""  # the agent's management network "10.X" (agent.free_mgmt_net)
    agent_topology: str = ""
    # --owners: an agent per owner (domain), each with its topology, port, CA and tokens
    # (tools/lab/federation.py); agent_topology/agent_port are then unused.
    owners: federation.Owners | None = None
    domain_ports: dict[str, int] = dataclasses.field(default_factory=dict)
    domain_topologies: dict[str, str] = dataclasses.field(default_factory=dict)
    # --agent-replicas N (> 1): N replicas of the agent of domain "lab" (lab-1..lab-N), each on
    # its own port, electing a leader through a 3-member etcd cluster that also holds their
    # journal (tools/lab/etcd.py, docs/testbed.md "Agent replicas on etcd").
    agent_replicas: int = 1
    replica_ports: dict[str, int] = dataclasses.field(default_factory=dict)
    etcd_cmd: list[str] = dataclasses.field(default_factory=list)
    etcd_cluster: dict = dataclasses.field(default_factory=dict)  # etcd.plan(), pids added
    # --slurm: slurmctld, a slurmd per site and munged; jobs reserve through the agent
    # (tools/lab/slurm.py, docs/slurm.md).
    slurm: bool = False

    def user_spec_for(self, path: WanPath) -> str:
        return self.path_specs.get(path.index, self.wan_spec)

    def spec_for(self, path: WanPath) -> str:
        """The SPEC the path's emulator runs: with gateways, the tunnel's DSCP is reserved."""
        spec = self.user_spec_for(path)
        return gateway.with_prio_dscp(spec) if self.dataplane else spec

    def plan_gateways(self, topo: Topology) -> dict:
        """Tunnel plans and each site's configuration text (ValueError: a bad option). With
        agents the gateways start without tunnels and the agent's topology is rendered too."""
        if self.agents:
            self.gateway.agents = True
            self.gateway.wan_mtu = self.mtu_bytes
            gateway.draw_identity_keys(self.gateway, [s.name for s in topo.sites])
            self.gateway_configs = {s.name: gateway.render_agent_config(s, topo, self.gateway,
                                                                        self.spec_for)
                                    for s in topo.sites}
            if self.agent_replicas > 1:
                for name in agent.replica_names(self.agent_replicas):
                    self.replica_ports.setdefault(name, agent.free_port())
                # The topology's listen: line names the first replica's port (each replica
                # gets its own with --listen).
                self.agent_port = self.replica_ports[f"{agent.NAME}-1"]
                if not self.etcd_cluster:
                    self.etcd_cluster = etcd.plan()
            if not self.agent_port:
                self.agent_port = agent.free_port()
            if not self.mgmt_net:
                self.mgmt_net = agent.free_mgmt_net()
            if self.owners is not None:
                for d in self.owners.domains:
                    self.domain_ports.setdefault(d, agent.free_port())
                files = self.domain_files()
                public = {name: pub for name, (_, pub) in self.gateway.identity_keys.items()}
                self.domain_topologies = {
                    d: federation.render_domain_topology(d, topo, self.owners, self.spec_for,
                                                         files, agent.journal_file(d),
                                                         self.mtu_bytes, self.mgmt_net, public)
                    for d in self.owners.domains}
                return {}
            self.agent_topology = agent.render_topology(
                topo, self.spec_for, self.agent_port, self.mtu_bytes, self.mgmt_net,
                {name: public for name, (_, public) in self.gateway.identity_keys.items()})
            return {}
        plans = gateway.plan_tunnels(topo, self.gateway, self.spec_for)
        gateway.draw_tunnel_keys(self.gateway, [plan.id for plan in plans.values()])
        self.gateway_configs = {s.name: gateway.render_config(s, topo, plans, self.gateway)
                                for s in topo.sites}
        return plans

    def domain_files(self) -> dict[str, "federation.DomainFiles"]:
        if self.owners is None:
            raise LabError("the lab has no --owners: no domains, no domain files")
        return {d: federation.DomainFiles(d, self.domain_ports[d]) for d in self.owners.domains}


@dataclasses.dataclass
class Lab:
    config: LabConfig
    topo: Topology
    emulators: dict[str, dict] = dataclasses.field(default_factory=dict)  # path key -> record
    gateways: dict[str, dict] = dataclasses.field(default_factory=dict)   # site name -> record
    agents: dict[str, dict] = dataclasses.field(default_factory=dict)     # agent name -> record
    slurm_daemons: dict[str, dict] = dataclasses.field(default_factory=dict)  # name -> record
    slurm_conf_link: bool = False  # /etc/slurm/slurm.conf is our symlink
    phase: str = "creating"
    step: str = ""  # the step of `up` in progress (for status and post-mortems)
    created_unix_ns: int = dataclasses.field(default_factory=time.time_ns)

    def to_state(self) -> dict:
        cfg = self.config
        return {
            "phase": self.phase,
            "step": self.step,
            "prefix": topology.PREFIX,
            "created_unix_ns": self.created_unix_ns,
            "build_dir": str(cfg.build_dir) if cfg.build_dir else None,
            "wanem_cmd": cfg.wanem_cmd,
            "options": {"sites": cfg.sites, "paths": cfg.paths, "wan": cfg.wan_spec,
                        "wan_path": {str(k): v for k, v in cfg.path_specs.items()},
                        "seed": cfg.seed, "mtu": cfg.mtu_bytes, "wanem_opt": cfg.wanem_run_args,
                        "dataplane": cfg.dataplane,
                        "tunnel_rate": cfg.gateway.tunnel_rate if cfg.dataplane else None,
                        "bound": cfg.gateway.bound if cfg.dataplane else None,
                        "timing": cfg.gateway.timing if cfg.dataplane else None,
                        "shaper_rate": cfg.gateway.shaper_rate if cfg.dataplane else None,
                        "tunnel_slots": cfg.gateway.slots if cfg.dataplane else None,
                        "encrypt": cfg.gateway.encrypt
                        if cfg.dataplane and not cfg.agents else None,
                        "gw_rt_priority": cfg.gateway.effective_rt_priority()
                        if cfg.dataplane else None,
                        "agents": cfg.agents, "agent_replicas": cfg.agent_replicas,
                        "slurm": cfg.slurm},
            "gw_cmd": cfg.gw_cmd,
            "agent_cmd": cfg.agent_cmd,
            "agents": agent_records(self),
            # --agent-replicas: every replica's URL, for detwanctl --agent URL1,URL2,...
            "agent_urls": [a["url"] for a in agent_records(self)] if cfg.agents else [],
            "etcd": etcd_record(self),
            "etcd_cmd": cfg.etcd_cmd,
            "slurm": slurm.record(self),
            "namespaces": self.topo.namespaces,
            "sites": [site_record(s, self) for s in self.topo.sites],
            "tunnels": tunnel_records(self),
            "paths": [path_record(self, p) for p in self.topo.paths],
        }

    def save(self) -> None:
        state.write(self.to_state())


def site_record(s: Site, lab: Lab | None = None) -> dict:
    rec = {"name": s.name, "index": s.index, "host_ns": s.host_ns, "gateway_ns": s.gateway_ns,
           "best_effort_addr": s.best_effort_addr, "tunnel_addr": s.tunnel_addr,
           "cotenant_addr": s.cotenant_addr,
           "gateway_addr": s.gateway_lan_addr, "lan_prefix": s.lan_prefix,
           "tunnel_prefix": s.tunnel_prefix, "host_if": s.host_if,
           "gateway_lan_if": s.gateway_lan_if, "cross_ns": s.cross_ns,
           "cross_addr": s.cross_addr, "cross_prefix": s.cross_prefix, "cross_if": s.cross_if,
           "gateway_cross_addr": s.gateway_cross_addr,
           "gateway_cross_if": s.gateway_cross_if, "gateway": None}
    if lab is not None and lab.config.dataplane:
        gw = {"backend": lab.config.dataplane, "timing": lab.config.gateway.timing,
              "rt_priority": lab.config.gateway.effective_rt_priority(),
              "config": str(gateway.config_file(s)), "log": str(gateway.log_file(s)),
              "control": gateway.CONTROL, "tun": gateway.TUN_NAME, "pid": None,
              "pid_start_time": None,
              "admin_socket": str(gateway.admin_socket(s)) if lab.config.agents else None}
        gw.update({k: v for k, v in lab.gateways.get(s.name, {}).items()
                   if k in ("pid", "pid_start_time", "started_unix_ns")})
        rec["gateway"] = gw
    return rec


def agent_records(lab: Lab) -> list[dict]:
    """--agents: the lab's agent (empty without)."""
    if not lab.config.agents:
        return []
    if lab.config.agent_replicas > 1:
        return replica_records(lab)
    if lab.config.owners is not None:
        out = []
        for d, f in lab.config.domain_files().items():
            rec = federation.agent_record(d, f, agent.topology_file(d), agent.journal_file(d),
                                          agent.log_file(d))
            rec.update({"host_urls": {s.name: f"https://{agent.mgmt_root_addr(lab.config.mgmt_net, s)}"
                                      f":{f.port}" for s in lab.topo.sites},
                        "mgmt_net": f"{lab.config.mgmt_net}.0.0/16",
                        "gateways": len(lab.config.owners.sites_of(d, lab.topo)),
                        "pid": None, "pid_start_time": None})
            rec.update({k: v for k, v in lab.agents.get(d, {}).items()
                        if k in ("pid", "pid_start_time", "started_unix_ns", "argv")})
            out.append(rec)
        return out
    rec = {"name": agent.NAME, "url": agent.url_of(lab.config.agent_port),
           # The same agent from each site's host namespace (the management network).
           "host_urls": {s.name: agent.host_url(lab.config.mgmt_net, s, lab.config.agent_port)
                         for s in lab.topo.sites},
           "mgmt_net": f"{lab.config.mgmt_net}.0.0/16",
           "topology": str(agent.topology_file()), "journal": str(agent.journal_file()),
           "log": str(agent.log_file()), "pid": None, "pid_start_time": None}
    rec.update({k: v for k, v in lab.agents.get(agent.NAME, {}).items()
                if k in ("pid", "pid_start_time", "started_unix_ns", "argv")})
    return [rec]


def replica_records(lab: Lab) -> list[dict]:
    """--agent-replicas: one record per replica of domain "lab"."""
    cfg = lab.config
    out = []
    for name in agent.replica_names(cfg.agent_replicas):
        port = cfg.replica_ports[name]
        cgroup = etcd.cgroup_dir(name)
        rec = {"name": name, "domain": agent.NAME, "replica": name, "url": agent.url_of(port),
               "host_urls": {s.name: agent.host_url(cfg.mgmt_net, s, port)
                             for s in lab.topo.sites},
               "mgmt_net": f"{cfg.mgmt_net}.0.0/16", "port": port,
               "topology": str(agent.topology_file()), "journal": None,
               "store": etcd.store_url(cfg.etcd_cluster) if cfg.etcd_cluster else None,
               "store_key": str(agent.store_key_file()), "log": str(agent.log_file(name)),
               "cgroup": str(cgroup) if cgroup else None, "partitioned": False,
               "gateways": len(lab.topo.sites), "pid": None, "pid_start_time": None}
        rec.update({k: v for k, v in lab.agents.get(name, {}).items()
                    if k in ("pid", "pid_start_time", "started_unix_ns", "argv", "cgroup")})
        out.append(rec)
    return out


def etcd_record(lab: Lab) -> dict | None:
    """--agent-replicas: the etcd cluster (members with their pids), None without."""
    cluster = lab.config.etcd_cluster
    if lab.config.agent_replicas <= 1 or not cluster:
        return None
    return {"token": cluster["token"], "endpoints": etcd.endpoints(cluster),
            "store": etcd.store_url(cluster), "members": cluster["members"]}


def tunnel_records(lab: Lab) -> list[dict]:
    """The tunnels of --dataplane (empty without, and with --agents: the agent makes them)."""
    if not lab.config.dataplane or lab.config.agents:
        return []
    plans = gateway.plan_tunnels(lab.topo, lab.config.gateway, lab.config.spec_for)
    return [{"id": t.id, "sites": [t.path.a.name, t.path.b.name], "path": t.path.key,
             "wan_port": gateway.wan_port_name(t.path), "rate_bps": t.rate_bps,
             "line_rate_bps": t.line_rate_bps, "slots": gateway.slot_list(t.slots),
             "guaranteed_rate_bps": gateway.guaranteed_rate_bps(t.slots, t.line_rate_bps),
             "bound_ns": t.bound_ns, "min_path_delay_ns": t.min_path_delay_ns,
             "dscp": gateway.TUNNEL_DSCP, "port": gateway.TUNNEL_PORT,
             "encrypt": lab.config.gateway.encrypt,
             "key_file": str(gateway.key_file(lab.config.gateway, t.id))
             if lab.config.gateway.encrypt != "none" else None}
            for t in plans.values()]


def path_record(lab: Lab, p: WanPath) -> dict:
    rec = {"pair": p.pair, "sites": [p.a.name, p.b.name], "index": p.index, "key": p.key,
           "wan_ns": p.wan_ns, "spec": lab.config.spec_for(p), "subnet": p.subnet,
           "gateway_addrs": {p.a.name: p.gateway_addr(p.a), p.b.name: p.gateway_addr(p.b)},
           "gateway_ifs": {p.a.name: p.gateway_if(p.a), p.b.name: p.gateway_if(p.b)},
           "wan_ifs": {"a": p.wan_if(p.a), "b": p.wan_if(p.b)},
           "control_socket": str(wanem.control_socket(p)), "log": str(wanem.log_file(p)),
           "stats_json": str(wanem.stats_file(p)), "pid": None, "pid_start_time": None,
           "carries_best_effort": p.index == 1}
    emu = lab.emulators.get(p.key)
    if emu:
        rec.update(pid=emu["pid"], pid_start_time=emu["pid_start_time"],
                   started_unix_ns=emu["started_unix_ns"])
    return rec


# ---------------------------------------------------------------------------- steps of `up`

def create_namespaces(lab: Lab) -> None:
    for ns in lab.topo.namespaces:
        ip("netns", "add", ns)
        ip("link", "set", "dev", "lo", "up", ns=ns)
        # No IPv6: keeps router solicitations and MLD reports off the emulated WAN.
        sysctl(ns, "net.ipv6.conf.all.disable_ipv6", "1")
        sysctl(ns, "net.ipv6.conf.default.disable_ipv6", "1")
    for s in lab.topo.sites:
        sysctl(s.gateway_ns, "net.ipv4.ip_forward", "1")
        # Later tunnels and path 2 make routing asymmetric on purpose.
        sysctl(s.gateway_ns, "net.ipv4.conf.all.rp_filter", "0")
        sysctl(s.gateway_ns, "net.ipv4.conf.default.rp_filter", "0")


def _veth(ns1: str, if1: str, ns2: str, if2: str, mtu: int) -> None:
    # Created directly inside the namespaces: nothing of ours ever sits in the root namespace.
    ip("link", "add", if1, "address", mac_for(if1), "mtu", str(mtu), "type", "veth",
       "peer", "name", if2, "address", mac_for(if2), "mtu", str(mtu), "netns", ns2, ns=ns1)


def create_links(lab: Lab) -> None:
    mtu = lab.config.mtu_bytes
    for s in lab.topo.sites:
        _veth(s.host_ns, s.host_if, s.gateway_ns, s.gateway_lan_if, mtu)
        _veth(s.cross_ns, s.cross_if, s.gateway_ns, s.gateway_cross_if, mtu)
    for p in lab.topo.paths:
        _veth(p.a.gateway_ns, p.gateway_if(p.a), p.wan_ns, p.wan_if(p.a), mtu)
        _veth(p.wan_ns, p.wan_if(p.b), p.b.gateway_ns, p.gateway_if(p.b), mtu)


def all_links(topo: Topology) -> list[tuple[str, str]]:
    links = []
    for s in topo.sites:
        links += [(s.host_ns, s.host_if), (s.gateway_ns, s.gateway_lan_if),
                  (s.cross_ns, s.cross_if), (s.gateway_ns, s.gateway_cross_if)]
    for p in topo.paths:
        links += [(p.a.gateway_ns, p.gateway_if(p.a)), (p.wan_ns, p.wan_if(p.a)),
                  (p.wan_ns, p.wan_if(p.b)), (p.b.gateway_ns, p.gateway_if(p.b))]
    return links


def disable_offloads(lab: Lab) -> None:
    # Per-packet emulation needs real frames (no 64 KiB GSO/GRO super-frames), and frames seen by
    # a raw socket must carry complete checksums (tx checksum offload off).
    for ns, dev in all_links(lab.topo):
        res = run(["ethtool", "-K", dev, *OFFLOAD_FEATURES], ns=ns, check=False)
        if res.returncode != 0 and "Could not change any device features" not in res.stderr:
            raise LabError(f"ethtool -K {dev} in {ns} failed: {res.stderr.strip()}")


def configure_addresses(lab: Lab) -> None:
    for s in lab.topo.sites:
        ip("addr", "add", f"{s.best_effort_addr}/24", "dev", s.host_if, ns=s.host_ns)
        ip("addr", "add", f"{s.tunnel_addr}/32", "dev", s.host_if, ns=s.host_ns)
        ip("addr", "add", f"{s.cotenant_addr}/32", "dev", s.host_if, ns=s.host_ns)
        ip("addr", "add", f"{s.gateway_lan_addr}/24", "dev", s.gateway_lan_if, ns=s.gateway_ns)
        ip("addr", "add", f"{s.cross_addr}/24", "dev", s.cross_if, ns=s.cross_ns)
        ip("addr", "add", f"{s.gateway_cross_addr}/24", "dev", s.gateway_cross_if,
           ns=s.gateway_ns)
    for p in lab.topo.paths:
        for s in (p.a, p.b):
            ip("addr", "add", f"{p.gateway_addr(s)}/30", "dev", p.gateway_if(s), ns=s.gateway_ns)
    for ns, dev in all_links(lab.topo):
        if ns.startswith(topology.PREFIX + "wan-"):
            # The emulator bridges at L2 and sees every frame, whatever its MAC.
            ip("link", "set", "dev", dev, "promisc", "on", ns=ns)
        ip("link", "set", "dev", dev, "up", ns=ns)


def configure_neighbours(lab: Lab) -> None:
    # Static ARP on every link: no ARP exchange crosses the emulated WAN, so loss and link-down
    # tests measure only the traffic they send.
    for s in lab.topo.sites:
        ip("neigh", "replace", s.gateway_lan_addr, "lladdr", mac_for(s.gateway_lan_if),
           "dev", s.host_if, "nud", "permanent", ns=s.host_ns)
        ip("neigh", "replace", s.best_effort_addr, "lladdr", mac_for(s.host_if),
           "dev", s.gateway_lan_if, "nud", "permanent", ns=s.gateway_ns)
        ip("neigh", "replace", s.gateway_cross_addr, "lladdr", mac_for(s.gateway_cross_if),
           "dev", s.cross_if, "nud", "permanent", ns=s.cross_ns)
        ip("neigh", "replace", s.cross_addr, "lladdr", mac_for(s.cross_if),
           "dev", s.gateway_cross_if, "nud", "permanent", ns=s.gateway_ns)
    for p in lab.topo.paths:
        for s in (p.a, p.b):
            peer = p.peer(s)
            ip("neigh", "replace", p.gateway_addr(peer), "lladdr", mac_for(p.gateway_if(peer)),
               "dev", p.gateway_if(s), "nud", "permanent", ns=s.gateway_ns)


def configure_routes(lab: Lab) -> None:
    tunnels = bool(lab.config.dataplane)
    for s in lab.topo.sites:
        ip("route", "add", "default", "via", s.gateway_lan_addr, ns=s.host_ns)
        ip("route", "add", "default", "via", s.gateway_cross_addr, ns=s.cross_ns)
        if tunnels:
            # Tunnel traffic leaves from the host's tunnel address, so the far host's replies
            # come back through the tunnel too; the MTU is the TUN device's, so nothing is
            # fragmented or refused at the gateway.
            ip("route", "add", f"{topology.TUNNEL_NET}.0.0/16", "via", s.gateway_lan_addr,
               "src", s.tunnel_addr, "mtu", str(lab.config.gateway.tun_mtu), ns=s.host_ns)
        ip("route", "add", s.tunnel_prefix, "via", s.best_effort_addr, ns=s.gateway_ns)
        for other in lab.topo.sites:
            if other == s:
                continue
            p = lab.topo.primary_path(s, other)
            # Best effort goes over path 1, kernel-routed, and so does the cross hosts' traffic
            # (always: real cross traffic competes with best effort, never enters a tunnel).
            # Without gateways the tunnel address does too; with them, the gateway routes it
            # into its TUN device (tun.routes).
            prefixes = [other.lan_prefix, other.cross_prefix] + \
                ([] if tunnels else [other.tunnel_prefix])
            for prefix in prefixes:
                ip("route", "add", prefix, "via", p.gateway_addr(other), "dev", p.gateway_if(s),
                   ns=s.gateway_ns)


def start_emulators(lab: Lab) -> None:
    for ordinal, p in enumerate(lab.topo.paths):
        # Distinct seeds: disjoint paths must not drop the same packets.
        seed = lab.config.seed + 2 * ordinal  # the emulator uses seed (ab) and seed+1 (ba)
        lab.emulators[p.key] = wanem.start(lab.config.wanem_cmd, p, lab.config.spec_for(p), seed,
                                           lab.config.wanem_run_args)
        lab.save()  # pids on record at once, for `status` and for `down` after a crash
    for p in lab.topo.paths:
        wanem.wait_ready(p, lab.emulators[p.key])


def start_gateways(lab: Lab) -> None:
    """--dataplane: writes each site's configuration (validated by the CLI before anything was
    made), starts detwan-gw in the gateway namespace, waits until it answers and its TUN device
    is up. Pids go on record at once, so `down` stops them even after a crash."""
    if not lab.config.dataplane:
        return
    if not lab.config.gateway_configs:
        lab.config.plan_gateways(lab.topo)
    gateway.write_tunnel_keys(lab.config.gateway)  # the files the configurations name
    for s in lab.topo.sites:
        gateway.config_file(s).write_text(lab.config.gateway_configs[s.name], encoding="utf-8")
        if lab.config.dataplane == "dpdk":
            gateway.drop_kernel_tunnel_port(s, lab.topo, all_paths=lab.config.agents)
    for s in lab.topo.sites:
        lab.gateways[s.name] = gateway.start(lab.config.gw_cmd, s,
                                             lab.config.gateway.effective_rt_priority())
        lab.save()
    for s in lab.topo.sites:
        gateway.wait_ready(lab.config.gw_cmd, s, lab.gateways[s.name])
        gateway.make_realtime(s, lab.gateways[s.name])


def start_etcd(lab: Lab) -> None:
    """--agent-replicas N > 1: the 3-member etcd cluster, healthy before any replica starts.
    Each member's pid goes on record as it starts."""
    if not lab.config.agents or lab.config.agent_replicas <= 1:
        return
    if not lab.config.etcd_cluster:
        lab.config.etcd_cluster = etcd.plan()
    etcd.start(lab.config.etcd_cmd or etcd.etcd_command(), lab.config.etcd_cluster, lab.save)
    lab.save()


def _start_replicas(lab: Lab) -> None:
    """--agent-replicas: the store key, then every replica in its own cgroup (for partitions);
    ready once exactly one is leader and has reached every gateway, the others followers."""
    cfg = lab.config
    agent.write_store_key(agent.store_key_file())
    store = etcd.store_url(cfg.etcd_cluster)
    replicas = []
    for name in agent.replica_names(cfg.agent_replicas):
        port = cfg.replica_ports[name]
        cgroup = etcd.make_cgroup(name)
        argv = agent.replica_argv(cfg.agent_cmd, name, port, store, agent.store_key_file())
        rec = agent.start_argv(argv, name, etcd.enter_cgroup(str(cgroup) if cgroup else None))
        rec["cgroup"] = str(cgroup) if cgroup else None
        lab.agents[name] = rec
        lab.save()
        replicas.append((name, rec, agent.url_of(port)))
    agent.wait_one_leader(replicas, len(lab.topo.sites))


def start_agents(lab: Lab) -> None:
    """--agents: writes the agent's topology (checked by the CLI before anything was made),
    starts detwan-agent in the root namespace, waits until it answers and has reached every
    gateway. Its pid goes on record at once."""
    if not lab.config.agents:
        return
    if lab.config.owners is not None:
        _start_domain_agents(lab)
        return
    if not lab.config.agent_topology:
        lab.config.plan_gateways(lab.topo)
    agent.topology_file().write_text(lab.config.agent_topology, encoding="utf-8")
    agent.create_management(lab.topo, lab.config.mgmt_net)
    if lab.config.agent_replicas > 1:
        _start_replicas(lab)
        return
    lab.agents[agent.NAME] = agent.start(lab.config.agent_cmd)
    lab.save()
    agent.wait_ready(lab.agents[agent.NAME], agent.url_of(lab.config.agent_port),
                     len(lab.topo.sites))


def _start_domain_agents(lab: Lab) -> None:
    """--owners: the PKI (a CA, certificate and tokens per domain), then every domain's agent;
    each is ready once it answers and has reached its own gateways."""
    if not lab.config.domain_topologies:
        lab.config.plan_gateways(lab.topo)
    owners = lab.config.owners
    if owners is None:
        raise LabError("the lab has no --owners: no domain agents to start")
    files = lab.config.domain_files()
    federation.make_pki(files, [agent.mgmt_root_addr(lab.config.mgmt_net, s)
                                for s in lab.topo.sites])
    for d, text in lab.config.domain_topologies.items():
        agent.topology_file(d).write_text(text, encoding="utf-8")
    agent.create_management(lab.topo, lab.config.mgmt_net)
    for d in owners.domains:
        lab.agents[d] = agent.start(lab.config.agent_cmd, d)
        lab.save()
    for d in owners.domains:
        agent.wait_ready(lab.agents[d], files[d].url,
                         len(owners.sites_of(d, lab.topo)), name=d,
                         ca=str(files[d].ca))


def _ping(ns: str, addr: str) -> bool:
    for _ in range(PING_ATTEMPTS):
        res = run(["ping", "-n", "-q", "-c", "1", "-W", str(PING_WAIT_S), addr], ns=ns,
                  check=False, timeout=PING_WAIT_S + 5)
        if res.returncode == 0:
            return True
    return False


def check_reachability(lab: Lab) -> None:
    if not lab.config.check_reachability:
        return
    failures = []
    # With agents no tunnel exists until someone reserves one: only best effort answers.
    tunnel = not lab.config.agents
    for x in lab.topo.sites:
        for y in lab.topo.sites:
            if x.index < y.index:
                for addr in (y.best_effort_addr, y.tunnel_addr) if tunnel else (y.best_effort_addr,):
                    if not _ping(x.host_ns, addr):
                        failures.append(f"{x.name}-host -> {addr}")
                if not _ping(x.cross_ns, y.cross_addr):
                    failures.append(f"{x.name}-xh -> {y.cross_addr}")
    for p in lab.topo.paths:
        if p.index > 1 and not _ping(p.a.gateway_ns, p.gateway_addr(p.b)):
            failures.append(f"{p.a.name}-gw -> {p.gateway_addr(p.b)} (path {p.key})")
    if failures:
        raise LabError(f"no answer after {PING_ATTEMPTS} pings: " + "; ".join(failures)
                       + " (a SPEC that drops everything needs --no-ping-check)")


Step = Callable[[Lab], None]
STEPS: list[tuple[str, Step]] = [
    ("create_namespaces", create_namespaces),
    ("create_links", create_links),
    ("disable_offloads", disable_offloads),
    ("configure_addresses", configure_addresses),
    ("configure_neighbours", configure_neighbours),
    ("configure_routes", configure_routes),
    ("start_emulators", start_emulators),
    ("start_gateways", start_gateways),
    ("start_etcd", start_etcd),
    ("start_agents", start_agents),
    ("start_slurm", slurm.start),
    ("check_reachability", check_reachability),
]


def _fault_hook(step: str) -> None:
    """Test hooks (tests/lab): fail, or die without any cleanup, right after `step`."""
    if os.environ.get("DETWAN_TESTBED_FAIL_AFTER") == step:
        raise LabError(f"injected failure after step {step} (DETWAN_TESTBED_FAIL_AFTER)")
    if os.environ.get("DETWAN_TESTBED_CRASH_AFTER") == step:
        os._exit(70)  # simulates a crash: no finally blocks, no cleanup


def up(config: LabConfig, log: Callable[[str], None]) -> Lab:
    topo = topology.build(config.sites, config.paths)
    lab = Lab(config, topo)
    state.remove_logs()
    lab.save()
    for name, step in STEPS:
        log(f"up: {name}")
        lab.step = name
        lab.save()
        step(lab)
        _fault_hook(name)
    lab.phase, lab.step = "up", ""
    lab.save()
    return lab


# ---------------------------------------------------------------------------------- `down`

def existing_lab() -> str | None:
    """Describes the lab that is up (project namespaces or a state file), None if none."""
    found = netns.list_namespaces()
    st = state.read()
    if st:
        sites = ",".join(s.get("name", "?") for s in st.get("sites", []))
        return f"sites {sites}, phase {st.get('phase')}, {len(found)} namespaces {topology.PREFIX}*"
    if found:
        return f"{len(found)} leftover namespaces: {', '.join(found[:4])}" + \
            (", ..." if len(found) > 4 else "")
    if state.state_path().exists():
        return f"unreadable {state.state_path()}"
    return None


def down(log: Callable[[str], None]) -> bool:
    """Removes every trace; works without (or with a corrupt) state file. True if anything was
    there."""
    namespaces = netns.list_namespaces()
    # Recorded pids count only with their start time: a stale record never hits a recycled pid.
    pids: dict[int, int | None] = {pid: start for pid, start in state.read_pid_files().items()
                                   if start is not None}
    st = state.read()
    if st:
        records = list(st.get("paths", []))
        records += [s.get("gateway") for s in st.get("sites", []) if isinstance(s, dict)]
        records += list(st.get("agents", []))
        records += list((st.get("etcd") or {}).get("members") or [])
        records += list(((st.get("slurm") or {}).get("daemons") or {}).values())
        for p in records:
            if isinstance(p, dict) and isinstance(p.get("pid"), int) and \
                    isinstance(p.get("pid_start_time"), int):
                pids.setdefault(p["pid"], p["pid_start_time"])
        for pid, start in cross.recorded_pids(st).items():  # also in pid files
            pids.setdefault(pid, start)
    # Processes inside our namespaces (emulators, and whatever `exec` left running) outlive
    # `ip netns del`: stop them first.
    for ns in namespaces:
        for pid in netns.namespace_pids(ns):
            pids[pid] = netns.process_start_time(pid)
    anything = bool(namespaces or state.state_path().exists()
                    or any(netns.is_alive(p, s) for p, s in pids.items()))
    survivors = netns.stop_processes(pids)
    if survivors:
        log(f"down: warning: pids {survivors} survived SIGKILL")
    for ns in namespaces:
        log(f"down: deleting namespace {ns}")
        ip("netns", "del", ns, check=False)
    for dev in netns.root_links():
        anything = True
        log(f"down: deleting leftover link {dev} in the root namespace")
        ip("link", "del", "dev", dev, check=False)
    state.remove_runtime_files()
    # --agent-replicas: partition rules, the replicas' cgroups, etcd's data (found by prefix
    # and run directory, without the state file).
    etcd.remove_partitions()
    etcd.remove_cgroups()
    etcd.remove_files()
    slurm.remove_files()
    gateway.remove_dpdk_runtime_dirs()
    left = netns.list_namespaces()
    if left:
        raise LabError(f"namespaces still present after down: {', '.join(left)}")
    return anything
