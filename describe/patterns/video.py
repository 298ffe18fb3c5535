# SPDX-License-Identifier: GPL-2.0-only
"""The record's `video` for `--pattern video`: a player's quality of
experience as seed 001's YouTube tests measured it (Ahsan et al.'s
"YouTube test": connect time, prebuffering time, startup delay, stalls,
download rate), and the CPU each second of video cost.

The client fetches the media's segments one after another over one
connection (rr's closed loop, one request in flight, as the workload's
"rr" events record each: when it was asked for, when its last byte was
in and checked). The player is modelled from those times alone, here,
pure:
  - playback starts once the first ceil(prebuffer / segment) segments are
    in (a segment plays only whole);
  - it then plays at the media's pace, segment k due at the start plus k
    segments of media plus every stall so far; a segment not yet in when
    due is a stall, which lasts until it is in, and playback resumes at
    once (no rebuffering goal);
  - the client fetches the next segment as soon as the last is in (no
    buffer cap: a real player stops fetching when its buffer is full, and
    picks the next segment's bitrate from what it measured; qprof models
    neither, at a fixed --bitrate).

Times: the connect starts when the client is told to start (the window's
start edge, its clock), the handshake ends at its "connected" event.
"""

import math
import statistics
from dataclasses import replace
from typing import List, Optional

from qprof import errors
from qprof.describe import options, per_unit
from qprof.describe.patterns import ROLES, Pattern, both_checked, rr


def playback(arrivals_ns: List[int], segment_ns: int, prebuffer_segments: int) -> dict:
    """When playback starts and each stall, from the segments' arrival
    times (in order): {start_ns, stalls: [(at_ns, ns)], end_ns}."""
    need = max(1, min(prebuffer_segments, len(arrivals_ns)))
    start = max(arrivals_ns[:need])
    stalled, stalls = 0, []
    for k, t in enumerate(arrivals_ns):
        due = start + k * segment_ns + stalled
        if t > due:
            stalls.append((due, t - due))
            stalled += t - due
    return {"start_ns": start, "stalls": stalls, "end_ns": start + len(arrivals_ns) * segment_ns + stalled}


def describe(
    events: List[dict],
    t_start_ns: int,
    t_connected_ns: Optional[int],
    segment_s: float,
    prebuffer_s: float,
    bitrate: int,
    segment_bytes: int,
    count: int,
    rec: dict,
) -> Optional[dict]:
    """From the client's rr events, its start and connected times (its
    clock), and the plan's media. None if no segment came."""
    segs = sorted((e for e in events if e["event"] == "rr"), key=lambda e: e["seq"])
    if not segs:
        return None
    arrivals = [e["answered_ns"] for e in segs]
    prebuffer_segments = math.ceil(prebuffer_s / segment_s - 1e-9)
    play = playback(arrivals, round(segment_s * 1e9), prebuffer_segments)
    rates = [segment_bytes * 8 / ((e["answered_ns"] - e["sent_ns"]) / 1e9) for e in segs]
    fetch_ns = segs[-1]["answered_ns"] - segs[0]["sent_ns"]
    media_s = len(segs) * segment_s
    stall_ns = [ns for _, ns in play["stalls"]]
    cpu = per_unit.costs(rec, 1, None)["cpu_s"]
    return {
        "bitrate": bitrate,
        "segment_s": segment_s,
        "segment_bytes": segment_bytes,
        "segments": len(segs),
        "segments_asked": count,
        "media_s": media_s,
        "prebuffer_s": prebuffer_s,
        "prebuffer_segments": min(prebuffer_segments, len(segs)),
        "connect_s": (t_connected_ns - t_start_ns) / 1e9 if t_connected_ns else None,
        "prebuffering_s": (play["start_ns"] - segs[0]["sent_ns"]) / 1e9,
        "startup_delay_s": (play["start_ns"] - t_start_ns) / 1e9,
        "stalls": len(stall_ns),
        "stall_s": sum(stall_ns) / 1e9,
        "stall_each_s": [ns / 1e9 for ns in stall_ns],
        "playback_s": (play["end_ns"] - play["start_ns"]) / 1e9,
        "download_rate_bit": sum(segment_bytes for _ in segs) * 8 / (fetch_ns / 1e9) if fetch_ns > 0 else None,
        "segment_rate_bit": {
            "min": min(rates),
            "median": statistics.median(rates),
            "max": max(rates),
        },
        "segment_rate_each_bit": rates,
        # The window (connect to the last segment) over the media it fetched.
        "cpu_s_per_media_s": {k: (v / media_s if v is not None else None) for k, v in cpu.items()},
        "flame_ns_per_media_s": _per_media_s(per_unit.flame(rec, 1), media_s),
    }


