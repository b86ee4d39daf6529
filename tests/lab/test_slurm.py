"""Slurm in the lab (`tools/testbed up --dataplane uring --agents --slurm`): real slurmctld,
slurmd and munged; jobs with --detwan-rate reserve their WAN path through the agent before their
tasks start (the SPANK plugin spank_detwan.so, docs/slurm.md) and release it however they end.

  * a job runs with its reservation: every task sees DETWAN_SITE, DETWAN_AGENT and
    DETWAN_RESERVATION, the reservation is provisioned and its tunnel active when the task
    starts (the task asks the agent), traffic crosses the tunnel; afterwards it is terminated;
  * the same through sbatch (the batch script and its srun steps ride one reservation);
  * a cancelled job (scancel) and a timed-out job (--time=1) release theirs;
  * a job whose rate cannot be admitted is refused with the agent's reason on its stderr and
    holds nothing; a bad --detwan-rate never reaches the queue;
  * concurrent jobs whose rates sum beyond the link's reservable capacity: the agent never has
    more reserved on the link than it may, and every refused job failed with its reason;
  * a failed `up --slurm` leaves no daemon, key, spool directory or /etc/slurm link behind.

One 2-site lab (module-scoped, always torn down). States and counters only, no absolute times.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

import labutil
from labutil import tb

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import agent, slurm, topology  # noqa: E402

WAN = "delay=5ms,rate=200mbit"   # link ab1: 200 Mbit/s, 90 % (180 Mbit/s) reservable
RESERVABLE_BPS = 180_000_000
FINAL = ("terminated", "failed")


def ctl(*args: str) -> dict:
    res = subprocess.run([str(labutil.build_dir() / agent.CTL_BINARY), "--json", *args],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, DETWAN_AGENT=os.environ["DETWAN_AGENT"]))
    assert res.returncode == 0, f"detwanctl {' '.join(args)}: {res.stdout}{res.stderr}"
    return json.loads(res.stdout)


def slurm_cmd(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                          env=slurm.client_env(), stdin=subprocess.DEVNULL)


def for_job(job_id: int) -> list[dict]:
    """The agent's reservations made for a job (request id slurm-JOB-a-b)."""
    want = f"slurm-{job_id}-a-b"
    return [r for r in ctl("list")["reservations"] if r["client_request_id"] == want]


