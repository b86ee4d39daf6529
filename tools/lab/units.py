"""The unit grammar of common/units.h, for the lab's Python side: the same texts are accepted,
give the same values and are refused with the same messages as common/units.cc's parsers
(tests/lab/test_units.py checks one table against both, the C++ side through
`detwan-wanem check-spec`). Durations ('10ms', '1.5us', '10m' = minutes, '6h', '1d', '0'; whole
nanoseconds), rates ('200mbit', '1gbps' = bits, '1GBps' or '1gbyte' = bytes/s; decimal
prefixes; whole bits/s), sizes ('1g' = '1gb' = '1gib' = 2^30, '1500'; binary prefixes, whole
bytes) and fractions ('1%', '0.01'). Shares ('150%', '1.5') are the lab's own. Errors are
ValueError naming the text."""
from __future__ import annotations

import argparse
import math
import re
from typing import Any, Callable

# More significant digits than this cannot be scaled inside 128 bits in C++ (kMaxDigits).
_MAX_DIGITS = 24
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1
_DURATION_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
                   "m": 60_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000,
                   "d": 86_400_000_000_000}
_SIZE_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_RATE_PREFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
# std::from_chars(double) as parse_fraction uses it: digits with an optional point and exponent.
_FLOAT_PREFIX = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SPACE = " \t\n\v\f\r"  # std::isspace in the C locale


def _lower(text: str) -> str:
    """ASCII lower case (common::lower): other characters unchanged."""
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in text)


def _decimal(text: str, example: str) -> tuple[bool, int, int, str]:
    """'[+-]digits[.digits]' at the start of text: (negative, digits as an integer, digits
    after the point, the rest)."""
    pos, negative = 0, False
    if text[:1] in ("-", "+"):
        negative, pos = text[0] == "-", 1
    digits = frac_digits = significant = total = 0
    seen_point = False
    while pos < len(text):
        c = text[pos]
        if c == "." and not seen_point:
            seen_point = True
            pos += 1
            continue
        if not "0" <= c <= "9":
            break
        total += 1
        frac_digits += seen_point
        if significant > 0 or c != "0":
            significant += 1
        if significant > _MAX_DIGITS:
            raise ValueError(f"'{text}': too many digits (out of range)")
        digits = digits * 10 + ord(c) - ord("0")
        pos += 1
    if total == 0:
        raise ValueError(f"'{text}': not a number (expected e.g. '{example}')")
    return negative, digits, frac_digits, text[pos:]


def _scale(text: str, digits: int, frac_digits: int, multiplier: int, limit: int,
           base_unit: str) -> int:
    value, rest = divmod(digits * multiplier, 10**frac_digits)
    if rest:
        raise ValueError(f"'{text}': finer than 1 {base_unit} resolution")
    if value > limit:
        raise ValueError(f"'{text}': out of range")
    return value


def parse_duration_ns(raw: str, allow_negative: bool = False) -> int:
    """'10ms', '1.5ms', '250us', '10m' (minutes), '6h', '1d', '0' -> ns (a whole number)."""
    text = raw.strip(_SPACE)
    if not text:
        raise ValueError("empty duration (expected e.g. '10ms')")
    negative, digits, frac_digits, suffix = _decimal(text, "10ms")
    if negative and not allow_negative and digits != 0:
        raise ValueError(f"'{text}': negative duration not allowed")
    unit = _lower(suffix)
    multiplier = 1
    if not unit:
        if digits != 0:
            raise ValueError(f"'{text}': missing duration unit (use ns, us, ms, s, m, h, d; "
                             "only 0 may be written without one)")
    elif unit in _DURATION_UNITS:
        multiplier = _DURATION_UNITS[unit]
    else:
        raise ValueError(f"'{text}': unknown duration unit '{suffix}' "
                         "(use ns, us, ms, s, m, h, d)")
    value = _scale(text, digits, frac_digits, multiplier, _INT64_MAX + negative, "ns")
    return -value if negative else value


def _rate_unit_bits(rest: str) -> int | None:
    low = _lower(rest)
    if rest[:1] == "B" and low in ("bps", "b/s"):
        return 8
    if low in ("bit", "bits", "bit/s", "bps", "b/s"):
        return 1
    if low in ("byte", "bytes", "byte/s", "bytes/s"):
        return 8
    return None