def _per_media_s(flame: Optional[dict], media_s: float) -> Optional[dict]:
    """The window's flame totals and categories (ns) per second of media."""
    if flame is None:
        return None
    return {
        side: {
            # None: the side left no sample in the window (per_unit.flame).
            "total": None if f["total"] is None else f["total"] / media_s,
            "categories": None if f["categories"] is None else {c: v / media_s for c, v in f["categories"].items()},
        }
        for side, f in flame.items()
    }


# --- its step of plan.resolve, and its section of the record ------------------


def resolve(opts: "options.RunOptions") -> "options.RunOptions":
    """A player over one connection: the media's --duration in --segment
    pieces of --bitrate x --segment bytes, each a request of rr's closed
    loop with one in flight (the next asked for when the last is in), for
    as many segments as the media holds; the window is the whole session,
    from the connect to the last segment."""
    for name, given in (
        ("bytes", opts.bytes is not None),
        ("warmup", bool(opts.warmup_s)),
        ("period", opts.period_s is not None),
        ("conns", opts.conns not in (None, 1)),
        ("streams", opts.streams != 1),
        ("tcp-conns", opts.tcp_conns not in (None, "one")),
    ):
        if given:
            raise errors.StackCannot(
                f"--{name} does not apply to --pattern video, which fetches --duration of media in --segment "
                f"pieces over one connection, one after another; drop --{name}."
            )
    opts = options.filled(opts, "bitrate", "segment", "prebuffer", "duration")
    rr.app(opts)
    segments = math.ceil(opts.duration_s / opts.segment - 1e-9)
    size = round(opts.bitrate * opts.segment / 8)
    # What video sets itself; a value given (a resolved plan handed to the guest) must be the same.
    sets = {"count": segments, "request": rr.WL_RR_MIN, "response": size, "rr-mode": "closed"}
    for name, value in sets.items():
        given = getattr(opts, options.BY_NAME[name].field)
        if given is not None and given != value:
            raise errors.StackCannot(
                f"--{name} is set by --pattern video from --duration, --segment and --bitrate; drop --{name}."
            )
    hi = options.BY_NAME["response"].hi
    if not rr.WL_RR_MIN <= size <= hi:
        raise errors.BadValue(
            f"--bitrate {options.BY_NAME['bitrate'].value_text(opts.bitrate)} x --segment {opts.segment:g}s is "
            f"{size:,} bytes a segment, outside {rr.WL_RR_MIN} to {hi:,}; change --bitrate or --segment."
        )
    if opts.prebuffer > opts.duration_s:
        raise errors.BadValue(
            f"--prebuffer {opts.prebuffer:g}s is more than the {opts.duration_s:g} s of media (--duration); lower it."
        )
    return replace(opts, rr_mode="closed", conns=1, count=segments, request=rr.WL_RR_MIN, response=size, warmup_s=0.0)


def section(opts: "options.RunOptions", m, rec: dict) -> Optional[dict]:
    return describe(
        m.reports["client"],
        m.window.start.client_mark["t_ns"],
        m.connected.get("t_ns"),
        opts.segment,
        opts.prebuffer,
        opts.bitrate,
        opts.response,
        opts.count,
        rec,
    )


SECTIONS = {"video": section}


def every_segment(got: dict, gave: dict, opts, expected: int) -> bool:
    """Every segment asked for came, whole and checked, as did each request."""
    return (
        both_checked(got, gave, opts, expected)
        and got.get("responses") == opts.count
        and got["app_bytes"] == opts.count * opts.response
    )


ROW = Pattern(
    "video",
    ROLES,
    ROLES,
    "client",
    "count",
    (
        "a player fetching --duration of media at --bitrate in --segment pieces over one connection, one after "
        "another, playing once --prebuffer is in: startup delay and stalls"
    ),
    events=True,
    unit="segments",
    event="rr",
    backlog=lambda cfg, role, datagram: role == "server",  # its segments, never the client's requests
    counting=lambda o: f"{o.count} segments of {o.response:,} bytes, one after another on one connection",
    options=("rr-streams", "app", "bitrate", "segment", "prebuffer"),
    sets=("count", "request", "response", "rr-mode", "conns"),
    resolve=resolve,
    sections=SECTIONS,
    connections="fetches segments over a connection",
    verified=every_segment,
)
