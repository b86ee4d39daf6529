"""Assembles the packages' trees (debian/PKG/ in the work directory, as dpkg-shlibdeps expects),
writes their DEBIAN/ files and builds the .deb files with dpkg-deb.

Per package: the files (text files relocated, man pages gzip -9n, ELF files stripped as dh_strip
does unless --no-strip), /usr/share/doc/PKG/{copyright,changelog.Debian.gz}, DEBIAN/control
(Depends: dpkg-shlibdeps on its ELF files plus layout's explicit ones), conffiles (everything
under /etc), md5sums, the maintainer scripts and triggers of packaging/debian/PKG.*, and for the
library its shlibs file.
"""
from __future__ import annotations

import gzip
import hashlib
import math
import os
import pathlib
import re
import shutil
import subprocess
import textwrap
import time

from debpkg import layout
from debpkg.stage import BuildInfo, PackageError, Staged, rewrite_prefix

REPO = pathlib.Path(__file__).resolve().parents[2]
DEBIAN_SRC = REPO / "packaging" / "debian"
SCRIPTS = ("preinst", "postinst", "prerm", "postrm")
MAINTAINER = os.environ.get("DETWAN_DEB_MAINTAINER",
                            "detwan developers <detwan-dev@lists.example.org>")


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             timeout=600, **kw)
    except OSError as e:
        raise PackageError(f"cannot run {argv[0]}: {e} (tools/install-deps installs it)") from e
    if res.returncode != 0:
        raise PackageError(f"{' '.join(argv)} exited {res.returncode}:\n{res.stderr.strip()}")
    return res


