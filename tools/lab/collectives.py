"""detwan collectives over the lab: `detwan-bench COLLECTIVE --lab ...` execs
`python3 -m lab.collectives COLLECTIVE ...` (this module).

It brings up a lab of --sites sites whose every WAN path runs detwan-wanem with delay = RTT/2
each way, the loss, the rate and a drop-tail queue of max(BDP, 128 KiB) (transport.wan_spec),
or with --no-setup reuses the lab that is up. It then starts --ranks-per-site ranks in each
site's host namespace (`tools/testbed exec SITE -- detwan-bench COLLECTIVE --rank R --nranks N
--id tcp://<site a's best-effort address>:PORT --site SITE --wan-rate RATE ...`; ranks are
numbered site by site, rank 0 in site a hosts the rendezvous), and forwards rank 0's report:
the nccl-tests table as it streams, or (--json) its JSON object with "path" (rate_bps, rtt_ns,
loss) and "lab" added. When a rank fails the others get a short grace period to report, then
every rank is stopped; so is everything on a timeout or SIGINT/SIGTERM/SIGHUP, and a lab this
run brought up is always torn down (one it found running is left as it was).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time

from lab import measure, reserve
from lab.transport import (MTU_BYTES, BenchError, bench_binary, running_lab, stop,
                           wan_spec)
from lab.units import (arg_type, parse_duration_ns, parse_fraction, parse_rate_bps,
                       parse_size_bytes)

PROG = "detwan-bench COLLECTIVE --lab"
COLLECTIVES = ("allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall",
               "sendrecv")
MIN_QUEUE_BYTES = 128 * 1024
GRACE_S = 5.0
SCHEMA = "detwan-bench-collective"

# Options handed to every rank unchanged: (flags, argparse keyword arguments).
PASS_THROUGH: list[tuple[tuple[str, ...], dict]] = [
    (("-b", "--minbytes"), {}), (("-e", "--maxbytes"), {}), (("-f", "--stepfactor"), {}),
    (("-i", "--stepbytes"), {}), (("-d", "--datatype"), {}), (("-o", "--op"), {}),
    (("-r", "--root"), {}), (("-n", "--iters"), {}), (("-w", "--warmup_iters"), {}),
    (("-c", "--check"), {}), (("-a", "--algo"), {}), (("--chunk",), {}),
    (("--op-timeout",), {}), (("--intra-backend",), {}), (("--inter-backend",), {}),
    (("-m", "--agg_iters"), {}), (("--inflight",), {}),
]


class Interrupted(Exception):
    pass


def log(msg: str) -> None:
    print(f"[collectives] {msg}", file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    p.add_argument("collective", choices=COLLECTIVES)
    p.add_argument("--sites", type=int, help="lab sites, 2..4 (default 2, or as many as "
                   "--site-sizes names)")
    p.add_argument("--ranks-per-site", type=int, default=2, help="ranks in each site (default 2)")
    p.add_argument("--site-sizes", type=arg_type(parse_site_sizes),
                   help="ranks of sites a, b, ... instead, e.g. 3,1 (as many as --sites)")
    p.add_argument("--rate", type=arg_type(parse_rate_bps), default=parse_rate_bps("200mbit"),
                   help="rate of every WAN path (default 200mbit)")
    p.add_argument("--rtt", type=arg_type(parse_duration_ns), default=parse_duration_ns("20ms"),
                   help="round-trip time (delay = rtt/2 each way; default 20ms)")
    p.add_argument("--loss", type=arg_type(parse_fraction), default=0.0,
                   help="random loss each way, e.g. 0.1%%")
    p.add_argument("--mtu", type=int, help="IP MTU of the lab's links and of detwan's datagrams, "
                   "e.g. 9000 (default 1500; with --no-setup: the running lab's)")
    p.add_argument("--queue", type=arg_type(parse_size_bytes),
                   help="emulator queue (default max(BDP, 128k))")
    p.add_argument("--wan-rate", type=arg_type(parse_rate_bps),
                   help="detwan's reserved rate per site pair and direction (default: the path "
                   "rate)")
    p.add_argument("--best-effort", action="store_true",
                   help="give the library no reserved rate (--wan-rate 0)")
    p.add_argument("--dataplane", choices=("uring", "dpdk"),
                   help="own lab: gateways of this backend and an agent (--dataplane X --agents), "
                   "so that --reserve can run the ranks' inter-site traffic through tunnels")
    p.add_argument("--reserve", type=arg_type(parse_rate_bps),
                   help="reserve RATE each way between every pair of sites through the lab's "
                   "agent for the run (released afterwards); the ranks get DETWAN_RESERVATION "
                   "and DETWAN_AGENT and send through the tunnels")
    p.add_argument("--reserve-burst", type=arg_type(parse_size_bytes),
                   help="the reservations' max_burst_bytes (default: the agent's)")
    p.add_argument("--reservation", help="ride existing reservation(s) 'r-3[,r-4]' instead")
    p.add_argument("--port", type=int, default=5500, help="rendezvous port of rank 0")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds for the whole run")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-setup", action="store_true", help="use the lab that is up (else fail)")
    p.add_argument("--build-dir")
    p.add_argument("--bench-binary")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--deterministic", action="store_true", help="passed to every rank")
    g = p.add_argument_group("passed to every rank (see `detwan-bench COLLECTIVE --help`)")
    for flags, kwargs in PASS_THROUGH:
        g.add_argument(*flags, dest="pt_" + flags[-1].lstrip("-").replace("-", "_"), **kwargs)
    return p


def pass_through(args) -> list[str]:
    out = []
    for flags, _ in PASS_THROUGH:
        value = getattr(args, "pt_" + flags[-1].lstrip("-").replace("-", "_"))
        if value is not None:
            out += [flags[-1], str(value)]
    if args.deterministic:
        out.append("--deterministic")
    return out


def parse_site_sizes(text: str) -> list[int]:
    """"3,1" -> [3, 1]: every size a whole number >= 1."""
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ValueError(f"'{text}' is not a list of rank counts >= 1 such as 3,1")
    return sizes


def rank_plan(st: dict, nsites: int, per_site: int,
              sizes: list[int] | None = None) -> list[dict]:
    """Ranks numbered site by site over sites a, b, ... of the lab's site list: per_site in
    each, or sizes[i] in site i."""
    sites = sorted(st["sites"], key=lambda s: s["index"])
    if len(sites) < nsites:
        raise BenchError(f"the lab has {len(sites)} sites; --sites {nsites} needs more")
    sizes = sizes or [per_site] * nsites
    if len(sizes) != nsites:
        raise BenchError(f"--site-sizes gives {len(sizes)} sites, --sites {nsites}")
    plan: list[dict] = []
    for s, size in enumerate(sizes):
        plan += [{"rank": len(plan) + j, "site": sites[s]} for j in range(size)]
    return plan


def rank_command(args, binary: str, plan: list[dict], entry: dict, wan_rate_bps: int | None,
                 json_out: bool) -> list[str]:
    """wan_rate_bps None: the rank rides reservations (the rate is the agent's)."""
    root_addr = plan[0]["site"]["best_effort_addr"]
    argv = [binary, args.collective, "--rank", str(entry["rank"]), "--nranks", str(len(plan)),
            "--id", f"tcp://{root_addr}:{args.port}", "--site", entry["site"]["name"],
            *(["--wan-rate", f"{wan_rate_bps}bit"] if wan_rate_bps is not None else []),
            *pass_through(args)]
    if json_out:
        argv.append("--json")
    return [str(measure.TESTBED), "exec", entry["site"]["name"], "--", *argv]


def _raise_interrupted(signum, _frame):
    raise Interrupted(f"signal {signum}")


def rank_env(entry: dict, rtt_ns: int, mtu_bytes: int, riding: dict | None,
             secret: str) -> dict:
    """The rank's environment; riding: {"ids": "r-1,r-2", "host_urls": {site: agent URL}};
    secret: the job's bootstrap secret (the fixed-address rendezvous refuses ranks without it)."""
    env = dict(os.environ)
    env["DETWAN_BOOTSTRAP_SECRET"] = secret
    # The path's RTT for the cost model of --deterministic (which must not measure it).
    env.setdefault("DETWAN_WAN_RTT", f"{max(rtt_ns // 1000, 1)}us")
    env["DETWAN_MTU"] = str(mtu_bytes)  # the datagrams fill the lab's MTU, no more
    if riding:
        env["DETWAN_RESERVATION"] = riding["ids"]
        env["DETWAN_AGENT"] = riding["host_urls"][entry["site"]["name"]]
    return env


def run_ranks(args, binary: str, plan: list[dict], wan_rate_bps: int | None, rtt_ns: int,
              mtu_bytes: int, riding: dict | None = None) -> tuple[str, list, str]:
    """Starts every rank, forwards (table) or collects (JSON) rank 0's stdout, stops every rank
    on failure, timeout or signal. Returns (rank 0's stdout, exit statuses, error or "")."""
    procs, logs = [], []
    out = b""
    error = ""
    saved = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
    secret = secrets.token_hex(16)  # one per job: the ranks' bootstrap secret
    try:
        for entry in plan:
            cmd = rank_command(args, binary, plan, entry, wan_rate_bps,
                               args.json or entry["rank"] != 0)
            err = tempfile.TemporaryFile()
            logs.append(err)
            procs.append(subprocess.Popen(
                cmd, stdout=subprocess.PIPE if entry["rank"] == 0 else subprocess.DEVNULL,
                stderr=err, stdin=subprocess.DEVNULL,
                env=rank_env(entry, rtt_ns, mtu_bytes, riding, secret)))
        first = rank_command(args, binary, plan, plan[0], wan_rate_bps, args.json)
        log(f"{len(procs)} ranks, rank 0: {' '.join(first[4:])}")
        deadline = time.monotonic() + args.timeout
        failed_at = None
        assert procs[0].stdout is not None  # rank 0 writes to a pipe (above)
        fd = procs[0].stdout.fileno()
        open_out = True
        while True:
            if open_out:
                ready, _, _ = select.select([fd], [], [], 0.2)
                if ready:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        open_out = False
                    elif args.json:
                        out += chunk
                    else:
                        sys.stdout.buffer.write(chunk)
                        sys.stdout.flush()
            else:
                time.sleep(0.2)
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) and not open_out:
                break
            now = time.monotonic()
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = now
            if failed_at is not None and now - failed_at > GRACE_S:
                if any(c is None for c in codes):
                    error = error or "a rank failed: stopped the others"
                for p in procs:
                    stop(p)
            if now > deadline:
                error = f"timed out after {args.timeout:g} s: stopped every rank"
                for p in procs:
                    stop(p)
                deadline = float("inf")
    finally:
        for p in procs:
            stop(p)
        for s, h in saved.items():
            signal.signal(s, h)
    codes = [p.returncode for p in procs]
    for entry, code, err in zip(plan, codes, logs):
        err.seek(0)
        text = err.read().decode(errors="replace").strip()
        err.close()
        if code != 0 or text:
            sys.stderr.write(f"--- rank {entry['rank']} (site {entry['site']['name']}, "
                             f"exit {code}) ---\n{text[-4000:]}\n")
    return out.decode(errors="replace"), codes, error


