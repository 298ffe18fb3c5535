# SPDX-License-Identifier: GPL-2.0-only
"""--pattern video over seed 002's links, with netem in the guest (this
host's kernel has no sch_netem): QUIC and TLS over TCP, one comparison,
served by the session's started guest one run after the other. That a
comparison boots one guest for all its runs where none was started is
tests/test_resident_unit.py's (placement.Guest under compare); a run
booting its own is test_exit_codes' (the deadline fault) and test_guest's
(a boot that fails); a booted guest serving jobs is test_guest's started
guests, which boot as a run's own does."""

import json

import pytest

from conftest import leftovers, needs_build, qprof, validate_records
from test_guest import GUEST_RUN_S, GUEST_TEST_S, needs_guest, qemu_processes, served_by
from test_video import check_segments, prebuffer_bound_s

pytestmark = [pytest.mark.guest, needs_build, needs_guest, pytest.mark.timeout(GUEST_TEST_S)]
# Two 1 s segments, playback from the first: the second cannot cross the
# link in the second the first plays (the link is slower than the media,
# whatever the segments), so the player stalls.
VIDEO_3G = (
    *("--stacks", "quic,tcp-tls", "--guest", "--pattern", "video", "--link", "3g"),
    *("--duration", "2s", "--segment", "1s", "--prebuffer", "1s"),
    *("--probes", "none", "--sample-hz", "0", "--repeat", "1"),
)


@pytest.fixture(scope="module")
def video(tmp_path_factory, session_guest):
    """{stack: record} of VIDEO_3G, compared in the session's started guest."""
    info = session_guest.ensure()
    runs = tmp_path_factory.mktemp("video") / "runs"
    r = qprof("compare", "--json", *VIDEO_3G, runs_dir=runs, timeout=GUEST_RUN_S)
    assert r.returncode == 0, r.stderr
    # TCG's speed may leave the link idle; qprof then says the emulation held the run back.
    assert all("emulat" in line for line in r.stderr.splitlines() if line.strip()), r.stderr
    assert leftovers() == [] and qemu_processes() == []
    validate_records(runs)
    after = session_guest.status()
    assert after["served"] == info["served"] + 2
    comp = json.loads(r.stdout)
    return info, [json.loads((runs / run["id"] / "run.json").read_text()) for run in comp["runs"]]


def test_a_comparison_in_the_started_guest_is_served_run_after_run(video):
    """Both runs are the started guest's jobs, one after the other."""
    info, recs = video
    first, second = (served_by(rec, info) for rec in recs)
    assert first["runs_before"] == info["served"]
    assert second == {**first, "runs_before": info["served"] + 1}


@pytest.mark.parametrize("stack", ["quic", "tcp-tls"])
def test_video_over_3g_in_the_guest(video, stack):
    """Seed 002's 3G link (1 Mbit/s, 550 ms, 0.5% loss, netem in the
    guest) under 2.5 Mbit/s video: the player starts no sooner than the
    prebuffer can cross the link, and stalls, since the link cannot carry
    the media at its pace."""
    (rec,) = [rec for rec in video[1] if rec["stack"] == stack]
    v = check_segments(rec)
    assert v["startup_delay_s"] >= prebuffer_bound_s(v, 1e6)
    assert v["stalls"] >= 1
