# SPDX-License-Identifier: GPL-2.0-only
"""The patterns qprof drives (--pattern), one row each: what differs
between them, asked of the row, as describe/transports.py's rows are for
the stacks (tests/test_rows.py holds the code to it). What a pattern does
beyond the row's words is in its module, which the row names: its step
of plan.resolve and its own sections of the record (describe/bulk.py,
downloads.py, rr.py, handshakes.py, video.py).

Who sends the measured bytes and who verifies them: bulk by --direction
(up: the client sends, as iperf3; down: the server, as iperf3 -R and
secnetperf's download; both: --streams each way, as iperf3 --bidir), a
download from the server, rr and handshakes both ways, video both ways
too (requests up, segments down). A window counts the bytes its receiver
verified: "server", "client", or "both" (the two receivers' bytes added,
each direction its own goodput)."""

from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

from qprof.describe import bulk, downloads, handshakes, rr, video

ROLES = ("client", "server")

# A window that counted no bytes, said as a run's error (collectors/endpoints.py).
NO_BYTES = "no bytes arrived inside the window though both sides reported success; see the run's logs."


def whole_streams(got: dict, gave: dict, opts, expected: int) -> bool:
    """The receiver checked every byte the sender sent, on every stream
    (a bulk's, a download's) it was to complete."""
    return (
        got.get("verified") is True and got["app_bytes"] == gave["app_bytes"] and got["streams_completed"] == expected
    )


def both_checked(got: dict, gave: dict, opts, expected: int) -> bool:
    """Each side checked what it received (requests, responses, answers) and
    matched responses to requests; a request still unanswered is a figure."""
    return got.get("verified") is True and gave.get("verified") is True


def every_segment(got: dict, gave: dict, opts, expected: int) -> bool:
    """Every segment asked for came, whole and checked, as did each request."""
    return (
        both_checked(got, gave, opts, expected)
        and got.get("responses") == opts.count
        and got["app_bytes"] == opts.count * opts.response
    )


@dataclass(frozen=True)
class Pattern:
    name: str
    # The roles that send the measured bytes, and those that verify them;
    # None: bulk's, which --direction says (describe/direction.py).
    senders: Optional[Tuple[str, ...]]
    receivers: Optional[Tuple[str, ...]]
    # Whose verified bytes the window counts (a role); None: its one
    # receiver's, or "both" for two.
    window_receiver: Optional[str]
    # "timed": a --duration (or bulk's --bytes) window; "count": the
    # --count downloads or the media's segments, from the client's start
    # to the last one's last byte (collectors/windows.py).
    window: str
    # The client reports each event (request, handshake, download, segment),
    # kept as they came for the record's per-event figures.
    events: bool
    # The server serves until told: handshakes come on new connections, so
    # it cannot know the client's last one.
    server_told: bool = False
    # What one of its events is called, and the client's report of each
    # (wl_role.c's event names).
    unit: str = ""
    event: str = ""
    # The server's report of each, where it makes one (a download's "served").
    server_event: str = ""
    # A count window's plan in words, from the run's options (the progress line).
    counting: Optional[Callable[[object], str]] = None
    # Whether a role ever has more than a datagram to send at once (so GSO
    # on must show as super-packets), from the run's config and the path's
    # largest datagram payload (describe/offload.py).
    backlog: Callable[[dict, str, int], bool] = lambda cfg, role, datagram: True
    # The roles told to stop at a timed window's end (an rr client then
    # drains what it sent); None: its senders (bulk's, by --direction, the
    # server ending each stream with its FIN going down).
    stopped: Optional[Tuple[str, ...]] = ("client",)
    # --interval cuts its window into samples of the receiver's bytes.
    intervals: bool = False
    # Sends as fast as the stack can, so it should fill a --link's rate.
    fills_link: bool = False
    # The options of some patterns only that it takes (the option table's
    # names; every other option is every pattern's), and those it sets
    # itself from others, holding a value given to be the one it sets.
    options: Tuple[str, ...] = ()
    sets: Tuple[str, ...] = ()
    # Its step of plan.resolve (plan._pattern has checked what every
    # pattern shares): its own options' rules and defaults, in its module.
    resolve: Callable[[object], object] = lambda opts: opts
    # The record's sections that are its own, each made from the run's
    # options, its measurement and the record so far (describe/record.py),
    # in its module; every other pattern's are null in its records.
    sections: Dict[str, Callable[[object, object, dict], Optional[dict]]] = field(default_factory=dict)
    # What it does with connections, in words ("" for none: a datagram
    # stack, which has none, runs it).
    connections: str = ""
    # The streams (downloads, requests...) its receiver is to complete, from the run's options.
    expected: Callable[[object], int] = lambda o: o.count
    # Whether the receiver's report (got) and the sender's (gave) prove
    # the data (describe/record.py; a datagram stack's is its own rule).
    verified: Callable[[dict, dict, object, int], bool] = whole_streams
    # A window that counted no bytes, said as the run's error.
    empty_window: str = NO_BYTES


