"""detwan-gw in the lab, the configuration side: what each site's gateway is told (pure
functions; the processes are lab.gateway, which re-exports all of this).

What this module decides (docs/testbed.md, "Gateways"):
  * one tunnel per pair of sites over WAN path 1, id 10*i + j for sites i < j, the same id at
    both ends; it carries the peer host's tunnel address (10.20.j.2/32), which the gateway routes
    into its TUN device (tun.routes) instead of the kernel route over path 1, from this site's
    host's tunnel address only (match.src 10.20.i.2/32: the tunnel's tenant; another source is
    dropped and counted, foreign_source, and the far end delivers only packets between the two);
  * each WAN port's schedule: a 1 ms cycle of 100 slots with a 2 us guard; the line rate is the
    path's emulated `rate=` (the gateway then never bursts faster than the WAN drains), 1 Gbit/s
    without one; the tunnel owns the first slots, as few as sched::GateControlList's guaranteed
    rate needs for the tunnel rate, plus one slot of margin;
  * the latency bound (on-time delivery): the path's largest delay (delay + jitter; 4 sigma for
    normal / pareto-normal jitter) + 3 ms, unless --bound is given (0 = deliver on receipt);
  * the clock offset between gateways is 0: every namespace shares the machine's clock;
  * every static tunnel is authenticated and encrypted (AES-256-GCM) with a random key drawn
    for this lab (one per tunnel, both ends; a 0600 file in the run directory's keys/, named by
    the tunnel's `auth.keys[].secret_file`), unless `up --encrypt none` asks for the
    unencrypted path by name (the tunnels then say `auth: none`); with --agents the agent
    draws a key per reservation and the TUN MTU leaves room for the AEAD tag;
  * with the dpdk backend, an nftables rule in the gateway namespace drops the tunnel's UDP
    frames at the WAN veth's ingress hook: net_af_packet has already seen them (packet taps run
    before that hook), and the kernel, which has no socket on the port, would otherwise answer
    each one with an ICMP port unreachable.

Everything here is a pure function of the topology and the options (parsing, slot and bound
computation, the YAML text), tested without root in tests/lab/test_gateway.py.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import pathlib
import secrets
import subprocess

from lab.state import RUN_DIR
from lab.topology import Site, Topology, WanPath, mac_for
from lab.units import format_duration, format_rate, parse_duration_ns, parse_rate_bps

BACKENDS = ("uring", "dpdk")
TIMING_MODES = ("low-cpu", "busy")
TUNNEL_PORT = 4789
TUN_NAME = "dwtb-tun"
WAN_MTU_BYTES = 1500
ENCAP_OVERHEAD_BYTES = 68   # outer IPv4 20 + UDP 8 + tunnel header 40 (docs/wire-format.md)
AEAD_TAG_BYTES = 16         # after the payload of an authenticated tunnel's packets
# Tunnel ciphers (docs/gateway.md, "auth"); "none" only when asked for by name.
CIPHERS = ("aes-256-gcm", "chacha20-poly1305", "none")
DEFAULT_CIPHER = "aes-256-gcm"
KEY_ID = 1
# The largest inner packet a WAN frame carries through an encrypted tunnel: what the agent
# reports as a reservation's tunnel.mtu_bytes, so a job that fills it is neither fragmented nor
# refused at the gateway. PLAIN_TUN_MTU_BYTES: through an unencrypted one (`--encrypt none`).
TUN_MTU_BYTES = WAN_MTU_BYTES - ENCAP_OVERHEAD_BYTES - AEAD_TAG_BYTES
PLAIN_TUN_MTU_BYTES = WAN_MTU_BYTES - ENCAP_OVERHEAD_BYTES
CONTROL = "@detwan-gw"      # the daemon's default: an abstract socket per network namespace
TUNNEL_DSCP = 46            # EF; the emulators get prio-dscp=46 (see with_prio_dscp)
RESERVED_QUEUE = "256kb"    # the emulators' byte limit for the reserved class (prio-queue)
CYCLE_NS = 1_000_000
SLOT_COUNT = 100
GUARD_NS = 2_000
ETHERNET_OVERHEAD_BYTES = 18  # dataplane/gw/config.h kEthernetOverheadBytes
DEFAULT_LINE_RATE_BPS = 1_000_000_000
DEFAULT_TUNNEL_RATE = "100mbit"
BOUND_MARGIN_NS = 3_000_000
# Policer depth: 10 ms at the tunnel rate. The lab's traffic generators (iperf3, probes) share
# two vCPUs with everything else; one descheduled for a few ms then sends a burst that the
# default depth (one 1 ms cycle at the rate) polices although the average is well below it.
POLICER_BURST_NS = 10_000_000
DEFAULT_RT_PRIORITY = 10

def spec_tokens(spec: str) -> dict[str, str]:
    """detwan-wanem SPEC -> {key: value}; later tokens override earlier ones, as in the emulator.
    Only the keys the gateway configuration depends on are interpreted (delay, jitter,
    jitter-dist, rate, prio-dscp); the SPEC itself is validated by `detwan-wanem check-spec`."""
    tokens: dict[str, str] = {}
    for tok in spec.split(","):
        key, eq, value = tok.strip().partition("=")
        if eq:
            tokens[key.strip()] = value.strip()
    return tokens


def with_prio_dscp(spec: str) -> str:
    """The SPEC with `prio-dscp=46` and `prio-queue=256kb` added, each unless the SPEC sets it.

    The tunnel's frames (DSCP 46) then go to the emulator's strict-priority reserved class,
    ahead of best effort and cross traffic, with a byte limit of their own. That models what
    the tunnel's slots stand for: WAN capacity reserved for it along the path, which best-effort
    load neither queues it behind nor crowds out of the buffer (without prio-queue, a saturated
    best-effort class fills the shared queue and the emulator drops reserved frames too)."""
    tokens = spec_tokens(spec)
    extra = [t for key, t in (("prio-dscp", f"prio-dscp={TUNNEL_DSCP}"),
                              ("prio-queue", f"prio-queue={RESERVED_QUEUE}"))
             if key not in tokens]
    return ",".join(([spec] if spec.strip() else []) + extra)


def path_delay_range_ns(spec: str) -> tuple[int, int]:
    """(smallest, largest) one-way delay the emulator can give a frame on this SPEC, queueing
    aside: delay -/+ jitter (uniform), -/+ 4 sigma (normal is clamped there; pareto-normal's
    tail may reach further, and such packets are counted late)."""
    tokens = spec_tokens(spec)
    delay = parse_duration_ns(tokens.get("delay", "0"))
    jitter = parse_duration_ns(tokens.get("jitter", "0"))
    spread = jitter if tokens.get("jitter-dist", "uniform") == "uniform" else 4 * jitter
    return max(0, delay - spread), delay + spread


def default_bound_ns(spec: str) -> int:
    return path_delay_range_ns(spec)[1] + BOUND_MARGIN_NS


def line_rate_bps(spec: str) -> int:
    rate = spec_tokens(spec).get("rate", "0")
    bps = 0 if rate in ("0", "") else parse_rate_bps(rate)
    return bps or DEFAULT_LINE_RATE_BPS


def max_frame_bytes() -> int:
    return WAN_MTU_BYTES + ETHERNET_OVERHEAD_BYTES


def guaranteed_rate_bps(slots: int, line_bps: int) -> int:
    """sched::GateControlList::guaranteed_rate_bps for `slots` contiguous slots from slot 0."""
    if slots >= SLOT_COUNT:
        return line_bps  # an owner of every slot has one endless window
    frame_ns = -(-max_frame_bytes() * 8 * 10**9 // line_bps)  # ceil_serialisation_ns
    usable_ns = slots * (CYCLE_NS // SLOT_COUNT) - GUARD_NS - frame_ns
    return max(0, usable_ns) * line_bps // CYCLE_NS


def slots_for_rate(rate_bps: int, line_bps: int) -> int:
    """Contiguous slots the tunnel needs: the fewest whose guaranteed rate carries it, plus one
    slot of margin. ValueError if the port cannot carry the rate."""
    if rate_bps > line_bps:
        raise ValueError(f"tunnel rate {format_rate(rate_bps)} exceeds the WAN port's line rate "
                         f"{format_rate(line_bps)}")
    for n in range(1, SLOT_COUNT + 1):
        if guaranteed_rate_bps(n, line_bps) >= rate_bps:
            return min(n + 1, SLOT_COUNT)
    raise ValueError(f"tunnel rate {format_rate(rate_bps)} does not fit a {format_rate(line_bps)} "
                     f"port after guard bands")


def policer_burst_bytes(rate_bps: int) -> int:
    return max(rate_bps * POLICER_BURST_NS // 8 // 10**9, 8 * max_frame_bytes())


def slot_list(count: int) -> str:
    return "0" if count == 1 else f"0-{count - 1}"


def tunnel_id(x: Site, y: Site) -> int:
    i, j = sorted((x.index, y.index))
    return 10 * i + j


def wan_port_name(path: WanPath) -> str:
    return f"{path.pair}{path.index}"


def peer_name(path: WanPath, site: Site) -> str:
    """The peer name, on `site`'s gateway, of the far gateway over `path`: the far site's name
    on path 1, "<name>-<k>" on path k."""
    far = path.peer(site)
    return far.name if path.index == 1 else f"{far.name}-{path.index}"


def admin_socket(site: Site) -> pathlib.Path:
    """The admin socket of the site's gateway (--agents): where detwan-agent programs it."""
    return RUN_DIR / f"gw-{site.name}.admin.sock"


