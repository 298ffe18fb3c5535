# SPDX-License-Identifier: GPL-2.0-only
"""A round trip between two hosts (--link rtt with --link-dev) where only
one side's kernel has netem: this machine's has no sch_netem
(docs/platform.md), the QEMU guest's (Debian's kernel, as a host over its
tap device, tests/sshhosts.py GuestSshHost) has. A round trip is the sum
of both directions' delays, so qprof puts all of it on the guest's
egress, as one would with netem on one host, and says so in the record
(collectors/emulation.py); where that cannot be (loss or jitter, or no
side with netem) it refuses, tested in tests/test_hosts_unit.py and
tests/test_run_hosts.py."""

import json
import subprocess

import pytest

from conftest import needs_build
from test_guest import needs_guest
from test_run_hosts import hosts_run

pytestmark = [pytest.mark.guest, needs_build]


def _root_qdisc(host, dev: str) -> str:
    """The root qdisc of dev: here, or on the host (over ssh)."""
    argv = ["tc", "-j", "qdisc", "show", "dev", dev]
    if host is not None:
        argv = ["ssh", "-F", str(host.ssh_config), "-o", "BatchMode=yes", host.destination, *argv]
    r = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    return next((q["kind"] for q in json.loads(r.stdout) if q.get("root")), "none")


@needs_guest
@pytest.mark.timeout(600)
def test_a_round_trip_between_hosts_goes_on_the_side_with_netem(guest_ssh_host, runs_dir):
    host = guest_ssh_host
    before = {"here": _root_qdisc(None, host.tap), "there": _root_qdisc(host, "eth0")}
    rec = hosts_run(
        runs_dir, host, "--stack", "quic", "-d", "1s", "--warmup", "0.5s", "--sample-hz", "0", "--probes", "none",
        "--link", "rtt=40ms", "--link-dev", f"local:{host.tap},{host.destination}:eth0", timeout=600,
    )  # fmt: skip
    assert rec["status"] == "complete" and rec["verified"] is True and rec["bytes"] > 0
    one = rec["link"]["one_sided"]
    assert (one["netem_on"], one["delay_s"]) == ("server", 0.04)
    assert f"the client's device {host.tap} (this machine) has no sch_netem" in one["reason"]
    there, here = (rec["link"]["directions"][d] for d in ("server_to_client", "client_to_server"))
    # The guest's kernel holds the whole round trip's delay, read back there; the tap here none.
    assert there["applied"]["kinds"] == ["netem"] and there["plan"]["delay_s"] == 0.04 and there["differs"] == []
    assert "netem" not in here["applied"]["kinds"] and here["plan"]["delay_s"] == 0 and here["differs"] == []
    # QUIC's own measure of the path: no round trip shorter than the delay on it.
    m = json.loads((runs_dir / rec["id"] / "measurement.json").read_text())
    assert m["window"]["end"]["client_mark"]["conn_stats"]["min_rtt_us"] >= 40_000
    assert {"here": _root_qdisc(None, host.tap), "there": _root_qdisc(host, "eth0")} == before
    assert host.wait_idle() == []
