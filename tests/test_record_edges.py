# SPDX-License-Identifier: GPL-2.0-only
"""The record builder at the edges of what a window can hold: a window
too short for /proc's clock ticks (none or one moved), and a window that
moved no bytes. Each starts from a stored measurement of a real run
(tests/data/record/) whose end edge is moved back to just after its start,
so every instrument's reading is real and only the window changes."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from qprof.describe import cpu, link, record
from qprof.describe.measurement import Measurement

from conftest import SCHEMAS

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "record"
TICK_S = 1 / cpu.CLK_TCK


def _measurement(case: str) -> Measurement:
    return Measurement.from_json((DATA / case / "measurement.json").read_text())


def _shorten(m: Measurement, seconds: float, ticks: int, nbytes=None) -> Measurement:
    """The window cut to `seconds` by both clocks, with `ticks` clock ticks
    of user time on the machine and on each process, and nbytes received
    (the stored window's bytes scaled to the length when None)."""
    m = copy.deepcopy(m)
    start, end = m.window.start, m.window.end
    whole_s = (end.t_ns - start.t_ns) / 1e9
    end.t_ns = start.t_ns + int(seconds * 1e9)
    s = start.system
    end.system = cpu.SystemCpu(
        s.user_s + ticks * TICK_S,
        s.nice_s,
        s.system_s,
        s.idle_s + seconds,
        *(s.iowait_s, s.irq_s, s.softirq_s, s.steal_s),
    )
    for side in ("client", "server"):
        a = getattr(start, side)
        setattr(end, side, cpu.ProcessCpu(a.user_s + ticks * TICK_S, a.system_s, a.oncpu_s + seconds / 2))
        a_mark, b_mark = getattr(start, f"{side}_mark"), getattr(end, f"{side}_mark")
        b_mark["t_ns"] = a_mark["t_ns"] + int(seconds * 1e9)
        moved = b_mark["app_bytes"] - a_mark["app_bytes"]
        b_mark["app_bytes"] = a_mark["app_bytes"] + (int(moved * seconds / whole_s) if nbytes is None else nbytes)
    return m


def _valid(rec: dict) -> dict:
    rec = json.loads(json.dumps(rec))  # as run.json holds it
    complete = {"schema_version": 2, "id": "20261124-000000-000000", "status": "complete", **rec}
    jsonschema.validate(complete, json.loads(SCHEMAS["run.json"].read_text()))
    return rec


TICK_FIGURES = ("user_s", "system_s", "total_s")


@pytest.mark.parametrize("ticks", [0, 1])
def test_a_window_too_short_for_ticks_has_no_tick_figures(ticks):
    """21 ms holds about two ticks: whether none or one moved, a tick count
    cannot say what the CPU did, so every tick figure is absent with its
    reason, and schedstat's exact on-CPU time stands."""
    m = _shorten(_measurement("quic"), 0.021, ticks)
    rec = _valid(record.describe(m, DATA / "quic"))
    for side in ("client", "server"):
        c = rec["cpu"][side]
        assert all(c[k] is None for k in TICK_FIGURES), c
        assert c["ns_per_byte"]["total"] is None and c["ns_per_byte"]["user"] is None
        assert "clock ticks" in c["ticks_absent_reason"]
        assert c["oncpu_schedstat_s"] == pytest.approx(0.021 / 2)
        assert c["ns_per_byte"]["oncpu"] == pytest.approx(c["oncpu_schedstat_s"] * 1e9 / rec["bytes"])
    system = rec["cpu"]["system"]
    assert system["utilisation"] is None and system["total_s"] is None and system["idle_s"] is None
    assert all(v is None for v in system["ns_per_byte"].values())
    assert "clock ticks" in system["ticks_absent_reason"]
    # What divides by the CPU time is absent too, not infinite or zero.
    for side in ("client", "server"):
        if rec["syscalls"][side] is not None:
            assert rec["syscalls"][side]["send_wall_s_per_cpu_s"] is None


def test_a_window_long_enough_for_ticks_keeps_them():
    """At the threshold the same figures are numbers again."""
    seconds = cpu.MIN_WINDOW_TICKS * TICK_S
    m = _shorten(_measurement("quic"), seconds, 7)
    rec = _valid(record.describe(m, DATA / "quic"))
    for side in ("client", "server"):
        assert rec["cpu"][side]["ticks_absent_reason"] is None
        assert rec["cpu"][side]["user_s"] == pytest.approx(7 * TICK_S)
    assert rec["cpu"]["system"]["utilisation"] == pytest.approx(7 / (7 + cpu.MIN_WINDOW_TICKS))


@pytest.mark.parametrize("case", ["quic", "tcp-tls", "udp"])
def test_a_window_that_moved_no_bytes(case):
    """Nothing crossed: goodput is a measured zero, and every figure per
    byte is absent rather than a division by zero."""
    m = _shorten(_measurement(case), 1.0, 50, nbytes=0)
    rec = _valid(record.describe(m, DATA / case))
    assert rec["bytes"] == 0 and rec["throughput_gbps"] == 0
    for side in ("client", "server", "system"):
        assert all(v is None for v in rec["cpu"][side]["ns_per_byte"].values()), side
    assert rec["cpu"]["client"]["total_s"] == pytest.approx(50 * TICK_S)
    if rec["streams"] is not None:
        assert rec["streams"]["jain_index"] is None and rec["streams"]["min_share"] is None
    if rec["flame"] is not None:
        for side in ("client", "server"):
            f = rec["flame"]["sides"][side]
            assert f["samples"] > 0 and f["ns_per_byte"] is None and f["categories_ns_per_byte"] is None


def test_a_zero_length_window_divides_by_nothing():
    """No real window has zero length (so the schema refuses one); the
    guards still hold: nothing divides by it."""
    m = _shorten(_measurement("tcp-link"), 0.0, 0, nbytes=0)
    rec = json.loads(json.dumps(record.describe(m, DATA / "tcp-link")))
    assert rec["throughput_gbps"] is None
    s = rec["link"]["saturation"]
    assert s["link_utilisation"] is None and s["busiest_process_cpus"] is None


def _saturation(util_c2s, cpu_busy=0.1, busiest=0.1, fills_link=True, loss=0.0, rate=10**9, held=1000):
    """held: the data direction's tbf overlimits (packets held for tokens)."""
    out = {
        "requested": {"rate_bit": rate, "loss_percent": loss, "rtt_s": 0.0},
        "directions": {
            name: {"window": {"tbf": {"bytes": int(u * rate / 8), "packets": 1, "drops": 0, "overlimits": h}}}
            for name, u, h in (("client_to_server", util_c2s, held), ("server_to_client", 0.01, 0))
        },
    }
    link.add_saturation(out, 1.0, cpu_busy, busiest, fills_link)
    return out["saturation"]


def test_what_limited_a_run_is_never_left_unsaid():
    assert _saturation(0.95)["limited_by"] == "link"
    assert _saturation(0.5, cpu_busy=0.97)["limited_by"] == "cpu"
    assert _saturation(0.5, busiest=0.95)["limited_by"] == "cpu"
    assert _saturation(0.05, fills_link=False)["limited_by"] == "workload"
    assert _saturation(0.3, loss=1.0)["limited_by"] == "transport"
    # A tbf that never held a packet back did not limit the run: the sender offered less.
    assert _saturation(0.2, held=0)["limited_by"] == "transport" and _saturation(0.2, held=0)["warning"] is None
    s = _saturation(0.41)
    assert s["limited_by"] == "emulation" and "41%" in s["warning"] and "1 Gbit/s" in s["warning"]
    # Only an emulation shortfall warns; a full link, a busy CPU or a lossy link does not.
    assert all(_saturation(u, **kw)["warning"] is None for u, kw in ((0.95, {}), (0.5, {"cpu_busy": 0.97})))
    # Absent CPU figures (a short window) decide nothing by themselves.
    assert _saturation(0.95, cpu_busy=None, busiest=None)["limited_by"] == "link"
    assert _saturation(0.5, cpu_busy=None, busiest=None)["limited_by"] == "emulation"
    for u in (0.0, 0.2, 0.5, 0.89, 0.9, 1.0):
        for kw in ({}, {"cpu_busy": 0.95}, {"fills_link": False}, {"loss": 2.0}, {"held": 0}):
            s = _saturation(u, **kw)
            assert s["limited_by"] in link.LIMITS and s["limited_by_means"] == link.LIMITS[s["limited_by"]]
            assert (s["limited_by"] == "link") == (u >= link.SATURATED)


def test_a_side_with_no_sample_has_no_graph_figures(tmp_path):
    """A side that moved bytes but left no stack sample (its CPU's timer
    lost every one: CI saw a server on a CPU that recorded 4% of its
    samples get none) has no graph to divide: its figures drawn from the
    graph are absent, and say why, rather than zeros; the other side's
    stand, and the table shows the absent ones as not measured."""
    import io
    import shutil

    from rich.console import Console

    from qprof.present import tables

    run_dir = tmp_path / "quic"
    shutil.copytree(DATA / "quic", run_dir)
    (run_dir / "stacks" / "server.folded").write_text("")
    rec = _valid(record.describe(_measurement("quic"), run_dir))
    server, client = rec["flame"]["sides"]["server"], rec["flame"]["sides"]["client"]
    assert server["samples"] == 0 and server["absent_reason"], server
    for key in ("ns_per_byte", "gap_percent", "stack_quality", "categories_ns_per_byte"):
        assert server[key] is None, key
    assert server["measured_ns_per_byte"] > 0
    assert client["samples"] > 0 and client["ns_per_byte"] > 0 and client["categories_ns_per_byte"]
    out = io.StringIO()
    tables._print_flame({"id": "20261124-000000-000000", **rec}, Console(file=out, width=120))
    row = next(line for line in out.getvalue().splitlines() if "graph total" in line)
    assert "—" in row and f"{client['ns_per_byte']:.3f}" in row, row