KEY_DIR = RUN_DIR / "keys"  # the static tunnels' key files (removed by `down`)


def key_file(options: "GatewayOptions", tunnel: int) -> pathlib.Path:
    return options.key_dir / f"tunnel-{tunnel}.key"


def draw_tunnel_keys(options: "GatewayOptions", tunnels) -> None:
    """A random 32-byte key (64 hex digits, Python's CSPRNG) for each tunnel id that has none
    yet: drawn once per lab, so a configuration rendered again names the same keys."""
    if options.encrypt == "none":
        return
    for t in tunnels:
        options.tunnel_keys.setdefault(t, secrets.token_hex(32))


def write_tunnel_keys(options: "GatewayOptions") -> None:
    """The key files the configurations name: directory 0700, files 0600, owned by the lab's
    user (root), as detwan-gw wants a secret_file."""
    if not options.tunnel_keys and not options.identity_keys:
        return
    options.key_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(options.key_dir, 0o700)
    files = {key_file(options, t): secret + "\n" for t, secret in options.tunnel_keys.items()}
    files.update({identity_file(options, name): pem
                  for name, (pem, _) in options.identity_keys.items()})
    for path, text in files.items():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(text)


def identity_file(options: "GatewayOptions", site_name: str) -> pathlib.Path:
    return options.key_dir / f"gw-{site_name}.identity.pem"


