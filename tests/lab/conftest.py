"""Lab tests: real network namespaces, veth and detwan-wanem on one machine.

Run as root: `python3 -m pytest tests/lab` (build first; DETWAN_BUILD_DIR selects the build,
default <repo>/build). Every test that brings a lab up tears it down in a finalizer.

Two kinds, told apart by the `netns` marker:
  netns      needs root and network namespaces (a lab, an emulator, a gateway); skipped with the
             reason when not root or when `ip netns` does not work. Every test that uses the
             wanem_ready fixture (every lab fixture does) must carry it: collection fails
             otherwise.
  unmarked   needs neither: the package's structure and unit grammar, configuration rendering,
             programs on loopback. `python3 -m pytest -m "not netns" tests/lab` runs just
             these, as any user, in seconds; tools/run-tests runs both kinds.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import labutil  # noqa: E402


def _netns_problem() -> str | None:
    if os.geteuid() != 0:
        return "lab tests need root (network namespaces)"
    try:
        res = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"'ip netns' unavailable: {e}"
    if res.returncode != 0:
        return f"'ip netns' unavailable: {res.stderr.strip()}"
    return None


NETNS_PROBLEM = _netns_problem()


def pytest_configure(config):
    config.addinivalue_line("markers", "netns: needs root and network namespaces")


# Fixtures that bring up (or wait for) a lab: a test using one needs namespaces.
NETNS_FIXTURES = {"wanem_ready"}


def pytest_collection_modifyitems(config, items):
    unmarked = [item.nodeid for item in items if "netns" not in item.keywords
                and NETNS_FIXTURES & set(getattr(item, "fixturenames", ()))]
    if unmarked:
        raise pytest.UsageError("tests that bring up a lab must be marked netns "
                                "(@pytest.mark.netns): " + ", ".join(unmarked))
    if NETNS_PROBLEM:
        skip = pytest.mark.skip(reason=NETNS_PROBLEM)
        for item in items:
            if "netns" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def probe_bin():
    path = labutil.probe_binary()
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built: run ninja -C {labutil.build_dir()} "
                    "(or set DETWAN_BUILD_DIR)")
    return path


@pytest.fixture(scope="session")
def wanem_ready():
    """The emulator must be built (or replaced for development via DETWAN_WANEM_CMD), and no
    lab may be up already: tests create and remove their own."""
    if not os.environ.get("DETWAN_WANEM_CMD") and not os.access(labutil.wanem_binary(), os.X_OK):
        pytest.fail(f"{labutil.wanem_binary()} is not built: run ninja -C "
                    f"{labutil.build_dir()} (or set DETWAN_BUILD_DIR)")
    left = labutil.namespaces()
    if left:
        pytest.fail(f"a lab is already up ({', '.join(left)}): run tools/testbed down first")
    yield
    # Belt and braces: nothing may survive the session.
    if labutil.namespaces():
        labutil.tb("down", "-q")


@pytest.fixture(scope="module")
def agentlab(wanem_ready):
    """One 3-site lab with two disjoint WAN paths per pair, the uring gateways and the control
    agent, for a module's tests (test_agent*.py); always torn down."""
    from agent_lab import WAN
    with labutil.lab("--sites", "3", "--paths", "2", "--dataplane", "uring", "--agents",
                     "--wan", WAN) as st:
        os.environ["DETWAN_AGENT"] = st["agents"][0]["url"]
        yield st
        os.environ.pop("DETWAN_AGENT", None)
