"""`tools/testbed cross start|stop|status`: real cross traffic between the sites' cross hosts
(tools/lab/cross.py; docs/testbed.md, "Cross traffic").

Exit codes: 0 success; 1 no lab, nothing running, or a flow that did not start; 2 bad usage;
3 (`status`) cross traffic is recorded but not every iperf3 runs any more (a --duration
ended, or one died).
"""
from __future__ import annotations

import json
import os
import sys

from lab import cross
from lab.netns import LabError
from lab.units import format_rate, parse_duration_ns, parse_fraction


def add_parser(sub) -> None:
    p = sub.add_parser("cross", help="start|stop|status: real cross traffic (iperf3 TCP cubic/"
                       "bbr + UDP) between the sites' cross hosts over WAN path 1")
    csub = p.add_subparsers(dest="cross_action", required=True)
    s = csub.add_parser("start", help="start cross traffic (runs until `cross stop`, "
                        "`down` or --duration)")
    s.add_argument("--rate", metavar="RATE",
                   help="offered rate per direction of each site pair, e.g. 150mbit")
    s.add_argument("--share", metavar="SHARE",
                   help="offered rate = SHARE x the rate of --of, e.g. --share 150%% --of "
                   "100mbit (pass the best-effort share: path rate - reserved rate)")
    s.add_argument("--of", metavar="RATE", help="the rate --share refers to")
    s.add_argument("--tcp-flows", type=int, default=cross.DEFAULT_TCP_FLOWS, metavar="N",
                   help=f"TCP flows per direction (default {cross.DEFAULT_TCP_FLOWS})")
    s.add_argument("--cc", default=",".join(cross.DEFAULT_CC), metavar="LIST",
                   help="congestion controls the TCP flows alternate over (default "
                   f"{','.join(cross.DEFAULT_CC)})")
    s.add_argument("--udp-fraction", default=str(cross.DEFAULT_UDP_FRACTION), metavar="F",
                   help="share of the offered rate sent as unresponsive UDP, e.g. 50%% or 0.5 "
                   f"(default {cross.DEFAULT_UDP_FRACTION})")
    s.add_argument("--pairs", metavar="LIST",
                   help="site pairs, e.g. ab,bc (default every pair)")
    s.add_argument("--one-way", action="store_true",
                   help="only from the first site of each pair to the second (default: both "
                   "directions)")
    s.add_argument("--duration", metavar="DURATION",
                   help="stop by itself after DURATION (e.g. 60s; default: until `cross stop`)")
    s.add_argument("--json", action="store_true", help="print what was started as JSON")
    t = csub.add_parser("stop", help="stop cross traffic and report what each flow achieved")
    t.add_argument("--json", action="store_true")
    u = csub.add_parser("status", help="the running flows")
    u.add_argument("--json", action="store_true")


def _mbit(bps: float) -> str:
    return f"{bps / 1e6:.2f} Mbit/s"


def cmd_cross(args) -> int:
    if args.cross_action == "start":
        return _start(args)
    if os.geteuid() != 0:
        raise LabError("must run as root (network namespaces)")
    if args.cross_action == "stop":
        report = cross.stop()
        if args.json:
            json.dump(report, sys.stdout, indent=2, sort_keys=True)
            print()
        else:
            print_report(report, sys.stdout)
        return 0
    st = cross.status()
    if args.json:
        json.dump(st, sys.stdout, indent=2, sort_keys=True)
        print()
    elif not st["groups"]:
        print("no cross traffic")
    else:
        print(f"cross traffic: {format_rate(st['rate_bps'])} per direction, "
              f"{'running' if st['running'] else 'NOT ALL RUNNING'}, {st['seconds']:.0f} s")
        for g in st["groups"]:
            alive = "alive" if g["server"]["alive"] and g["client"]["alive"] else "ended"
            print(f"  {g['id']:10s} {g['kind']} {g['cc'] or '':6s} x{g['streams']} "
                  f"{_mbit(g['stream_rate_bps'])} each, port {g['port']}, {alive}")
        for ns, counts in st["cc_in_use"].items():
            print(f"  {ns}: TCP data connections by congestion control {counts}")
    if not st["groups"]:
        return 1
    return 0 if st["running"] else 3


def _start(args) -> int:
    try:
        rate = cross.offered_rate_bps(args.rate, args.share, args.of)
        udp_fraction = parse_fraction(args.udp_fraction)
        cc = tuple(c.strip() for c in args.cc.split(",") if c.strip())
        pairs = [p.strip() for p in args.pairs.split(",") if p.strip()] if args.pairs else None
        duration = parse_duration_ns(args.duration) / 1e9 if args.duration else None
        if duration is not None and duration <= 0:
            raise ValueError("--duration must be positive (leave it out to run until stop)")
        cross.plan("abcd", rate, args.tcp_flows, cc, udp_fraction, None, True)  # validates
    except ValueError as e:
        print(f"tools/testbed: cross start: {e}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        raise LabError("must run as root (network namespaces)")
    try:
        handle = cross.start(rate, tcp_flows=args.tcp_flows, cc=cc, udp_fraction=udp_fraction,
                             pairs=pairs, both_directions=not args.one_way,
                             duration_s=duration)
    except ValueError as e:  # pairs that this lab does not have
        print(f"tools/testbed: cross start: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(handle.to_record(), sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    print(f"cross traffic started: {format_rate(rate)} offered per direction, "
          f"{len(handle.groups)} iperf3 client/server pairs"
          + (f", for {handle.duration_s} s" if handle.duration_s else
             " (until tools/testbed cross stop)"))
    for g in handle.groups:
        print(f"  {g.id:10s} {g.src}-xh -> {g.dst}-xh  {g.kind} {g.cc or '':6s} "
              f"x{g.streams} at {_mbit(g.stream_rate_bps)} each")
    return 0


def print_report(report: dict, out) -> None:
    """stop()'s report as a table: per flow offered, achieved, retransmits or loss."""
    print(f"cross traffic ran {report['seconds']:.1f} s, offered "
          f"{_mbit(report['offered_bps'])} per direction", file=out)
    for f in report["flows"]:
        extra = (f"lost {f['lost_percent']:.1f}%" if f["kind"] == "udp" and
                 f.get("lost_percent") is not None else
                 f"retransmits {f.get('retransmits')}" if f["kind"] == "tcp" else "")
        err = f"  ERROR: {f['error']}" if f.get("error") else ""
        print(f"  {f['id']:12s} {f['kind']} {f['cc'] or '':6s} offered "
              f"{_mbit(f['offered_bps']):>15s}  achieved {_mbit(f['achieved_bps']):>15s}  "
              f"{extra}{err}", file=out)
    t = report["totals"]
    kinds = ", ".join(f"{k} {_mbit(v)}" for k, v in sorted(t["by_kind"].items()))
    dirs = ", ".join(f"{k} {_mbit(v)}" for k, v in sorted(t["by_direction"].items()))
    print(f"  total {_mbit(t['achieved_bps'])} (TCP {_mbit(t['tcp_bps'])}, UDP "
          f"{_mbit(t['udp_bps'])}); by kind: {kinds}; by direction: {dirs}", file=out)
    if report.get("survivors"):
        print(f"  warning: pids {report['survivors']} survived SIGKILL", file=out)
