# SPDX-License-Identifier: GPL-2.0-only
"""Decoding probe snapshots and the figures derived from them."""

import copy
import json
import random
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from qprof.collectors.probes import OPTION_FLAGS, delta
from qprof.describe import derive, options, record
from qprof.describe.measurement import Measurement
from qprof.describe.plan import resolve

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


def test_softirq_time_and_packets_rx_are_opt_in():
    """Each option reaches its probe tool only when set; both off by default."""
    default = options.RunOptions()
    assert default.softirq_time is False and default.packets_rx is False
    assert OPTION_FLAGS["cputhread"](default) == [] and OPTION_FLAGS["packets"](default) == []
    assert OPTION_FLAGS["cputhread"](options.RunOptions(softirq_time=True)) == ["--softirqs"]
    assert OPTION_FLAGS["packets"](options.RunOptions(packets_rx=True)) == ["--rx"]
    # The receive side counted is the syscalls probe's datagrams too.
    assert OPTION_FLAGS["syscalls"](options.RunOptions(packets_rx=True)) == ["--datagrams"]


def _counting_datagrams(m: Measurement, counted: bool) -> Measurement:
    """m as a syscalls probe with --datagrams would have recorded it: each
    receive call of every thread took 3 datagrams (or, not counted, null)."""
    m = copy.deepcopy(m)
    probe = m.probes["syscalls"]
    probe["datagrams"] = counted
    for mark in [probe["window"], *probe.get("bracket", {}).values(), *probe.get("marks", {}).values()]:
        for t in mark.get("threads", []) if isinstance(mark, dict) else []:
            ok = t["calls"] - t["errors"] if t["sys"] in derive.RECV else 0
            t["datagrams"], t["datagrams_most"] = (3 * ok, 3 if ok else 0) if counted else (None, None)
    return m


def test_a_udp_sides_received_datagrams_are_what_its_receive_calls_took():
    """With the syscalls probe's datagrams, a QUIC side's received datagrams
    (datagrams per receive call, the check against the library's count) are
    what its calls took from the socket, not its device's packets; a probe
    that could not count them leaves them null, with the reason."""
    m = Measurement.from_json((DATA / "quic" / "measurement.json").read_text())
    rec = json.loads(json.dumps(record.describe(_counting_datagrams(m, True), DATA / "quic")))
    for side in ("client", "server"):
        calls = rec["syscalls"][side]["by_syscall"]
        took = sum(c["datagrams"] for n, c in calls.items() if n in derive.RECV)
        assert took == 3 * rec["syscalls"][side]["recv_calls_with_data"] > 0
        assert rec["syscalls"][side]["datagrams_per_recv_call"] == pytest.approx(3)
        assert rec["crosscheck"][side]["udp_recv_datagrams"]["ebpf"] == took
    rec = json.loads(json.dumps(record.describe(_counting_datagrams(m, False), DATA / "quic")))
    for side in ("client", "server"):
        check, f = rec["crosscheck"][side]["udp_recv_datagrams"], rec["syscalls"][side]
        assert check["ebpf"] is None and check["absent_reason"] == derive.DATAGRAMS_ABSENT
        assert f["datagrams_per_recv_call"] is None and f["rx_absent_reason"] == derive.DATAGRAMS_ABSENT


@pytest.mark.parametrize(
    "stack, gro, rx",
    [
        ("tcp", None, False),
        ("tcp", "on", True),  # the veths' GRO shows only where they receive
        ("tcp-tls", "off", True),
        ("quic", "on", False),  # msquic's GRO shows in its receive calls (syscalls probe)
        ("udp", "off", False),
    ],
)
def test_a_run_that_sets_the_veths_gro_counts_their_receive_side(stack, gro, rx):
    plan = resolve(options.RunOptions(stack=stack, gro=gro))
    assert plan.options.packets_rx is rx
    assert resolve(options.RunOptions(stack=stack, gro=gro, packets_rx=True)).options.packets_rx is True


