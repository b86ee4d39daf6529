#!/usr/bin/python3
"""The multi-site demo (README's main job), as it stands after the lab issue.

Brings up a 2-site lab whose WAN path is emulated by detwan-wanem with delay, jitter, random loss
and a rate limit, then measures from site a's host to site b's host:
  * one-way delay and its spread with detwan-probe (timestamped UDP, shared kernel clock),
  * loss and reordering over the same stream,
  * TCP goodput with iperf3 against the most a TCP flow can carry at that rate,
and prints configured vs measured side by side, with the emulator's own counters. The lab is
always torn down. Later issues add the tunnel (detwan-gw) and compare it with this best-effort
path.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from lab import measure, wanem  # noqa: E402

DEFAULT_SPEC = "delay=10ms,jitter=1ms,loss=0.5%,rate=100mbit,queue=256kb"
# TCP goodput ceiling: the emulator counts whole Ethernet frames (1514 bytes for a full segment)
# while a 1448-byte-MSS flow (timestamps on) delivers 1448 bytes of payload per frame.
TCP_PAYLOAD_SHARE = 1448 / 1514


def parse_spec(text: str) -> dict:
    return dict(tok.split("=", 1) for tok in text.split(",") if "=" in tok)


def to_ns(text: str) -> int:
    units = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
    for suffix in ("ns", "us", "ms", "s"):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * units[suffix])
    return int(text)


def to_bps(text: str) -> float:
    scale = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1}
    for suffix, factor in scale.items():
        if text.lower().endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    raise ValueError(f"demo: rate '{text}' not understood")


def wanem_stats(site_pair: str) -> dict:
    res = subprocess.run([str(measure.TESTBED), "wanem", site_pair, "1", "--", "stats", "--json"],
                         capture_output=True, text=True, timeout=30)
    return json.loads(res.stdout) if res.returncode == 0 else {}


def ms(ns: float) -> str:
    return f"{ns / 1e6:8.3f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wan", default=DEFAULT_SPEC, metavar="SPEC")
    ap.add_argument("--seconds", type=int, default=5, help="length of each measurement")
    ap.add_argument("--pps", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    spec = parse_spec(args.wan)
    build = wanem.build_dir(None)
    probe_bin = str(build / wanem.PROBE_BINARY)

    print(f"== detwan demo: 2-site lab, WAN = {args.wan}", flush=True)
    with measure.own_lab("--sites", "2", "--wan", args.wan) as lab:
        a, b = lab["sites"][0], lab["sites"][1]
        print(f"   site a host {a['best_effort_addr']}  ->  site b host {b['best_effort_addr']}"
              f"  (tunnel address {b['tunnel_addr']} reserved for detwan-gw)", flush=True)
        print(f"== probe: {args.pps} packets/s for {args.seconds} s, a -> b", flush=True)
        report = measure.probe(probe_bin, "a", b, pps=args.pps, count=args.pps * args.seconds)
        rate_bps = to_bps(spec["rate"]) if "rate" in spec else None
        tcp = None
        if rate_bps:
            print(f"== iperf3 TCP (kernel default congestion control) for {args.seconds} s",
                  flush=True)
            tcp = measure.iperf3_goodput_bps("a", b, seconds=args.seconds)
        counters = wanem_stats("ab")

    owd = report["owd_ns"]
    pct = report.get("owd_percentiles_ns", {})
    delay_ns = to_ns(spec.get("delay", "0"))
    jitter_ns = to_ns(spec.get("jitter", "0"))
    loss_cfg = spec.get("loss", "0%")
    rows = [
        # Jitter never reorders: a packet waits for its predecessor, which lifts the median a
        # little above the configured delay when packets are closer together than the jitter.
        ("one-way delay p50", f"{ms(delay_ns)} (+ FIFO hold)", ms(owd["p50"])),
        ("one-way delay min / max", f"{ms(delay_ns - jitter_ns)} / {ms(delay_ns + jitter_ns)}",
         f"{ms(owd['min'])} / {ms(owd['max'])}"),
        ("delay p1 .. p99", "uniform ± jitter",
         f"{ms(pct.get('p1', owd['min']))} .. {ms(owd['p99'])}"),
        ("reordered packets", "0 (jitter never reorders)", str(report["reordered"])),
        ("loss", loss_cfg, f"{100 * report['loss_rate']:.3f} % "
                           f"({report['lost']} of {report['sent']})"),
    ]
    if tcp:
        ceiling = rate_bps * TCP_PAYLOAD_SHARE
        rows.append((f"TCP goodput ({tcp['cc']})",
                     f"<= {ceiling / 1e6:.1f} Mbit/s (1448/1514 of {spec['rate']})",
                     f"{tcp['received_bps'] / 1e6:.1f} Mbit/s "
                     f"({100 * tcp['received_bps'] / ceiling:.1f} % of ceiling)"))
    if args.json:
        print(json.dumps({"spec": args.wan, "probe": report, "tcp": tcp, "wanem": counters}))
    else:
        print()
        print(f"{'what':<26} {'configured':<40} measured")
        print("-" * 100)
        for what, cfg, got in rows:
            print(f"{what:<26} {cfg:<40} {got}")
        be = counters.get("ab", {}).get("best_effort")
        if be:
            drops = ", ".join(f"{k} {v}" for k, v in be["dropped"].items() if v) or "none"
            soj = be["sojourn_ns"]
            print()
            print(f"detwan-wanem, a -> b best effort: offered {be['offered_packets']}, "
                  f"forwarded {be['forwarded_packets']}, dropped: {drops}; delay inside the "
                  f"emulator (probe + TCP, queueing included) p50 {ms(soj['p50'])}, "
                  f"p99 {ms(soj['p99'])}")
    print("\n== lab torn down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
