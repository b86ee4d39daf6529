"""Which staged file goes into which Debian package, and what each package says about itself.

Paths are the installed ones, relative to / (after build.relocate: /usr/local/... -> /usr/...,
units in /lib/systemd/system, the Python package in /usr/lib/python3/dist-packages). Every
staged file must match exactly one package's patterns (build.split fails otherwise), so a new
installed file is a build error until it is given a package here. Patterns are fnmatch
patterns: `*` also matches `/`.
"""
from __future__ import annotations

import dataclasses

LIB = "usr/lib/{multiarch}"
PY = "usr/lib/python3/dist-packages"
MAN = "usr/share/man/man1"
COMP = "usr/share/bash-completion/completions"
UNITS = "lib/systemd/system"


@dataclasses.dataclass
class Package:
    name: str
    section: str
    summary: str
    description: str           # the long description: paragraphs, wrapped by build.control()
    files: list[str]           # fnmatch patterns of installed paths (relative to /)
    depends: list[str] = dataclasses.field(default_factory=list)  # besides dpkg-shlibdeps'
    shlibdeps: bool = True     # run dpkg-shlibdeps on its ELF files
    extra: dict[str, str] = dataclasses.field(default_factory=dict)  # more control fields
    arch_all: bool = False


def programs(*names: str) -> list[str]:
    out = []
    for n in names:
        out += [f"usr/bin/{n}", f"{MAN}/{n}.1.gz", f"{COMP}/{n}"]
    return out


PACKAGES = [
    Package(
        "detwan-gateway", "net",
        "detwan dataplane gateway: deterministic WAN tunnels",
        "detwan-gw carries a site's traffic through deterministic tunnels to the other "
        "sites' gateways: slot-scheduled, encrypted, with on-time playout (io_uring or DPDK "
        "backend).\n\nThe unit detwan-gw@NAME.service runs /etc/detwan/gw/NAME.yaml; "
        "/etc/detwan/gw/example.yaml.sample documents every key. Nothing is started on install.",
        programs("detwan-gw") + [f"{UNITS}/detwan-gw@.service", "etc/detwan/gw/*"]),
    Package(
        "detwan-agent", "net",
        "detwan agent: reservations of deterministic WAN tunnels",
        "detwan-agent admits, schedules and provisions reservations of deterministic tunnels "
        "over the gateways of its domain, and serves the reservation API (HTTP/JSON).\n\n"
        "The unit detwan-agent.service runs /etc/detwan/agent/topology.yaml (a sample is "
        "installed beside it) as a dynamic unprivileged user. Nothing is started on install.",
        programs("detwan-agent") + [f"{UNITS}/detwan-agent.service", "etc/detwan/agent/*"]),
    Package(
        "detwan-tools", "net",
        "detwan client and measurement tools",
        "detwanctl (reserve, inspect and release tunnels through an agent), detwan-perf "
        "(latency, jitter and loss per direction; STAMP), detwan-probe (one-way delay, loss "
        "and reordering), detwan-wanem (user-space WAN emulator) and detwan-bench (detwan "
        "components against their baselines).",
        programs("detwanctl", "detwan-perf", "detwan-probe", "detwan-wanem", "detwan-bench")),
    Package(
        "libdetwan0", "libs",
        "detwan collectives library",
        "libdetwan is the C API of detwan's collectives: site-aware allreduce and friends over "
        "reserved WAN tunnels, for training jobs that span sites.",
        [f"{LIB}/libdetwan.so.*"],
        extra={"Multi-Arch": "same"}),
    Package(
        "libdetwan-dev", "libdevel",
        "detwan collectives library: development files",
        "The C header (detwan/collectives.h, detwan/version.h), the pkg-config file "
        "(pkg-config --cflags --libs detwan) and the link-time symlink of libdetwan.",
        ["usr/include/detwan/*", f"{LIB}/libdetwan.so", f"{LIB}/pkgconfig/detwan.pc"],
        depends=["libdetwan0 (= {version})"], shlibdeps=False),
    Package(
        "python3-detwan", "python",
        "detwan collectives as a torch.distributed backend",
        "The Python package detwan: `import detwan.torch` registers the torch.distributed "
        "backend \"detwan\" (collectives over reserved WAN tunnels), with the hybrid and "
        "heterogeneous process groups.",
        [f"{PY}/detwan/*"],
        # The extension module is built for the build's python3 (3.11 on Debian 12) and
        # against its PyTorch (python3-torch, libtorch 1.13).
        depends=["python3 (>= {py}), python3 (<< {py_next})", "python3-torch"]),
    Package(
        "slurm-detwan-plugin", "admin",
        "Slurm SPANK plugin: jobs reserve their detwan WAN path",
        "spank_detwan.so lets srun and sbatch jobs reserve a deterministic tunnel between "
        "their sites (--detwan-rate) through detwanctl and the sites' agents, and ends the "
        "reservation with the job. Enable it in plugstack.conf: "
        "/etc/detwan/slurm/plugstack.conf.sample has the line.",
        [f"{LIB}/detwan/spank_detwan.so", "etc/detwan/slurm/*"],
        depends=["detwan-tools (= {version})"],
        extra={"Enhances": "slurmd, slurm-client"}),
]
