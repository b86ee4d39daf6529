"""The staged install: `meson install --no-rebuild --destdir` of the build tree, each staged file
given its installed Debian path (relocate), then split among the packages (split).

A build configured with another prefix than /usr (meson's default /usr/local) is relocated:
PREFIX/... -> /usr/..., PREFIX/lib/systemd/system -> /lib/systemd/system (Debian 12's unit
directory), PREFIX/lib/pythonX.Y/dist-packages -> /usr/lib/python3/dist-packages, SYSCONFDIR ->
/etc; text files have the prefix rewritten the same way, and no packaged file may still name it
(build.check_no_prefix). Nothing is compiled again.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import pathlib
import re
import subprocess

from debpkg import layout


class PackageError(Exception):
    pass


@dataclasses.dataclass
class BuildInfo:
    build_dir: pathlib.Path
    version: str          # meson's project version
    prefix: str
    sysconfdir: str       # absolute
    libdir: str           # relative to prefix, e.g. lib/x86_64-linux-gnu


@dataclasses.dataclass
class Staged:
    source: pathlib.Path  # in the staging tree
    path: str             # installed path, relative to /
    gzip: bool = False    # a man page: gzip -9n on the way into the package


def meson_json(build_dir: pathlib.Path, what: str):
    try:
        res = subprocess.run(["meson", "introspect", str(build_dir), what], capture_output=True,
                             text=True, timeout=120)
    except OSError as e:
        raise PackageError(f"cannot run meson: {e}") from e
    if res.returncode != 0:
        raise PackageError(f"meson introspect {what} {build_dir}: {(res.stderr or res.stdout).strip()} "
                           "(is it a configured meson build directory?)")
    return json.loads(res.stdout)


def build_info(build_dir: pathlib.Path) -> BuildInfo:
    opts = {o["name"]: o["value"] for o in meson_json(build_dir, "--buildoptions")}
    version = meson_json(build_dir, "--projectinfo")["version"]
    prefix = opts["prefix"].rstrip("/") or "/"
    sysconf = opts["sysconfdir"]
    if not sysconf.startswith("/"):
        sysconf = f"{prefix}/{sysconf}"
    return BuildInfo(build_dir, version, prefix, sysconf.rstrip("/"), opts["libdir"])


def meson_install(info: BuildInfo, stage: pathlib.Path, log: pathlib.Path) -> None:
    """`meson install --no-rebuild --destdir STAGE`: the build must be complete (ninja first)."""
    with open(log, "w", encoding="utf-8") as out:
        res = subprocess.run(["meson", "install", "-C", str(info.build_dir), "--no-rebuild",
                              "--destdir", str(stage)], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, timeout=600)
    if res.returncode != 0:
        raise PackageError(f"meson install --no-rebuild failed (is the build complete? run "
                           f"ninja -C {info.build_dir}); its output:\n"
                           + "\n".join(log.read_text(errors="replace").splitlines()[-25:]))


def relocate(info: BuildInfo, installed: str) -> tuple[str, bool]:
    """(the Debian path relative to /, whether it is gzipped) of an absolute installed path."""
    p, gz = installed, False
    prefix = info.prefix
    if p == info.sysconfdir or p.startswith(info.sysconfdir + "/"):
        p = "/etc" + p[len(info.sysconfdir):]
    elif p.startswith(prefix + "/"):
        rest = p[len(prefix) + 1:]
        m = re.match(r"lib/python3(\.\d+)?/(dist|site)-packages/(.*)", rest)
        if m:
            p = "/usr/lib/python3/dist-packages/" + m.group(3)
        elif rest.startswith("lib/systemd/system/"):
            p = "/" + rest
        else:
            p = "/usr/" + rest
    else:
        raise PackageError(f"{installed} is installed outside the prefix {prefix} and "
                           f"sysconfdir {info.sysconfdir}: no Debian place for it")
    if p.startswith("/usr/share/man/") and not p.endswith(".gz"):
        p, gz = p + ".gz", True
    return p.lstrip("/"), gz


def rewrite_prefix(info: BuildInfo, text: bytes) -> bytes:
    """The same relocation inside a text file (units' ExecStart, detwan.pc, man pages)."""
    if info.prefix == "/usr":
        return text
    p = re.escape(info.prefix.encode())
    text = re.sub(p + rb"/lib/python3(\.\d+)?/(dist|site)-packages",
                  b"/usr/lib/python3/dist-packages", text)
    text = re.sub(p + rb"/lib/systemd/system", b"/lib/systemd/system", text)
    text = text.replace(info.sysconfdir.encode(), b"/etc")
    return re.sub(p + rb"(?![\w.-])", b"/usr", text)


def staged_files(info: BuildInfo, stage: pathlib.Path) -> list[Staged]:
    out = []
    for root, dirs, files in os.walk(stage):
        dirs.sort()
        for name in sorted(files) + sorted(d for d in dirs if os.path.islink(os.path.join(root, d))):
            src = pathlib.Path(root) / name
            path, gz = relocate(info, "/" + str(src.relative_to(stage)))
            out.append(Staged(src, path, gz))
    return out


def multiarch(info: BuildInfo) -> str:
    m = re.fullmatch(r"lib/([\w-]+-linux-[\w]+)", info.libdir)
    if not m:
        raise PackageError(f"libdir {info.libdir}: not a Debian multiarch directory "
                           "(lib/<triplet>); configure the build with meson's default libdir")
    return m.group(1)


def split(info: BuildInfo, files: list[Staged]) -> dict[str, list[Staged]]:
    """Every staged file into exactly one package: a file no package claims, or that two claim,
    is an error naming it (layout.PACKAGES is the list to fix)."""
    arch = multiarch(info)
    pats = {p.name: [f.format(multiarch=arch) for f in p.files] for p in layout.PACKAGES}
    out: dict[str, list[Staged]] = {p.name: [] for p in layout.PACKAGES}
    problems = []
    for f in files:
        owners = [name for name, ps in pats.items() if any(fnmatch.fnmatchcase(f.path, x)
                                                           for x in ps)]
        if len(owners) == 1:
            out[owners[0]].append(f)
        elif not owners:
            problems.append(f"/{f.path} (staged as {f.source}) is claimed by no package")
        else:
            problems.append(f"/{f.path} is claimed by {' and '.join(owners)}")
    if problems:
        raise PackageError("the staged tree does not split into the packages "
                           "(tools/debpkg/layout.py):\n  " + "\n  ".join(problems))
    return out
