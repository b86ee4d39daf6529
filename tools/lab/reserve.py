"""Reservations through the lab's detwan-agent, for the benchmarks and tests that run jobs over
a reserved tunnel (`detwan-bench COLLECTIVE --lab --reserve RATE`, compare-allreduce
--dataplane). Plain HTTP/JSON on the agent's API (docs/control-api.md) from the root namespace;
errors carry the agent's own message.
"""
from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request


class ReserveError(Exception):
    pass


def call(url: str, method: str, path: str, body: dict | None = None,
         timeout_s: float = 30.0) -> dict:
    """One API call; the answer's JSON, or ReserveError naming the agent's error."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as answer:
            return json.loads(answer.read().decode())
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        try:
            err = json.loads(text)["error"]
            text = f"{err.get('code')}: {err.get('message')}"
        except (ValueError, KeyError, TypeError):
            pass
        raise ReserveError(f"{method} {path}: HTTP {e.code}: {text}") from e
    except (OSError, urllib.error.URLError) as e:
        raise ReserveError(f"{method} {url}{path}: {e}") from e


def reserve(url: str, src: str, dst: str, rate_bps: int, duration_s: float = 3600,
            burst_bytes: int | None = None, max_latency_ns: int | None = None,
            protect: str | None = None, encrypt: str | None = None) -> dict:
    """Reserves and provisions src<->dst at rate_bps each way; the provisioned reservation.
    protect="1+1": every packet on two link-disjoint paths (the lab needs --paths 2). encrypt:
    the tunnel's cipher, or "none" (by name) for a tunnel in clear; None: the agent's default
    (encrypted)."""
    body = {"src": src, "dst": dst, "min_bandwidth_bps": int(rate_bps),
            "duration_ns": int(duration_s * 1e9), "provision": True}
    if encrypt is not None:
        body["encrypt"] = encrypt
    if protect:
        body["protect"] = protect
    if burst_bytes:
        body["max_burst_bytes"] = int(burst_bytes)
    if max_latency_ns:
        body["max_latency_ns"] = int(max_latency_ns)
    r = call(url, "POST", "/v1/reservations", body)
    if r.get("state") != "provisioned" or not r.get("dataplane", {}).get("active"):
        with contextlib.suppress(ReserveError):
            end(url, r["id"])
        raise ReserveError(f"reservation {r.get('id')} of {src}<->{dst} is {r.get('state')}, "
                           f"dataplane {r.get('dataplane')}")
    return r


def release(url: str, rid: str) -> dict:
    return call(url, "POST", f"/v1/reservations/{rid}/release")


def end(url: str, rid: str) -> None:
    """Releases (if provisioned) and terminates; quiet about a reservation already gone."""
    with contextlib.suppress(ReserveError):
        release(url, rid)
    with contextlib.suppress(ReserveError):
        call(url, "DELETE", f"/v1/reservations/{rid}")


def summary(r: dict) -> dict:
    """What a report shows of a reservation."""
    bound = r.get("bound", {})
    return {"id": r["id"], "sites": [r["src"], r["dst"]], "rate_bps": r["min_bandwidth_bps"],
            "burst_bytes": r.get("burst_bytes"), "path": r.get("path"),
            "max_latency_ns": bound.get("max_latency_ns"),
            "max_latency_variation_ns": bound.get("max_latency_variation_ns"),
            "delivery": bound.get("delivery"),
            "tunnel_mtu_bytes": r.get("tunnel", {}).get("mtu_bytes")}


@contextlib.contextmanager
def reserved_pairs(url: str, sites: list[str], rate_bps: int, **kwargs):
    """Provisions one reservation per pair of `sites` for the duration of the block; ends them
    all afterwards, also on failure. Yields the reservations."""
    made: list[dict] = []
    try:
        for i, a in enumerate(sites):
            for b in sites[i + 1:]:
                made.append(reserve(url, a, b, rate_bps, **kwargs))
        yield made
    finally:
        for r in made:
            end(url, r["id"])
