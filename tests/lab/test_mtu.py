"""`tools/testbed up --mtu`: every link of the lab carries frames of that size end to end
through the emulator (which sizes its buffers from the MTU), and nothing larger."""
from __future__ import annotations

import pytest

import labutil
from labutil import tb

pytestmark = pytest.mark.netns


def ping_df(src: str, addr: str, payload_bytes: int) -> bool:
    """One ping of `payload_bytes` with don't-fragment set: crosses only if every link fits it
    (IP packet = payload + 28)."""
    for _ in range(3):
        res = tb("exec", src, "--", "ping", "-n", "-q", "-c", "1", "-W", "1", "-M", "do", "-s",
                 str(payload_bytes), addr, timeout=10)
        if res.returncode == 0:
            return True
    return False


def test_jumbo_lab_carries_9000_byte_packets_and_no_more(wanem_ready):
    with labutil.lab("--mtu", "9000", "--wan", "delay=1ms,rate=200mbit") as st:
        assert st["options"]["mtu"] == 9000
        b = st["sites"][1]["best_effort_addr"]
        assert ping_df("a", b, 9000 - 28), "a full 9000-byte packet did not cross the lab"
        assert not ping_df("a", b, 9000 - 28 + 1), "a packet above the MTU crossed"


def test_default_lab_has_mtu_1500(wanem_ready):
    with labutil.lab("--wan", "delay=1ms") as st:
        assert st["options"]["mtu"] == 1500
        b = st["sites"][1]["best_effort_addr"]
        assert ping_df("a", b, 1500 - 28)
        assert not ping_df("a", b, 1500 - 28 + 1)


def test_bad_mtu_and_mtu_with_gateways_are_refused():
    res = tb("up", "--mtu", "100")
    assert res.returncode == 2 and "--mtu 100" in res.stderr
    res = tb("up", "--mtu", "9000", "--dataplane", "uring")
    assert res.returncode == 2 and "--dataplane" in res.stderr
    assert labutil.namespaces() == [], "a refused up created namespaces"