def test_untimed_softirqs_are_absent_not_zero():
    """A cputhread window without softirqs (the tool's softirq null): the
    on-CPU figures as before, every softirq figure None with the reason."""
    thread = {"tgid": 1, "tid": 1, "comm": "a", "oncpu_ns": 4000, "runq_ns": 10, "switches": 3, "involuntary": 1}
    vec = {"vec": "NET_RX", "count": 5, "time_ns": 1000, "in_target_ns": {"1": 600}, "in_ksoftirqd_ns": 0}
    timed_window = {"threads": [thread], "softirq": [vec], "softirq_includes_hardirqs": True, "hardirq_ns": None}
    untimed_window = {"threads": [thread], "softirq": None, "softirq_includes_hardirqs": None, "hardirq_ns": None}
    timed = derive.thread_figures(timed_window, {"client": 1}, {"client": 1000}, 1000)
    untimed = derive.thread_figures(untimed_window, {"client": 1}, {"client": 1000}, 1000)
    assert timed["client"]["ns_per_byte"] == {"oncpu": 4.0, "softirq_in_context": 0.6, "own_work": 3.4}
    assert timed["softirq_absent_reason"] is None and timed["softirq"]["NET_RX"]["count"] == 5
    assert untimed["client"]["ns_per_byte"] == {"oncpu": 4.0, "softirq_in_context": None, "own_work": None}
    assert untimed["client"]["softirq_in_context_s"] is None and untimed["softirq"] is None
    assert untimed["client"]["oncpu_s"] == timed["client"]["oncpu_s"]
    assert untimed["client"]["threads"] == timed["client"]["threads"]
    assert "--softirq-time" in untimed["softirq_absent_reason"]


def _without_softirqs_and_rx(m: Measurement) -> Measurement:
    """m as the default probes record it now: the cputhread probe without
    softirq timing, the packets probe without its receive side."""
    m = copy.deepcopy(m)
    cpu, pk = m.probes["cputhread"], m.probes["packets"]
    cpu["softirq_time"], pk["rx"] = False, False
    for k in ("softirq", "softirq_includes_hardirqs", "hardirq_count", "hardirq_ns", "hardirq_in_softirq_ns"):
        cpu["window"][k] = None
    cpu["window"]["progs"] = [p for p in cpu["window"]["progs"] if not p["name"].startswith("softirq")]
    for d in pk["window"]["devices"]:
        d["rx"] = None
    pk["window"]["progs"] = [p for p in pk["window"]["progs"] if p["name"] == "start_xmit"]
    return m