def new_identity() -> tuple[str, str]:
    """An X25519 key pair made with stock openssl (docs/gateway.md, "Identity key"): the private
    key's PEM and the public key as the gateway reports it (base64 of its 32 raw bytes: the end
    of the SubjectPublicKeyInfo DER)."""
    pem = subprocess.run(["openssl", "genpkey", "-algorithm", "X25519"], check=True,
                         capture_output=True, text=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubout", "-outform", "DER"], input=pem.encode(),
                         check=True, capture_output=True).stdout
    return pem, base64.b64encode(der[-32:]).decode("ascii")


def draw_identity_keys(options: "GatewayOptions", site_names) -> None:
    """--agents: each gateway's own identity key pair, drawn once per lab (a configuration
    rendered again names the same file and key). The agent's topology registers the public
    keys, so its encrypted reservations are keyed by X25519 exchange: it holds no secret."""
    for name in site_names:
        if name not in options.identity_keys:
            options.identity_keys[name] = new_identity()


def auth_lines(options: "GatewayOptions", tunnel: int) -> list[str]:
    """A static tunnel's `auth:` (docs/gateway.md): its key file, or `none` when asked for."""
    if options.encrypt == "none":
        return ["    auth: none                # up --encrypt none: neither authenticated nor "
                "encrypted"]
    return ["    auth:",
            f"      cipher: {options.encrypt}",
            f"      keys: [{{id: {KEY_ID}, secret_file: {_q(str(key_file(options, tunnel)))}}}]"]


# ------------------------------------------------------------------------ the configuration

