# SPDX-License-Identifier: GPL-2.0-only
"""`qprof compare`'s statistics: each configuration's runs summarised by
their median and spread, the ratio of medians to the first
configuration, and a flag where a difference is larger than the
run-to-run spread. The figures are the table's (core/figures.py) and
each flame category per side.

Pure: the runs' records in, the comparison record's figures out
(collectors/compare.py runs the configurations).
"""

import statistics
from typing import Dict, List, Optional, Sequence

from qprof import figures
from qprof.figures import Figure


def metrics(records: List[dict]) -> List[Figure]:
    """What a comparison of these records shows: the table, then each
    flame category per side that any of them has."""
    return list(figures.TABLE) + figures.categories(records)


def summarize(values: List[Optional[float]]) -> dict:
    """Median and spread of the measured values; unmeasured ones are left
    out and counted, never taken as zero."""
    got = [v for v in values if v is not None]
    if not got:
        return {"n": 0, "absent": len(values), "median": None, "min": None, "max": None, "values": values}
    return {
        "n": len(got),
        "absent": len(values) - len(got),
        "median": statistics.median(got),
        "min": min(got),
        "max": max(got),
        "values": values,
    }


def beyond_spread(a: dict, b: dict) -> Optional[bool]:
    """True when the two configurations' ranges do not overlap, so the
    difference is larger than the run-to-run spread (for n runs each, a
    chance of 2/C(2n, n) under no difference: 0.1 at n=3, 0.008 at n=5).
    None with fewer than three measured runs each (at two, disjoint ranges
    happen by chance one time in three)."""
    if a["n"] < 3 or b["n"] < 3:
        return None
    return a["max"] < b["min"] or b["max"] < a["min"]


def table(configs: Sequence, runs: List[dict], metrics: List[Figure]) -> Dict[str, List[dict]]:
    """metric key -> per configuration: summary, ratio to the first,
    beyond_spread, and for a flame category the count of its values
    weighted by the threads' on-CPU time (`weighted`, where any is)."""
    out = {}
    for m in metrics:
        rows = []
        for i, _ in enumerate(configs):
            mine = [r["record"] for r in runs if r["config"] == i]
            rows.append(summarize([m.value(r) for r in mine]))
            weighted = sum(
                1
                for r in mine
                if m.category is not None and m.value(r) is not None and figures.weighted_side(r, m.side)
            )
            if weighted:
                rows[-1]["weighted"] = weighted
        base = rows[0]
        for row in rows:
            row["ratio"] = row["median"] / base["median"] if row["median"] is not None and base["median"] else None
            row["beyond_spread"] = beyond_spread(base, row) if row is not base else None
        if any(r["n"] for r in rows):
            out[m.key] = rows
    return out


def units(metrics: List[Figure]) -> Dict[str, dict]:
    """What the record says of each metric, for readers without the table."""
    return {m.key: {"label": m.label, "unit": m.unit, "lower_is_better": m.lower_is_better} for m in metrics}


def record_figures(configs: Sequence, runs: List[dict]) -> dict:
    """The comparison record's figures: the table of metrics (a category's
    rows count the runs weighted by their threads' on-CPU time), the runs
    whose capture undercounts and could not be weighted (their categories
    are left out), and each metric's label, unit and direction."""
    shown = metrics([r["record"] for r in runs])
    return {
        "metrics": table(configs, runs, shown),
        "incomplete_captures": [
            r["id"]
            for r in runs
            if r["record"].get("flame")
            and not figures.complete_capture(r["record"])
            and not figures.weighted_capture(r["record"])
        ],
        "metric_units": units(shown),
    }


def representative(runs: List[dict], config: int) -> Optional[dict]:
    """The configuration's run with the median system CPU per byte (the
    lower middle for an even count) among those with a complete capture
    if any: the one its flame graph stands for."""
    system = figures.side_cpu("system")
    mine = [r for r in runs if r["config"] == config and system.value(r["record"]) is not None]
    if any(figures.complete_capture(r["record"]) for r in mine):
        mine = [r for r in mine if figures.complete_capture(r["record"])]
    if not mine:
        return None
    mine.sort(key=lambda r: system.value(r["record"]))
    return mine[(len(mine) - 1) // 2]
