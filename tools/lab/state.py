"""The lab's run directory: state file, lock, pid files, sockets and logs.

The state file describes the lab for `status`, `exec` and `wanem`. `down` reads it when it can
but never depends on it: namespaces are found by prefix and emulator pids are also kept in
one small pid file each.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import tempfile

RUN_DIR = pathlib.Path(os.environ.get("DETWAN_TESTBED_RUN_DIR", "/run/detwan-testbed"))
STATE_VERSION = 1


def state_path() -> pathlib.Path:
    return RUN_DIR / "state.json"


def ensure_run_dir() -> None:
    RUN_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)


@contextlib.contextmanager
def locked():
    """Serialises up/down (a second `up` racing the first must see its namespaces)."""
    ensure_run_dir()
    with open(RUN_DIR / ".lock", "w", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write(state: dict) -> None:
    """Atomic replace, so a crash never leaves a half-written file behind."""
    ensure_run_dir()
    state = dict(state, version=STATE_VERSION)
    fd, tmp = tempfile.mkstemp(dir=RUN_DIR, prefix=".state-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, state_path())


def read() -> dict | None:
    """The state, or None when there is none or it cannot be parsed."""
    try:
        with open(state_path(), encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def pid_file(key: str) -> pathlib.Path:
    return RUN_DIR / f"{key}.pid"


def write_pid_file(key: str, pid: int, start_time: int | None) -> None:
    pid_file(key).write_text(f"{pid} {start_time if start_time is not None else ''}\n",
                             encoding="utf-8")


def read_pid_files() -> dict[int, int | None]:
    pids: dict[int, int | None] = {}
    if not RUN_DIR.is_dir():
        return pids
    for f in RUN_DIR.glob("*.pid"):
        try:
            parts = f.read_text(encoding="utf-8").split()
            pids[int(parts[0])] = int(parts[1]) if len(parts) > 1 else None
        except (OSError, ValueError, IndexError):
            continue
    return pids


def remove_runtime_files() -> None:
    """Everything but the logs, which stay for post-mortems until the next `up`."""
    if not RUN_DIR.is_dir():
        return
    for pattern in ("state.json", "*.pid", "*.sock", ".state-*", "agent-*.db*",
                    "agent-*.store.key", "keys/tunnel-*.key"):
        for f in RUN_DIR.glob(pattern):
            with contextlib.suppress(OSError):
                f.unlink()
    with contextlib.suppress(OSError):
        (RUN_DIR / "keys").rmdir()
    # --owners: the domains' CAs, certificates and tokens (tools/lab/federation.py).
    shutil.rmtree(RUN_DIR / "pki", ignore_errors=True)


def remove_logs() -> None:
    """Logs, final counters and gateway configurations of the previous lab."""
    if not RUN_DIR.is_dir():
        return
    for pattern in ("*.log", "*.stats.json", "gw-*.yaml", "agent-*.yaml", "agent-*.db*",
                    "cross-*.json"):
        for f in RUN_DIR.glob(pattern):
            with contextlib.suppress(OSError):
                f.unlink()


def file_tail(file: pathlib.Path, lines: int = 15) -> str:
    """The last `lines` lines of a daemon's log, indented for an error message."""
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "  (no log)"
    return "\n".join("  | " + line for line in text.splitlines()[-lines:])
