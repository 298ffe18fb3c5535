# SPDX-License-Identifier: GPL-2.0-only
"""The transport's state over time (--interval): at each sample, each
side's congestion window, smoothed RTT, bytes in flight, pacing rate and
socket queues as they are then, and its lost and retransmitted packets
over the interval (a difference of the running counts), as the side's
library gives them in its marks; `null`, with the library's reason
declared once in the record, for what it does not give.

A sample keeps each side's mark groups that hold them (of_mark); which
key of which group is which value, and why a library lacks one, is the
stack's row (describe/transports.py, Stack.state)."""

from dataclasses import dataclass
from typing import Dict, Optional

from qprof.describe import transports

FIELDS = transports.STATE_FIELDS
# Running counts: an interval gets their difference; the rest are levels,
# the value at the interval's end.
COUNTERS = frozenset({"lost_packets", "retransmitted_packets"})
# The mark's groups the values come from (wl_tcp.c's "state", msquic's
# "conn_stats", the other QUIC libraries' "quic_stats").
GROUPS = ("state", "conn_stats", "quic_stats")


@dataclass(frozen=True)
class Source:
    given: Dict[str, str]  # field -> "group.key" of the mark that holds it
    absent: Dict[str, str]  # field -> why the library does not give it
    sometimes: Dict[str, str]  # field -> why a value it gives may be missing from a mark


def source(stack_name: Optional[str]) -> Optional[Source]:
    """The stack's source of state (its row's); None for programs of the
    user's (then every value is null, and why)."""
    stack = transports.STACKS.get(stack_name) if stack_name else None
    if stack is None or stack.state is None:
        return None
    return Source(dict(stack.state.given), dict(stack.state.absent), dict(stack.state.sometimes))


def absent(src: Optional[Source], stack_name: Optional[str]) -> Dict[str, str]:
    """Why each value the source lacks is null."""
    if src is None:
        return dict.fromkeys(FIELDS, f"qprof reads no transport state from {stack_name or 'this side'}'s marks")
    return dict(src.absent)


def of_mark(mark: Optional[dict]) -> dict:
    """The groups of a mark the state comes from, as a sample keeps them."""
    return {g: mark[g] for g in GROUPS if mark and g in mark}


def _value(groups: Optional[dict], where: str) -> Optional[int]:
    group, key = where.split(".")
    return ((groups or {}).get(group) or {}).get(key)


def interval(a: Optional[dict], b: Optional[dict], src: Optional[Source]) -> dict:
    """One side's state over an interval between two samples' groups
    (of_mark): levels at b, counts b - a; None where either lacks it."""
    out = dict.fromkeys(FIELDS)
    for field, where in (src.given if src else {}).items():
        now = _value(b, where)
        if field not in COUNTERS:
            out[field] = now
        elif now is not None and _value(a, where) is not None:
            out[field] = now - _value(a, where)
    return out


ROLES = ("client", "server")


def sources_of(opts) -> Dict[str, Optional[Source]]:
    """Each side's source, by the stack it runs (--server-stack: the server's own)."""
    return {side: source(transports.side_stack(opts, side)) for side in ROLES}


def sides_interval(a: dict, b: dict, sources: Dict[str, Optional[Source]]) -> dict:
    """Both sides' state over the interval between samples a and b."""
    ga, gb = a.get("state_groups") or {}, b.get("state_groups") or {}
    return {side: interval(ga.get(side), gb.get(side), sources[side]) for side in ROLES}


def absent_record(opts, samples: list) -> Dict[str, Dict[str, str]]:
    """side -> field -> why it is null: once for the run, the library's
    reason for what it lacks, and for a value it gives that some of the
    samples lack, how many and why (the library's reason, or no
    connection reported at that mark)."""
    out = {}
    for side, src in sources_of(opts).items():
        why = absent(src, transports.side_stack(opts, side))
        for field in FIELDS:
            missing = sum(s["state"][side][field] is None for s in samples)
            if field not in why and missing:
                cause = (src.sometimes if src else {}).get(field, "no connection reported")
                why[field] = f"the marks held none at {missing} of {len(samples)} intervals ({cause})"
        out[side] = why
    return out
