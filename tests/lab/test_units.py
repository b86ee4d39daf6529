"""The unit grammar, one table (units_table.txt) checked against both implementations:
tools/lab/units.py directly, and common/units.cc through `detwan-wanem check-spec`, which parses
each value with common::parse_duration_ns / parse_rate_bps / parse_size_bytes / parse_fraction
and prints the spec's canonical form (or the parser's reason). No root needed."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

import labutil

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import units  # noqa: E402

TABLE = labutil.REPO / "tests" / "lab" / "units_table.txt"
PARSERS = {"duration": units.parse_duration_ns, "rate": units.parse_rate_bps,
           "size": units.parse_size_bytes, "fraction": units.parse_fraction}
# The detwan-wanem spec key whose value each kind's common/units.cc parser reads.
WANEM_KEY = {"duration": "delay", "rate": "rate", "size": "queue", "fraction": "loss"}
# detwan-wanem refuses delays above one day (kMaxDurationNs), whatever common/units accepts.
WANEM_MAX_DELAY_NS = 86_400_000_000_000


def table() -> list[tuple[str, str, int | float | None, str | None, int]]:
    """(kind, text, value or None, error part or None, line)."""
    rows = []
    for n, line in enumerate(TABLE.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        kind, text, expected = line.split(None, 2)
        assert kind in PARSERS, f"{TABLE.name}:{n}: unknown kind {kind}"
        if expected.startswith("!"):
            rows.append((kind, text, None, expected[1:].strip(), n))
        else:
            value = float(expected) if kind == "fraction" else int(expected)
            rows.append((kind, text, value, None, n))
    return rows


ROWS = table()
IDS = [f"{kind}:{text}" for kind, text, _, _, _ in ROWS]


def same(kind: str, got, want) -> bool:
    return math.isclose(got, want, rel_tol=1e-12) if kind == "fraction" else got == want


def test_the_table_covers_every_kind_with_values_and_errors():
    for kind in PARSERS:
        assert any(k == kind and v is not None for k, _, v, _, _ in ROWS), kind
        assert any(k == kind and e is not None for k, _, _, e, _ in ROWS), kind


@pytest.mark.parametrize("kind, text, value, error, line", ROWS, ids=IDS)
def test_python_units(kind, text, value, error, line):
    parse = PARSERS[kind]
    if error is None:
        got = parse(text)
        assert same(kind, got, value), f"units_table.txt:{line}: {text} -> {got}, not {value}"
        assert type(got) is (float if kind == "fraction" else int)
    else:
        with pytest.raises(ValueError) as e:
            parse(text)
        assert error in str(e.value), f"units_table.txt:{line}: {e.value}"


def wanem_binary() -> str:
    path = str(labutil.wanem_binary())
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built")
    return path


@pytest.mark.parametrize("kind, text, value, error, line", ROWS, ids=IDS)
def test_cpp_units_through_wanem_check_spec(kind, text, value, error, line):
    if kind == "duration" and value is not None and value > WANEM_MAX_DELAY_NS:
        pytest.skip("detwan-wanem caps delays at one day")
    key = WANEM_KEY[kind]
    res = subprocess.run([wanem_binary(), "check-spec", f"{key}={text}"], capture_output=True,
                         text=True, timeout=10, stdin=subprocess.DEVNULL)
    said = (res.stdout + res.stderr).strip()
    if error is not None:
        assert res.returncode != 0 and error in said, f"units_table.txt:{line}: {said}"
        return
    assert res.returncode == 0, f"units_table.txt:{line}: {said}"
    # The canonical form prints the value exactly (at most three decimals of the largest unit
    # that allows it) and leaves out a zero; read it back with the (table-checked) Python side.
    fields = dict(t.split("=", 1) for t in res.stdout.split())
    got = PARSERS[kind](fields[key]) if key in fields else 0
    assert same(kind, got, value), f"units_table.txt:{line}: C++ gives {fields.get(key)}"
