# SPDX-License-Identifier: GPL-2.0-only
"""--pattern video over seed 002's links, with netem in the guest (this
host's kernel has no sch_netem)."""

import pytest

from conftest import needs_build, run_json
from test_guest import needs_guest, qemu_processes
from test_video import check_segments, prebuffer_bound_s

pytestmark = [pytest.mark.guest, needs_build, needs_guest]


@pytest.mark.parametrize("stack", ["quic", "tcp-tls"])
def test_video_over_3g_in_the_guest(runs_dir, stack):
    """Seed 002's 3G link (1 Mbit/s, 550 ms, 0.5% loss, netem in the
    guest) under 2.5 Mbit/s video: the player starts no sooner than the
    prebuffer can cross the link, and stalls, since the link cannot carry
    the media at its pace."""
    rec = run_json(
        runs_dir,
        *("--stack", stack, "--guest", "--pattern", "video", "--link", "3g", "--duration", "4s"),
        *("--probes", "none", "--sample-hz", "0"),
        timeout=600,
        allow=(r"emulat",),
    )
    assert qemu_processes() == []
    v = check_segments(rec)
    assert v["startup_delay_s"] >= prebuffer_bound_s(v, 1e6)
    assert v["stalls"] >= 1
