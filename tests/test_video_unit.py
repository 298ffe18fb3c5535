# SPDX-License-Identifier: GPL-2.0-only
"""--pattern video's player, modelled from the segments' arrival times
(describe/patterns/video.py), and what the plan derives from the media."""

import pytest

from qprof import errors
from qprof.describe import options, plan
from qprof.describe.patterns import video

pytestmark = pytest.mark.unit

S = 1_000_000_000  # one second in ns
SEG = 2 * S


def test_playback_starts_once_the_prebuffer_is_in_and_never_stalls_when_ahead():
    # Segments arrive every 0.5 s: far ahead of the 2 s each plays.
    arrivals = [S + k * S // 2 for k in range(10)]
    p = video.playback(arrivals, SEG, 2)
    assert p["start_ns"] == arrivals[1] and p["stalls"] == []
    assert p["end_ns"] == arrivals[1] + 10 * SEG


def test_a_late_segment_stalls_playback_until_it_is_in():
    # Segment 2 comes 3 s after playback reached it; the rest are in time after it.
    arrivals = [S, 2 * S, S + 2 * SEG + 3 * S, S + 2 * SEG + 3 * S + S]
    p = video.playback(arrivals, SEG, 1)
    assert p["start_ns"] == S
    assert p["stalls"] == [(S + 2 * SEG, 3 * S)]
    assert p["end_ns"] == S + 4 * SEG + 3 * S


def test_stalls_add_up_and_each_resumes_at_once():
    # A link at half the bitrate: each segment takes 4 s to come, and plays 2 s.
    arrivals = [4 * S * (k + 1) for k in range(5)]
    p = video.playback(arrivals, SEG, 1)
    assert [ns for _, ns in p["stalls"]] == [2 * S] * 4
    # Playback ends 2 s after the last segment came: it plays once it is in.
    assert p["end_ns"] == arrivals[-1] + SEG


@pytest.mark.parametrize("prebuffer", [1, 2, 5])
def test_the_startup_delay_is_the_connect_and_the_prebuffer(prebuffer):
    events = [{"event": "rr", "seq": k, "sent_ns": 100 + k * S, "answered_ns": 100 + (k + 1) * S} for k in range(5)]
    rec = {"cpu": {"client": {"oncpu_schedstat_s": 0.5}, "server": {"oncpu_schedstat_s": 0.25}, "system": {}}}
    got = video.describe(events, 0, 50, 2.0, 2.0 * prebuffer, 8_000_000, 2_000_000, 5, rec)
    assert got["connect_s"] == 50 / 1e9
    assert got["prebuffer_segments"] == prebuffer
    assert got["prebuffering_s"] == pytest.approx(prebuffer)
    assert got["startup_delay_s"] == pytest.approx(prebuffer + 100 / 1e9)
    assert got["startup_delay_s"] >= got["connect_s"] + got["prebuffering_s"] - 1e-9
    # Each segment's 16 Mbit in 1 s: twice the bitrate, so no stall once playing.
    assert got["stalls"] == 0 and got["stall_s"] == 0
    assert got["segment_rate_bit"] == {"min": 16e6, "median": 16e6, "max": 16e6}
    assert got["cpu_s_per_media_s"]["client"] == pytest.approx(0.5 / 10)


def resolved(**kw):
    return plan.resolve(options.RunOptions(**kw)).options


def test_the_plan_derives_the_segments_from_the_media():
    o = resolved(stack="tcp", pattern="video", bitrate=4_000_000, segment=2.0, duration_s=9.0)
    assert (o.count, o.response, o.request, o.rr_mode, o.conns) == (5, 1_000_000, 16, "closed", 1)
    assert options.workload_args(o, "client")[:2] == ["--pattern", "rr"]
    # A resolved plan (the guest's hand-over) resolves to itself.
    assert plan.resolve(o).options == o


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"count": 3}, "--count"),
        ({"period_s": 0.01}, "--period"),
        ({"conns": 2}, "--conns"),
        ({"response": 1000}, "--response is set by --pattern video"),
        ({"bitrate": 8_000, "segment": 0.001}, "bytes a segment"),
        ({"prebuffer": 20.0}, "--prebuffer 20s is more than"),
    ],
)
def test_video_refuses_what_it_sets_or_cannot_do(kw, words):
    with pytest.raises(errors.QprofError, match=words):
        resolved(stack="quic", pattern="video", **kw)


@pytest.mark.parametrize("stack", ["udp"])
def test_video_runs_where_requests_are_counted(stack):
    with pytest.raises(errors.QprofError, match="--pattern video"):
        resolved(stack=stack, pattern="video")


def test_video_options_belong_to_video():
    with pytest.raises(errors.QprofError, match="--bitrate applies to --pattern video only"):
        resolved(stack="quic", pattern="rr", bitrate=1_000_000)
