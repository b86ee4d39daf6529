"""Locating and driving detwan-wanem (the user-space WAN emulator)."""
from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
import time

from lab.netns import LabError, is_alive, process_start_time
from lab.state import RUN_DIR, file_tail, write_pid_file
from lab.topology import WanPath

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
WANEM_BINARY = "tools/wanem/detwan-wanem"
PROBE_BINARY = "tools/probe/detwan-probe"
READY_TIMEOUT_S = 10.0


def build_dir(cli_value: str | None) -> pathlib.Path:
    """--build-dir, else $DETWAN_BUILD_DIR, else <repo>/build."""
    value = cli_value or os.environ.get("DETWAN_BUILD_DIR") or str(REPO_ROOT / "build")
    return pathlib.Path(value).resolve()


def wanem_command(build: pathlib.Path, override: str | None) -> list[str]:
    """The emulator command line prefix: --wanem-cmd / $DETWAN_WANEM_CMD, else the built binary."""
    override = override or os.environ.get("DETWAN_WANEM_CMD")
    if override:
        return shlex.split(override)
    binary = build / WANEM_BINARY
    if not os.access(binary, os.X_OK):
        raise LabError(f"{binary} not found or not executable: build it first "
                       f"(meson setup {build} && ninja -C {build}), or pass --build-dir")
    return [str(binary)]


def check_spec(cmd: list[str], spec: str) -> str | None:
    """None when SPEC is valid, else detwan-wanem's message (which names the bad token)."""
    try:
        res = subprocess.run([*cmd, "check-spec", spec], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"cannot run '{' '.join(cmd)} check-spec': {e}") from e
    if res.returncode == 0:
        return None
    return (res.stderr.strip() or res.stdout.strip()
            or f"check-spec exited {res.returncode} without a message")


def control_socket(path: WanPath) -> pathlib.Path:
    return RUN_DIR / f"{path.key}.sock"


def log_file(path: WanPath) -> pathlib.Path:
    return RUN_DIR / f"wanem-{path.key}.log"


def stats_file(path: WanPath) -> pathlib.Path:
    return RUN_DIR / f"wanem-{path.key}.stats.json"


def start(cmd: list[str], path: WanPath, spec: str, seed: int | None,
          extra_args: list[str] | None = None) -> dict:
    """Starts one emulator in the path's WAN namespace; returns its state record."""
    sock = control_socket(path)
    if sock.exists():
        sock.unlink()
    argv = ["ip", "netns", "exec", path.wan_ns, *cmd, "run",
            "--iface-a", path.wan_if(path.a), "--iface-b", path.wan_if(path.b),
            "--control", str(sock), "--stats-json", str(stats_file(path))]
    if spec:
        argv += ["--spec", spec]
    if seed is not None:
        argv += ["--seed", str(seed)]
    argv += extra_args or []
    with open(log_file(path), "w", encoding="utf-8") as log:
        log.write("$ " + shlex.join(argv) + "\n")
        log.flush()
        # `ip netns exec` execs the command, so this pid is the emulator's own.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    start_time = process_start_time(proc.pid)
    write_pid_file(path.key, proc.pid, start_time)
    return {"pid": proc.pid, "pid_start_time": start_time, "argv": argv,
            "started_unix_ns": time.time_ns()}


def wait_ready(path: WanPath, record: dict, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Polls (bounded) until the control socket exists; fails early if the emulator died."""
    sock = control_socket(path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(record["pid"], record["pid_start_time"]):
            raise LabError(f"detwan-wanem for path {path.key} exited during start-up:\n"
                           + log_tail(path))
        if sock.exists():
            return
        time.sleep(0.01)
    raise LabError(f"detwan-wanem for path {path.key} did not create {sock} within "
                   f"{timeout_s:.0f} s:\n" + log_tail(path))


def log_tail(path: WanPath, lines: int = 15) -> str:
    return file_tail(log_file(path), lines)
