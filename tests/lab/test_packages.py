"""The Debian packages installed and run (tools/package deb, docs/packages.md).

`apt-get install ./build/packages/*.deb` on this machine (apt resolves their Depends, which
checks them), then the installed files only: the units' ExecStartPre/ExecStart lines, read from
the installed unit files with %i filled in, run a gateway pair (configs in
/etc/detwan/gw/NAME.yaml, in the lab's gateway namespaces) and the agent
(/etc/detwan/agent/topology.yaml); the agent answers /healthz with the version and reaches both
gateways, /usr/bin/detwanctl reserves a tunnel through it, and pings cross the tunnel. systemd is
not PID 1 here, so the test runs the units' command lines itself (`systemd-analyze verify`
checks the installed units where it exists). The lab itself (namespaces, detwan-wanem) comes
from the build tree: it stands for the WAN, not for what is tested.

Whatever happens, the finally block stops the processes, takes the lab down and purges every
detwan package (which removes /etc/detwan): nothing stays installed. The test refuses to run
where detwan packages or /etc/detwan already exist (an operator's, not ours to remove).
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

import labutil
from labutil import tb

pytestmark = pytest.mark.netns

PACKAGES = ["detwan-gateway", "detwan-agent", "detwan-tools", "libdetwan0", "libdetwan-dev",
            "python3-detwan", "slurm-detwan-plugin"]
UNITS = pathlib.Path("/lib/systemd/system")
ETC = pathlib.Path("/etc/detwan")
AGENT_STATE = pathlib.Path("/var/lib/detwan-agent")  # the unit's StateDirectory=
INSTALLED = {"DETWAN_GW_CMD": "/usr/bin/detwan-gw", "DETWAN_AGENT_CMD": "/usr/bin/detwan-agent",
             "DETWAN_CTL_CMD": "/usr/bin/detwanctl"}
APT = ["apt-get", "-o", "DPkg::Lock::Timeout=900", "-y", "-q"]


def version() -> str:
    res = subprocess.run(["meson", "introspect", str(labutil.build_dir()), "--projectinfo"],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout)["version"]


def installed() -> list[str]:
    """detwan packages dpkg knows in any state but not-installed (config-files included)."""
    res = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n",
                          *PACKAGES], capture_output=True, text=True)
    return [line.split()[0] for line in res.stdout.splitlines()
            if len(line.split()) > 1 and line.split()[1][1] != "n"]


def unit_commands(unit: pathlib.Path, instance: str = "") -> dict[str, list[str]]:
    """ExecStartPre / ExecStart of an installed unit file, %i replaced, split as systemd would
    (no prefixes such as '-' or '+' are used by our units)."""
    out = {}
    for line in unit.read_text().splitlines():
        m = re.match(r"(ExecStartPre|ExecStart)=(.*)", line)
        if m:
            out[m.group(1)] = shlex.split(m.group(2).replace("%i", instance))
    assert set(out) == {"ExecStartPre", "ExecStart"}, f"{unit}: {out}"
    return out


def in_ns(ns: str | None, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv] if ns else argv


def start(argv: list[str], log: pathlib.Path) -> subprocess.Popen:
    with open(log, "w", encoding="utf-8") as f:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)


def wait_until(what: str, check, timeout_s: float, proc: subprocess.Popen, log: pathlib.Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc.poll() is not None:
            pytest.fail(f"{what}: exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    pytest.fail(f"{what}: not within {timeout_s:g} s:\n{log.read_text()[-3000:]}")


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read().decode())


def cleanup(procs: list[subprocess.Popen]) -> list[str]:
    """Everything the test made goes, each step tried even if one before failed."""
    problems = []
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    res = tb("down", "-q")
    if res.returncode != 0:
        problems.append(f"tools/testbed down: {res.stderr}")
    left = installed()
    if left:
        res = subprocess.run([*APT, "purge", *left], capture_output=True, text=True,
                             env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        if res.returncode != 0:
            problems.append(f"apt-get purge: {res.stdout[-2000:]}{res.stderr}")
        # The maintainer scripts' purge removes the operator's files too (docs/packages.md).
        for path in (ETC, AGENT_STATE):
            if res.returncode == 0 and path.exists():
                problems.append(f"{path} left after purge: {sorted(map(str, path.rglob('*')))}")
    shutil.rmtree(ETC, ignore_errors=True)
    shutil.rmtree(AGENT_STATE, ignore_errors=True)
    if installed():
        problems.append(f"still installed: {installed()}")
    return problems


def test_installed_packages_run_a_gateway_pair_and_an_agent(wanem_ready, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("installs packages: needs root")
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        pytest.skip("apt-get / dpkg-deb not found: not a Debian system")
    if installed() or ETC.exists():
        pytest.fail(f"detwan packages ({installed()}) or {ETC} already here: not this test's "
                    "to overwrite or purge (dpkg --purge them first)")
    v = version()
    out = labutil.build_dir() / "packages"
    res = subprocess.run([str(labutil.REPO / "tools" / "package"), "deb", "--build-dir",
                          str(labutil.build_dir()), "--no-lintian"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    debs = sorted(out.glob("*.deb"))
    assert sorted(d.name.split("_")[0] for d in debs) == sorted(PACKAGES), debs

    procs: list[subprocess.Popen] = []
    try:
        res = subprocess.run([*APT, "install", "--no-install-recommends", *map(str, debs)],
                             capture_output=True, text=True, timeout=1800,
                             env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        assert res.returncode == 0, f"apt-get install:\n{res.stdout[-3000:]}\n{res.stderr}"
        assert sorted(installed()) == sorted(PACKAGES)
        for prog in ("detwan-gw", "detwan-agent", "detwanctl", "detwan-perf"):
            got = subprocess.run([f"/usr/bin/{prog}", "--version"], capture_output=True,
                                 text=True).stdout.strip()
            assert got == f"{prog} {v}"
        # The Python package and the C API (libdetwan0 through ldconfig, libdetwan-dev's
        # pkg-config file) from the system's own paths.
        got = subprocess.run(["/usr/bin/python3", "-c", "import detwan; print(detwan.__version__)"],
                             capture_output=True, text=True, cwd="/")
        assert got.stdout.strip() == v, got.stderr
        job = tmp_path / "job.c"
        job.write_text('#include <detwan/collectives.h>\n#include <stdio.h>\n'
                       'int main(void) { printf("%s\\n", DETWAN_VERSION_STRING); return 0; }\n')
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "detwan"],
                               capture_output=True, text=True, check=True).stdout.split()
        subprocess.run(["cc", "-o", str(tmp_path / "job"), str(job), *flags], check=True)
        assert subprocess.run([str(tmp_path / "job")], capture_output=True,
                              text=True).stdout.strip() == v
        if shutil.which("systemd-analyze"):
            res = subprocess.run(["systemd-analyze", "verify", "--man=no",
                                  str(UNITS / "detwan-gw@.service"),
                                  str(UNITS / "detwan-agent.service")],
                                 capture_output=True, text=True)
            assert res.returncode == 0 and not res.stdout + res.stderr, res.stdout + res.stderr

        # The lab (WAN, namespaces, keys, the configurations it renders for the agent mode),
        # its own gateways and agent stopped: ours replace them, from the units.
        tb("up", "-q", "--sites", "2", "--dataplane", "uring", "--agents", "--wan",
           "delay=5ms,rate=200mbit", check=True, env=INSTALLED, timeout=300)
        st = labutil.status()
        for s in st["sites"]:
            tb("gateway", s["name"], "stop", check=True, env=INSTALLED)
        tb("agent", "lab", "kill", check=True, env=INSTALLED)

        (ETC / "gw").mkdir(parents=True, exist_ok=True)
        for s in st["sites"]:
            name = s["name"]
            shutil.copyfile(labutil.RUN_DIR / f"gw-{name}.yaml", ETC / "gw" / f"{name}.yaml")
            cmds = unit_commands(UNITS / "detwan-gw@.service", name)
            ns = s["gateway_ns"]
            res = subprocess.run(in_ns(ns, cmds["ExecStartPre"]), capture_output=True, text=True)
            assert res.returncode == 0, f"ExecStartPre of detwan-gw@{name}: {res.stderr}"
            log = tmp_path / f"gw-{name}.log"
            proc = start(in_ns(ns, cmds["ExecStart"]), log)
            procs.append(proc)
            wait_until(f"detwan-gw@{name} ready", lambda: tb(
                "gw", name, "--", "stats", "--json", env=INSTALLED).returncode == 0, 60, proc, log)

        (ETC / "agent").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(labutil.RUN_DIR / "agent-lab.yaml", ETC / "agent" / "topology.yaml")
        AGENT_STATE.mkdir(mode=0o700, exist_ok=True)
        cmds = unit_commands(UNITS / "detwan-agent.service")
        res = subprocess.run(cmds["ExecStartPre"], capture_output=True, text=True)
        assert res.returncode == 0, f"ExecStartPre of detwan-agent: {res.stderr}"
        log = tmp_path / "agent.log"
        agent = start(cmds["ExecStart"], log)
        procs.append(agent)
        m = wait_until("detwan-agent listening", lambda: re.search(
            r"listening on (http://\S+)", log.read_text()), 30, agent, log)
        url = m.group(1).replace("0.0.0.0", "127.0.0.1")
        health = wait_until("the agent reaching both gateways", lambda: (
            lambda h: h if h["gateways_reachable"] == 2 else None)(get_json(url + "/healthz")),
            30, agent, log)
        assert health["version"] == v and health["status"] == "ok", health
        assert health["journal"] == str(AGENT_STATE / "journal.db"), health

        res = subprocess.run(["/usr/bin/detwanctl", "reserve", "--from", "a", "--to", "b",
                              "--rate", "20mbit", "--duration", "10m", "--provision", "--json"],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, DETWAN_AGENT=url))
        assert res.returncode == 0, res.stdout + res.stderr
        b = next(s for s in st["sites"] if s["name"] == "b")
        assert labutil.ping_replies("a", b["tunnel_addr"], 20) >= 15
        stats = json.loads(tb("gw", "a", "--", "stats", "--json", check=True,
                              env=INSTALLED).stdout)
        sent = sum(t["tx"]["sent_on_time_packets"] + t["tx"]["sent_best_effort_packets"]
                   for t in stats["tunnels"])
        assert sent >= 15, stats["tunnels"]
    finally:
        problems = cleanup(procs)
        assert not problems, problems
