"""The multi-site demo (README's main job): a detwan tunnel, reserved through the control agent,
next to best effort on one jittery, congested WAN path, measured side by side by detwan-perf.

Brings up a 2-site lab (`tools/testbed up --dataplane uring --agents`) whose WAN path, emulated
by detwan-wanem, has delay, uniform jitter, random loss, a rate limit and cross traffic filling
most of it. Each site's gateway runs detwan-gw without tunnels; the lab's detwan-agent is asked
(`detwanctl reserve --provision`) for the rate between the sites with a latency variation below
the WAN's jitter, so it computes the path's bound, chooses on-time delivery and programs the
tunnel on both gateways (reserved rate, time slots, release at the bound; the emulator gives the
tunnel's DSCP the reserved class, as reserved WAN capacity would). The tunnel is authenticated
and encrypted (the agent's default, AES-256-GCM, a key drawn for the reservation): the demo
measures the normal case, and checks that both gateways sealed and opened the traffic. The
reservation is printed with its computed bound and cipher. Site b's host runs `detwan-perf server`; site
a's host runs `detwan-perf client B_TUNNEL --compare B_BEST_EFFORT`: one schedule, each packet
sent to both addresses back to back, so
  * the primary path goes through both gateways and the tunnel,
  * the compare path is kernel-routed over the same WAN path,
and detwan-perf prints one-way delay, PDV, IPDV, RFC 3550 jitter and loss of both with their
ratios. The demo adds the receiving gateway's own egress histogram and writes, into --out
(default ./detwan-demo): summary.txt (what was printed), perf.json (detwan-perf's JSON,
docs/perf-json.md) and delay.svg (delay over time and delay CDF of both paths). The lab is
always torn down.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from lab import agent, gateway, measure, perf  # noqa: E402

DEFAULT_SPEC = "delay=10ms,jitter=2ms,jitter-dist=uniform,loss=0.1%,rate=200mbit,cross=80%"
# Asked of the agent: well below the WAN's 4 ms of jitter, so it must deliver on time.
MAX_LATENCY_VARIATION = "1ms"
MAX_LATENCY = "40ms"
# detwan-perf measures host to host: the gateways' bound (gateway a -> release at b) plus the
# hops host -> gateway and gateway -> host and the hosts' own scheduling. The application's
# bound, counted as "beyond bound", is the tunnel's plus this margin.
APP_MARGIN_NS = 2_000_000


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def reserve(ctl: list[str], url: str, rate: str) -> tuple[dict, str]:
    """detwanctl reserve --provision: the reservation's JSON and its human description."""
    args = ["--agent", url, "reserve", "--from", "a", "--to", "b", "--rate", rate,
            "--max-latency", MAX_LATENCY, "--max-latency-variation", MAX_LATENCY_VARIATION,
            "--duration", "1h", "--provision"]
    res = subprocess.run([*ctl, *args, "--json"], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise RuntimeError(f"detwanctl reserve failed (exit {res.returncode}): "
                           f"{res.stderr.strip() or res.stdout.strip()}")
    r = json.loads(res.stdout)
    shown = subprocess.run([*ctl, "--agent", url, "show", r["id"]], capture_output=True,
                           text=True, timeout=60)
    return r, shown.stdout


def run(args, out_dir: pathlib.Path, say) -> dict:
    say(f"== detwan demo: 2 sites, WAN = {args.wan}")
    say("   bringing up the lab with detwan-gw (io_uring) in each gateway and detwan-agent; "
        "the gateways start without tunnels")
    ctl = agent.ctl_command(pathlib.Path(os.environ.get("DETWAN_BUILD_DIR") or
                                         pathlib.Path(__file__).resolve().parents[2] / "build"))
    with measure.own_lab("--sites", "2", "--dataplane", "uring", "--agents", "--wan",
                         args.wan) as lab:
        url = lab["agents"][0]["url"]
        say(f"== detwanctl --agent {url} reserve --from a --to b --rate {args.tunnel_rate} "
            f"--max-latency {MAX_LATENCY} --max-latency-variation {MAX_LATENCY_VARIATION} "
            "--duration 1h --provision")
        reservation, shown = reserve(ctl, url, args.tunnel_rate)
        say(shown.rstrip())
        tunnel_id = reservation["tunnel_id"]
        bound_ns = reservation["bound"]["playout_bound_ns"] or reservation["bound"]["max_latency_ns"]
        b = lab["sites"][1]
        say(f"== detwan-perf for {args.seconds} s at {args.pps} packets/s: a -> "
            f"{b['tunnel_addr']} (tunnel) --compare {b['best_effort_addr']} (best effort)")
        json_path = out_dir / "perf.json"
        with perf.server(b):
            text = perf.client("a", b["tunnel_addr"], [
                "--compare", b["best_effort_addr"], "-t", str(args.seconds), "--pps",
                str(args.pps), "--bound", f"{bound_ns + APP_MARGIN_NS}ns", "--plot",
                str(out_dir / "delay.svg"),
                "--json-file", str(json_path)], seconds=args.seconds, json_output=False)
        gw_rx = gateway.tunnel_counters(measure.gateway_stats("b"), tunnel_id)
        auth = {s: gateway.find_tunnel(measure.gateway_stats(s), tunnel_id)["auth"]
                for s in ("a", "b")}
        wan_stats = measure.wanem_stats("ab", 1)
    if reservation.get("encrypt") in (None, "none") or not auth["a"] or not auth["b"] or \
            auth["a"]["sealed_packets"] == 0 or auth["b"]["opened_packets"] == 0:
        raise RuntimeError(f"the demo's tunnel is not authenticated: reservation encrypt "
                           f"{reservation.get('encrypt')}, gateways {auth}")
    say("")
    # The client's table (its live per-interval lines, "[  0.00-  1.00 s] ...", are left out).
    say("\n".join(line for line in text.rstrip().splitlines()
                   if not re.match(r"\[\s*[\d.]+-\s*[\d.]+ s\] ", line)))
    owd, wan = gw_rx["one_way_delay_ns"], gw_rx["wan_delay_ns"]
    say("")
    say(f"gateway b, tunnel {tunnel_id} egress (tx timestamp at gateway a -> release at b), "
        f"bound {ms(bound_ns)} (computed by the agent):")
    say(f"  after playout   min {ms(owd['min'])}  p50 {ms(owd['p50'])}  p99 {ms(owd['p99'])}  "
        f"p99.9 {ms(owd['p99_9'])}  max {ms(owd['max'])}  ({owd['count']} packets)")
    say(f"  WAN, before     min {ms(wan['min'])}  p50 {ms(wan['p50'])}  p99 {ms(wan['p99'])}  "
        f"p99.9 {ms(wan['p99_9'])}  max {ms(wan['max'])}")
    say(f"  released {gw_rx['rx_released']}, late {gw_rx['rx_late']} (released at once, "
        f"counted), dropped in playout {gw_rx['rx_dropped']}")
    say(f"  {auth['b']['cipher']}: gateway a sealed {auth['a']['sealed_packets']}, gateway b "
        f"opened {auth['b']['opened_packets']}, refused {sum(auth['b']['drops'].values())}")
    say("")
    say("The tunnel's delay sits at the bound: the receiving gateway holds each packet until "
        "its\nsender timestamp + bound, which absorbs the WAN's jitter and the queueing behind "
        "cross\ntraffic; best effort carries all of it. What remains on the tunnel is the "
        "gateways' and\nhosts' own scheduling on this shared machine.")
    say(f"\n== written to {out_dir}: summary.txt, perf.json, delay.svg (delay over time, CDF)")
    return {"spec": args.wan, "bound_ns": bound_ns, "reservation": reservation,
            "perf": json.loads(json_path.read_text()),
            "gateway_b_tunnel": gw_rx, "tunnel_auth": auth, "wanem": wan_stats}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wan", default=DEFAULT_SPEC, metavar="SPEC")
    ap.add_argument("--seconds", type=int, default=10, help="length of the measurement")
    ap.add_argument("--pps", type=int, default=1000, help="test packets/s on each path")
    ap.add_argument("--tunnel-rate", default=gateway.DEFAULT_TUNNEL_RATE)
    ap.add_argument("--out", default="detwan-demo", help="directory for the summary and plot")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = io.StringIO()

    def say(line: str) -> None:
        summary.write(line + "\n")
        if not args.json:
            print(line, flush=True)

    try:
        result = run(args, out_dir, say)
    finally:
        (out_dir / "summary.txt").write_text(summary.getvalue())
    if args.json:
        print(json.dumps(result))
    else:
        print("\n== lab torn down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
