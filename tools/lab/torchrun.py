"""Launches N ranks of a Python script as real processes with torchrun's variables (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus DETWAN_SITE and the
PYTHONPATH that makes `import detwan.torch` work from the build tree, bounded in time; shared
by tests/torch, tests/lab/test_torch_lab.py and tools/bench/train-cross-site."""
from __future__ import annotations

import os
import pathlib
import random
import socket
import subprocess
import sys
import time

from lab.agent import free_port

REPO = pathlib.Path(__file__).resolve().parents[2]


def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("DETWAN_BUILD_DIR") or REPO / "build").resolve()


def python_path() -> str:
    """What makes `import detwan.torch` work from a build tree (README, docs/pytorch.md)."""
    return str(build_dir() / "collectives" / "torch" / "python")


def extension_problem() -> str | None:
    pkg = build_dir() / "collectives" / "torch" / "python" / "detwan" / "torch"
    if not list(pkg.glob("_C*.so")):
        return (f"the torch backend is not built in {build_dir()} (meson -Dtorch=enabled needs "
                "python3-torch and libtorch-dev: tools/install-deps)")
    return None


def store_port() -> int:
    """A free port for rank 0's rendezvous store, below the kernel's ephemeral range (32768 and
    up): a port bind(0) hands out is ephemeral, and another process's outgoing connection once
    took one between its choice and the store's bind ("Address already in use")."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port
    return free_port()


def launch(script: list[str], sites: list[str], env: dict | None = None,
           prefix: list[list[str]] | None = None, master_addr: str = "127.0.0.1",
           master_port: int | None = None, log_dir: pathlib.Path | None = None,
           rank_env: list[dict] | None = None) -> list[subprocess.Popen]:
    """One process per entry of `sites` (rank i runs in site sites[i]); `prefix[i]` is put
    before the interpreter (e.g. `ip netns exec NS`); rank_env[i] adds rank i's variables."""
    world = len(sites)
    port = master_port or store_port()
    local_rank: dict[str, int] = {}
    procs = []
    for rank, site in enumerate(sites):
        lr = local_rank.get(site, 0)
        local_rank[site] = lr + 1
        e = dict(os.environ)
        e.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(lr),
                  "LOCAL_WORLD_SIZE": str(sites.count(site)), "MASTER_ADDR": master_addr,
                  "MASTER_PORT": str(port), "DETWAN_SITE": site,
                  "PYTHONPATH": os.pathsep.join(
                      [python_path()] + ([os.environ["PYTHONPATH"]]
                                         if os.environ.get("PYTHONPATH") else [])),
                  "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
        e.update(env or {})
        e.update(rank_env[rank] if rank_env else {})
        cmd = (prefix[rank] if prefix else []) + ["/usr/bin/python3", *script]
        if log_dir:
            # The rank keeps its own copy of the descriptor; ours is closed at once.
            with open(log_dir / f"rank-{rank}.log", "w") as log:
                procs.append(subprocess.Popen(cmd, env=e, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL))
        else:
            procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    return procs


def wait_all(procs: list[subprocess.Popen], timeout_s: float) -> list[int | None]:
    """Exit codes; a process still running at the deadline is killed (None)."""
    deadline = time.monotonic() + timeout_s
    codes: list[int | None] = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return codes


if __name__ == "__main__":
    sys.exit("import this module")
