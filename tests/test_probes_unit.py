# SPDX-License-Identifier: GPL-2.0-only
"""Decoding probe snapshots and the figures derived from them."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from qprof.collectors.probes import OPTION_FLAGS, delta
from qprof.describe import derive, options, record
from qprof.describe.measurement import Measurement

from conftest import SCHEMAS

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "record"


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


def test_untimed_calls_have_no_time_not_zero():
    """Without --syscall-time the probe prints time_ns and time_hist_ns as
    null: they stay null through delta and the per-process sum, the counts
    are whole, and the time figures are absent with the reason."""
    untimed = [
        {**entry(1, 2, "sendmsg", 10, 1000, None), "time_ns": None},
        {**entry(1, 3, "sendmsg", 5, 500, None), "time_ns": None},
        {**entry(1, 3, "recvmmsg", 4, 40, None, errors=1), "time_ns": None},
    ]
    d = delta({"threads": untimed[:1]}, {"threads": untimed})
    assert d["threads"][0]["time_ns"] is None and d["threads"][0]["time_hist_ns"] is None
    calls = derive.by_syscall(untimed, tgid=1)
    assert calls["sendmsg"]["calls"] == 15 and calls["sendmsg"]["bytes"] == 1500
    assert calls["sendmsg"]["time_ns"] is None and calls["sendmsg"]["time_hist_ns"] is None
    f = derive.syscall_figures(calls, nbytes=1500, cpu_s=0.01, datagrams_out=None, datagrams_in=None, timed=False)
    assert f["send_calls"] == 15 and f["recv_calls"] == 4 and f["recv_calls_with_data"] == 3
    assert f["bytes_per_send_call"] == pytest.approx(100)
    for k in ("in_syscall_ns_per_byte", "send_wall_s_per_cpu_s", "recv_wall_s_per_cpu_s"):
        assert f[k] is None, k
    assert "--syscall-time" in f["time_absent_reason"]
    # Timed, the same calls give numbers and no reason.
    timed = derive.by_syscall([entry(1, 2, "sendmsg", 10, 1000, [10], time_ns=5000)], tgid=1)
    f = derive.syscall_figures(timed, nbytes=1000, cpu_s=0.01, datagrams_out=None, datagrams_in=None)
    assert f["in_syscall_ns_per_byte"] == pytest.approx(5) and f["time_absent_reason"] is None


def test_syscall_time_is_opt_in():
    """The option reaches the probe tool as --time only when set; off by default."""
    assert options.RunOptions().syscall_time is False
    assert OPTION_FLAGS["syscalls"](options.RunOptions()) == []
    assert OPTION_FLAGS["syscalls"](options.RunOptions(syscall_time=True)) == ["--time"]


def _untimed(m: Measurement) -> Measurement:
    """m as an untimed syscalls probe would have recorded it."""
    m = copy.deepcopy(m)
    probe = m.probes["syscalls"]
    probe["call_time"] = False
    for mark in [probe["window"], *probe.get("marks", {}).values()]:
        for t in mark.get("threads", []):
            t["time_ns"] = t["time_hist_ns"] = None
    return m


@pytest.mark.parametrize("case", ["quic", "tcp-tls"])
def test_record_of_an_untimed_probe(case):
    """A stored run's measurement, its syscalls probe untimed: the record
    has every count of the timed one, the time figures null with the
    reason, and it is valid; the schema refuses a zero in their place."""
    m = Measurement.from_json((DATA / case / "measurement.json").read_text())
    timed = json.loads(json.dumps(record.describe(m, DATA / case)))
    rec = json.loads(json.dumps(record.describe(_untimed(m), DATA / case)))
    schema = json.loads(SCHEMAS["run.json"].read_text())
    complete = {"schema_version": 2, "id": "20261124-000000-000000", "status": "complete", **rec}
    jsonschema.validate(complete, schema)
    for side in ("client", "server"):
        a, b = timed["syscalls"][side], rec["syscalls"][side]
        assert a["time_absent_reason"] is None and a["in_syscall_ns_per_byte"] > 0
        assert "--syscall-time" in b["time_absent_reason"]
        for k in ("in_syscall_ns_per_byte", "send_wall_s_per_cpu_s", "recv_wall_s_per_cpu_s"):
            assert b[k] is None, (side, k)
        assert {k: v for k, v in b.items() if k not in TIME_FIGURES} == {
            k: strip_time(v) if k == "by_syscall" else v for k, v in a.items() if k not in TIME_FIGURES
        }
        for name, s in b["by_syscall"].items():
            assert s["time_ns"] is None and s["time_hist_ns"] is None, name
    assert rec["crosscheck"] == timed["crosscheck"]
    broken = copy.deepcopy(complete)
    broken["syscalls"]["client"]["in_syscall_ns_per_byte"] = 0.0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


TIME_FIGURES = ("in_syscall_ns_per_byte", "send_wall_s_per_cpu_s", "recv_wall_s_per_cpu_s", "time_absent_reason")


def strip_time(by_syscall: dict) -> dict:
    return {n: {**s, "time_ns": None, "time_hist_ns": None} for n, s in by_syscall.items()}


def test_compare():
    assert derive.compare(98, 100)["ratio"] == pytest.approx(0.98)
    assert derive.compare(None, 100)["ratio"] is None
    assert derive.compare(5, 0)["ratio"] is None