@dataclasses.dataclass
class GatewayOptions:
    backend: str = "uring"
    tunnel_rate: str = DEFAULT_TUNNEL_RATE
    bound: str | None = None    # None: computed per path from its SPEC
    timing: str = "low-cpu"
    shaper_rate: str | None = None  # space the tunnel's frames at this rate (None: no shaper)
    slots: int | None = None    # slots 0..slots-1 of every tunnel (None: as few as the rate needs)
    rt_priority: int | None = None  # SCHED_FIFO priority (None: 10 for low-cpu, 0 for busy)
    # The gateway as this many shards: dpdk, dpdk.lcores [0 .. shards-1] (each net_af_packet
    # device then has one queue pair per shard); uring, gateway.shards (threads). 1: one.
    shards: int = 1
    # How a low-cpu gateway wakes: "batched" (the gateway's defaults: a slot window's frames,
    # the on-time packets due together and the arrivals until then per wake-up) or "exact" (one
    # wake-up per frame, release and arrival: gateway.release_ahead, playout_ahead and
    # rx_coalesce 0), for A/B benchmarks.
    wake: str = "batched"
    # --agents: the gateways start without tunnels, with an admin socket, a WAN port and a peer
    # on every path, and route each other site's whole tunnel prefix into their TUN device;
    # detwan-agent programs the tunnels (tools/lab/agent.py).
    agents: bool = False
    # IP MTU of the WAN links (the lab's --mtu; --agents only: static tunnels stay at 1500). The
    # TUN device carries what fits after the encapsulation.
    wan_mtu: int = WAN_MTU_BYTES
    # Static tunnels: the cipher, or "none" (`up --encrypt none`, for the benchmarks of the
    # unencrypted path); the keys drawn for this lab (tunnel id -> 64 hex digits) and where
    # their files go. With --agents the agent decides per reservation (encrypted unless a
    # request says "none").
    encrypt: str = DEFAULT_CIPHER
    tunnel_keys: dict[int, str] = dataclasses.field(default_factory=dict)
    key_dir: pathlib.Path = KEY_DIR
    # --agents: each gateway's identity key pair (site name -> (private PEM, public base64)).
    identity_keys: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)

    @property
    def tun_mtu(self) -> int:
        """What fits after the encapsulation, and the AEAD tag unless every tunnel is plain (the
        agent's tunnels are encrypted by default: the TUN device leaves room for the tag)."""
        tag = 0 if (self.encrypt == "none" and not self.agents) else AEAD_TAG_BYTES
        return self.wan_mtu - ENCAP_OVERHEAD_BYTES - tag

    def effective_rt_priority(self) -> int:
        """Gateways that sleep between deadlines run SCHED_FIFO, as detwan-wanem's poll thread
        does: under CFS a sleeper on a loaded 2-vCPU machine wakes milliseconds late (measured:
        playout error p99 4 ms, p99.9 10 ms at load 7). A busy-polling one never (it would take
        a core)."""
        if self.rt_priority is not None:
            return self.rt_priority
        return DEFAULT_RT_PRIORITY if self.timing == "low-cpu" else 0


@dataclasses.dataclass(frozen=True)
class TunnelPlan:
    """One tunnel as both gateways configure it."""
    id: int
    path: WanPath
    rate_bps: int
    line_rate_bps: int
    slots: int
    bound_ns: int
    min_path_delay_ns: int


def plan_tunnels(topo: Topology, options: GatewayOptions,
                 spec_for) -> dict[tuple[str, str], TunnelPlan]:
    """Tunnel per pair of sites ("a", "b"), over path 1. ValueError names what does not fit."""
    rate = parse_rate_bps(options.tunnel_rate)
    if rate <= 0:
        raise ValueError(f"--tunnel-rate {options.tunnel_rate}: must be above 0")
    if options.slots is not None and not 1 <= options.slots <= SLOT_COUNT:
        raise ValueError(f"--tunnel-slots {options.slots}: must be in [1, {SLOT_COUNT}]")
    if options.shaper_rate is not None:
        parse_rate_bps(options.shaper_rate)
    if options.bound is not None:
        parse_duration_ns(options.bound)
    if options.encrypt not in CIPHERS:
        raise ValueError(f"--encrypt {options.encrypt}: expected one of {', '.join(CIPHERS)}")
    plans = {}
    for x in topo.sites:
        for y in topo.sites:
            if x.index >= y.index:
                continue
            path = topo.primary_path(x, y)
            spec = spec_for(path)
            lo, _ = path_delay_range_ns(spec)
            bound = default_bound_ns(spec) if options.bound is None \
                else parse_duration_ns(options.bound)
            line = line_rate_bps(spec)
            try:
                slots = options.slots or slots_for_rate(rate, line)
            except ValueError as e:
                raise ValueError(f"--tunnel-rate {options.tunnel_rate} on path {path.key}: {e}") \
                    from e
            # min_path_delay = the smallest delay the emulator gives: a --bound below it makes
            # --check-config fail with a message naming the field (every packet would be late).
            plans[(x.name, y.name)] = TunnelPlan(tunnel_id(x, y), path, rate, line, slots,
                                                 bound, lo)
    return plans


