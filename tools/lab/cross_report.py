"""What real cross traffic achieved (tools/lab/cross.py): iperf3's JSON reports, `ss -ti` and
the totals. Pure functions on text and dicts, tested without root in tests/lab/test_cross.py.

Where the numbers come from: `cross.stop` interrupts each iperf3 *server* (the receiver) first.
The server then prints its JSON report (bytes received per stream, for UDP the lost packets
and jitter) over an accurate duration, and tells its client, which prints its own report
(bytes sent, retransmits, the congestion control) and exits. A client interrupted first makes
its server report a nonsensical duration (seen with iperf3 3.12 and `-t 0`: hours for a run
of seconds), and a server interrupted first makes its client do the same, so durations are
taken from the server and checked against the wall-clock time of the run.
"""
from __future__ import annotations

import json
import pathlib

DURATION_SLACK_S = 5.0   # a reported duration longer than the run by more than this is wrong
# `ss -ti` also lists iperf3's control connection, which uses the namespace's default
# congestion control; a data connection has carried far more than this.
DATA_CONNECTION_MIN_BYTES = 64 * 1024


def load_json(path: pathlib.Path | str) -> dict | None:
    """iperf3's JSON output (-J) from a file; None if missing, empty or cut short (a killed
    iperf3 writes nothing)."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _seconds(reported: float | None, wall_s: float) -> tuple[float, str]:
    """The run's duration: iperf3's when it is plausible, else the wall-clock time."""
    if reported and 0 < reported <= wall_s + DURATION_SLACK_S:
        return float(reported), "iperf3"
    return max(wall_s, 1e-9), "wall-clock"


def group_flows(group: dict, server: dict | None, client: dict | None,
                wall_s: float) -> list[dict]:
    """The flows (iperf3 streams) of one group (a record of cross.FlowGroup.to_record) with
    what they achieved: received bytes and bits/s at the receiver, sent bytes at the sender,
    TCP retransmits and congestion control, UDP loss and jitter. `error` names what is
    missing."""
    s_end = (server or {}).get("end") or {}
    c_end = (client or {}).get("end") or {}
    errors = []
    if not s_end:
        errors.append("no receiver report" + (f" ({server.get('error')})"
                                              if server and server.get("error") else ""))
    if not c_end:
        errors.append("no sender report" + (f" ({client.get('error')})"
                                            if client and client.get("error") else ""))
    base = {"group": group["id"], "src": group["src"], "dst": group["dst"],
            "kind": group["kind"], "cc": group.get("cc"),
            "offered_bps": group["stream_rate_bps"]}
    flows = []
    if group["kind"] == "udp":
        recv = s_end.get("sum_received") or s_end.get("sum") or {}
        sent = c_end.get("sum_sent") or c_end.get("sum") or {}
        seconds, source = _seconds(recv.get("seconds"), wall_s)
        flows.append(dict(base, id=f"{group['id']}", received_bytes=recv.get("bytes", 0),
                          sent_bytes=sent.get("bytes", 0), seconds=seconds,
                          seconds_from=source,
                          achieved_bps=recv.get("bytes", 0) * 8 / seconds,
                          packets=recv.get("packets"), lost_packets=recv.get("lost_packets"),
                          lost_percent=recv.get("lost_percent"),
                          jitter_ms=recv.get("jitter_ms"),
                          error="; ".join(errors) or None))
        return flows
    s_streams = s_end.get("streams") or []
    c_streams = c_end.get("streams") or []
    cc = c_end.get("sender_tcp_congestion") or s_end.get("receiver_tcp_congestion")
    if cc and group.get("cc") and cc != group["cc"]:
        errors.append(f"iperf3 reports congestion control {cc}, not {group['cc']}")
    for i in range(group["streams"]):
        recv = (s_streams[i].get("receiver") or {}) if i < len(s_streams) else {}
        sent = (c_streams[i].get("sender") or {}) if i < len(c_streams) else {}
        seconds, source = _seconds(recv.get("seconds"), wall_s)
        flows.append(dict(base, id=f"{group['id']}-{i + 1}", cc_reported=cc,
                          received_bytes=recv.get("bytes", 0), sent_bytes=sent.get("bytes", 0),
                          seconds=seconds, seconds_from=source,
                          achieved_bps=recv.get("bytes", 0) * 8 / seconds,
                          retransmits=sent.get("retransmits"),
                          error="; ".join(errors) or None))
    return flows


def totals(flows: list[dict]) -> dict:
    """Sums of achieved bits/s: all flows, TCP, UDP, per kind ("cubic", "bbr", "udp": a TCP
    flow counts under its congestion control) and per direction ("ab")."""
    sums = {"achieved_bps": 0.0, "tcp_bps": 0.0, "udp_bps": 0.0}
    by_kind: dict[str, float] = {}
    by_direction: dict[str, float] = {}
    for f in flows:
        bps = f["achieved_bps"]
        kind = "udp" if f["kind"] == "udp" else (f.get("cc") or "tcp")
        direction = f["src"] + f["dst"]
        sums["achieved_bps"] += bps
        sums["tcp_bps" if f["kind"] == "tcp" else "udp_bps"] += bps
        by_kind[kind] = by_kind.get(kind, 0.0) + bps
        by_direction[direction] = by_direction.get(direction, 0.0) + bps
    return {**sums, "by_kind": by_kind, "by_direction": by_direction, "flows": len(flows),
            "flows_with_errors": sum(1 for f in flows if f.get("error"))}


def parse_ss_ti(text: str, known_cc: set[str],
                min_bytes: int = DATA_CONNECTION_MIN_BYTES) -> list[dict]:
    """`ss -Htin` output -> [{local, peer, cc, bytes_acked}] per connection; the congestion
    control is the info line's token that names a known algorithm. Connections that carried
    fewer than `min_bytes` (iperf3's control connection) are left out."""
    conns = []
    current: dict | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            parts = line.split()
            current = {"local": parts[-2] if len(parts) >= 2 else "",
                       "peer": parts[-1] if parts else "", "cc": None, "bytes_acked": 0}
            conns.append(current)
            continue
        if current is None:
            continue
        for token in line.split():
            if token in known_cc and current["cc"] is None:
                current["cc"] = token
            elif token.startswith("bytes_acked:"):
                current["bytes_acked"] = int(token.split(":", 1)[1])
    return [c for c in conns if c["bytes_acked"] >= min_bytes]


def count_cc(conns: list[dict]) -> dict[str, int]:
    """{congestion control: number of connections}."""
    counts: dict[str, int] = {}
    for c in conns:
        key = c["cc"] or "unknown"
        counts[key] = counts.get(key, 0) + 1
    return counts
