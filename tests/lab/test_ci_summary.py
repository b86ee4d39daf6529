"""tools/ci/summarize.py, the closing summary of the README's test command (hermetic: no
namespaces; it lives here because this is the Python suite CI runs).

Every suite's counts add up into the one closing line "N passed, N failed" (a script test without
a report of cases counts as one), and every skipped
test says why on the lines before it: GoogleTest's skip messages come from the output meson
kept (its JSON report has none), pytest's from the JUnit XML.
"""
import json
import pathlib
import subprocess
import sys

SUMMARIZE = pathlib.Path(__file__).resolve().parents[2] / "tools" / "ci" / "summarize.py"

GTEST_REPORT = {
    "testsuites": [{
        "name": "Backends/ChannelTest",
        "testsuite": [
            {"name": "Echo/udp", "result": "COMPLETED"},
            {"name": "Echo/verbs", "result": "SKIPPED"},
            {"name": "Flaps/udp", "result": "COMPLETED", "failures": [{"failure": "x"}]},
        ],
    }]
}
GTEST_STDOUT = ("[ RUN      ] Backends/ChannelTest.Echo/verbs\n"
                "../tests/transport/backends/channel_test.cc:74: Skipped\n"
                "verbs: no RDMA device (ibv_get_device_list found 0 devices)\n"
                "[  SKIPPED ] Backends/ChannelTest.Echo/verbs (0 ms)\n")
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.lab.test_x" name="test_a"/>
<testcase classname="tests.lab.test_x" name="test_b">
<skipped type="pytest.skip" message="Slurm daemons are not installed">...</skipped></testcase>
</testsuite></testsuites>
"""


def run(tmp_path):
    unit = tmp_path / "unit"
    unit.mkdir()
    (unit / "transport_channel_test.json").write_text(json.dumps(GTEST_REPORT))
    build = tmp_path / "build"
    (build / "meson-logs").mkdir(parents=True)
    testlog = build / "meson-logs" / "testlog.json"
    # A binary of meson's protocol 'gtest' leaves <build>/<test>.xml, named after the test
    # alone, while the log names it "project:suite / test" (a project with several suites).
    (build / "dataplane_gw_engine_test.xml").write_text(
        '<testsuites><testsuite name="Engine"><testcase classname="Engine" name="a"/>'
        '<testcase classname="Engine" name="b"/></testsuite></testsuites>')
    testlog.write_text("\n".join(json.dumps(e) for e in [
        {"name": "detwan:unit / dataplane_gw_engine_test", "result": "OK",
         "command": ["/b/tests/dataplane/gw/dataplane_gw_engine_test"]},
        {"name": "transport_channel_test", "result": "FAIL", "stdout": GTEST_STDOUT,
         "command": ["/b/tests/transport/transport_channel_test"]},
        # Scripts (no report of cases): one test each, as meson saw it.
        {"name": "version_everywhere", "result": "OK", "command": ["/s/tests/version-check"]},
        {"name": "install_tree", "result": "FAIL", "command": ["/s/tests/install-check"]},
    ]) + "\n")
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "lab.xml").write_text(JUNIT)
    return subprocess.run(
        [sys.executable, str(SUMMARIZE), f"unit={unit}:{testlog}", f"lab={lab}"],
        capture_output=True, text=True, check=False)


def test_counts_every_suite_and_says_why_each_test_was_skipped(tmp_path):
    result = run(tmp_path)
    lines = result.stdout.splitlines()
    assert lines[-1] == "5 passed, 2 failed"
    assert result.returncode == 1  # something failed
    assert "  FAILED: unit/Backends/ChannelTest.Flaps/udp" in lines
    assert "  FAILED: unit/install_tree: FAIL (exit status)" in lines
    assert "  2 skipped, why:" in lines
    assert "    unit: 1 x verbs: no RDMA device (ibv_get_device_list found 0 devices)" in lines
    assert "    lab: 1 x Slurm daemons are not installed" in lines