def wait_for(predicate, what: str, timeout_s: float = 60.0, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def job_state(job_id: int) -> str:
    res = slurm_cmd("scontrol", "show", "job", "-o", str(job_id))
    m = re.search(r"JobState=(\S+)", res.stdout)
    return m.group(1) if m else "UNKNOWN"


def wait_job_end(job_id: int, timeout_s: float = 60.0) -> str:
    ended = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
    return wait_for(lambda: (s := job_state(job_id)) in ended and s, f"job {job_id} to end",
                    timeout_s)


def wait_released(job_id: int, timeout_s: float = 60.0) -> dict:
    """The job's one reservation once the epilog has terminated it."""
    def done():
        rs = for_job(job_id)
        return rs[0] if len(rs) == 1 and rs[0]["state"] in FINAL else None
    return wait_for(done, f"job {job_id}'s reservation to be terminated", timeout_s)


def sbatch(tmp_path: pathlib.Path, script: str, *args: str) -> tuple[int, pathlib.Path]:
    out = tmp_path / "job-%j.out"
    res = slurm_cmd("sbatch", "--parsable", f"--output={out}", *args, "--wrap", script)
    assert res.returncode == 0, res.stderr
    job_id = int(res.stdout.strip().split(";")[0])
    return job_id, tmp_path / f"job-{job_id}.out"


def nothing_booked() -> bool:
    return not [r for r in ctl("list")["reservations"] if r["state"] not in FINAL]


def lab_processes() -> list[str]:
    """Slurm and munge daemons of a lab (their command lines name the lab's run directory)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(labutil.RUN_DIR / "slurm").encode() in a for a in argv):
            found.append(b" ".join(argv).decode(errors="replace"))
    return found


# ------------------------------------------------------------------------ without root

def test_configuration_files(tmp_path):
    topo = topology.build(2, 1)
    conf = slurm.render_conf(topo, "10.99", 6817, 6818, "host1")
    assert "SlurmctldHost=host1(10.99.1.1)" in conf
    assert "NodeName=site-a NodeAddr=10.10.1.2" in conf and "NodeName=site-b NodeAddr=10.10.2.2" in conf
    assert f"AuthInfo=socket={slurm.munge_socket()}" in conf
    assert "ProctrackType=proctrack/linuxproc" in conf and "TaskPlugin=task/none" in conf
    assert "PrologFlags=Alloc" in conf
    plug = slurm.render_plugstack(pathlib.Path("/b"), topo, "10.99", 7800)
    assert plug.splitlines()[1] == (
        "required /b/control/slurm/spank_detwan.so detwanctl=/b/tools/detwanctl/detwanctl "
        "sites=site-a:a,site-b:b agent=http://127.0.0.1:7800 "
        "agents=a=http://10.99.1.1:7800,b=http://10.99.2.1:7800 "
        "duration=1h timeout=30")


@pytest.mark.netns
def test_slurm_needs_agents(wanem_ready):
    res = tb("up", "--dataplane", "uring", "--slurm")
    assert res.returncode == 2 and "--slurm needs --agents" in res.stderr
    res = tb("up", "--agents", "--slurm")
    assert res.returncode == 2 and "--dataplane" in res.stderr
    assert not labutil.namespaces()


def nothing_of_slurm_left() -> None:
    assert not labutil.namespaces()
    assert not lab_processes()
    assert not (labutil.RUN_DIR / "slurm").exists()
    assert not (slurm.ETC_CONF.is_symlink() and
                str(os.readlink(slurm.ETC_CONF)).startswith(str(labutil.RUN_DIR)))


@pytest.mark.netns
def test_failed_or_crashed_up_leaves_no_slurm_behind(wanem_ready):
    res = tb("up", "-q", "--dataplane", "uring", "--agents", "--slurm",
             env={"DETWAN_TESTBED_FAIL_AFTER": "start_slurm"})
    assert res.returncode == 1 and "injected failure after step start_slurm" in res.stderr
    nothing_of_slurm_left()
    # `up` dies right after starting Slurm, cleaning nothing; `down` finds it all.
    res = tb("up", "-q", "--dataplane", "uring", "--agents", "--slurm",
             env={"DETWAN_TESTBED_CRASH_AFTER": "start_slurm"})
    assert res.returncode == 70
    assert lab_processes()
    assert tb("down", "-q").returncode == 0
    nothing_of_slurm_left()


# ------------------------------------------------------------------------------ the lab

@pytest.fixture(scope="module")
def slurmlab(wanem_ready):
    problem = slurm.check_prerequisites(labutil.build_dir())
    if problem:
        pytest.fail(problem)
    with labutil.lab("--sites", "2", "--dataplane", "uring", "--agents", "--slurm",
                     "--wan", WAN) as st:
        os.environ["DETWAN_AGENT"] = st["agents"][0]["url"]
        yield st
        os.environ.pop("DETWAN_AGENT", None)
    nothing_of_slurm_left()


@pytest.mark.netns
def test_status_lists_the_daemons(slurmlab):
    sl = slurmlab["slurm"]
    assert sl["nodes"] == {"a": "site-a", "b": "site-b"}
    assert set(sl["daemons"]) == {"munged", "slurmctld", "slurmd-site-a", "slurmd-site-b"}
    assert all(d["alive"] for d in sl["daemons"].values())
    assert slurm.node_states() == {"site-a": "idle", "site-b": "idle"}


TASK_REPORT = (
    "printf 'SITE=%s JOB=%s RES=%s AGENT=%s ' \"$DETWAN_SITE\" \"$SLURM_JOB_ID\" "
    "\"$DETWAN_RESERVATION\" \"$DETWAN_AGENT\"; "
    f"{labutil.build_dir() / agent.CTL_BINARY} --agent \"$DETWAN_AGENT\" --json show "
    "\"$DETWAN_RESERVATION\" | tr -d '\\n' | sed -E 's/.*\"state\":\"([a-z]+)\".*\"dataplane\":"
    "\\{\"active\":(true|false).*/STATE=\\1 ACTIVE=\\2/'; echo")


def parse_reports(text: str) -> dict[str, dict[str, str]]:
    """Per site, the KEY=VALUE pairs a task printed with TASK_REPORT."""
    reports = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "SITE" in fields:
            reports[fields["SITE"]] = fields
    return reports


@pytest.mark.netns
def test_srun_job_runs_with_its_reservation_and_releases_it(slurmlab):
    ping_peer = "ping -n -q -c 2 -W 2 10.20.$([ \"$DETWAN_SITE\" = a ] && echo 2 || echo 1).2 " \
                ">/dev/null && echo TUNNEL=ok || echo TUNNEL=down"
    res = slurm_cmd("srun", "--detwan-rate=50mbit", "-N2", "sh", "-c",
                    TASK_REPORT + "; " + ping_peer)
    assert res.returncode == 0, res.stdout + res.stderr
    reports = parse_reports(res.stdout)
    assert set(reports) == {"a", "b"}, res.stdout
    a, b = reports["a"], reports["b"]
    assert a["RES"] == b["RES"] and a["RES"].startswith("r-") and a["JOB"] == b["JOB"]
    for site, r in reports.items():
        assert r["AGENT"] == slurmlab["agents"][0]["host_urls"][site]
        assert r["STATE"] == "provisioned" and r["ACTIVE"] == "true", r  # before the task ran
    assert res.stdout.count("TUNNEL=ok") == 2, res.stdout
    job_id = int(a["JOB"])
    # srun made the allocation, so it ended the job's reservation itself before returning.
    assert [x["state"] for x in for_job(job_id)] == ["terminated"]
    r = wait_released(job_id)
    assert r["id"] == a["RES"] and r["state"] == "terminated"
    assert r["min_bandwidth_bps"] == 50_000_000 and {r["src"], r["dst"]} == {"a", "b"}
    # The plugin never names a cipher: the job's tunnel got the agent's default, authenticated
    # and encrypted with a key of its own (the pings above went through it).
    assert r["encrypt"] == "aes-256-gcm" and r["spec"]["encrypt"] == "aes-256-gcm", r
    assert r["warnings"] == [] and len(r["tunnel_keys"]["keys"]) == 1, r
    assert nothing_booked()


@pytest.mark.netns
def test_sbatch_job_and_its_steps_ride_one_reservation(slurmlab, tmp_path):
    job_id, out = sbatch(tmp_path, "echo BATCH=$DETWAN_RESERVATION; srun -l printenv "
                         "DETWAN_RESERVATION DETWAN_SITE", "--detwan-rate=20mbit", "-N2")
    assert wait_job_end(job_id) == "COMPLETED", out.read_text()
    text = out.read_text()
    batch = re.search(r"BATCH=(r-\d+)", text)
    assert batch, text
    assert sorted(re.findall(r"^\d+: (r-\d+)$", text, re.M)) == [batch.group(1)] * 2, text
    assert sorted(re.findall(r"^\d+: ([ab])$", text, re.M)) == ["a", "b"], text
    assert wait_released(job_id)["id"] == batch.group(1)
    assert nothing_booked()


@pytest.mark.netns
def test_single_site_job_needs_no_reservation(slurmlab):
    res = slurm_cmd("srun", "--detwan-rate=50mbit", "-N1", "-w", "site-b", "sh", "-c",
                    "echo SITE=$DETWAN_SITE RES=${DETWAN_RESERVATION:-none}")
    assert res.returncode == 0, res.stderr
    assert "SITE=b RES=none" in res.stdout
    assert nothing_booked()


@pytest.mark.netns
def test_cancelled_job_releases_its_reservation(slurmlab, tmp_path):
    job_id, _ = sbatch(tmp_path, "srun sleep 300", "--detwan-rate=30mbit", "-N2")
    wait_for(lambda: [r for r in for_job(job_id) if r["state"] == "provisioned"],
             f"job {job_id}'s reservation to be provisioned")
    assert slurm_cmd("scancel", str(job_id)).returncode == 0
    assert wait_job_end(job_id) == "CANCELLED"
    assert wait_released(job_id)["state"] == "terminated"
    assert nothing_booked()


@pytest.mark.netns
def test_refused_job_is_told_why_and_holds_nothing(slurmlab):
    res = slurm_cmd("srun", "--detwan-rate=500mbit", "-N2", "echo", "TASK-RAN")
    assert res.returncode != 0
    assert "TASK-RAN" not in res.stdout
    m = re.search(r"detwan: job (\d+) refused, nothing reserved: a <-> b at 500000000bit from "
                  r"agent http://\S+: (no_capacity|no_slots): ", res.stderr)
    assert m, res.stderr
    assert for_job(int(m.group(1))) == []
    assert nothing_booked()
    # A bad rate never reaches the queue.
    res = slurm_cmd("srun", "--detwan-rate=fast", "-N2", "true")
    assert res.returncode != 0
    assert "--detwan-rate=fast: expected a rate such as 50mbit" in res.stderr


@pytest.mark.netns
def test_job_waits_briefly_for_a_conflicting_reservation(slurmlab, tmp_path):
    # A reservation between a and b that is not the job's (as a previous job's is until its
    # epilog ends it): the job's request meets prefix_conflict and is retried until it is gone.
    other = ctl("reserve", "--from", "a", "--to", "b", "--rate", "10mbit", "--duration", "10m",
                "--provision")
    job_id, out = sbatch(tmp_path, "echo RES=$DETWAN_RESERVATION", "--detwan-rate=10mbit", "-N2")
    wait_for(lambda: job_state(job_id) == "RUNNING", f"job {job_id} to start")
    time.sleep(1)  # the job's step daemon is retrying now
    assert for_job(job_id) == []
    ctl("terminate", other["id"])
    assert wait_job_end(job_id) == "COMPLETED", out.read_text()
    r = wait_released(job_id)
    assert f"RES={r['id']}" in out.read_text()
    assert nothing_booked()


def link_reserved_bps() -> int:
    """The most reserved now in either direction of link ab1."""
    link = next(l for l in ctl("topology")["links"] if l["name"] == "ab1")
    return max(d["reserved_bps_now"] for d in link["directions"])


@pytest.mark.netns
def test_concurrent_jobs_never_oversubscribe_the_link(slurmlab, tmp_path):
    # Four jobs of 100 Mbit/s each (400 in all) on a link with 180 reservable; each holds its
    # nodes for a few seconds so they overlap (4 CPUs per node, one task per node each).
    jobs = [sbatch(tmp_path, "srun sleep 6", "--detwan-rate=100mbit", "-N2", "-n2")
            for _ in range(4)]
    peak = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        peak = max(peak, link_reserved_bps())
        if all(job_state(j) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
               for j, _ in jobs):
            break
        time.sleep(0.1)
    assert peak <= RESERVABLE_BPS
    admitted, refused = [], []
    for job_id, out in jobs:
        state = wait_job_end(job_id)
        text = out.read_text()
        if for_job(job_id):
            admitted.append(job_id)
            assert state == "COMPLETED", text
            assert wait_released(job_id)["state"] == "terminated"
        else:
            refused.append(job_id)
            assert state == "FAILED", text
            assert f"detwan: job {job_id} refused, nothing reserved:" in text
            assert re.search("no_capacity|no_slots", text), text
    assert admitted and refused, (admitted, refused)
    assert peak >= 100_000_000  # an admitted job's rate was on the link while it ran
    assert nothing_booked()


@pytest.mark.netns
def test_timed_out_job_releases_its_reservation(slurmlab, tmp_path):
    job_id, _ = sbatch(tmp_path, "srun sleep 600", "--detwan-rate=10mbit", "-N2", "--time=1")
    wait_for(lambda: [r for r in for_job(job_id) if r["state"] == "provisioned"],
             f"job {job_id}'s reservation to be provisioned")
    assert wait_job_end(job_id, timeout_s=240) == "TIMEOUT"
    assert wait_released(job_id)["state"] == "terminated"
    assert nothing_booked()