def lab_header(args, path: dict, reused: bool, nranks: int) -> str:
    shape = ("+".join(map(str, args.site_sizes)) if args.site_sizes else
             f"{args.sites} sites x {args.ranks_per_site}")
    return (f"# lab: {shape} ranks ({nranks}), WAN path "
            f"'{path['spec']}', MTU {path['mtu_bytes']} ({'reused' if reused else 'own'} lab)\n")


def run(args, binary: str, st: dict, path: dict, reused: bool) -> int:
    if args.reserve or args.reservation:
        agents = st.get("agents") or []
        if not agents:
            raise BenchError("--reserve/--reservation need a lab with an agent "
                             "(tools/testbed up --dataplane uring --agents, or --dataplane here)")
        if args.reservation:
            return run_planned(args, binary, st, path, reused,
                               {"ids": args.reservation, "host_urls": agents[0]["host_urls"]},
                               None)
        names = [s["name"] for s in sorted(st["sites"], key=lambda s: s["index"])][:args.sites]
        with reserve.reserved_pairs(agents[0]["url"], names, args.reserve,
                                    burst_bytes=args.reserve_burst) as made:
            log("reserved " + ", ".join(f"{r['id']} ({r['src']}<->{r['dst']}, bound "
                                        f"{r['bound']['max_latency_ns'] / 1e6:.2f} ms)"
                                        for r in made))
            riding = {"ids": ",".join(r["id"] for r in made),
                      "host_urls": agents[0]["host_urls"]}
            return run_planned(args, binary, st, path, reused, riding, made)
    return run_planned(args, binary, st, path, reused, None, None)


