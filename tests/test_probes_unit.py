# SPDX-License-Identifier: GPL-2.0-only
"""Decoding probe snapshots and the figures derived from them."""

import pytest

from qprof.collectors.probes import delta
from qprof.describe import derive

pytestmark = pytest.mark.unit


def entry(tgid, tid, sys, calls, nbytes, hist, errors=0, time_ns=0):
    return {
        "tgid": tgid,
        "tid": tid,
        "comm": "qprof-wl",
        "sys": sys,
        "calls": calls,
        "errors": errors,
        "eagain": errors,
        "bytes": nbytes,
        "msgs_requested": 0,
        "msgs_returned": 0,
        "mmsg_truncated": 0,
        "time_ns": time_ns,
        "time_hist_ns": hist,
    }


def test_delta_pairs_entries_and_subtracts_histograms():
    start = {"event": "mark", "name": "start", "t_ns": 10, "threads": [entry(1, 2, "sendmsg", 5, 500, [0, 1, 4])]}
    end = {
        "event": "mark",
        "name": "end",
        "t_ns": 99,
        "threads": [
            entry(1, 3, "recvmmsg", 7, 70, [7]),  # new since start
            entry(1, 2, "sendmsg", 15, 1500, [0, 2, 9, 4]),
        ],
    }
    d = delta(start, end)
    by = {(t["tid"], t["sys"]): t for t in d["threads"]}
    assert by[(2, "sendmsg")]["calls"] == 10 and by[(2, "sendmsg")]["bytes"] == 1000
    assert by[(2, "sendmsg")]["time_hist_ns"] == [0, 1, 5, 4]
    assert by[(3, "recvmmsg")]["calls"] == 7 and by[(3, "recvmmsg")]["time_hist_ns"] == [7]
    assert d["t_ns"] == 99 and d["name"] == "end"


def test_by_syscall_keeps_one_process_and_sums_threads():
    threads = [
        entry(1, 2, "sendmsg", 10, 1000, [3, 7]),
        entry(1, 3, "sendmsg", 5, 500, [0, 0, 5]),
        entry(9, 9, "sendmsg", 99, 9999, [99]),
    ]
    calls = derive.by_syscall(threads, tgid=1)
    assert calls["sendmsg"]["calls"] == 15 and calls["sendmsg"]["bytes"] == 1500
    assert calls["sendmsg"]["time_hist_ns"] == [3, 7, 5]
    assert sum(calls["sendmsg"]["time_hist_ns"]) == calls["sendmsg"]["calls"]


def test_syscall_figures():
    calls = {
        "sendmsg": {"calls": 100, "errors": 0, "eagain": 0, "bytes": 6_400_000, "time_ns": 2_000_000},
        "recvmmsg": {"calls": 50, "errors": 10, "eagain": 10, "bytes": 4_000, "time_ns": 1_000_000},
        "write": {"calls": 7, "errors": 0, "eagain": 0, "bytes": 70, "time_ns": 5},
    }
    f = derive.syscall_figures(calls, nbytes=6_000_000, cpu_s=0.01, datagrams_out=4400, datagrams_in=None)
    assert f["send_calls"] == 100 and f["recv_calls"] == 50 and f["recv_calls_with_data"] == 40
    assert f["syscalls_per_mb"] == pytest.approx(150 / 6.0)
    assert f["bytes_per_send_call"] == pytest.approx(64_000)
    assert f["bytes_per_recv_call"] == pytest.approx(100)
    assert f["datagrams_per_send_call"] == pytest.approx(44)
    assert f["datagrams_per_recv_call"] is None  # not measured stays absent
    assert f["in_syscall_ns_per_byte"] == pytest.approx(3_000_000 / 6_000_000)
    assert f["send_wall_s_per_cpu_s"] == pytest.approx(0.2)
    assert f["recv_wall_s_per_cpu_s"] == pytest.approx(0.1)


def test_compare():
    assert derive.compare(98, 100)["ratio"] == pytest.approx(0.98)
    assert derive.compare(None, 100)["ratio"] is None
    assert derive.compare(5, 0)["ratio"] is None
