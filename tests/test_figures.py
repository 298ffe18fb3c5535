# SPDX-License-Identifier: GPL-2.0-only
"""The one table of headline figures (core/figures.py): each figure is
declared there alone and everything that shows one reads it; compare and
check leave an undercounting capture's categories out alike; OpenMetrics,
the history's columns and the report's charts carry the headline rows;
and a comparison recorded before the table existed comes out the same
from it. Stored records and synthetic ones; nothing is measured."""

import ast
import json
from pathlib import Path

import pytest

from qprof import figures, history
from qprof.describe import check, comparison
from qprof.flamegraphs import normalize, openmetrics

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
# What shows a figure: each reads the table instead of declaring its own.
READERS = (
    "describe/comparison.py",
    "describe/check.py",
    "core/history.py",
    "flamegraphs/openmetrics.py",
    "present/html.py",
)
KEYS = set(figures.FIGURE)
# A comparison `qprof compare` recorded before the table, with its runs' records.
STORED_RUNS = DATA / "report" / "runs"
STORED_COMPARISON = STORED_RUNS / "comparisons" / "20261123-215335-e67b1b" / "comparison.json"


# --- declared once ---------------------------------------------------------------------


def reads_table(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name == "qprof.figures" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom):
            names = {a.name for a in node.names}
            if node.module == "qprof.figures" or (node.module == "qprof" and "figures" in names):
                return True
            if node.level == 1 and (node.module == "figures" or (node.module is None and "figures" in names)):
                return True
    return False