def _q(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid YAML scalar


def dpdk_section(site: Site, paths: list, options: "GatewayOptions") -> list[str]:
    """The dpdk: lines of a gateway's configuration: an net_af_packet device per WAN path,
    with a queue pair per shard, and the lcores of the shards."""
    eal = ["--no-huge", "-m", "256", "--file-prefix", f"dwtb-{site.name}", "--no-pci"]
    qpairs = f",qpairs={options.shards}" if options.shards > 1 else ""
    eal += [f"--vdev=net_af_packet{k},iface={p.gateway_if(site)}{qpairs}"
            for k, p in enumerate(paths)]
    if options.shards > 1:
        eal += ["-l", f"0-{options.shards - 1}"]
        lcores = "  lcores: [" + ", ".join(str(k) for k in range(options.shards)) + "]"
    else:
        lcores = "  lcore: -1"
    return ["dpdk:", "  eal: [" + ", ".join(_q(a) for a in eal) + "]", "  mbufs: 8191", lcores]


def gateway_section_lines(site: Site, options: GatewayOptions) -> list[str]:
    """The `gateway:` section both configurations start with (without the admin socket)."""
    return [
        "gateway:",
        f"  name: {site.name}",
        f"  backend: {options.backend}",
        f"  timing: {options.timing}",
        "  cpu: -1",
        *uring_shard_lines(options),
        *(["  release_ahead: 0us", "  playout_ahead: 0us", "  rx_coalesce: 0us"]
          if options.wake == "exact" else []),
        '  control_socket: ""          # the default, abstract @detwan-gw of this namespace',
    ]


METRICS_PORT = 9464  # every lab gateway's HTTP exporter, on its LAN address


def metrics_lines(site: Site) -> list[str]:
    """The `metrics:` section: the HTTP exporter on the gateway's LAN address, for the site's own
    LAN (its host namespace, where a Prometheus would run) and nobody else."""
    return ["metrics:",
            f"  listen: {_q(f'{site.gateway_lan_addr}:{METRICS_PORT}')}",
            f"  allow: [{site.lan_prefix}]   # the site's LAN only",
            "  min_interval: 1s"]


def wan_port_lines(site: Site, p: WanPath, k: int, line_bps: int, mtu: int,
                   options: GatewayOptions) -> list[str]:
    """One entry of wan_ports: the site's end of WAN path p, the k-th port of its gateway."""
    lines = [
        f"  - name: {wan_port_name(p)}",
        f"    local: {_q(f'{p.gateway_addr(site)}:{TUNNEL_PORT}')}",
        f"    line_rate: {format_rate(line_bps)}",
        f"    mtu: {mtu}",
        f"    cycle: {format_duration(CYCLE_NS)}",
        f"    slots: {SLOT_COUNT}",
        f"    guard: {format_duration(GUARD_NS)}",
    ]
    if options.backend == "dpdk":
        lines.append(f"    dpdk: {{device: net_af_packet{k}, "
                     f"next_hop_mac: {_q(mac_for(p.gateway_if(p.peer(site))))}}}")
    return lines


def render_agent_config(site: Site, topo: Topology, options: GatewayOptions, spec_for) -> str:
    """--agents: `site`'s gateway without tunnels, with an admin socket, a WAN port and a peer on
    every path (detwan-agent adds the tunnels at run time)."""
    peers = [t for t in topo.sites if t != site]
    paths = [p for p in topo.paths if site in (p.a, p.b)]
    lines = [
        f"# detwan-gw of lab site {site.name}, written by tools/testbed up --dataplane "
        f"{options.backend} --agents (tools/lab/gateway.py): no tunnels, detwan-agent adds them",
        *gateway_section_lines(site, options),
        f"  admin_socket: {_q(str(admin_socket(site)))}   # writes: root only (mode 0600)",
        *metrics_lines(site),
    ]
    if site.name in options.identity_keys:
        lines += ["identity:   # its own X25519 key pair; the agent's topology has the public key",
                  f"  private_key_file: {_q(str(identity_file(options, site.name)))}"]
    lines += [
        "tun:",
        "  enabled: true",
        f"  name: {TUN_NAME}",
        f"  mtu: {options.tun_mtu}",
        "  routes: [" + ", ".join(p.tunnel_prefix for p in peers) + "]",
    ]
    if options.backend == "dpdk":
        lines += dpdk_section(site, paths, options)
    lines.append("wan_ports:")
    for k, p in enumerate(paths):
        lines += wan_port_lines(site, p, k, line_rate_bps(spec_for(p)), options.wan_mtu, options)
    lines.append("peers:")
    for p in paths:
        far = p.peer(site)
        lines += [
            f"  - name: {peer_name(p, site)}",
            f"    wan_port: {wan_port_name(p)}",
            f"    endpoint: {_q(f'{p.gateway_addr(far)}:{TUNNEL_PORT}')}",
            "    clock_offset: 0           # all lab namespaces share one clock",
            f"    min_path_delay: {format_duration(path_delay_range_ns(spec_for(p))[0])}",
        ]
    lines.append("tunnels: []")
    return "\n".join(lines) + "\n"


def uring_shard_lines(options: GatewayOptions) -> list[str]:
    """The uring backend's shards (gateway.shards; dpdk puts them in dpdk.lcores). Not pinned:
    the lab shares its CPUs with everything else."""
    if options.backend != "uring" or options.shards <= 1:
        return []
    return [f"  shards: {options.shards}          # tunnel id mod {options.shards} owns a tunnel"]


def render_config(site: Site, topo: Topology, plans: dict[tuple[str, str], TunnelPlan],
                  options: GatewayOptions) -> str:
    """The YAML configuration of `site`'s gateway (the format of dataplane/gw/config.h)."""
    peers = [t for t in topo.sites if t != site]
    mine = [plans[min(site.name, p.name), max(site.name, p.name)] for p in peers]
    lines = [
        f"# detwan-gw of lab site {site.name}, written by tools/testbed up --dataplane "
        f"{options.backend} (tools/lab/gateway.py)",
        *gateway_section_lines(site, options),
        *metrics_lines(site),
        "tun:",
        "  enabled: true",
        f"  name: {TUN_NAME}",
        f"  mtu: {options.tun_mtu}",
        "  routes: [" + ", ".join(f"{p.tunnel_addr}/32" for p in peers) + "]",
    ]
    if options.backend == "dpdk":
        lines += dpdk_section(site, [plan.path for plan in mine], options)
    lines.append("wan_ports:")
    for k, plan in enumerate(mine):
        lines += wan_port_lines(site, plan.path, k, plan.line_rate_bps, WAN_MTU_BYTES, options)
    lines.append("peers:")
    for plan in mine:
        p = plan.path
        peer = p.peer(site)
        lines += [
            f"  - name: {peer.name}",
            f"    wan_port: {wan_port_name(p)}",
            f"    endpoint: {_q(f'{p.gateway_addr(peer)}:{TUNNEL_PORT}')}",
            "    clock_offset: 0           # all lab namespaces share one clock",
            f"    min_path_delay: {format_duration(plan.min_path_delay_ns)}",
        ]
    lines.append("tunnels:")
    for plan in mine:
        peer = plan.path.peer(site)
        lines += [
            f"  - id: {plan.id}",
            f"    peer: {peer.name}",
            f"    rate: {format_rate(plan.rate_bps)}",
            f"    slots: {_q(slot_list(plan.slots))}        # guaranteed "
            f"{format_rate(guaranteed_rate_bps(plan.slots, plan.line_rate_bps))} at line rate "
            f"{format_rate(plan.line_rate_bps)}",
            f"    burst: {policer_burst_bytes(plan.rate_bps)}b"
            f"         # {format_duration(POLICER_BURST_NS)} at the rate",
            f"    bound: {format_duration(plan.bound_ns)}",
            "    late: deliver",
            f"    dscp: {TUNNEL_DSCP}",
            "    over_rate: drop",
        ]
        if options.shaper_rate:
            lines.append(f"    shaper_rate: {options.shaper_rate}")
        lines.append(f"    match: {{dst: [{peer.tunnel_addr}/32], src: [{site.tunnel_addr}/32]}}")
        lines += auth_lines(options, plan.id)
    return "\n".join(lines) + "\n"
