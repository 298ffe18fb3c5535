# SPDX-License-Identifier: GPL-2.0-only
"""The record's `handshakes` for `--pattern handshakes` (secnetperf's hps,
netperf's TCP_CRR): new connections, --conns at once, each a handshake and
an 8-byte exchange, from the client's per-connection reports (workloads/wl.h,
the "handshake" event, as a download's).

The window's handshakes are the connections whose answer came back inside
it (by the client's clock), so the rate is theirs over the window's
length and the CPU per handshake is the window's CPU over them. The
times run from the connect call: `handshake` to the transport's handshake
done (QUIC CONNECTED, SSL_connect, or TCP's connect), `complete` to the
answer checked, `tcp_handshake` (TLS over TCP) to TCP's connect. Each goes
into an HDR histogram as rr's delays do (1 ns units, within 0.1%).
Resumption and 0-RTT are counted as they happened; a stack without
sessions (tcp) has none to count (None).

An open loop (--period) offers a connection every period, at most --conns
at once: `offered_per_s`, each connection's `wait` from its due time to
its connect call, and `late` (opened after the next one fell due), from
the window's handshakes and, as the client counted them, the whole run's.
Without --period these are None: nothing was offered or late.
"""

import statistics
from typing import Dict, List, Optional

from qprof import errors
from qprof.describe import options, per_unit, transports
from qprof.describe.patterns import ROLES, Pattern, both_checked, rr

TIMES = ("tcp_handshake", "handshake", "complete")


def completed_ns(e: dict) -> int:
    return e["t_connect_ns"] + e["complete_ns"]


def in_window(events: List[dict], start_ns: int, end_ns: int) -> List[dict]:
    """The handshakes whose answer came back inside [start, end), in order."""
    done = (e for e in events if e["event"] == "handshake" and "complete_ns" in e)
    return sorted((e for e in done if start_ns <= completed_ns(e) < end_ns), key=lambda e: e["i"])


def percentiles(values: List[int]) -> Optional[Dict[str, Optional[float]]]:
    """As rr's delay_ns: HDR percentiles capped at the exact max, min, max, mean."""
    if not values:
        return None
    h = rr.histogram(values)
    top = max(values)
    return {
        **{f"p{p:g}": min(h.get_value_at_percentile(p), top) for p in rr.PERCENTILES},
        "min": min(values),
        "max": top,
        "mean": statistics.fmean(values),
    }


def _count(window: List[dict], key: str) -> Optional[int]:
    """How many did it (resumed, early_data); None where no report says either way."""
    said = [e[key] for e in window if key in e]
    return sum(1 for v in said if v) if said else None


def describe(
    events: List[dict],
    start_ns: int,
    end_ns: int,
    conns: int,
    resume: bool,
    period_s: Optional[float],
    client_done: dict,
    marks: Dict[str, dict],
    rec: dict,
    wire: Optional[Dict[str, dict]],
) -> dict:
    """From the client's handshake events, the window's edges (the client's
    clock), its done report, the marks at the edges (each role's count)
    and the record's core (CPU, syscalls)."""
    window = in_window(events, start_ns, end_ns)
    n = len(window)
    sessions = any("resumed" in e for e in events if e["event"] == "handshake")
    seconds = (end_ns - start_ns) / 1e9
    by_marks = {
        role: marks["end"][role].get("handshakes", 0) - marks["start"][role].get("handshakes", 0)
        for role in ("client", "server")
    }
    return {
        "conns": conns,
        "resume": resume,
        "handshakes": n,
        "per_s": n / seconds if seconds > 0 else None,
        # Each role's own count over the window (the client's marks count a
        # connection as it closes, the events as its answer came: at most
        # --conns apart at each edge).
        "counted": by_marks,
        "resumed": _count(window, "resumed"),
        "early_data": _count(window, "early_data"),
        "period_s": period_s,
        "offered_per_s": 1 / period_s if period_s else None,
        "late": sum(1 for e in window if e.get("wait_ns", 0) > period_s * 1e9) if period_s else None,
        "wait_ns": percentiles([e["wait_ns"] for e in window if "wait_ns" in e]) if period_s else None,
        **{f"{t}_ns": percentiles([e[f"{t}_ns"] for e in window if f"{t}_ns" in e]) for t in TIMES},
        "histogram": rr.histogram([e["handshake_ns"] for e in window if "handshake_ns" in e]).encode().decode()
        if n
        else None,
        # A stack without sessions (tcp) resumes none: not counted, not zero.
        "whole_run": {
            k: client_done.get(k) if sessions or k not in ("resumed", "early_data") else None
            for k in ("handshakes", "connections_opened", "resumed", "early_data", "connections_due", "late")
        },
        "per_handshake": per_unit.costs(rec, n, wire),
        "flame_ns_per_handshake": per_unit.flame(rec, n),
    }


# --- its step of plan.resolve, and its section of the record ------------------


def resolve(opts: "options.RunOptions") -> "options.RunOptions":
    """New connections, --conns at once, for a timed window: as fast as
    the client can, or one every --period (an open loop)."""
    if opts.bytes is not None:
        raise errors.StackCannot(
            "--bytes does not apply to --pattern handshakes, which runs for --duration; drop --bytes."
        )
    if opts.streams != 1:
        raise errors.StackCannot(
            "--pattern handshakes opens one stream per connection; for more at once raise --conns, and drop --streams."
        )
    if opts.resume:
        transports.refuse_resume(opts.stack)
    if opts.period_s is not None:
        rr.schedule(opts, "connection")
    return options.filled(opts, "conns")


def section(opts: "options.RunOptions", m, rec: dict) -> dict:
    edges = {
        e: {"client": w.client_mark, "server": w.server_mark}
        for e, w in (("start", m.window.start), ("end", m.window.end))
    }
    return describe(
        m.reports["client"],
        m.window.start.client_mark["t_ns"],
        m.window.end.client_mark["t_ns"],
        opts.conns,
        opts.resume,
        opts.period_s,
        m.done["client"],
        edges,
        rec,
        rr.wire(rec),
    )


SECTIONS = {"handshakes": section}


ROW = Pattern(
    "handshakes",
    ROLES,
    ROLES,
    "server",
    "timed",
    "new connections, --conns at once, each a checked 8-byte exchange, as secnetperf's hps and netperf's TCP_CRR",
    events=True,
    server_told=True,
    unit="handshakes",
    event="handshake",
    # Each flight is a few datagrams, sent as the handshake allows.
    backlog=lambda cfg, role, datagram: False,
    options=("resume", "period", "conns"),
    resolve=resolve,
    sections=SECTIONS,
    connections="opens connections",
    verified=both_checked,
)