def is_elf(path: pathlib.Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def deb_version(info: BuildInfo, revision: str) -> str:
    return f"{info.version}-{revision}"


def arch() -> str:
    return run(["dpkg", "--print-architecture"]).stdout.strip()


def copy_in(info: BuildInfo, f: Staged, root: pathlib.Path, strip: bool) -> None:
    dest = root / f.path
    dest.parent.mkdir(parents=True, exist_ok=True)
    if f.source.is_symlink():
        os.symlink(os.readlink(f.source), dest)
        return
    data = f.source.read_bytes()
    elf = data[:4] == b"\x7fELF"
    if not elf:
        data = rewrite_prefix(info, data)
    if f.gzip:
        data = gzip.compress(data, compresslevel=9, mtime=0)  # gzip -9n
    dest.write_bytes(data)
    executable = f.path.startswith(("usr/bin/", "usr/sbin/"))
    os.chmod(dest, 0o755 if executable else 0o644)
    if elf and strip:
        # dh_strip's flags: shared objects lose their unneeded symbols, programs all debug info.
        flags = ["--strip-unneeded"] if ".so" in dest.name else []
        run(["strip", "--remove-section=.comment", "--remove-section=.note", *flags, str(dest)])


def check_no_prefix(info: BuildInfo, root: pathlib.Path) -> None:
    """After relocation no packaged file may name the build's prefix (a /usr/local path in a
    unit, a pkg-config file or a program would point at nothing once installed)."""
    if info.prefix == "/usr":
        return
    pat = re.compile(re.escape(info.prefix.encode()) + rb"(?![\w.-])")
    bad = [str(p.relative_to(root)) for p in root.rglob("*")
           if p.is_file() and not p.is_symlink() and pat.search(p.read_bytes())]
    if bad:
        raise PackageError(f"still naming the build's prefix {info.prefix} after relocation: "
                           + ", ".join(bad))


def changelog(pkg: str, version: str) -> bytes:
    """changelog.Debian: one entry, dated by the commit (SOURCE_DATE_EPOCH if set)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        res = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"],
                             capture_output=True, text=True)
        epoch = res.stdout.strip() or str(int(time.time()))
    date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(int(epoch)))
    text = (f"detwan ({version}) unstable; urgency=medium\n\n"
            f"  * Binary packages built by tools/package from the meson build tree\n"
            f"    (docs/packages.md).\n\n -- {MAINTAINER}  {date}\n")
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def add_docs(pkg: str, root: pathlib.Path, version: str) -> None:
    doc = root / "usr/share/doc" / pkg
    doc.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DEBIAN_SRC / "copyright", doc / "copyright")
    (doc / "changelog.Debian.gz").write_bytes(changelog(pkg, version))
    for f in doc.iterdir():
        os.chmod(f, 0o644)


def soname(path: pathlib.Path) -> str:
    out = run(["objdump", "-p", str(path)]).stdout
    m = re.search(r"^\s*SONAME\s+(\S+)", out, re.M)
    if not m:
        raise PackageError(f"{path} has no SONAME (meson library() needs version/soversion)")
    return m.group(1)


def library_shlibs(pkg: layout.Package, root: pathlib.Path, info: BuildInfo) -> str | None:
    """DEBIAN/shlibs of a library package (its name must follow its SONAME: libdetwan.so.0 ->
    libdetwan0), so that dpkg-shlibdeps maps the library to it for the other packages."""
    libs = [p for p in root.rglob("*.so.*") if not p.is_symlink() and is_elf(p)]
    if not pkg.name.startswith("lib") or pkg.name.endswith("-dev") or not libs:
        return None
    lines = []
    for lib in libs:
        name = soname(lib)
        m = re.fullmatch(r"(lib[\w+-]+)\.so\.(\d+)", name)
        if not m or pkg.name != m.group(1) + m.group(2):
            raise PackageError(f"{pkg.name} ships {name}: the package name must be "
                               f"{name.replace('.so.', '')}")
        lines.append(f"{m.group(1)} {m.group(2)} {pkg.name} (>= {info.version})\n")
    return "".join(lines)


def shlibdeps(work: pathlib.Path, root: pathlib.Path) -> list[str]:
    """dpkg-shlibdeps on the package's ELF files, run in the work directory whose debian/*/
    trees are the packages (so a library of one package is found with its shlibs)."""
    elves = sorted(str(p.relative_to(work)) for p in root.rglob("*")
                   if p.is_file() and not p.is_symlink() and is_elf(p))
    if not elves:
        return []
    res = run(["dpkg-shlibdeps", "-O", "--warnings=0", *[f"-e{e}" for e in elves]],
              cwd=work)
    m = re.search(r"^shlibs:Depends=(.*)$", res.stdout, re.M)
    return [d.strip() for d in m.group(1).split(",")] if m and m.group(1).strip() else []


def installed_size_kib(root: pathlib.Path) -> int:
    total = 0
    for p in root.rglob("*"):
        if p.is_relative_to(root / "DEBIAN"):
            continue
        total += math.ceil(p.lstat().st_size / 1024) if p.is_file() and not p.is_symlink() else 1
    return total


def wrap_description(summary: str, text: str) -> str:
    out = [f"Description: {summary}"]
    for i, para in enumerate(text.split("\n\n")):
        if i:
            out.append(" .")
        out += [" " + line for line in textwrap.wrap(para, 76)]
    return "\n".join(out)


def control(pkg: layout.Package, root: pathlib.Path, version: str, architecture: str,
            depends: list[str]) -> str:
    fields = [("Package", pkg.name), ("Source", "detwan"), ("Version", version),
              ("Architecture", "all" if pkg.arch_all else architecture),
              ("Maintainer", MAINTAINER), ("Installed-Size", str(installed_size_kib(root)))]
    fields += list(pkg.extra.items())
    if depends:
        fields.append(("Depends", ", ".join(depends)))
    fields += [("Section", pkg.section), ("Priority", "optional")]
    return "\n".join(f"{k}: {v}" for k, v in fields) + "\n" + \
        wrap_description(pkg.summary, pkg.description) + "\n"


def write_debian_dir(pkg: layout.Package, root: pathlib.Path, version: str,
                     architecture: str, depends: list[str]) -> None:
    deb = root / "DEBIAN"
    deb.mkdir(exist_ok=True)
    for script in SCRIPTS:
        src = DEBIAN_SRC / f"{pkg.name}.{script}"
        if src.exists():
            shutil.copyfile(src, deb / script)
            os.chmod(deb / script, 0o755)
    if (DEBIAN_SRC / f"{pkg.name}.triggers").exists():
        shutil.copyfile(DEBIAN_SRC / f"{pkg.name}.triggers", deb / "triggers")
    conffiles = sorted("/" + str(p.relative_to(root)) for p in (root / "etc").rglob("*")
                       if p.is_file()) if (root / "etc").is_dir() else []
    if conffiles:
        (deb / "conffiles").write_text("\n".join(conffiles) + "\n")
    sums = []
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_file() and not p.is_symlink() and not rel.startswith("DEBIAN"):
            sums.append(f"{hashlib.md5(p.read_bytes()).hexdigest()}  {rel}")
    (deb / "md5sums").write_text("\n".join(sums) + "\n")
    (deb / "control").write_text(control(pkg, root, version, architecture, depends))
    for p in deb.iterdir():
        if p.name not in SCRIPTS:
            os.chmod(p, 0o644)


def python_versions(root: pathlib.Path) -> tuple[str, str]:
    """(3.11, 3.12) from the extension module's name (_C.cpython-311-...so)."""
    for p in root.rglob("*.so"):
        m = re.search(r"\.cpython-3(\d+)-", p.name)
        if m:
            minor = int(m.group(1))
            return f"3.{minor}", f"3.{minor + 1}"
    return "3", "4"


def dpkg_deb(root: pathlib.Path, out: pathlib.Path) -> None:
    for d in [root, *[p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()]]:
        os.chmod(d, 0o755)
    run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(out)])
