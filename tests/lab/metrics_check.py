"""Checks of Prometheus expositions and of the Grafana dashboards in docs/grafana/ against them
(used by the lab's metrics test; pure functions, no root).

A dashboard query names metrics; every one must be a series name a real exposition has (with
prometheus_client's parser: counters as NAME_total, histograms as NAME_bucket/_sum/_count), or
the panel shows nothing and nobody notices until the day it is needed."""
from __future__ import annotations

import json
import pathlib
import re

from prometheus_client.parser import text_string_to_metric_families

GRAFANA = pathlib.Path(__file__).resolve().parents[2] / "docs" / "grafana"

# PromQL words that are not metric names (functions are recognised by the '(' after them).
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
             "unless", "bool", "offset", "inf", "nan"}


def series_names(exposition: str) -> set[str]:
    """Every sample name of the exposition (parsed by the official client: raises on bad text)."""
    return {s.name for family in text_string_to_metric_families(exposition)
            for s in family.samples}


def families(exposition: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(exposition)}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)           # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)                    # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)                   # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        after = text[m.end():].lstrip()
        if after.startswith("(") or word.lower() in _KEYWORDS:
            continue  # a function or a keyword
        if text[:m.start()].rstrip().endswith(("$",)):
            continue  # a dashboard variable
        names.add(word)
    return names


def dashboard_queries(path: pathlib.Path) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every templating query of a dashboard."""
    doc = json.loads(path.read_text())
    out = []
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            out.append((f"{path.name}: panel '{panel['title']}' {target['refId']}", target["expr"]))
    for var in doc.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)", query.strip())
        out.append((f"{path.name}: variable ${var['name']}", m.group(1) if m else query))
    return out


def unknown_dashboard_metrics(known: set[str]) -> list[str]:
    """'where: name' for every metric a dashboard query names that `known` lacks."""
    missing = []
    for path in sorted(GRAFANA.glob("*.json")):
        for where, expr in dashboard_queries(path):
            for name in sorted(metric_names(expr)):
                if name not in known:
                    missing.append(f"{where}: {name}")
    return missing