def run_planned(args, binary: str, st: dict, path: dict, reused: bool, riding: dict | None,
                made: list[dict] | None) -> int:
    plan = rank_plan(st, args.sites, args.ranks_per_site, args.site_sizes)
    wan_rate = None if riding else (0 if args.best_effort else (args.wan_rate or path["rate_bps"]))
    if not args.json:
        sys.stdout.write(lab_header(args, path, reused, len(plan)))
        if riding:
            sys.stdout.write(f"# riding reservation(s) {riding['ids']} through the gateways\n")
        sys.stdout.flush()
    out, codes, error = run_ranks(args, binary, plan, wan_rate, path["rtt_ns"],
                                  path["mtu_bytes"], riding)
    failures = [f"rank {e['rank']} exited {c}" for e, c in zip(plan, codes) if c != 0]
    path_doc = {"rate_bps": path["rate_bps"], "rtt_ns": path["rtt_ns"], "loss": path["loss"],
                "mtu_bytes": path["mtu_bytes"]}
    lab_doc = {"reused": reused, "spec": path["spec"], "sites": args.sites,
               "ranks_per_site": None if args.site_sizes else args.ranks_per_site,
               "site_sizes": args.site_sizes or [args.ranks_per_site] * args.sites,
               "detwan_wan_rate_bps": wan_rate,
               "path": "tunnel" if riding else "best_effort" if not wan_rate else "rate",
               "reservations": [reserve.summary(r) for r in made] if made else
               (riding["ids"].split(",") if riding else [])}
    if args.json:
        try:
            doc = json.loads(out)
        except json.JSONDecodeError:
            doc = {"schema": SCHEMA, "version": 1, "collective": args.collective,
                   "nranks": len(plan), "rows": [],
                   "error": "rank 0 printed no report" + (f" ({', '.join(failures)})"
                                                          if failures else "")}
        doc["path"] = path_doc
        doc["lab"] = lab_doc
        if error and not doc.get("error"):
            doc["error"] = error
        print(json.dumps(doc, indent=2))
    elif error:
        print(f"# error: {error}")
    if error:
        log(error)
    if failures:
        log(", ".join(failures))
    return 0 if not failures and not error else 1


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.sites = args.sites or (len(args.site_sizes) if args.site_sizes else 2)
    if args.build_dir:
        os.environ["DETWAN_BUILD_DIR"] = str(pathlib.Path(args.build_dir).resolve())
    try:
        if args.ranks_per_site < 1:
            raise BenchError("--ranks-per-site must be >= 1")
        if args.site_sizes and len(args.site_sizes) != args.sites:
            raise BenchError(f"--site-sizes names {len(args.site_sizes)} sites, --sites "
                             f"{args.sites}")
        binary = bench_binary(args.bench_binary)
        if os.geteuid() != 0:
            raise BenchError("must run as root (network namespaces)")
        existing = measure.lab_present()
        if existing or args.no_setup:
            if not existing:
                raise BenchError("--no-setup: no lab is up (tools/testbed up ...)")
            if not args.no_setup:
                raise BenchError(f"a lab is already up ({existing}): pass --no-setup to use it, "
                                 "or run tools/testbed down")
            st, path = running_lab()
            if args.mtu is not None and args.mtu != path["mtu_bytes"]:
                raise BenchError(f"--mtu {args.mtu}: the running lab's links have MTU "
                                 f"{path['mtu_bytes']}")
            spec = path["spec"]
            log(f"using the running lab ({existing}): '{spec}'")
            return run(args, binary, st, path, reused=True)
        if not 2 <= args.sites <= 4:
            raise BenchError(f"--sites {args.sites}: the lab has 2..4 sites")
        bdp = int(args.rate * args.rtt / 8e9)
        queue = args.queue or max(bdp, MIN_QUEUE_BYTES)
        spec = wan_spec(args.rate, args.rtt, args.loss, queue)
        mtu = args.mtu or MTU_BYTES
        up = ["--sites", str(args.sites), "--wan", spec, "--seed", str(args.seed),
              "--mtu", str(mtu)]
        if args.dataplane:
            up += ["--dataplane", args.dataplane, "--agents"]
        if args.build_dir:
            up += ["--build-dir", args.build_dir]
        log(f"tools/testbed up {' '.join(up)}")
        with measure.own_lab(*up) as st:
            path = {"rate_bps": args.rate, "rtt_ns": args.rtt, "loss": args.loss, "spec": spec,
                    "mtu_bytes": mtu}
            status = run(args, binary, st, path, reused=False)
        log("lab removed")
        return status
    except (BenchError, RuntimeError, subprocess.TimeoutExpired, Interrupted, reserve.ReserveError,
            measure.Terminated) as e:  # own_lab's signal exception
        print(f"{PROG}: {e}", file=sys.stderr)
        if args.json:
            print(json.dumps({"schema": SCHEMA, "version": 1, "collective": args.collective,
                              "rows": [], "path": None, "error": str(e)}))
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