def declarations(source: str) -> list:
    """Literal declarations of the table's figures: a dict, tuple, list or
    set that names two or more of its keys (a list of headline figures, a
    block of columns), or a constructor called with one as its first
    argument (Metric("throughput_gbps", ...)). Reading one figure of a
    record by its field name is neither."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Dict, ast.Tuple, ast.List, ast.Set)):
            named = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in KEYS}
            if len(named) >= 2:
                out.append(f"line {node.lineno}: {', '.join(sorted(named))}")
        elif isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            callee = getattr(node.func, "id", None) or getattr(node.func, "attr", "")
            if isinstance(first, ast.Constant) and first.value in KEYS and callee[:1].isupper():
                out.append(f"line {node.lineno}: {callee}({first.value!r}, ...)")
    return out


def test_each_figure_is_declared_once_in_the_table():
    assert len(figures.FIGURE) == len(figures.TABLE), "a key declared twice in the table"
    assert len({f.column for f in figures.INDEXED}) == len(figures.INDEXED)
    bad = []
    for rel in READERS:
        source = (REPO / rel).read_text()
        if not reads_table(source):
            bad.append(f"{rel} does not import qprof.figures")
        bad += [f"{rel} {d}" for d in declarations(source)]
    bad += [f"collectors/compare.py {d}" for d in declarations((REPO / "collectors" / "compare.py").read_text())]
    assert not bad, "\n".join(bad)


def test_the_declaration_check_sees_the_old_ones():
    assert declarations('HEADLINE = {"client_ns_per_byte": "client ns/B", "throughput_gbps": "throughput"}\n')
    assert declarations('COLUMNS = (("id", "TEXT"), ("throughput_gbps", "REAL"), ("system_ns_per_byte", "REAL"))\n')
    assert declarations('METRICS = [Metric("throughput_gbps", "throughput", "Gbit/s", get)]\n')
    assert not declarations('x = rec.get("throughput_gbps")\nNEEDED = ("stack", "throughput_gbps", "bytes")\n')
    assert reads_table("from . import figures\n") and reads_table("from qprof.figures import HEADLINE\n")
    assert not reads_table("from qprof import history\n")


def test_the_headline_rows_are_the_ones_check_and_the_history_name():
    assert [f.key for f in figures.HEADLINE] == [
        "throughput_gbps",
        "client_ns_per_byte",
        "server_ns_per_byte",
        "system_ns_per_byte",
    ]
    for f in figures.HEADLINE:
        assert f.short and f.column and f.family, f.key
    assert [figures.side_cpu(s).key for s in figures.SIDES] == [f"{s}_ns_per_byte" for s in figures.SIDES]


# --- values as before --------------------------------------------------------------------


def test_a_stored_comparison_comes_out_the_same_from_the_table():
    """comparison.json as `qprof compare` wrote it before the table (its
    runs' records beside it): the same metrics, medians, ratios, labels,
    units and left-out captures, to the last bit."""
    stored = json.loads(STORED_COMPARISON.read_text())
    runs = [{**r, "record": json.loads((STORED_RUNS / r["id"] / "run.json").read_text())} for r in stored["runs"]]
    got = comparison.record_figures(stored["configs"], runs)
    assert got["metrics"] == stored["metrics"]
    assert list(got["metrics"]) == list(stored["metrics"])  # the order the terminal table prints
    # Figures added to the table since then are described, but hold no value in those records.
    added = set(got["metric_units"]) - set(stored["metric_units"])
    assert {k: got["metric_units"][k] for k in stored["metric_units"]} == stored["metric_units"]
    assert not added & set(got["metrics"])
    assert got["incomplete_captures"] == stored["incomplete_captures"] != []


def test_conversions_and_derived_figures():
    rec = {
        "downloads": {"percentiles": {"complete_s": {"p50": 0.125}}, "cpu_per_download_s": {"all": 0.002}},
        "rr": {"delay_ns": {"p50": 1_250_000}, "per_request": {"cpu_s": {"client": 3e-5}}},
        "workload": {"server": {"window": {"datagrams": 990, "lost": 10}}},
    }
    value = {f.key: f.value(rec) for f in figures.TABLE}
    assert value["download_complete_p50"] == 0.125 * 1e3 and value["download_cpu_ms"] == 0.002 * 1e3
    # The key's doubled p is what stored comparisons hold.
    assert value["rr_delay_pp50"] == 1_250_000 / 1e6 and value["rr_delay_pp95"] is None
    assert value["rr_client_cpu_us"] == 3e-5 * 1e6 and value["rr_server_cpu_us"] is None
    assert value["udp_loss_share"] == 10 / 1000
    # Not held, or not a number: absent, never zero.
    assert value["throughput_gbps"] is None
    assert figures.FIGURE["throughput_gbps"].value({"throughput_gbps": True}) is None
    assert (
        figures.FIGURE["udp_loss_share"].value({"workload": {"server": {"window": {"datagrams": 0, "lost": 0}}}})
        is None
    )


# --- an undercounting capture --------------------------------------------------------------


def _flamed(crypto: float, complete: bool) -> dict:
    return {
        "stack": "quic",
        "environment": {"cpu_model": "X", "cpu_count": 2},
        "throughput_gbps": 5.0,
        "cpu": {side: {"ns_per_byte": {"total": 1.0}} for side in ("client", "server", "system")},
        "flame": {
            "complete": complete,
            "sides": {"client": {"categories_ns_per_byte": {"crypto": crypto, "protocol": 1.0 - crypto}}},
        },
    }


def test_compare_and_check_leave_an_undercounting_captures_categories_out():
    """A capture some CPU undersampled (flame.complete false) misstates its
    categories: neither compare nor check counts them, so such a capture
    can neither fail nor pass a check. The same figures from a complete
    capture are compared and held to the threshold."""
    base = [_flamed(0.30, True) for _ in range(3)]
    for complete in (False, True):
        run = [_flamed(0.60, complete)]
        runs = [{"id": f"b{i}", "config": 0, "record": r} for i, r in enumerate(base)]
        runs.append({"id": "r", "config": 1, "record": run[0]})
        compared = comparison.record_figures([0, 1], runs)
        rows = {r["figure"]: r for r in check.verdict(run, base, 0.05)}
        cats = {f.key: f.value(run[0]) for f in check.held_to(run + base) if f.category}
        assert set(cats) == {"client_crypto_ns_per_byte", "client_protocol_ns_per_byte"}
        crypto = compared["metrics"]["client_crypto_ns_per_byte"][1]
        if complete:
            assert cats["client_crypto_ns_per_byte"] == crypto["median"] == 0.60
            assert rows["client crypto ns/B"]["regressed"] and compared["incomplete_captures"] == []
        else:
            assert set(cats.values()) == {None} and crypto["n"] == 0 and crypto["median"] is None
            assert "client crypto ns/B" not in rows and "client protocol ns/B" not in rows
            assert compared["incomplete_captures"] == ["r"]
        # The headline figures count whatever the capture, in both.
        assert rows["client ns/B"]["median"] == compared["metrics"]["client_ns_per_byte"][1]["median"] == 1.0


# --- everything that shows the headline rows --------------------------------------------------


def _stored_record() -> dict:
    return json.loads((DATA / "record" / "quic" / "expected.json").read_text())


def test_the_history_indexes_every_headline_row():
    rec = _stored_record()
    row = history.entry("run", "x", "20261123-162245-0000aa", rec)
    for f in figures.INDEXED:
        assert f.column in history.NAMES
        assert row[f.column] == f.value(rec)
    assert all(f in figures.INDEXED for f in figures.HEADLINE)
    assert history.HEADLINE_METRICS == tuple(f.key for f in figures.HEADLINE)
    for f in figures.HEADLINE:
        assert row[f.column] is not None, f.key  # a complete bulk run holds every headline figure


def _side(rec: dict, side: str) -> normalize.SideFigures:
    cats = rec["flame"]["sides"][side]["categories_ns_per_byte"]
    return normalize.SideFigures(
        samples=rec["flame"]["samples"][side],
        sample_period_ns=rec["flame"]["sample_period_ns"],
        divisor=rec["bytes"],
        ns_per_unit=sum(cats.values()),
        categories_samples={},
        categories_ns_per_unit=cats,
        complete_samples=0,
        stack_quality=None,
    )


def test_openmetrics_exports_every_headline_row():
    rec = _stored_record()
    sides_ = list(rec["flame"]["sides"])
    measured = {s: figures.side_cpu(s).value(rec) if s != "others" else None for s in sides_}
    fams = {f.name: f for f in openmetrics.families(rec, {s: _side(rec, s) for s in sides_}, measured, normalize.BYTE)}
    for f in figures.HEADLINE:
        base, factor = figures.BASE_UNITS[f.unit]
        family = fams[f"qprof_{f.family}_{base}"]
        want = {} if f.side is None else {"side": f.side}
        got = [v for labels, v in family.samples if {k: x for k, x in labels.items() if k == "side"} == want]
        assert got == [f.value(rec) * factor], f.key
    # One side exported: its own series only (the machine's is every side's).
    one = openmetrics.families(rec, {"client": _side(rec, "client")}, measured, normalize.BYTE)
    cpu = next(f for f in one if f.name == "qprof_cpu_nanoseconds_per_byte")
    assert [labels["side"] for labels, _ in cpu.samples] == ["client"]


def _every_figure(scale: float) -> dict:
    """A record that holds every figure of the table, each `scale`."""
    rec: dict = {}
    for f in figures.TABLE:
        d = rec
        for p in f.path[:-1]:
            d = d.setdefault(p, {})
        d[f.path[-1]] = {"datagrams": 100, "lost": scale} if f.key == "udp_loss_share" else scale
    return rec


def test_the_report_charts_every_figure_of_a_comparison():
    from qprof.present import html

    runs = [{"id": f"r{i}", "config": i % 2, "record": _every_figure(1.0 + i)} for i in range(4)]
    configs = [{"label": s, "stack": s, "overrides": {}} for s in ("quic", "tcp")]
    rec = {"configs": configs, **comparison.record_figures(configs, runs)}
    assert set(rec["metrics"]) == KEYS  # the record holds every figure
    charts = {c.name: c for c in html.metric_charts(rec)}
    for f in figures.TABLE:
        chart = charts[f"metric-{f.key}"]
        assert chart.title == f.label + (f" ({f.unit})" if f.unit else "")
    for f in figures.HEADLINE:
        assert f"metric-{f.key}" in charts
