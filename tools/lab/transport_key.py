"""The key file the lab gives `detwan-bench transport send/recv` (docs/transport.md,
"Authenticated channels"): the transport refuses unauthenticated channels unless asked for
them by name, so every lab run passes the job's key the way a job would.

security_args(mode): the command-line flags for mode "authenticate" (the default), "encrypt"
or "none" (--insecure). The key is 32 random bytes in hex, written once per process to a file
of mode 600 in a private temporary directory (both namespaces' processes read the same file),
removed when the process exits."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

MODES = ("none", "authenticate", "encrypt")
_key_path: str | None = None


def key_file() -> str:
    """Path of this process's key file (created on first use)."""
    global _key_path
    if _key_path is None:
        directory = tempfile.mkdtemp(prefix="detwan-key-")
        atexit.register(shutil.rmtree, directory, True)
        path = os.path.join(directory, "transport.key")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(os.urandom(32).hex() + "\n")
        _key_path = path
    return _key_path


def security_args(mode: str = "authenticate") -> list[str]:
    """detwan-bench transport send/recv flags for `mode` (one of MODES)."""
    if mode == "none":
        return ["--insecure"]
    if mode not in MODES:
        raise ValueError(f"security mode {mode!r}: one of {', '.join(MODES)}")
    return ["--key-file", key_file(), *(["--encrypt"] if mode == "encrypt" else [])]
