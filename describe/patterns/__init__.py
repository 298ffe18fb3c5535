# SPDX-License-Identifier: GPL-2.0-only
"""The patterns qprof drives (--pattern), one row each: what differs
between them, asked of the row, as describe/transports.py's rows are for
the stacks (tests/test_rows.py holds the code to it). A pattern is a
module of this package (bulk.py, downloads.py, rr.py, handshakes.py,
video.py): its row (ROW), and what it does beyond the row's words, which
the row names: its step of plan.resolve and its own sections of the
record.

Who sends the measured bytes and who verifies them: bulk by --direction
(up: the client sends, as iperf3; down: the server, as iperf3 -R and
secnetperf's download; both: --streams each way, as iperf3 --bidir), a
download from the server, rr and handshakes both ways, video both ways
too (requests up, segments down). A window counts the bytes its receiver
verified: "server", "client", or "both" (the two receivers' bytes added,
each direction its own goodput)."""

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

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
    # What moves, in words (`--pattern`'s help: "What moves: NAME (what), ...").
    what: str
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
    # Runs as a flow of --mix, beside others through one bottleneck, for
    # the mix's one --duration, and a flow's figures describe it (its
    # goodput and share, an rr section's requests: describe/mix.py).
    mixes: bool = False
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


def words(names, last: str = "and") -> str:
    """Names as a sentence lists them: "a", "a and b", "a, b and c" (last:
    the word before the last one, "or" for choices)."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


def row(opts) -> Pattern:
    """The row of opts.pattern (bulk where none is set, as the option's default)."""
    return PATTERNS[getattr(opts, "pattern", None) or "bulk"]


# The patterns: every module of this package is one, its row its ROW
# (a new pattern is a module here, and nothing in this file changes),
# in the order of their modules' names.
PATTERNS: Dict[str, Pattern] = {}
for _m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _row = importlib.import_module(f"{__name__}.{_m.name}").ROW
    PATTERNS[_row.name] = _row
