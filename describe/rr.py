# SPDX-License-Identifier: GPL-2.0-only
"""The record's `rr` for `--pattern rr`: request/response latency as seed
003 (Peng et al.) measures it, from the client's per-request reports
(workloads/wl.h, the "rr" event).

Open loop: request k is due at t0 + k x period whatever the replies do,
and its response delay runs from its due time (not from when it was
actually sent), so a stalled client or connection shows in the figures
instead of hiding them (no coordinated omission). The window's requests
are those due inside it: requests_due counts the schedule's due times in
it, so responses never exceed it.

Closed loop (--rr-mode closed, secnetperf's rps and latency): each
connection keeps its requests in flight and sends the next when an answer
comes; a request is due when it went, so its delay is the round trip,
none is late, and the rate is what the transport gives (requests_per_s).

The delays go into an HDR histogram (HdrHistogram_py: 1 ns units up to
60 s, three significant digits, so every percentile is within 0.1% at any
delay; a coarser unit would be a fixed step, 0.8% of a 65 us delay), kept
encoded in the record so it can be read again. A percentile is the top of
its bucket, so it is capped at the exact largest delay, which it can
never exceed. Jitter is the seed's: the mean of the
absolute differences between consecutive delays, as a percentage of the
mean delay.
"""

import statistics
from typing import Dict, List, Optional, Tuple

from hdrh.histogram import HdrHistogram

from qprof.describe import per_unit
from qprof.describe.derive import jain_index

PERCENTILES = (5, 25, 50, 75, 95, 99, 99.9, 99.99)
LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS = 1, 60_000_000_000, 3


def in_window(events: List[dict], start_ns: int, end_ns: int) -> List[dict]:
    """The requests due inside [start, end), in order of their sequence."""
    return sorted((e for e in events if start_ns <= e["due_ns"] < end_ns), key=lambda e: e["seq"])


