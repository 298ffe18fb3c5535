# SPDX-License-Identifier: GPL-2.0-only
"""--pattern video over seed 002's links, with netem in the guest (this
host's kernel has no sch_netem): QUIC and TLS over TCP, one comparison.
It runs where no guest was started (a state directory of its own), so it
boots one guest, which serves both its runs."""

import json

import pytest

from conftest import leftovers, needs_build, qprof, validate_records
from test_guest import GUEST_RUN_S, GUEST_TEST_S, needs_guest, qemu_processes
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
    """{stack: record} of VIDEO_3G, compared where no guest was started; the
    session's started guest, if up, is left as it was."""
    before = session_guest.status()
    tmp = tmp_path_factory.mktemp("video")
    runs, state = tmp / "runs", tmp / "state"
    r = qprof(
        "compare", "--json", *VIDEO_3G, runs_dir=runs, env_extra={"QPROF_STATE_DIR": str(state)}, timeout=GUEST_RUN_S
    )
    assert r.returncode == 0, r.stderr
    # TCG's speed may leave the link idle; qprof then says the emulation held the run back.
    assert all("emulat" in line for line in r.stderr.splitlines() if line.strip()), r.stderr
    assert leftovers() == [] and qemu_processes() == [] and sorted(p.name for p in state.iterdir()) == ["lock"]
    validate_records(runs)
    assert session_guest.status() == before
    comp = json.loads(r.stdout)
    return [json.loads((runs / run["id"] / "run.json").read_text()) for run in comp["runs"]]


def test_a_comparison_boots_one_guest_for_its_runs(video):
    """Without a started guest the comparison boots one, and both runs are
    its, one after the other."""
    first, second = (rec["environment"]["guest"] for rec in video)
    assert first["started"] is False and first["runs_before"] == 0
    assert second == {**first, "runs_before": 1}


@pytest.mark.parametrize("stack", ["quic", "tcp-tls"])
def test_video_over_3g_in_the_guest(video, stack):
    """Seed 002's 3G link (1 Mbit/s, 550 ms, 0.5% loss, netem in the
    guest) under 2.5 Mbit/s video: the player starts no sooner than the
    prebuffer can cross the link, and stalls, since the link cannot carry
    the media at its pace."""
    (rec,) = [rec for rec in video if rec["stack"] == stack]
    v = check_segments(rec)
    assert v["startup_delay_s"] >= prebuffer_bound_s(v, 1e6)
    assert v["stalls"] >= 1