@pytest.mark.parametrize("case", ["quic", "tcp-tls"])
def test_record_without_softirqs_and_rx(case):
    """A stored run's measurement as the default probes now take it: the
    record is valid, every figure that needs softirq timing or the receive
    side is null with a reason naming the option, the rest is the record
    of the full measurement; the schema refuses a zero in their place."""
    m = Measurement.from_json((DATA / case / "measurement.json").read_text())
    full = json.loads(json.dumps(record.describe(m, DATA / case)))
    rec = json.loads(json.dumps(record.describe(_without_softirqs_and_rx(m), DATA / case)))
    schema = json.loads(SCHEMAS["run.json"].read_text())
    complete = {"schema_version": 2, "id": "20261124-000000-000000", "status": "complete", **rec}
    jsonschema.validate(complete, schema)
    ct, was = rec["cpu_threads"], full["cpu_threads"]
    assert was["softirq_absent_reason"] is None and was["softirq"]
    assert "--softirq-time" in ct["softirq_absent_reason"]
    assert ct["softirq"] is None and ct["softirq_includes_hardirqs"] is None and ct["hardirq_s"] is None
    for side in ("client", "server"):
        assert ct[side]["softirq_in_context_s"] is None
        assert ct[side]["ns_per_byte"] == {**was[side]["ns_per_byte"], "softirq_in_context": None, "own_work": None}
        assert ct[side]["oncpu_check"] == was[side]["oncpu_check"] and ct[side]["threads"] == was[side]["threads"]
        a, b = full["syscalls"][side], rec["syscalls"][side]
        assert a["rx_absent_reason"] is None
        assert "--packets-rx" in b["rx_absent_reason"] and b["datagrams_per_recv_call"] is None
        drop = ("datagrams_per_recv_call", "rx_absent_reason")
        assert {k: v for k, v in b.items() if k not in drop} == {k: v for k, v in a.items() if k not in drop}
    assert full["syscalls"]["server"]["datagrams_per_recv_call"] > 1  # the receiver's, measured in full
    if case == "quic":
        for side in ("client", "server"):
            check = rec["crosscheck"][side]["udp_recv_datagrams"]
            assert check["ebpf"] is None and check["ratio"] is None and "--packets-rx" in check["absent_reason"]
            assert check["own"] == full["crosscheck"][side]["udp_recv_datagrams"]["own"]
            assert rec["crosscheck"][side]["udp_send_datagrams"] == full["crosscheck"][side]["udp_send_datagrams"]
        # msquic's GRO shows in the receive calls, not on the device.
        assert rec["offload"]["observed"] == full["offload"]["observed"]
    else:
        assert rec["crosscheck"] == full["crosscheck"]
        obs = rec["offload"]["observed"]
        assert full["offload"]["observed"]["gro"] == "off" and obs["gro"] is None
        assert "--packets-rx" in obs["gro_absent_reason"] and obs["gso"] == full["offload"]["observed"]["gso"]
    for path, value in (
        (("cpu_threads", "client", "ns_per_byte", "own_work"), 0.0),
        (("cpu_threads", "softirq"), {}),
        (("syscalls", "server", "datagrams_per_recv_call"), 0.0),
    ):
        broken = copy.deepcopy(complete)
        *parents, leaf = path
        target = broken
        for p in parents:
            target = target[p]
        target[leaf] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


def test_compare():
    assert derive.compare(98, 100)["ratio"] == pytest.approx(0.98)
    assert derive.compare(None, 100)["ratio"] is None
    assert derive.compare(5, 0)["ratio"] is None


LOG2_MAIN = r"""
#include <inttypes.h>
#include "common.bpf.h"
int main(void)
{
	uint64_t v;

	while (scanf("%" SCNu64, &v) == 1)
		printf("%u\n", log2_slot(v));
	return 0;
}
"""


def test_histogram_buckets_are_each_values_power_of_two(tmp_path):
    """The probes' histogram bucket (probes/common.bpf.h, compiled here for
    this machine: the same C the BPF programs inline) is the value's
    highest set bit, 0 for 0, and 31 from 2^31 up, for every power of two
    and its neighbours and a spread of values between."""
    cc = shutil.which("cc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler: `make deps` installs one")
    src, exe = tmp_path / "log2.c", tmp_path / "log2"
    src.write_text(LOG2_MAIN)
    probes_dir = Path(__file__).resolve().parent.parent / "probes"
    subprocess.run([cc, "-O2", "-I", str(probes_dir), "-o", str(exe), str(src)], check=True, timeout=60)
    rng = random.Random(20261128)
    values = [0, 1, 2**64 - 1]
    values += [(1 << b) + d for b in range(64) for d in (-3, -2, -1, 0, 1, 2, 3) if 0 <= (1 << b) + d < 2**64]
    values += [rng.getrandbits(64) >> rng.randrange(64) for _ in range(20000)]
    out = subprocess.run([str(exe)], input="\n".join(map(str, values)), capture_output=True, text=True, timeout=60)
    got = [int(x) for x in out.stdout.split()]
    assert got == [min(max(v.bit_length() - 1, 0), 31) for v in values]
