"""The unit grammar of common/units.h for the lab's Python side: durations ('10ms', '250us',
'0'), rates ('200mbit', '1gbps': bits, decimal prefixes), sizes ('1g' = 2^30, '4m', '20mb':
binary prefixes), fractions ('1%', '0.01') and shares ('150%', '1.5'). Errors are ValueError
naming the text."""
from __future__ import annotations

import argparse
import re
from typing import Any, Callable

_DURATION_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_RATE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_duration_ns(text: str) -> int:
    """'10ms', '1.5ms', '250us', '0' -> ns."""
    t = text.strip().lower()
    if t == "0":
        return 0
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ns|us|ms|s)", t)
    if not m:
        raise ValueError(f"'{text}': expected a duration like 15ms, 500us or 0")
    return round(float(m.group(1)) * _DURATION_UNITS[m.group(2)])


def parse_rate_bps(text: str) -> int:
    """'100mbit', '1gbit', '1gbps' -> bit/s."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)", text.strip().lower())
    if not m:
        raise ValueError(f"'{text}': expected a rate like 100mbit or 1gbit")
    return round(float(m.group(1)) * _RATE_UNITS[m.group(2)])


def parse_size_bytes(text: str) -> int:
    """'1g' = 2^30, '4m', '20mb', '1500' -> bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?", text.strip().lower())
    if not m:
        raise ValueError(f"'{text}': expected a size like 1g, 4m or 1500")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def parse_fraction(text: str) -> float:
    """'1%', '0.1%', '0.01' -> a fraction in [0, 1]."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"'{text}': expected a fraction like 1% or 0.01") from None
    if not 0 <= value <= 1:
        raise ValueError(f"'{text}': fraction must be in [0, 1] (or 0%..100%)")
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