def due_in_window(answered: List[dict], start_ns: int, end_ns: int, period_s: float, client_done: dict) -> int:
    """The open loop's requests due inside [start, end): the k, from 0 to
    the whole run's requests_due, with start <= t0 + k x period < end. A
    window of L periods holds int(L) or int(L) + 1 of them by where t0 falls
    against its start, so the length alone undercounts by one half the time
    and a window answered more than fell due in it. t0 from any answer (its
    due_ns less seq periods, qprof-wl's integer microseconds); with none,
    the length's count."""
    period_ns = 1000 * (client_done.get("period_us") or round(period_s * 1e6))
    if not answered:
        return int((end_ns - start_ns) / period_ns)
    t0 = answered[0]["due_ns"] - answered[0]["seq"] * period_ns
    first = max(0, -((t0 - start_ns) // period_ns))  # ceil((start - t0) / period)
    past = -((t0 - end_ns) // period_ns)
    if client_done.get("requests_due") is not None:
        past = min(past, client_done["requests_due"])
    return max(0, past - first)


def histogram(delays_ns: List[int]) -> HdrHistogram:
    h = HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
    for d in delays_ns:
        h.record_value(min(max(d, LOWEST_NS), HIGHEST_NS))
    return h


def delay_cdf_ms(*encoded: str) -> List[Tuple[float, float]]:
    """The cumulative distribution of the delays in one or more encoded
    histograms (a record's rr.histogram; several, a comparison's runs, are
    pooled): (delay ms, share of the delays at or below it), one point per
    distinct recorded value, each at the highest delay its bucket holds.
    No delays, no points."""
    if not encoded:
        return []
    h = HdrHistogram.decode(encoded[0])
    for more in encoded[1:]:
        h.add(HdrHistogram.decode(more))
    total = h.get_total_count()
    out, seen = [], 0
    if not total:
        return out
    for item in h.get_recorded_iterator():
        seen += item.count_at_value_iterated_to
        out.append((h.get_highest_equivalent_value(item.value_iterated_to) / 1e6, seen / total))
    return out


def jitter_percent(delays_ns: List[int]) -> Optional[float]:
    """Seed 003: mean |d(i) - d(i-1)| over the mean delay, in percent."""
    if len(delays_ns) < 2:
        return None
    mean_jitter = statistics.fmean(abs(b - a) for a, b in zip(delays_ns, delays_ns[1:]))
    mean = statistics.fmean(delays_ns)
    return 100 * mean_jitter / mean if mean > 0 else None


def describe(
    events: List[dict],
    start_ns: int,
    end_ns: int,
    period_s: float,
    payload: int,
    client_done: dict,
    rec: dict,
    wire: Optional[Dict[str, dict]],
    request: Optional[int] = None,
    response: Optional[int] = None,
    in_flight: Optional[int] = None,
) -> dict:
    """From the client's rr events, the window's edges (the client's clock),
    its done report and the record's core (CPU, syscalls). No period_s: a
    closed loop, with in_flight requests kept in flight in all."""
    answered = [e for e in events if e["event"] == "rr"]
    window = in_window(answered, start_ns, end_ns)
    seconds = (end_ns - start_ns) / 1e9
    closed = period_s is None
    due = None if closed else due_in_window(answered, start_ns, end_ns, period_s, client_done)
    delays = [e["answered_ns"] - e["due_ns"] for e in window]
    h = histogram(delays)
    late = None if closed else sum(1 for d in delays if d > period_s * 1e9)
    n = len(window)
    request = request or payload
    response = response or payload
    out = {
        "mode": "closed" if closed else "open",
        "period_s": period_s,
        "in_flight": in_flight if closed else None,
        # Both messages' size when they are one; else request and response say each.
        "payload": payload if request == response == payload else None,
        "request": request,
        "response": response,
        "requests_due": due,
        "responses": n,
        "requests_per_s": n / seconds if seconds > 0 else None,
        "late": late,
        "send_lag_ns_max": None if closed else max((e["sent_ns"] - e["due_ns"] for e in window), default=None),
        "delay_ns": {
            **{f"p{p:g}": min(h.get_value_at_percentile(p), max(delays)) if n else None for p in PERCENTILES},
            "min": min(delays, default=None),
            "max": max(delays, default=None),
            "mean": statistics.fmean(delays) if delays else None,
        },
        "jitter_percent": jitter_percent(delays),
        "connections": _per_connection(window, client_done.get("connections_opened")),
        "histogram": h.encode().decode() if n else None,
        "connections_opened": client_done.get("connections_opened"),
        "connections_per_1000_requests": (
            1000 * client_done["connections_opened"] / client_done["requests_sent"]
            if client_done.get("connections_opened") is not None and client_done.get("requests_sent")
            else None
        ),
        "whole_run": {
            k: client_done.get(k) if not (closed and k == "late") else None
            for k in ("requests_due", "requests_sent", "responses", "late", "outstanding")
        },
        "per_request": per_unit.costs(rec, n, wire),
        "flame_ns_per_request": per_unit.flame(rec, n),
        "data_volume": data_volume(rec, n, wire, client_done.get("connections_opened")),
    }
    return out


# Each way of a request and its response: who sends it, who checks it.
WAYS = {"client_to_server": ("client", "server"), "server_to_client": ("server", "client")}


def data_volume(rec: dict, n: int, wire: Optional[Dict[str, dict]], connections: Optional[int] = 1) -> Optional[dict]:
    """Seed 003's data volume per request (what the client sends) and per
    response (what the server sends), each split by layer, per answered
    request of the window:
      - payload: the messages' bytes, as the receiver checked them (its
        app_bytes over the window);
      - framing: what --app's protocol added (its start lines, headers and
        frames, as its own layer counted them; 0 without --app, whose
        messages go bare);
      - transport: the rest of the wire's bytes, the wire's total less the
        two: TLS records, the transport's and IP's headers, ACKs and other
        control, handshakes;
      - wire: every byte the sender's device sent (the packets probe), as the
        seed's "total sent data by the plant" over its requests.
    None without answers, and for a request flow of --mix, whose flows share
    one device and whose workloads report no window of their own; the wire's
    figures None without the packets probe."""
    if not n or "workload" not in rec:
        return None
    windows = {side: rec["workload"][side]["window"] for side in ("client", "server")}
    app = windows["client"].get("app")
    out = {"app": app["protocol"] if app else None}
    for way, (sender, receiver) in WAYS.items():
        payload = windows[receiver]["app_bytes"] / n
        sent_app = windows[sender].get("app")
        framing = sent_app["tx_framing_bytes"] / n if sent_app else 0.0
        w = (wire or {}).get(way)
        total = w["wire_bytes"] / n if w else None
        out[way] = {
            "payload_bytes": payload,
            "framing_bytes": framing,
            "message_bytes": payload + framing,
            "transport_bytes": total - payload - framing if total is not None else None,
            "wire_bytes": total,
            "wire_packets": w["wire_packets"] / n if w else None,
            "messages": sent_app["tx_messages"] / n if sent_app else None,
            "ack_only_packets": _per(_ack_only(windows[sender], connections), n),
        }
    return out


def _per(v: Optional[float], n: int) -> Optional[float]:
    return None if v is None else v / n


def _ack_only(window: dict, connections: Optional[int]) -> Optional[int]:
    """The packets a side sent that carried no data, by its transport's own
    count: TCP_INFO's segments out less its data segments (pure ACKs, and a
    connection's SYN and FIN), summed over its connections; msquic's
    datagrams sent (its perf counter) less its ack-eliciting packets (its
    connection statistics; msquic's own TotalPackets counts only those), so
    ACK-only packets, and only in a run of one connection, whose statistics
    the workload reports. None where neither counts."""
    tcp = window.get("tcp_info") or {}
    if tcp.get("data_segs_out") is not None and tcp.get("segs_out") is not None:
        return tcp["segs_out"] - tcp["data_segs_out"]
    sent = (window.get("perf_counters") or {}).get("udp_send")
    eliciting = (window.get("conn_stats") or {}).get("send_retransmittable_packets")
    if sent is not None and eliciting is not None and connections == 1:
        return max(sent - eliciting, 0)
    return None


def _per_connection(window: List[dict], opened: Optional[int]) -> Optional[dict]:
    """The window's answers on each connection the client opened (the
    events' conn, numbered from 0) and Jain's index over them, as bulk's
    connections block does for bytes. None with one connection, or a
    client that does not say how many it opened."""
    if not opened or opened < 2:
        return None
    counts = [0] * opened
    for e in window:
        c = e.get("conn")
        if c is None or not 0 <= c < opened:
            return None
        counts[c] += 1
    total = sum(counts)
    return {
        "responses": counts,
        "jain_index": jain_index(counts),
        "min_share": min(counts) / total if total else None,
    }
