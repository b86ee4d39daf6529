"""What both allreduce comparisons run (tools/bench/compare-allreduce: lab/compare.py over an
emulated WAN path, lab/compare_wan.py through the gateways with --dataplane): the baselines' and
detwan-bench's binaries, one gloo or Open MPI sweep of one size in the lab's namespaces, their
JSON rows, and the errors of both command lines. Both modules import this one;
it imports neither.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import shlex
import shutil
import subprocess
import tempfile
from typing import Sequence

from lab import measure, wanem
from lab.runs import Runs, last_json, run_group, tail

GLOO_BINARY = "tools/bench/baselines/gloo-allreduce"
MPI_BINARY = "tools/bench/baselines/mpi-allreduce"
BENCH_BINARY = "tools/bench/detwan-bench"


class CompareError(Exception):
    """A comparison that cannot run (reported in its JSON)."""


class Terminated(Exception):
    """SIGTERM or SIGHUP during a comparison (raise_terminated): it stops and cleans up."""


def raise_terminated(signum, _frame):
    raise Terminated(f"signal {signum}")


# ---------------------------------------------------------------------------------- lab

def lab_sites(st: dict, nsites: int) -> list[dict]:
    sites = sorted(st["sites"], key=lambda s: s["index"])
    if len(sites) < nsites:
        raise CompareError(f"the lab has {len(sites)} sites, --sites {nsites} needs more")
    return sites[:nsites]


def rank_sites(sites: list[dict], per_site: int) -> list[dict]:
    return [s for s in sites for _ in range(per_site)]


def _host_ip(s: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", s["host_ns"], "ip", *args],
                          capture_output=True, text=True, timeout=10)


@contextlib.contextmanager
def without_tunnel_addrs(sites: list[dict]):
    """Removes each host's /32s in the tunnel prefix -- its tunnel address and the co-tenant's
    (topology.py) -- for the MPI run (see lab/compare.py's module doc) and restores them, with the routes
    that use them as their source (a dataplane lab's route into the tunnel: the kernel drops
    those with the address)."""
    removed = []
    try:
        for s in sites:
            for key in ("tunnel_addr", "cotenant_addr"):
                addr = s.get(key)
                if not addr:
                    continue
                routes = [line.split() for line in _host_ip(s, "-o", "route", "show").stdout
                          .splitlines() if f"src {addr}" in line]
                res = _host_ip(s, "addr", "del", f"{addr}/32", "dev", s["host_if"])
                if res.returncode == 0:
                    removed.append((s, addr, routes))
        yield sorted({s["name"] for s, _, _ in removed})
    finally:
        for s, addr, routes in reversed(removed):
            _host_ip(s, "addr", "add", f"{addr}/32", "dev", s["host_if"])
            for route in routes:
                _host_ip(s, "route", "replace", *route)


# ------------------------------------------------------------------------------- tools

def binaries(args) -> dict:
    build = wanem.build_dir(args.build_dir)

    def found(rel: str) -> str | None:
        p = build / rel
        return str(p) if os.access(p, os.X_OK) else None
    bench = args.bench_binary or os.environ.get("DETWAN_BENCH_BINARY") or found(BENCH_BINARY)
    return {"build": str(build), "gloo": found(GLOO_BINARY), "mpi": found(MPI_BINARY),
            "detwan": bench}


def sweep_args(size: int, args) -> list[str]:
    return ["-b", str(size), "-e", str(size), "-f", "2", "-n", str(args.iters), "-w",
            str(args.warmup), "-c", "1"]


def parse_row(doc: dict | None, size: int) -> tuple[dict | None, str | None]:
    if doc is None:
        return None, "printed no JSON"
    if doc.get("error"):
        return None, str(doc["error"])
    rows = [r for r in doc.get("rows", []) if r.get("size_bytes") in (size, size // 4 * 4)]
    if not rows:
        return None, f"no row for {size} bytes in its output"
    row = rows[0]
    if row.get("wrong", 0) != 0:
        return None, f"{row['wrong']} wrong elements"
    return row, None


def result(row: dict | None, reason: str | None, extra: dict | None = None) -> dict:
    out = {"row": row, "busbw": row.get("busbw_GBps") if row else None,
           "time_s": row["time_us"] / 1e6 if row else None,
           "wrong": row.get("wrong") if row else None,
           "reason": None if row else reason}
    out.update(extra or {})
    return out


def run_gloo(runs: Runs, args, binary: str, where: Sequence[dict | None], size: int,
             timeout_s: float) -> dict:
    """One gloo sweep of one size; where[r] is rank r's site (None: this namespace, loopback)."""
    store = pathlib.Path(tempfile.mkdtemp(prefix="gloo-store-", dir=runs.workdir))
    n = len(where)
    argvs = []
    for r, site in enumerate(where):
        addr = site["best_effort_addr"] if site else "127.0.0.1"
        cmd = [binary, "--rank", str(r), "--nranks", str(n), "--store", str(store),
               "--iface-addr", addr, "--timeout", str(int(timeout_s) + 1), "--json",
               *sweep_args(size, args)]
        argvs.append([str(measure.TESTBED), "exec", site["name"], "--", *cmd] if site else cmd)
    outs, killed = run_group(runs, argvs, timeout_s)
    shutil.rmtree(store, ignore_errors=True)
    if killed:
        return result(None, killed)
    row, reason = parse_row(last_json(outs[0][1]), size)
    if row is None:
        errs = [tail(e, 300) for rc, _, e in outs if rc]
        reason = f"{reason}; " + " | ".join(errs) if errs else reason
    return result(row, reason)


def write_agent(runs: Runs, sites: list[dict]) -> pathlib.Path:
    """plm_rsh_agent: `agent HOST CMD...` runs CMD in HOST's site namespace."""
    agent = runs.workdir / "mpi-agent"
    cases = "\n".join(f"  {s['best_effort_addr']}) ns={shlex.quote(s['host_ns'])} ;;"
                      for s in sites)
    agent.write_text(f"""#!/bin/sh
# Written by compare-allreduce: Open MPI's remote-launch agent for the lab (no ssh: site namespaces).
host="$1"; shift
case "$host" in
{cases}
  *) echo "mpi-agent: no lab site has address $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" sh -c "$*"
""")
    agent.chmod(0o755)
    return agent


def mpirun_argv(runs: Runs, args, binary: str, sites: list[dict] | None, nranks: int,
                size: int) -> list[str]:
    common = ["mpirun", "--allow-run-as-root", "-np", str(nranks), "--mca", "btl", args.mpi_btl,
              "--mca", "orte_base_help_aggregate", "0"]
    if sites is None:
        return [*common, "--oversubscribe", "--host", f"localhost:{nranks}", "--mca",
                "btl_tcp_if_include", "lo", binary, "--json", *sweep_args(size, args)]
    agent = write_agent(runs, sites)
    hosts = ",".join(f"{s['best_effort_addr']}:{args.ranks_per_site}" for s in sites)
    nets = ",".join(s["lan_prefix"] for s in sites)
    return [str(measure.TESTBED), "exec", sites[0]["name"], "--", *common, "--host", hosts,
            "--mca", "plm_rsh_agent", str(agent), "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "btl_tcp_if_include", nets, "--mca", "oob_tcp_if_include", nets,
            binary, "--json", *sweep_args(size, args)]


def run_mpi(runs: Runs, args, binary: str | None, sites: list[dict] | None, nranks: int,
            size: int, timeout_s: float) -> dict:
    if binary is None:
        return result(None, "mpi-allreduce not built (libopenmpi-dev missing at meson setup)")
    if shutil.which("mpirun") is None:
        return result(None, "mpirun not installed (openmpi-bin)")
    argv = mpirun_argv(runs, args, binary, sites, nranks, size)
    outs, killed = run_group(runs, [argv], timeout_s)
    if killed:
        return result(None, killed)
    rc, out, err = outs[0]
    row, reason = parse_row(last_json(out), size)
    if row is None:
        reason = f"{reason} (mpirun exit {rc}): {tail(err)}"
    return result(row, reason)
