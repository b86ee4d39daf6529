"""Planning real cross traffic (tools/lab/cross.py): which iperf3 flows, at what rates, with
which arguments. Pure functions, tested without root in tests/lab/test_cross.py.

Per direction of each chosen site pair, the offered rate R splits into `tcp_flows` TCP flows of
(1 - udp_fraction) x R / tcp_flows each, their congestion control alternating over `cc`, and
one UDP flow of udp_fraction x R. Flows of one direction and congestion control form a group:
one iperf3 client with `-P` streams (`-b` caps each stream) and one server.
"""
from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Iterable, Sequence

from lab.units import parse_rate_bps, parse_share

DEFAULT_TCP_FLOWS = 4
DEFAULT_CC = ("cubic", "bbr")
DEFAULT_UDP_FRACTION = 0.5
BASE_PORT = 5301            # the groups' iperf3 ports: BASE_PORT, BASE_PORT + 1, ...
MIN_STREAM_RATE_BPS = 1000  # iperf3 -b 0 would mean "unlimited" for TCP


@dataclasses.dataclass(frozen=True)
class FlowGroup:
    """One iperf3 client/server pair: `streams` flows of one kind from src's cross host to
    dst's, each offering stream_rate_bps."""
    id: str                 # "ab-cubic", "ba-udp"
    src: str
    dst: str
    kind: str               # "tcp" | "udp"
    cc: str | None          # TCP congestion control; None for UDP
    streams: int
    stream_rate_bps: int    # iperf3 -b (per stream)
    port: int

    @property
    def offered_bps(self) -> int:
        return self.streams * self.stream_rate_bps

    def to_record(self) -> dict:
        return dataclasses.asdict(self)


def offered_rate_bps(rate: str | None = None, share: str | None = None,
                     of: str | None = None) -> int:
    """The offered rate per direction from `--rate RATE`, or `--share S --of RATE` (S x RATE;
    the caller passes the best-effort share: path rate - reserved rate). ValueError if
    neither or both are given, or a value does not parse."""
    if rate is not None and (share is not None or of is not None):
        raise ValueError("give either --rate or --share with --of, not both")
    if rate is not None:
        value = parse_rate_bps(rate)
    elif share is not None and of is not None:
        value = round(parse_share(share) * parse_rate_bps(of))
    elif share is not None or of is not None:
        raise ValueError("--share and --of go together (offered = share x the given rate)")
    else:
        raise ValueError("give the offered rate: --rate RATE or --share SHARE --of RATE")
    if value <= 0:
        raise ValueError("the offered rate must be positive")
    return value


def split_rate(rate_bps: int, tcp_flows: int, udp_fraction: float) -> tuple[int, int]:
    """(rate of each TCP flow, rate of the UDP flow): TCP together offers (1 - udp_fraction)
    of rate_bps, UDP the rest; without TCP flows UDP offers all of it. 0 means no such flow."""
    if not 0 <= udp_fraction <= 1:
        raise ValueError(f"udp_fraction {udp_fraction}: must be in [0, 1]")
    if tcp_flows < 0:
        raise ValueError(f"tcp_flows {tcp_flows}: must be >= 0")
    if tcp_flows == 0:
        return 0, rate_bps
    udp = round(rate_bps * udp_fraction)
    return (rate_bps - udp) // tcp_flows, udp


def cc_per_flow(tcp_flows: int, cc: Sequence[str]) -> list[str]:
    """The congestion control of each TCP flow: cc alternates (cubic, bbr, cubic, bbr, ...)."""
    if tcp_flows and not cc:
        raise ValueError("no congestion control given for the TCP flows")
    for name in cc:
        if not re.fullmatch(r"[a-z0-9_]+", name):
            raise ValueError(f"congestion control '{name}': expected a name like cubic or bbr")
    return [cc[i % len(cc)] for i in range(tcp_flows)]


def directions(sites: Sequence[str], pairs: Iterable[str | Sequence[str]] | None,
               both_directions: bool) -> list[tuple[str, str]]:
    """(src, dst) site names. pairs: "ab" or ("a", "b") items, default every pair of sites
    (lower site first); both_directions adds the reverse of each."""
    if pairs is None:
        chosen = list(itertools.combinations(sites, 2))
    else:
        chosen = []
        for p in pairs:
            x, y = (p[0], p[1]) if len(p) == 2 else ("", "")
            if not x or x == y or x not in sites or y not in sites:
                raise ValueError(f"pair '{''.join(p)}': expected two different sites of the "
                                 f"lab ({', '.join(sites)}), e.g. ab")
            chosen.append((x, y))
    out: list[tuple[str, str]] = []
    for x, y in chosen:
        for d in ((x, y), (y, x)) if both_directions else ((x, y),):
            if d not in out:
                out.append(d)
    if not out:
        raise ValueError("no site pair to carry cross traffic")
    return out


def plan(sites: Sequence[str], rate_bps: int, tcp_flows: int = DEFAULT_TCP_FLOWS,
         cc: Sequence[str] = DEFAULT_CC, udp_fraction: float = DEFAULT_UDP_FRACTION,
         pairs: Iterable[str | Sequence[str]] | None = None, both_directions: bool = True,
         base_port: int = BASE_PORT) -> list[FlowGroup]:
    """The flow groups for `rate_bps` offered per direction (ValueError: bad arguments)."""
    tcp_rate, udp_rate = split_rate(rate_bps, tcp_flows, udp_fraction)
    per_flow = cc_per_flow(tcp_flows, cc)
    if (tcp_flows and udp_fraction < 1 and tcp_rate < MIN_STREAM_RATE_BPS) or \
            (udp_rate and udp_rate < MIN_STREAM_RATE_BPS):
        raise ValueError(f"rate {rate_bps} bit/s is too small to split over {tcp_flows} TCP "
                         f"flows and UDP (each flow needs >= {MIN_STREAM_RATE_BPS} bit/s)")
    groups: list[FlowGroup] = []
    port = itertools.count(base_port)
    for src, dst in directions(sites, pairs, both_directions):
        if tcp_rate:
            for name in dict.fromkeys(per_flow):  # distinct, in order of first use
                groups.append(FlowGroup(f"{src}{dst}-{name}", src, dst, "tcp", name,
                                        per_flow.count(name), tcp_rate, next(port)))
        if udp_rate:
            groups.append(FlowGroup(f"{src}{dst}-udp", src, dst, "udp", None, 1, udp_rate,
                                    next(port)))
    return groups


def iperf3_args(group: FlowGroup, role: str, addr: str, duration_s: int | None,
                udp_length: int) -> list[str]:
    """iperf3's arguments for a group's server (role "server", addr = its own address) or
    client (role "client", addr = the server's)."""
    if role == "server":
        return ["-s", "-1", "-B", addr, "-p", str(group.port), "-J", "-i", "0"]
    # A TCP client counts retransmits only in its interval statistics (-i), and the report it
    # prints when its server ends the test has no final interval: 1 s intervals keep all but
    # the last second's retransmits (the JSON grows by ~1 KB a second).
    args = ["-c", addr, "-p", str(group.port), "-t", str(duration_s or 0), "-J",
            "-b", str(group.stream_rate_bps), "-P", str(group.streams)]
    if group.kind == "udp":
        args += ["-i", "0", "-u", "-l", str(udp_length)]
    else:
        args += ["-i", "1", "-C", str(group.cc)]
    return args
