# SPDX-License-Identifier: GPL-2.0-only
"""--pattern bulk, the record's side of it: its step of plan.resolve
(--direction and --conns, the workload's limit of streams) and its own
sections of the record, each stream's and each connection's share of
the window's bytes (Jain's index over them, as iperf3 -P's per-stream
lines and secnetperf -conns show)."""

from typing import Dict, List, Optional

from qprof import errors
from qprof.describe import derive, external, options, transports
from qprof.describe.patterns import Pattern
from qprof.describe.window import Window

MAX_STREAMS = 64  # qprof-wl's WL_MAX_STREAMS: --conns x --streams, x 2 with --direction both


def streams_each_way(opts) -> int:
    """Bulk's streams each way: --streams on each of --conns connections."""
    return opts.streams * (opts.conns or 1)


def resolve(opts: "options.RunOptions") -> "options.RunOptions":
    """Bulk's --direction: udp's receiver counts loss at the server only;
    both ways opens --streams each way."""
    if opts.proto is not None and not transports.STACKS[opts.stack].is_quic:
        # perf is the fill on a QUIC stack, so the option rows' catch-all
        # would take it for the plan's own value elsewhere.
        raise errors.StackCannot(options.not_taken("proto", opts.stack))
    if transports.datagram(opts.stack) and opts.direction not in (None, "up"):
        raise errors.StackCannot(
            f"--direction {opts.direction}: udp sends from the client only (the server counts what is lost); "
            "use quic or a TCP stack, or drop --direction."
        )
    if transports.datagram(opts.stack) and opts.conns not in (None, 1):
        raise errors.StackCannot("--conns: udp sends one flow of datagrams; use quic or a TCP stack, or drop --conns.")
    if transports.datagram(opts.stack):
        return opts
    opts = external.resolve(opts)
    opts = options.filled(opts, "direction", "conns")
    # (A program pair speaks whatever its programs do: no protocol is filled in.)
    if opts.stack in options.QUIC_STACKS:
        opts = options.filled(opts, "proto")
    ways = 2 if opts.direction == "both" else 1
    if opts.conns * opts.streams * ways > MAX_STREAMS:
        raise errors.BadValue(
            f"--conns {opts.conns} x --streams {opts.streams}{' x 2 ways' if ways == 2 else ''} is "
            f"{opts.conns * opts.streams * ways} streams, more than the {MAX_STREAMS} the workload runs; "
            "lower --conns or --streams."
        )
    return opts


def streams_record(window: Window, streams: int) -> Optional[dict]:
    """Each stream's (QUIC) or connection's (TCP) verified bytes over the
    window, as its receiver counted them, its goodput, and Jain's index
    over them; None when the receiver does not report them. A stream the
    receiver has not seen yet (msquic opens a stream at its peer with its
    first byte) moved nothing: 0. Both ways: up streams first, then down,
    each counted by the side that receives it (the other's entry is 0)."""
    a = _stream_bytes(window.start, window.receivers)
    b = _stream_bytes(window.end, window.receivers)
    if a is None or b is None:
        return None
    if window.receiver == "both":
        streams *= 2
    n = max(streams, len(b))
    a, b = list(a) + [0] * (n - len(a)), list(b) + [0] * (n - len(b))
    return _shares([y - x for x, y in zip(a, b)], window.seconds)


def _shares(got: List[int], seconds: float) -> dict:
    """Bytes per stream or connection over the window: each one's goodput,
    Jain's index over them and the smallest share."""
    return {
        "bytes": got,
        "gbps": [g * 8 / seconds / 1e9 if seconds > 0 else None for g in got],
        "jain_index": derive.jain_index(got),
        "min_share": min(got) / sum(got) if sum(got) else None,
    }


def connections_record(window: Window, done: dict, per_way: int) -> Optional[dict]:
    """Each connection's verified bytes over the window, its goodput and
    Jain's index over them (as iperf3 -P's per-stream lines, secnetperf
    -conns): the receiver's per-stream counts grouped by the connection
    each stream went on (its "done" says which: stream_conn, numbered in
    its own order). Both ways: the server's connections (up) first, then
    the client's (down). None when a receiver does not say."""
    # The streams each receiver gets: up ones first, then the down ones.
    down_first = per_way if window.receiver == "both" else 0
    ways = {"server": range(0, per_way), "client": range(down_first, down_first + per_way)}
    got: List[int] = []
    for role in ("server", "client"):
        if role not in window.receivers:
            continue
        conn_of = (done.get(role) or {}).get("stream_conn")
        a = getattr(window.start, f"{role}_mark").get("stream_bytes")
        b = getattr(window.end, f"{role}_mark").get("stream_bytes")
        if conn_of is None or a is None or b is None:
            return None
        by_conn: Dict[int, int] = {}
        for i in ways[role]:
            if i < len(conn_of) and conn_of[i] >= 0:
                moved = (b[i] if i < len(b) else 0) - (a[i] if i < len(a) else 0)
                by_conn[conn_of[i]] = by_conn.get(conn_of[i], 0) + moved
        got += [by_conn[c] for c in sorted(by_conn)]
    return _shares(got, window.seconds) if got else None


def _stream_bytes(e, roles) -> Optional[list]:
    """The receivers' stream_bytes at an edge, added entry by entry."""
    got = [getattr(e, f"{r}_mark").get("stream_bytes") for r in roles]
    if any(g is None for g in got):
        return None
    n = max(len(g) for g in got)
    return [sum(g[i] if i < len(g) else 0 for g in got) for i in range(n)]


# The record's sections that are bulk's, each from the run's options and measurement.
SECTIONS = {
    "streams": lambda opts, m, rec: streams_record(m.window, streams_each_way(opts)),
    "connections": lambda opts, m, rec: connections_record(m.window, m.done, streams_each_way(opts)),
}


ROW = Pattern(
    "bulk",
    None,
    None,
    None,
    "timed",
    "one side sends, by --direction, for --duration or --bytes",
    events=False,
    unit="streams",
    stopped=None,
    intervals=True,
    fills_link=True,
    mixes=True,
    options=("conns", "proto", "server-cmd", "client-cmd", "stack-file"),
    resolve=resolve,
    sections=SECTIONS,
    expected=streams_each_way,
)
