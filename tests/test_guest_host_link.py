# SPDX-License-Identifier: GPL-2.0-only
"""The server on a host with a kernel of its own: the QEMU guest
(Debian's kernel, TCG) reached over a tap device (tests/sshhosts.py
GuestSshHost), in one run that proves two things (each boot and run of
it takes a minute or more in the emulator):

Its environment is its own kernel's, its clock is not ours, and its
machine-wide figures are its own, added to this machine's.

A round trip between two hosts (--link rtt with --link-dev) where only
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

from qprof.collectors import guest

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
def test_a_run_with_its_server_in_the_guest_and_the_round_trip_on_its_netem(guest_ssh_host, runs_dir):
    host = guest_ssh_host
    before = {"here": _root_qdisc(None, host.tap), "there": _root_qdisc(host, "eth0")}
    rec = hosts_run(
        runs_dir, host, "--stack", "quic", "-d", "2s", "--warmup", "1s",
        "--link", "rtt=40ms", "--link-dev", f"local:{host.tap},{host.destination}:eth0", timeout=600,
    )  # fmt: skip
    assert rec["status"] == "complete" and rec["verified"] is True and rec["bytes"] > 0
    # Its own kernel, boot and clock.
    hosts = rec["hosts"]
    assert hosts["same_kernel"] is False
    there, here = hosts["server"]["environment"], hosts["client"]["environment"]
    assert there["kernel_release"] == guest.artifacts().kernel_release != here["kernel_release"]
    assert there["boot_id"] != here["boot_id"]
    clock = hosts["server"]["clock"]
    assert clock["uncertainty_ns"] * 2 >= clock["rtt_ns"] > 0
    for name, probe in rec["probes"].items():
        assert probe["status"] == "present", (name, probe)
    assert rec["probes"]["packets"]["hosts"]["server"]["build"] == "portable"  # Debian's 6.1
    flame = rec["flame"]
    for side in ("client", "server"):
        assert rec["cpu"][side]["oncpu_schedstat_s"] > 0
        assert flame["samples"][side] > 0
    # Each kernel's CPUs in the capture's coverage, each against its own window.
    assert {c.split("/")[0] for c in flame["coverage_per_cpu"]} == {"client", "server"}
    # The machine: both kernels' CPU together.
    for role in ("client", "server"):
        assert hosts[role]["cpu"]["total_s"] > 0
    assert rec["cpu"]["system"]["total_s"] == pytest.approx(
        hosts["client"]["cpu"]["total_s"] + hosts["server"]["cpu"]["total_s"], rel=1e-9
    )
    # The round trip: all of it on the guest's egress, which alone has netem.
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
