# SPDX-License-Identifier: GPL-2.0-only
"""Options no other test ran end to end: udp's --dgram-size and --batch,
msquic's --exec-profile, --cpus with a list of CPUs, video's --segment
with a --prebuffer that is not a whole number of them. Each is held to
what an instrument the option does not write saw."""

import json
import math
import os

import pytest

from qprof.describe import offload, record

from conftest import needs_build, qprof, run_json
from test_video import check_segments, prebuffer_bound_s

pytestmark = [pytest.mark.system, needs_build]


def test_udp_datagram_size_and_batch(runs_dir):
    """--dgram-size 1200 --batch 8 with sendmmsg and GSO off: the syscalls
    probe saw 8 messages asked of every sendmmsg and 1200 bytes in each
    one the server received; the packets probe saw 1200-byte datagrams
    (in frames with their UDP, IP and Ethernet headers) leave the client's
    veth. An edge's copy of the probe's map can pass a call whose exit is
    being counted, its `calls` added and its messages not yet (a plain
    copy, docs/probes.md): one call at each edge, so the window's messages
    are 8 a call within EDGE_TORN_CALLS calls."""
    rec = run_json(
        runs_dir,
        *("--stack", "udp", "--dgram-size", "1200", "--batch", "8", "--send-mode", "sendmmsg", "--gso", "off"),
        *("--duration", "0.5s", "--warmup", "0.3s", "--sample-hz", "0", "--probes", "syscalls,packets"),
    )
    assert rec["status"] == "complete" and rec["verified"] is True
    assert rec["workload"]["client"]["report"]["batch"] == 8
    calls = rec["syscalls"]["client"]["by_syscall"]["sendmmsg"]
    asked, made = calls["msgs_requested"], calls["calls"]
    assert made > 0 and asked % 8 == 0 and abs(asked - 8 * made) <= offload.EDGE_TORN_CALLS * 8, calls
    received = rec["syscalls"]["server"]["by_syscall"]
    msgs = sum(c.get("msgs_returned", 0) for c in received.values())
    got = sum(c["bytes"] for c in received.values())
    assert msgs > 0 and got == 1200 * msgs, received
    tx = record.derive.packets_devices(rec)["client"]["tx"]
    datagrams = tx["udp_skbs"]
    assert datagrams > 0 and tx["gso_skbs"] == 0, tx
    # Each frame on the veth: the payload, UDP's 8-byte header, IPv4's 20
    # and Ethernet's 14; what else left (ARP and the like) is other_skbs,
    # at most a frame each.
    assert 0 <= tx["bytes"] - (1200 + 8 + 20 + 14) * datagrams <= tx["other_skbs"] * 1514, tx


def test_exec_profile_changes_msquic_threads(runs_dir):
    """--exec-profile maxtput against lowlat, in one comparison: msquic's
    max-throughput profile runs its datapath on threads of their own, so
    the server process has more threads (/proc, at the window's end), and
    the record says which profile each run asked. Not the cputhread
    probe's list: it holds the threads that ran in the window, and a
    partition's worker with nothing to do may not run in half a second."""
    r = qprof(
        *("compare", "--stack", "quic", "--vary", "exec-profile=lowlat,maxtput", "--repeat", "1"),
        *("--duration", "0.5s", "--warmup", "0.3s", "--sample-hz", "0", "--json"),
        runs_dir=runs_dir,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    comp = json.loads(r.stdout)
    recs = {}
    for run in comp["runs"]:
        rec = json.loads((runs_dir / run["id"] / "run.json").read_text())
        assert rec["verified"] is True
        recs[rec["config"]["exec_profile"]] = rec
    threads = {p: rec["cpu"]["server"]["threads"] for p, rec in recs.items()}
    for rec in recs.values():
        # The two instruments' threads: every one that ran is one of the
        # process's (no msquic thread ends inside the window).
        assert 0 < len(rec["cpu_threads"]["server"]["threads"]) <= rec["cpu"]["server"]["threads"], rec["cpu"]
    assert set(threads) == {"lowlat", "maxtput"} and threads["maxtput"] > threads["lowlat"], threads


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to give the client a list of them")
def test_cpus_as_lists(runs_dir):
    """--cpus with a list for a side, as taskset -c writes one: the client
    on both CPUs (`0,1`), the server on the second alone; each side's
    threads ran only where asked, as the cputhread probe saw them."""
    first, second = sorted(os.sched_getaffinity(0))[:2]
    rec = run_json(
        runs_dir,
        *("--stack", "tcp", "--cpus", f"client={first},{second},server={second}"),
        *("--duration", "0.5s", "--warmup", "0.3s", "--sample-hz", "0"),
    )
    assert rec["placement"]["requested"] == {"client": [first, second], "server": [second]}
    for side, allowed in (("client", {first, second}), ("server", {second})):
        for t in rec["cpu_threads"][side]["threads"]:
            assert {int(c) for c in t["cpus"]} <= allowed, (side, t)
        assert rec["placement"]["on_requested_share"][side] == 1.0, rec["placement"]


def test_segments_and_a_prebuffer_between_them(runs_dir):
    """--segment 1s with --prebuffer 2.5s: segments of a second's media at
    the bitrate, and playback waits for three of them (the prebuffer
    rounded up to whole segments), which no 20 Mbit/s link brings sooner."""
    rec = run_json(
        runs_dir,
        *("--stack", "tcp-tls", "--pattern", "video", "--bitrate", "4mbit", "--duration", "5s"),
        *("--segment", "1s", "--prebuffer", "2.5s", "--link", "rate=20mbit", "--sample-hz", "0"),
        timeout=120,
    )
    v = check_segments(rec)
    assert v["segment_s"] == 1 and v["segments"] == 5
    assert v["segment_bytes"] == 4_000_000 // 8
    assert v["prebuffer_segments"] == math.ceil(2.5 / 1) == 3
    assert v["startup_delay_s"] >= prebuffer_bound_s(v, 20e6)
