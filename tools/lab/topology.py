"""Topology and addressing plan of the lab: pure data, no side effects.

Plan (site index i = 1..4 for a..d; WAN path k = 1..2 between sites i < j):

  site host namespace   dwtb-X-host   veth dwtb-X-h   10.10.i.2/24 best effort
                                                      10.20.i.2/32 tunnel address
                                                      10.20.i.3/32 a co-tenant's tunnel
                                                      address (another job on the site)
  site gateway          dwtb-X-gw     veth dwtb-X-g   10.10.i.1/24 (host LAN)
                                      veth dwtb-XYk-X 10.(100+k).(10i+j).{1|2}/30 (WAN path k)
  WAN path k of pair XY dwtb-wan-XY-k veths dwtb-XYk-wX, dwtb-XYk-wY, no IP; detwan-wanem
                                      bridges them at L2
  site cross host       dwtb-X-xh     veth dwtb-X-x   10.30.i.2/24 (real cross traffic,
                                                      tools/lab/cross.py)
                        (gateway)     veth dwtb-X-xg  10.30.i.1/24

Every name starts with PREFIX so `down` can find leftovers without the state file. A second,
independent lab can run beside the first with another prefix and run directory:
DETWAN_TESTBED_PREFIX=dwtc- DETWAN_TESTBED_RUN_DIR=/run/detwan-testbed-c (benchmarks beside a
test run).
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import re


def _prefix() -> str:
    prefix = os.environ.get("DETWAN_TESTBED_PREFIX", "dwtb-")
    # At most 5 characters keeps every interface name within IFNAMSIZ.
    if not re.fullmatch(r"[a-z]{2,4}-", prefix):
        raise ValueError(f"DETWAN_TESTBED_PREFIX '{prefix}': expected 2-4 lower-case letters "
                         "and a dash, e.g. dwtc-")
    return prefix


PREFIX = _prefix()
SITE_NAMES = "abcd"
MAX_SITES = len(SITE_NAMES)
MAX_PATHS = 2
IFNAMSIZ = 15  # usable characters of a Linux interface name

BEST_EFFORT_NET = "10.10"
TUNNEL_NET = "10.20"
CROSS_NET = "10.30"  # the cross hosts: best effort over path 1, never through a tunnel


@dataclasses.dataclass(frozen=True)
class Site:
    name: str   # "a"
    index: int  # 1-based

    @property
    def host_ns(self) -> str:
        return f"{PREFIX}{self.name}-host"

    @property
    def gateway_ns(self) -> str:
        return f"{PREFIX}{self.name}-gw"

    @property
    def host_if(self) -> str:
        return f"{PREFIX}{self.name}-h"

    @property
    def gateway_lan_if(self) -> str:
        return f"{PREFIX}{self.name}-g"

    @property
    def lan_prefix(self) -> str:
        return f"{BEST_EFFORT_NET}.{self.index}.0/24"

    @property
    def best_effort_addr(self) -> str:
        return f"{BEST_EFFORT_NET}.{self.index}.2"

    @property
    def gateway_lan_addr(self) -> str:
        return f"{BEST_EFFORT_NET}.{self.index}.1"

    @property
    def tunnel_prefix(self) -> str:
        return f"{TUNNEL_NET}.{self.index}.0/24"

    @property
    def tunnel_addr(self) -> str:
        return f"{TUNNEL_NET}.{self.index}.2"

    # A second host address in the site's tunnel prefix, on the same host namespace: another
    # job's (a co-tenant of the site), for the tests that a tunnel carries only its tenant. No
    # static tunnel carries it; with --agents a reservation may name it (src/dst_prefixes).
    @property
    def cotenant_addr(self) -> str:
        return f"{TUNNEL_NET}.{self.index}.3"

    # The cross host: another machine of the site that sends and receives real cross traffic
    # (tools/lab/cross.py), so it competes on the WAN without running in the ranks' hosts.
    @property
    def cross_ns(self) -> str:
        return f"{PREFIX}{self.name}-xh"

    @property
    def cross_if(self) -> str:
        """The cross host's veth (its peer in the gateway is gateway_cross_if)."""
        return f"{PREFIX}{self.name}-x"

    @property
    def gateway_cross_if(self) -> str:
        return f"{PREFIX}{self.name}-xg"

    @property
    def cross_prefix(self) -> str:
        return f"{CROSS_NET}.{self.index}.0/24"

    @property
    def cross_addr(self) -> str:
        return f"{CROSS_NET}.{self.index}.2"

    @property
    def gateway_cross_addr(self) -> str:
        return f"{CROSS_NET}.{self.index}.1"


