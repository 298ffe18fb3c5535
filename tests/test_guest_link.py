# SPDX-License-Identifier: GPL-2.0-only
"""--link with netem, in the guest (this host's kernel has no sch_netem):
the kernel holds what was asked, and the loss it applies is the loss asked
for, within a binomial bound."""

import math

import pytest
from test_guest import needs_guest, qemu_processes

from conftest import needs_build, run_json

pytestmark = [needs_build, needs_guest]


def test_netem_link_as_asked(runs_dir):
    spec = "rtt=40ms,loss=2%,rate=20mbit,jitter=4ms"
    rec = run_json(
        runs_dir,
        *("--stack", "tcp", "--guest", "--link", spec),
        *("--duration", "3s", "--warmup", "1s", "--probes", "none", "--sample-hz", "0"),
        timeout=400,
    )
    assert qemu_processes() == []
    assert rec["status"] == "complete" and rec["verified"] is True
    lk = rec["link"]
    for name, d in lk["directions"].items():
        a = d["applied"]
        assert a["kinds"] == ["tbf", "netem"], name
        assert a["rate_bit"] == 20_000_000 and a["delay_s"] == pytest.approx(0.020)
        assert a["jitter_s"] == pytest.approx(0.004) and a["loss_percent"] == pytest.approx(2.0)
        assert a["netem_rate_bit"] == 20_000_000  # jitter, kept in order
        assert d["differs"] == []
    # Loss 2% over a 40 ms RTT holds one TCP flow far below 20 Mbit/s
    # (Mathis: ~2.5 Mbit/s), so its queue never fills and every netem
    # drop is a random loss: binomial(n, 0.02), here within 4 sigma.
    assert lk["saturation"]["limited_by"] != "link"
    for name, d in lk["directions"].items():
        w = d["window"]["netem"]
        n = w["packets"] + w["drops"]
        assert n >= 300, (name, w)
        mean, sd = n * 0.02, math.sqrt(n * 0.02 * 0.98)
        assert abs(w["drops"] - mean) <= 4 * sd + 1, (name, w, mean, sd)
        assert d["netem_drops_percent"] == pytest.approx(100 * w["drops"] / n)
    # The data went client to server and TCP retransmitted what was lost.
    assert lk["directions"]["client_to_server"]["window"]["tbf"]["bytes"] > rec["bytes"]
    assert rec["kernel_loss"]["retransmitted_segments"] > 0