PATTERNS: Dict[str, Pattern] = {
    "bulk": Pattern(
        "bulk",
        None,
        None,
        None,
        "timed",
        events=False,
        unit="streams",
        stopped=None,
        intervals=True,
        fills_link=True,
        options=("conns",),
        resolve=bulk.resolve,
        sections=bulk.SECTIONS,
        expected=bulk.streams_each_way,
    ),
    "download": Pattern(
        "download",
        ("server",),
        ("client",),
        None,
        "count",
        events=True,
        unit="downloads",
        event="download",
        server_event="served",
        counting=lambda o: f"{o.count} downloads of {o.size:,} bytes, each on a new connection",
        options=("size", "count", "resume"),
        resolve=downloads.resolve,
        sections=downloads.SECTIONS,
        connections="opens a connection per download",
    ),
    "rr": Pattern(
        "rr",
        ROLES,
        ROLES,
        "server",
        "timed",
        events=True,
        unit="requests",
        event="rr",
        # A side whose messages (requests: the client's; responses: the
        # server's) exceed a datagram.
        backlog=lambda cfg, role, datagram: (
            (cfg.get("request" if role == "client" else "response") or cfg.get("payload") or 0) > datagram
        ),
        options=("period", "payload", "request", "response", "rr-streams", "tcp-conns", "app", "rr-mode", "conns"),
        resolve=rr.resolve,
        sections=rr.SECTIONS,
        connections="matches each response to its request on a connection",
        verified=both_checked,
        empty_window=(
            "no response arrived inside the window though both sides reported success: the server, "
            "the link or the CPU fell behind the requests due in it; lengthen --period or --duration."
        ),
    ),
    "handshakes": Pattern(
        "handshakes",
        ROLES,
        ROLES,
        "server",
        "timed",
        events=True,
        server_told=True,
        unit="handshakes",
        event="handshake",
        # Each flight is a few datagrams, sent as the handshake allows.
        backlog=lambda cfg, role, datagram: False,
        options=("resume", "period", "conns"),
        resolve=handshakes.resolve,
        sections=handshakes.SECTIONS,
        connections="opens connections",
        verified=both_checked,
    ),
    "video": Pattern(
        "video",
        ROLES,
        ROLES,
        "client",
        "count",
        events=True,
        unit="segments",
        event="rr",
        backlog=lambda cfg, role, datagram: role == "server",  # its segments, never the client's requests
        counting=lambda o: f"{o.count} segments of {o.response:,} bytes, one after another on one connection",
        options=("rr-streams", "app", "bitrate", "segment", "prebuffer"),
        sets=("count", "request", "response", "rr-mode", "conns"),
        resolve=video.resolve,
        sections=video.SECTIONS,
        connections="fetches segments over a connection",
        verified=every_segment,
    ),
}


def words(names) -> str:
    """Names as a sentence lists them: "a", "a and b", "a, b and c"."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def row(opts) -> Pattern:
    """The row of opts.pattern (bulk where none is set, as the option's default)."""
    return PATTERNS[getattr(opts, "pattern", None) or "bulk"]