def parse_rate_bps(raw: str) -> int:
    """'100mbit', '1gbit', '1gbps' -> bit/s; '1GBps', '1gbyte' -> 8e9 bit/s."""
    text = raw.strip(_SPACE)
    if not text:
        raise ValueError("empty rate (expected e.g. '1gbit')")
    negative, digits, frac_digits, suffix = _decimal(text, "1gbit")
    if negative:
        raise ValueError(f"'{text}': negative rate")
    if not suffix:
        raise ValueError(f"'{text}': missing rate unit (e.g. bit, kbit, mbit, gbit)")
    prefix = 1
    per_unit = _rate_unit_bits(suffix)
    if per_unit is None:
        prefix = _RATE_PREFIXES.get(_lower(suffix[0]), 0)
        if prefix:
            per_unit = _rate_unit_bits(suffix[1:])
    if per_unit is None:
        raise ValueError(f"'{text}': unknown rate unit '{suffix}' (use bit, kbit, mbit, gbit, "
                         "tbit; 'gbps' = gbit/s, 'GBps' or 'gbyte' = gigabytes/s)")
    return _scale(text, digits, frac_digits, prefix * per_unit, _UINT64_MAX, "bit/s")


def parse_size_bytes(raw: str) -> int:
    """'1g' = '1gb' = '1gib' = 2^30, '4m', '1.5k' = 1536, '1500' -> bytes."""
    text = raw.strip(_SPACE)
    if not text:
        raise ValueError("empty size (expected e.g. '64kb')")
    negative, digits, frac_digits, suffix = _decimal(text, "64kb")
    if negative:
        raise ValueError(f"'{text}': negative size")
    unit = _lower(suffix)
    multiplier = 1
    if unit and unit not in ("byte", "bytes"):
        # "k", "kb" and "kib" are all 1024 bytes, as in tc.
        prefix = unit
        if len(prefix) == 3 and prefix.endswith("ib"):
            prefix = prefix[:1]
        if len(prefix) == 2 and prefix[0] != "b" and prefix[1] == "b":
            prefix = prefix[:1]
        if prefix not in _SIZE_UNITS:
            raise ValueError(f"'{text}': unknown size unit '{suffix}' (use b, kb, mb, gb, tb; "
                             "1kb = 1024 b)")
        multiplier = _SIZE_UNITS[prefix]
    return _scale(text, digits, frac_digits, multiplier, _UINT64_MAX, "byte")


def parse_fraction(raw: str) -> float:
    """'1%', '0.1%', '0.01' -> a fraction in [0, 1]."""
    text = raw.strip(_SPACE)
    if not text:
        raise ValueError("empty fraction (expected e.g. '0.1%')")
    if text[0] == "-":
        raise ValueError(f"'{text}': negative fraction (must be in [0, 1] or 0%..100%)")
    m = _FLOAT_PREFIX.match(text)
    if m is None:  # also nan, inf, +x
        raise ValueError(f"'{text}': not a number (expected e.g. '0.1%' or '0.001')")
    value = float(m.group())
    if not math.isfinite(value):
        raise ValueError(f"'{text}': out of range")
    rest = text[m.end():]
    if rest == "%":
        value /= 100.0
    elif rest:
        raise ValueError(f"'{text}': unexpected '{rest}' after the number (use '%' or a bare "
                         "fraction)")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"'{text}': must be in [0, 1] (or 0%..100%)")
    return value


def parse_share(text: str) -> float:
    """'150%', '80%', '1.5' -> a non-negative factor (unlike a fraction it may exceed 1)."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"'{text}': expected a share like 150% or 1.5") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"'{text}': a share must be a finite number >= 0")
    return value


def format_duration(ns: int) -> str:
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns and ns % scale == 0:
            return f"{ns // scale}{unit}"
    return f"{ns}ns" if ns else "0"


def format_rate(bps: int) -> str:
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps % scale == 0:
            return f"{bps // scale}{unit}"
    return f"{bps}bit"


def arg_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from one of the parsers above: its ValueError becomes the usage error."""
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = parse.__name__
    return convert


def list_type(parse: Callable[[str], Any]) -> Callable[[str], list]:
    """An argparse type for a comma-separated list, each item read by `parse`."""
    def convert(text: str):
        try:
            return [parse(t) for t in text.split(",") if t.strip()]
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = parse.__name__ + "_list"
    return convert
