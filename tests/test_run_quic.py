# SPDX-License-Identifier: GPL-2.0-only
"""Real msquic transfers, in namespaces and on loopback."""

import json

import pytest

from qprof.describe import cpu as cpu_figures

from conftest import needs_build, run_json

pytestmark = [pytest.mark.system, needs_build]
# A 2 s window of the default instruments: test_run_probes asserts on the same run.
NETNS_2S = ("--stack", "quic", "--duration", "2s", "--warmup", "0.5s")


def assert_cpu_closes(rec):
    """ns/B x bytes gives back the CPU seconds measured, side by side."""
    nbytes = rec["bytes"]
    for side in ("client", "server", "system"):
        c = rec["cpu"][side]
        for part in ("user", "system", "softirq", "total"):
            seconds = c[f"{part}_s"]
            per_byte = c["ns_per_byte"][part]
            if seconds is None:
                assert per_byte is None, (side, part)
                continue
            assert per_byte * nbytes / 1e9 == pytest.approx(seconds, rel=1e-9, abs=1e-12), (side, part)


def edge_instants(run_dir):
    """Each edge's instants (measurement.json): qprof's read, and the receiver's mark."""
    w = json.loads((run_dir / "measurement.json").read_text())["window"]
    return {name: (e["t_ns"], e["server_mark"]["t_ns"]) for name, e in w.items()}


def assert_sane_transfer(rec, run_dir, streams=1):
    assert rec["status"] == "complete"
    assert rec["verified"] is True
    assert rec["bytes"] > 0 and rec["throughput_gbps"] > 0
    assert rec["bytes"] <= rec["bytes_total"]
    # Two clocks bracket the window: the receiver's over its two marks
    # (its bytes), qprof's over its two readings (the CPU). They part by
    # exactly how far each mark answered from qprof's read at its edge.
    (t0, m0), (t1, m1) = (edge_instants(run_dir)[e] for e in ("start", "end"))
    assert rec["window_s"] == pytest.approx((m1 - m0) / 1e9, rel=1e-12)
    assert rec["cpu_window_s"] == pytest.approx((t1 - t0) / 1e9, rel=1e-12)
    assert t0 < t1 and m0 < m1
    assert_cpu_closes(rec)
    cpu = rec["cpu"]
    # Both processes burnt CPU: schedstat's nanoseconds say so over any window.
    for side in ("client", "server"):
        assert cpu[side]["oncpu_schedstat_s"] > 0
        assert cpu[side]["ns_per_byte"]["oncpu"] == pytest.approx(cpu[side]["oncpu_schedstat_s"] * 1e9 / rec["bytes"])
    # The tick figures exist exactly when the window holds enough ticks
    # (a fixed size ends as fast as the machine moves it: 300 MB took 0.2 s here).
    ticks = cpu_figures.ticks_absent_reason(rec["cpu_window_s"]) is None
    for side in ("client", "server", "system"):
        assert (cpu[side]["ticks_absent_reason"] is None) == ticks, side
        assert (cpu[side]["total_s"] is not None) == ticks, side
    if ticks:
        for side in ("client", "server"):
            # Two instruments for one process, read together: /proc/PID/stat's
            # utime and stime are the kernel's sum_exec_runtime (schedstat's
            # nanoseconds) split in two and each floored to a tick, so each
            # edge reads under it by less than two ticks.
            grain_s = 2 / cpu_figures.CLK_TCK
            assert abs(cpu[side]["total_s"] - cpu[side]["oncpu_schedstat_s"]) < grain_s, (side, cpu[side])
        # The machine saw at least what they did in user space (system-wide user time includes theirs).
        assert cpu["system"]["user_s"] >= (cpu["client"]["user_s"] + cpu["server"]["user_s"]) * 0.95 - 0.05
        assert 0 < cpu["system"]["utilisation"] <= 1.0
    else:
        assert cpu["system"]["utilisation"] is None and cpu["client"]["ns_per_byte"]["total"] is None
    # Directions: the client sent, the server received, over the window.
    wc, ws = rec["workload"]["client"]["window"], rec["workload"]["server"]["window"]
    assert wc["app_bytes"] > 0
    assert ws["app_bytes"] == rec["bytes"]
    pc, ps = wc["perf_counters"], ws["perf_counters"]
    assert pc["app_send_bytes"] > 0 and pc["app_recv_bytes"] == 0
    assert ps["app_recv_bytes"] > 0 and ps["app_send_bytes"] == 0
    # Datagrams the client sent are the ones the server received, give or
    # take what was in flight at the edges (a few ms at these rates).
    assert ps["udp_recv"] == pytest.approx(pc["udp_send"], rel=0.02)
    assert pc["udp_send"] > ps["udp_send"]  # data one way, acks the other
    report_c, report_s = rec["workload"]["client"]["report"], rec["workload"]["server"]["report"]
    assert report_c["app_bytes"] == report_s["app_bytes"] == rec["bytes_total"]
    assert report_s["streams_completed"] == streams


def test_quic_netns(shared):
    runs_dir, rec = shared("run", *NETNS_2S)
    assert_sane_transfer(rec, runs_dir / rec["id"])
    topo = rec["environment"]["topology"]
    assert topo["kind"] == "netns" and topo["mtu"] == 1500
    assert topo["client"]["netns"] != topo["server"]["netns"]
    # The end edge is read once --duration has passed since the start
    # edge's read (collectors/windows.py sleeps until then), never before.
    assert rec["cpu_window_s"] >= 2.0
    # The record on disk is the one printed, and `latest` points at it.
    on_disk = json.loads((runs_dir / rec["id"] / "run.json").read_text())
    assert on_disk == rec
    assert (runs_dir / "latest").resolve() == (runs_dir / rec["id"]).resolve()
    # With lo up in each namespace msquic found its offloads.
    env = rec["environment"]
    assert env["msquic_send_segmentation"]["client"] is True
    assert env["msquic_recv_coalescing"]["server"] is True


def test_quic_loopback_streams(runs_dir):
    rec = run_json(
        runs_dir, "--topology", "loopback", "--duration", "2s", "--warmup", "0.5s", "--streams", "3", "--port", "24433"
    )
    assert_sane_transfer(rec, runs_dir / rec["id"], streams=3)
    assert rec["environment"]["topology"]["kind"] == "loopback"
    assert rec["config"]["streams"] == 3


def test_quic_fixed_size(runs_dir):
    rec = run_json(runs_dir, "--bytes", "300M", "--streams", "2")
    assert_sane_transfer(rec, runs_dir / rec["id"], streams=2)
    assert rec["bytes_total"] == 2 * 300 * 2**20
    # Measured whole: the window holds every byte, handshake included.
    assert rec["bytes"] == rec["bytes_total"] and rec["config"]["warmup_s"] == 0
