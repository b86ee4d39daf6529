"""Slurm across owners (issue 32, item 7): `tools/testbed up --sites 3 --owners a:x,b:y,c:z
--wan-owner w --dataplane uring --agents --slurm`. The SPANK plugin runs unchanged: every node
asks one agent, the first site's owner's (x, over HTTPS with x's CA and a tenant's token), which
aggregates across the carrier w and owner z. A job on site-a and site-c gets one reservation on
both nodes, federated across x, w and z and active when the tasks start; when the job ends it is
terminated in every domain. States and counters only.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import labutil

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import slurm  # noqa: E402


@pytest.fixture(scope="module")
def fedslurm(wanem_ready):
    problem = slurm.check_prerequisites(labutil.build_dir())
    if problem:
        pytest.fail(problem)
    with labutil.lab("--sites", "3", "--owners", "a:x,b:y,c:z", "--wan-owner", "w",
                     "--dataplane", "uring", "--agents", "--slurm",
                     "--wan", "delay=2ms,rate=200mbit") as st:
        yield st


def agent_env(st: dict, domain: str) -> dict:
    a = next(a for a in st["agents"] if a["domain"] == domain)
    return {**os.environ, "DETWAN_AGENT": a["url"], "DETWAN_AGENT_CA": a["ca"],
            "DETWAN_AGENT_TOKEN_FILE": a["token_file"]}


def reservations(st: dict, domain: str) -> list[dict]:
    res = subprocess.run([str(labutil.build_dir() / "tools" / "detwanctl" / "detwanctl"), "list",
                          "--json"], capture_output=True, text=True, timeout=60,
                         env=agent_env(st, domain), stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["reservations"]


@pytest.mark.netns
def test_a_job_on_two_owners_sites_rides_one_federated_reservation(fedslurm):
    res = subprocess.run(["srun", "-w", "site-a,site-c", "-N2", "--detwan-rate=20mbit", "bash",
                          "-c", "echo $DETWAN_SITE $DETWAN_RESERVATION $DETWAN_AGENT"],
                         capture_output=True, text=True, timeout=180, env=slurm.client_env(),
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    seen = sorted(line.split() for line in res.stdout.strip().splitlines())
    assert [s[0] for s in seen] == ["a", "c"], seen
    rid = seen[0][1]
    assert seen[1][1] == rid, seen  # both nodes ride the same reservation
    assert all(s[2].startswith("https://") for s in seen), seen
    # It was federated across x, w and z (the aggregator's record), and the job's end
    # terminated it in every domain.
    fed = next(r for r in reservations(fedslurm, "x") if r["id"] == rid)
    assert fed.get("federated") and [s["domain"] for s in fed["segments"]] == ["x", "w", "z"]
    deadline = time.monotonic() + 30
    while True:
        fed = next(r for r in reservations(fedslurm, "x") if r["id"] == rid)
        held = {d: [r for r in reservations(fedslurm, d) if not r.get("federated") and
                    r["state"] in ("held", "committed", "provisioned", "released")]
                for d in ("x", "w", "z")}
        if fed["state"] == "terminated" and not any(held.values()):
            break
        assert time.monotonic() < deadline, (fed["state"], held)
        time.sleep(0.3)