@dataclasses.dataclass(frozen=True)
class WanPath:
    """One emulated WAN path between two gateways; `a` is the lower-indexed site."""
    a: Site
    b: Site
    index: int  # k, 1-based

    @property
    def pair(self) -> str:
        return self.a.name + self.b.name

    @property
    def key(self) -> str:
        return f"{self.pair}-{self.index}"

    @property
    def wan_ns(self) -> str:
        return f"{PREFIX}wan-{self.key}"

    def gateway_if(self, site: Site) -> str:
        """The gateway-side veth of this path in `site`'s gateway namespace."""
        return f"{PREFIX}{self.pair}{self.index}-{site.name}"

    def wan_if(self, site: Site) -> str:
        """The WAN-namespace veth facing `site`'s gateway."""
        return f"{PREFIX}{self.pair}{self.index}-w{site.name}"

    @property
    def subnet(self) -> str:
        return f"10.{100 + self.index}.{10 * self.a.index + self.b.index}.0/30"

    def gateway_addr(self, site: Site) -> str:
        host = 1 if site == self.a else 2
        return f"10.{100 + self.index}.{10 * self.a.index + self.b.index}.{host}"

    def peer(self, site: Site) -> Site:
        return self.b if site == self.a else self.a


@dataclasses.dataclass(frozen=True)
class Topology:
    sites: tuple[Site, ...]
    paths: tuple[WanPath, ...]

    @property
    def namespaces(self) -> list[str]:
        names = []
        for s in self.sites:
            names += [s.host_ns, s.gateway_ns, s.cross_ns]
        names += [p.wan_ns for p in self.paths]
        return names

    def path(self, pair: str, index: int) -> WanPath:
        norm = "".join(sorted(pair.replace("-", "")))
        for p in self.paths:
            if p.pair == norm and p.index == index:
                return p
        known = ", ".join(f"{p.pair} {p.index}" for p in self.paths)
        raise KeyError(f"no WAN path '{pair} {index}' in this lab (paths: {known})")

    def primary_path(self, x: Site, y: Site) -> WanPath:
        """The path that carries best-effort traffic between two sites (path 1 for now)."""
        return self.path(x.name + y.name, 1)


def build(sites: int, paths: int) -> Topology:
    if not 2 <= sites <= MAX_SITES:
        raise ValueError(f"--sites must be in [2, {MAX_SITES}], got {sites}")
    if not 1 <= paths <= MAX_PATHS:
        raise ValueError(f"--paths must be 1 or 2, got {paths}")
    site_list = tuple(Site(SITE_NAMES[i], i + 1) for i in range(sites))
    path_list = tuple(WanPath(a, b, k)
                      for a, b in itertools.combinations(site_list, 2)
                      for k in range(1, paths + 1))
    topo = Topology(site_list, path_list)
    for s in site_list:
        for name in (s.host_if, s.gateway_lan_if, s.cross_if, s.gateway_cross_if):
            assert len(name) <= IFNAMSIZ, name
    for p in path_list:  # names are static, but keep the invariant checked in one place
        for name in (p.gateway_if(p.a), p.gateway_if(p.b), p.wan_if(p.a), p.wan_if(p.b)):
            assert len(name) <= IFNAMSIZ, name
    return topo


def mac_for(ifname: str) -> str:
    """Deterministic locally administered MAC per interface name (stable across runs)."""
    h = 0
    for ch in ifname.encode():
        h = (h * 131 + ch) & 0xFFFFFFFF
    return "02:d7:" + ":".join(f"{(h >> s) & 0xFF:02x}" for s in (24, 16, 8, 0))
