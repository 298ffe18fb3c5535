# SPDX-License-Identifier: GPL-2.0-only
"""Each pattern's window: what it is, and when its edges are read.

- timed (bulk --duration, rr, a mix): every client connects, the warm-up
  passes (a bulk transfer also waits for a rate-limited link to fill),
  the window runs for --duration, and the clients send on past its end;
- bytes (bulk --bytes): the transfer measured whole, from before the
  client connects to the receiver's last byte (each receiver's, both ways);
- download: the --count downloads, from the client's start to its last byte.

Every edge is collectors/edges.py's `take` over all of the endpoints'
flows; perf samples exactly the window.
"""

import time
from typing import Callable, NamedTuple, Optional, Tuple

from qprof import errors
from qprof.collectors import emulation
from qprof.collectors.edges import Reading, sample_intervals, sleep_watching, take
from qprof.collectors.endpoints import Endpoints
from qprof.collectors.faults import Faults
from qprof.describe import direction, patterns, state
from qprof.describe.plan import Plan
from qprof.describe.window import edge_sample, interval_figures

# The workloads give a handshake 10 s (msquic's default, wl_quic.c and
# wl_ngtcp2.c): past that, the workload's own failure says why.
CONNECT_TIMEOUT_S = 15.0
# A fixed-size transfer may take as long as it needs, but not stall: the
# receiver's progress is read this often, and no new byte for STALL_S ends it.
PROGRESS_CHECK_S = 5.0
STALL_S = 30.0


def _watchdog(faults: Faults) -> Tuple[float, float]:
    """(no byte for this long ends the run, progress read this often)."""
    return faults.watchdog((STALL_S, PROGRESS_CHECK_S))


class Taken(NamedTuple):
    """What a pattern's window measured: its edges and what came with them."""

    start: Reading
    end: Reading
    connected: dict  # flow index -> the client's "connected" event
    receiver: str = "server"  # whose verified bytes the window counts
    tls_before: Optional[dict] = None
    intervals: Optional[list] = None


def measure(plan: Plan, ep: Endpoints, emulated, on_progress, faults: Faults, on_interval=None) -> Taken:
    """The window of the plan's pattern (WINDOWS), its edges read over every flow."""
    opts = plan.options
    kind = "download" if patterns.row(opts).window == "count" else "bytes" if opts.bytes else "timed"
    return WINDOWS[kind](plan, ep, emulated, on_progress, faults, on_interval)


def _edge(name: str, ep: Endpoints, emulated) -> Reading:
    return take(name, ep.pairs, ep.probes, emulated, kernel=ep.single, sides=ep.sides)


def _tls_stat(ep: Endpoints) -> dict:
    return ep.tls_stat()


def _downloads(plan: Plan, ep: Endpoints, emulated, on_progress, faults: Faults, on_interval=None) -> Taken:
    """--pattern download: the window is the --count downloads, from the
    client's start to its last byte; --pattern video: its segments, from
    the client's start (its connect) to the last segment's last byte. The
    perf samples cover exactly it."""
    opts, client = plan.options, ep.client
    row = patterns.row(opts)
    tls_before = _tls_stat(ep)
    if ep.perf is not None:
        ep.perf.enable()
    start = _edge("start", ep, emulated)
    client.send("start")
    faults.sending(ep.server.pid)
    on_progress(row.counting(opts))
    unit, event = row.unit, row.event
    stall_s, check_s = _watchdog(faults)
    _wait_for_done(
        client,
        stall_s,
        check_s,
        lambda got: (
            f"the {unit} stalled: the client received no byte for {stall_s:g} s "
            f"({sum(e['event'] == event for e in client.reports)} of {opts.count} {unit} done); "
            f"see {client.log_path}."
        ),
    )
    end = _edge("end", ep, emulated)
    if ep.perf is not None:
        ep.perf.disable()
    connected = next((e for e in client.reports if e["event"] == "connected"), None) or {}
    return Taken(start, end, {0: connected}, "client", tls_before)


def _fixed_size(plan: Plan, ep: Endpoints, emulated, on_progress, faults: Faults, on_interval=None) -> Taken:
    """--bytes: the transfer measured whole, from before the client
    connects until the receiver (each, both ways) has the last byte."""
    opts, client = plan.options, ep.client
    tls_before = _tls_stat(ep)
    if ep.perf is not None:
        ep.perf.enable()
    start = _edge("start", ep, emulated)
    client.send("start")
    connected = client.wait_event("connected", faults.patience(CONNECT_TIMEOUT_S))
    faults.sending(_role(ep, direction.senders(opts)[0]).pid)
    on_progress("measuring until the last byte arrives")
    stall_s, check_s = _watchdog(faults)
    for role in direction.receivers(opts):
        receiver = _role(ep, role)
        _wait_for_done(
            receiver,
            stall_s,
            check_s,
            lambda got, role=role, receiver=receiver: (
                f"the fixed-size transfer stalled: the {role} received no byte for {stall_s:g} s "
                f"({got} of {opts.bytes * opts.streams * (opts.conns or 1)} bytes arrived); see {receiver.log_path}."
            ),
        )
    end = _edge("end", ep, emulated)
    if ep.perf is not None:
        ep.perf.disable()
    return Taken(start, end, {0: connected}, direction.window_receiver(opts), tls_before)


