"""tools/testbed up/down guarantees: bad input rejected before anything exists, failed or
crashed `up` leaves nothing that `down` cannot remove, `down` is idempotent."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

import labutil
from labutil import tb

pytestmark = pytest.mark.netns


@pytest.fixture
def teardown(wanem_ready):
    """For tests that build labs by hand: whatever they leave is removed."""
    yield
    assert tb("down", "-q").returncode == 0
    assert labutil.namespaces() == []


def assert_nothing_left(pids: list[int]) -> None:
    assert labutil.namespaces() == []
    assert not (labutil.RUN_DIR / "state.json").exists()
    alive = [p for p in pids if labutil.pid_alive(p)]
    assert alive == [], f"processes survived down: {alive}"


def test_bad_spec_is_rejected_before_anything_is_made(teardown):
    res = tb("up", "--wan", "delay=10ms,lsos=1%")
    assert res.returncode == 2
    assert "lsos" in res.stderr
    assert_nothing_left([])
    res = tb("up", "--paths", "2", "--wan", "delay=1ms", "--wan-path", "2=loss=120%")
    assert res.returncode == 2
    assert "loss=120%" in res.stderr and "--wan-path 2" in res.stderr
    assert_nothing_left([])


def test_down_after_killed_emulator_and_stray_process_is_clean_and_idempotent(teardown):
    tb("up", "-q", check=True)
    st = labutil.status()
    pids = [p["pid"] for p in st["paths"]]
    os.kill(pids[0], signal.SIGKILL)
    # A process started in a site outlives `ip netns del` unless down stops it.
    stray = subprocess.Popen([str(labutil.TESTBED), "exec", "b", "--", "sleep", "300"],
                             start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while labutil.pid_alive(pids[0]) and time.monotonic() < deadline:
            time.sleep(0.02)
        res = tb("status", "--json")
        assert res.returncode == 3  # degraded
        assert "DEAD" in tb("status").stdout
        assert tb("down").returncode == 0
        stray.wait(timeout=10)  # reaped here: down must have killed it
        assert_nothing_left(pids)
        res = tb("down")
        assert res.returncode == 0 and "no lab" in res.stdout
        res = tb("status")
        assert res.returncode == 1 and "no lab is up" in res.stderr
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait(timeout=5)


def test_down_cleans_a_crashed_half_up_without_a_usable_state_file(teardown):
    res = tb("up", "--sites", "3", env={"DETWAN_TESTBED_CRASH_AFTER": "start_emulators"})
    assert res.returncode == 70  # died without cleaning up
    left = labutil.namespaces()
    assert len(left) == 3 * 3 + 3  # host, gateway, cross host per site; a WAN per pair
    pids = [int((labutil.RUN_DIR / f).read_text().split()[0])
            for f in os.listdir(labutil.RUN_DIR) if f.endswith(".pid")]
    assert len(pids) == 3 and all(labutil.pid_alive(p) for p in pids)
    (labutil.RUN_DIR / "state.json").write_text("{ truncated")
    res = tb("status")
    assert res.returncode == 1 and "leftover namespaces" in res.stderr
    res = tb("up")
    assert res.returncode != 0 and "already up" in res.stderr
    assert tb("down").returncode == 0
    assert_nothing_left(pids)


def test_failed_up_removes_what_it_made(teardown):
    res = tb("up", "--paths", "2", env={"DETWAN_TESTBED_FAIL_AFTER": "start_emulators"})
    assert res.returncode == 1
    assert "injected failure" in res.stderr and "removed everything" in res.stderr
    assert_nothing_left([])


def test_interrupted_up_removes_what_it_made(teardown):
    # loss=100% keeps `up` in its (bounded) reachability check long enough to be interrupted.
    proc = subprocess.Popen([str(labutil.TESTBED), "up", "--wan", "loss=100%"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st = labutil.RUN_DIR / "state.json"
            if st.exists() and '"step": "check_reachability"' in st.read_text():
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode != 0
        assert "interrupted" in err and "removed everything" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert_nothing_left([])

