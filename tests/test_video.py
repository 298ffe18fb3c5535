# SPDX-License-Identifier: GPL-2.0-only
"""--pattern video: a player fetching its segments over one connection;
the startup delay and the stalls hold to what the link allows, at any
speed of this machine."""

import pytest

from conftest import needs_build, run_json

pytestmark = pytest.mark.system


def check_segments(rec: dict) -> dict:
    """Every segment asked for came whole and checked; the figures hang together."""
    assert rec["status"] == "complete" and rec["verified"] is True
    v = rec["video"]
    assert v["segments"] == v["segments_asked"] == rec["config"]["count"]
    assert v["segment_bytes"] == round(v["bitrate"] * v["segment_s"] / 8)
    assert v["media_s"] == pytest.approx(v["segments"] * v["segment_s"])
    assert 0 <= v["connect_s"] <= v["startup_delay_s"]
    assert v["prebuffering_s"] <= v["startup_delay_s"]
    assert (v["stalls"] > 0) == (v["stall_s"] > 0) and len(v["stall_each_s"]) == v["stalls"]
    assert v["stall_s"] == pytest.approx(sum(v["stall_each_s"]))
    assert v["playback_s"] == pytest.approx(v["media_s"] + v["stall_s"])
    r = v["segment_rate_bit"]
    assert 0 < r["min"] <= r["median"] <= r["max"] and len(v["segment_rate_each_bit"]) == v["segments"]
    assert v["cpu_s_per_media_s"]["client"] > 0 and v["cpu_s_per_media_s"]["server"] > 0
    return v


def prebuffer_bound_s(v: dict, rate_bit: float) -> float:
    """No link of rate_bit can bring the prebuffer's segments faster."""
    return v["prebuffer_segments"] * v["segment_bytes"] * 8 / rate_bit


@needs_build
@pytest.mark.parametrize(
    "stack, app", [("quic", None), ("quic", "h3"), ("tcp-tls", None), ("tcp-tls", "h1"), ("tcp-tls", "h2")]
)
def test_a_link_faster_than_the_bitrate_never_stalls(runs_dir, stack, app):
    """tbf at 20 Mbit/s under 2.5 Mbit/s video: each 2 s segment comes in
    about a quarter of a second, so playback never waits for one; the
    startup delay is at least the prebuffer's bytes at the link's rate."""
    rec = run_json(
        runs_dir,
        *("--stack", stack, "--pattern", "video", "--bitrate", "2.5mbit", "--duration", "8s"),
        *("--prebuffer", "4s", "--link", "rate=20mbit", "--sample-hz", "0", *(["--app", app] if app else [])),
        timeout=180,
    )
    v = check_segments(rec)
    assert v["prebuffer_segments"] == 2
    assert v["startup_delay_s"] >= prebuffer_bound_s(v, 20e6)
    assert v["stalls"] == 0 and v["stall_s"] == 0
    assert v["download_rate_bit"] <= 20e6 * 1.02


@needs_build
def test_a_link_slower_than_the_bitrate_stalls(runs_dir):
    """1 Mbit/s under 2 Mbit/s video: a 1 s segment takes about 2 s to come,
    so after the first, each one stalls playback; and playback cannot end
    before the last segment is in."""
    rec = run_json(
        runs_dir,
        *("--stack", "tcp", "--pattern", "video", "--bitrate", "2mbit", "--duration", "3s"),
        *("--segment", "1s", "--prebuffer", "1s"),
        *("--link", "rate=1mbit", "--sample-hz", "0"),
        timeout=180,
    )
    v = check_segments(rec)
    assert v["startup_delay_s"] >= prebuffer_bound_s(v, 1e6)
    assert v["stalls"] >= 1
    # The whole media's bytes at the link's rate bound the session from below.
    whole_s = v["segments"] * v["segment_bytes"] * 8 / 1e6
    assert v["startup_delay_s"] + v["playback_s"] >= whole_s + v["segment_s"] - 1e-3