def _role(ep: Endpoints, role: str, index: int = 0):
    return (ep.servers if role == "server" else ep.clients)[index]


def _timed(plan: Plan, ep: Endpoints, emulated, on_progress, faults: Faults, on_interval=None) -> Taken:
    """--duration (bulk, rr, a mix): every client connects, the warm-up
    passes (and a bulk transfer fills a rate-limited link), then the
    window runs for --duration; the clients send on past its end edge."""
    opts, procs = plan.options, ep.processes
    tls_before = _tls_stat(ep) if ep.single else None
    for c in ep.clients.values():
        c.send("start")
    connected = {i: c.wait_event("connected", faults.patience(CONNECT_TIMEOUT_S)) for i, c in ep.clients.items()}
    flows = f"{len(connected)} flows connected" if len(connected) > 1 else "connected"
    on_progress(f"{flows}; warming up {opts.warmup_s:g} s")
    sleep_watching(max(e["t_ns"] for e in connected.values()) + int(opts.warmup_s * 1e9), procs)
    filling = any(patterns.row(fp.options).fills_link for fp in plan.flows)
    if emulated is not None and emulated.spec.rate_bit and filling:
        on_progress("waiting for the link to fill")
        emulated.applied["before_window"] = emulation.wait_saturated(
            emulated.endpoints["client"],
            emulated.spec,
            lambda s: sleep_watching(time.monotonic_ns() + int(s * 1e9), procs),
        )
    if ep.perf is not None:
        ep.perf.enable()
    start = _edge("start", ep, emulated)
    on_progress(f"measuring {opts.duration_s:g} s")
    faults.window_opened(lambda t_ns: sleep_watching(t_ns, procs), start.t_ns, opts.duration_s, ep.server)
    end_ns = start.t_ns + int(opts.duration_s * 1e9)
    intervals = None
    receiver = direction.window_receiver(opts)
    # A program pair's receiver counts nothing to sample (its bytes are the probe's, over the window).
    if ep.single and opts.interval_s and patterns.row(opts).intervals and not plan.flows[0].stack.programs:
        first = start.edge()
        intervals = sample_intervals(
            first,
            end_ns,
            opts.interval_s,
            receiver,
            ep.server,
            ep.client,
            lambda a, b: on_interval(interval_line(a, b, start.t_ns, opts)) if on_interval else None,
            ep.cpu_now,
        )
    else:
        sleep_watching(end_ns, procs)
    end = _edge("end", ep, emulated)
    if ep.perf is not None:
        ep.perf.disable()
    # The senders stop only after the end edge was read whole (each reading
    # answers before take() returns), so it was taken in the steady state;
    # bulk down: the server, which then ends each stream with its FIN; an rr
    # client then drains what it sent.
    for fp in plan.flows:
        for role in patterns.row(fp.options).stopped or direction.senders(fp.options):
            _role(ep, role, fp.index).send("stop")
    if intervals is not None and on_interval:
        last = intervals[-1] if intervals else edge_sample(start.edge(), receiver)
        on_interval(interval_line(last, edge_sample(end.edge(), receiver), start.t_ns, opts))
    return Taken(start, end, connected, receiver, tls_before, intervals)


WINDOWS = {"download": _downloads, "bytes": _fixed_size, "timed": _timed}


def interval_line(a: dict, b: dict, t0_ns: int, opts) -> dict:
    """An interval's figures with its place in the window (s from its
    start), each side's transport state, and which sides send (the line
    shows theirs)."""
    return {
        "start_s": (a["t_ns"] - t0_ns) / 1e9,
        "end_s": (b["t_ns"] - t0_ns) / 1e9,
        **interval_figures(a, b),
        "state": state.sides_interval(a, b, state.sources_of(opts)),
        "senders": direction.senders(opts),
    }


def _wait_for_done(receiver, stall_s: float, check_s: float, stalled: Callable[[int], str]) -> None:
    """The receiver's done report, however long the transfer takes while
    bytes keep arriving (read every check_s); no new byte for stall_s is a
    Timeout, its sentence stalled(bytes received so far)."""
    seen, last_progress = -1, time.monotonic()
    while True:
        try:
            receiver.wait_event("done", check_s)
            return
        except errors.Timeout:
            pass
        got = receiver.mark("progress")["app_bytes"]
        if got > seen:
            seen, last_progress = got, time.monotonic()
        elif time.monotonic() - last_progress > stall_s:
            raise errors.Timeout(stalled(got))
