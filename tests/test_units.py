# SPDX-License-Identifier: GPL-2.0-only
"""Parsing and arithmetic, without a transfer."""

import ipaddress

import pytest

from qprof.collectors import topology
from qprof.describe import cpu, window
from qprof.errors import BadValue, TopologyFailed
from qprof.units import parse_duration_s, parse_size_bytes

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("10s", 10.0),
        ("10", 10.0),
        ("500ms", 0.5),
        ("2m", 120.0),
        ("1.5s", 1.5),
        (" 3 s ", 3.0),
    ],
)
def test_durations(text, seconds):
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "ten", "10h", "-1s", "1e3", "5 sec"])
def test_malformed_durations(text):
    with pytest.raises(BadValue, match="malformed"):
        parse_duration_s(text)


@pytest.mark.parametrize(
    "text,nbytes",
    [
        ("65536", 65536),
        ("64K", 65536),
        ("64k", 65536),
        ("1M", 1 << 20),
        ("1G", 1 << 30),
        ("1.5K", 1536),
        ("2GiB", 2 << 30),
        ("100MB", 100 << 20),
    ],
)
def test_sizes(text, nbytes):
    assert parse_size_bytes(text) == nbytes


@pytest.mark.parametrize("text", ["", "1X", "K", "-5M", "1.3"])
def test_malformed_sizes(text):
    with pytest.raises(BadValue):
        parse_size_bytes(text)


PROC_STAT = """cpu  1000 20 300 5000 10 5 70 0 0 0
cpu0 500 10 150 2500 5 2 35 0 0 0
intr 12345
"""


def test_proc_stat_in_seconds():
    s = cpu.parse_proc_stat(PROC_STAT)
    assert s.user_s == pytest.approx(1000 / cpu.CLK_TCK)
    assert s.softirq_s == pytest.approx(70 / cpu.CLK_TCK)
    assert s.idle_s == pytest.approx(5000 / cpu.CLK_TCK)


def test_pid_stat_with_spaces_in_comm():
    fields = ["S"] + [str(i) for i in range(4, 53)]
    fields[11], fields[12] = "250", "75"  # utime, stime
    text = "1234 (qprof wl) x) " + " ".join(fields)
    utime_s, stime_s = cpu.parse_pid_stat(text)
    assert utime_s == pytest.approx(250 / cpu.CLK_TCK)
    assert stime_s == pytest.approx(75 / cpu.CLK_TCK)


def test_process_figures_close():
    d = cpu.ProcessCpu(user_s=2.33, system_s=0.56, oncpu_s=2.9)
    nbytes = 2_817_625_688
    f = cpu.process_figures(d, nbytes, window_s=1.0)
    assert f["softirq_s"] is None and f["ns_per_byte"]["softirq"] is None
    for part in ("user", "system", "total"):
        seconds = f[f"{part}_s"]
        assert f["ns_per_byte"][part] * nbytes / 1e9 == pytest.approx(seconds, rel=1e-12)
    assert f["ns_per_byte"]["user"] + f["ns_per_byte"]["system"] == pytest.approx(f["ns_per_byte"]["total"])


def test_system_figures_exclude_idle():
    a = cpu.parse_proc_stat(PROC_STAT)
    b = cpu.SystemCpu(
        *(getattr(a, f + "_s") + inc for f, inc in zip(cpu.STAT_FIELDS, (1.0, 0.0, 0.5, 0.25, 0.0, 0.0, 0.25, 0.0)))
    )
    f = cpu.system_figures(b - a, nbytes=10**9, window_s=1.0)
    assert f["total_s"] == pytest.approx(1.75)
    assert f["utilisation"] == pytest.approx(1.75 / 2)
    assert f["ns_per_byte"]["total"] == pytest.approx(1.75)
    assert f["ns_per_byte"]["softirq"] == pytest.approx(0.25)


def test_per_byte_absent_stays_absent():
    assert cpu.per_byte(None, 100) is None
    assert cpu.per_byte(1.0, 0) is None


def test_counter_delta_and_gauges():
    a = {"send_total_packets": 10, "rtt_us": 50, "only_in_a": 1}
    b = {"send_total_packets": 25, "rtt_us": 40, "only_in_b": 2}
    assert window.counter_delta(a, b) == {"send_total_packets": 15, "rtt_us": 40}
    assert window.counter_delta(None, b) is None


def test_subnet_avoids_used_networks():
    pool = ipaddress.ip_network("10.218.0.0/29")
    used = [ipaddress.ip_network("10.218.0.0/30")]
    assert str(topology.choose_subnet(used, pool)) == "10.218.0.4/30"
    with pytest.raises(TopologyFailed):
        topology.choose_subnet([ipaddress.ip_network("10.0.0.0/8")], pool)


def test_others_cannot_go_below_zero():
    from qprof.describe import cpu

    start = {(1, 1): 100, (1, 2): 50, (7, 7): 10_000, (9, 9): 500}
    end = {(1, 1): 400, (7, 7): 12_000, (9, 9): 20, (11, 11): 30}  # (1,2) exited, (9,9) reused
    out = cpu.others_figures(start, end, {7}, nbytes=100)
    assert out["oncpu_schedstat_s"] * 1e9 == pytest.approx(300 + 20 + 30)
    assert out["tasks"] == 3 and out["ns_per_byte"]["oncpu"] == pytest.approx(3.5)
