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

from qprof import errors
from qprof.describe import derive, options, per_unit, transports
from qprof.describe.derive import jain_index
from qprof.describe.patterns import ROLES, Pattern, both_checked

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


# --- its step of plan.resolve, and its section of the record ------------------

MIN_RR_PERIOD_S = 100e-6  # qprof-wl's --period-us floor
WL_RR_MIN = 16  # qprof-wl's WL_RR_PAYLOAD_MIN: a message's sequence number and a little pattern
MAX_RR_TCP_CONNS = 128  # qprof-wl's WL_RR_MAX_CONNS: rr on a TCP stack, --conns x --streams


def resolve(opts: "options.RunOptions") -> "options.RunOptions":
    """Requests and responses: a connection's stack, the stack's own
    choice of streams or connections, an open loop at --period or a closed
    loop with --streams in flight on each of --conns, a timed window."""
    if opts.rr_streams is not None and opts.stack not in options.BY_NAME["rr-streams"].stacks:
        raise errors.StackCannot("--rr-streams chooses QUIC's streams; for TCP stacks use --tcp-conns.")
    if opts.tcp_conns is not None and opts.stack not in options.TCP_STACKS:
        raise errors.StackCannot("--tcp-conns chooses TCP connections; for quic use --rr-streams.")
    if opts.bytes is not None:
        raise errors.StackCannot("--bytes does not apply to --pattern rr, which runs for --duration; drop --bytes.")
    app(opts)
    opts = options.filled(opts, "rr-mode", "conns")
    if opts.rr_mode == "closed":
        return _closed(opts)
    if opts.streams != 1:
        raise errors.StackCannot(
            "--streams sets the requests in flight on each connection of --rr-mode closed; an open loop's "
            "--period sets how many are in flight. Add --rr-mode closed, or drop --streams."
        )
    if opts.tcp_conns == "on-demand" and opts.conns != 1:
        raise errors.BadValue("--tcp-conns on-demand opens connections as requests wait; drop --conns.")
    opts = options.filled(opts, "period", "payload")
    schedule(opts, "request")
    return opts


def _closed(opts: "options.RunOptions") -> "options.RunOptions":
    """The closed loop: no schedule to set, and the connections fixed."""
    if opts.period_s is not None:
        raise errors.StackCannot(
            "--period sets an open loop's schedule; --rr-mode closed sends each request when an answer "
            "comes. Drop --period, or use --rr-mode open."
        )
    if opts.tcp_conns == "on-demand":
        raise errors.StackCannot(
            "--tcp-conns on-demand opens connections as an open loop's requests wait; --rr-mode closed "
            "keeps --conns x --streams. Drop --tcp-conns, or use --rr-mode open."
        )
    multiplexed = transports.STACKS[opts.stack].is_quic or opts.app == "h2"
    if not multiplexed and opts.conns * opts.streams > MAX_RR_TCP_CONNS:
        raise errors.BadValue(
            f"--conns {opts.conns} x --streams {opts.streams} is {opts.conns * opts.streams} TCP connections "
            f"(one request in flight on each), more than the {MAX_RR_TCP_CONNS} the workload opens; "
            "lower --conns or --streams."
        )
    return options.filled(opts, "payload")


def app(opts: "options.RunOptions") -> None:
    """--app's protocol over its transport: HTTP/3 over QUIC, a stream a
    request; HTTP/1.1 over TCP."""
    if opts.app is None:
        return
    row = options.BY_NAME["app"].stacks
    if opts.stack not in row:
        raise errors.StackCannot(
            f"--app runs HTTP over --stack {', '.join(row)}, and {opts.stack}'s workload has no HTTP layer; "
            "use one of those, or drop --app."
        )
    # Which of the apps each stack of the row takes: HTTP/3 over QUIC, the rest over TCP.
    takes = [a for a in options.APPS if (a == "h3") == transports.STACKS[opts.stack].is_quic]
    if opts.app not in takes:
        can = [s for s in row if (opts.app == "h3") == transports.STACKS[s].is_quic]
        raise errors.StackCannot(
            f"--app {opts.app} runs over --stack {', '.join(can)}; with --stack {opts.stack} use "
            f"--app {' or '.join(takes)}."
        )
    if opts.rr_streams == "one":
        raise errors.BadValue(
            "--app h3 puts each request on a stream of its own, as HTTP/3 does; drop --rr-streams one."
        )
    if opts.app == "h2" and opts.tcp_conns == "on-demand":
        raise errors.BadValue(
            "--tcp-conns on-demand is HTTP/1.1's way round head-of-line blocking; --app h2 puts every request "
            "on a stream of one connection. Drop --tcp-conns."
        )


def schedule(opts: "options.RunOptions", unit: str) -> None:
    """An open loop's --period: one client can keep it, and one falls due inside the window."""
    # In nanoseconds: 100us parses to 9.999999999999999e-05 s, which is not below the floor.
    if round(opts.period_s * 1e9) < round(MIN_RR_PERIOD_S * 1e9):
        raise errors.BadValue(
            f"--period {opts.period_s * 1e6:g}us is below {MIN_RR_PERIOD_S * 1e6:g}us, faster than one "
            "client can keep a schedule; raise it."
        )
    duration_s = options.filled(opts, "duration").duration_s
    if opts.period_s >= duration_s:
        raise errors.BadValue(
            f"--period {opts.period_s:g}s is not shorter than the {duration_s:g} s window, so no {unit} "
            "would be due inside it; lower --period or raise --duration."
        )


def wire(rec: dict) -> Optional[dict]:
    """Each way's wire bytes and packets (the packets probe), or None."""
    dev = derive.packets_devices(rec)
    if dev.get("client") and dev.get("server"):
        return {"client_to_server": dev["client"]["tx"], "server_to_client": dev["server"]["tx"]}
    return None


def section(opts: "options.RunOptions", m, rec: dict) -> dict:
    return describe(
        m.reports["client"],
        m.window.start.client_mark["t_ns"],
        m.window.end.client_mark["t_ns"],
        opts.period_s,
        opts.payload,
        m.done["client"],
        rec,
        wire(rec),
        opts.request,
        opts.response,
        in_flight=opts.conns * opts.streams if opts.rr_mode == "closed" else None,
    )


SECTIONS = {"rr": section}


ROW = Pattern(
    "rr",
    ROLES,
    ROLES,
    "server",
    "timed",
    "the client sends a --payload request every --period, open loop, and the server answers each",
    events=True,
    unit="requests",
    event="rr",
    mixes=True,
    # A side whose messages (requests: the client's; responses: the
    # server's) exceed a datagram.
    backlog=lambda cfg, role, datagram: (
        (cfg.get("request" if role == "client" else "response") or cfg.get("payload") or 0) > datagram
    ),
    options=("period", "payload", "request", "response", "rr-streams", "tcp-conns", "app", "rr-mode", "conns"),
    resolve=resolve,
    sections=SECTIONS,
    connections="matches each response to its request on a connection",
    verified=both_checked,
    empty_window=(
        "no response arrived inside the window though both sides reported success: the server, "
        "the link or the CPU fell behind the requests due in it; lengthen --period or --duration."
    ),
)
