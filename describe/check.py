# SPDX-License-Identifier: GPL-2.0-only
"""`qprof check`: has a run (or a comparison's configuration) regressed
against a baseline? For a transport developer's CI to gate on.

Each side's CPU per byte (client, server, and the whole machine's), the
throughput, and each side's CPU per byte by category of work (the stack
samples' breakdown) are compared. A figure regressed when both hold:
- it is worse than every baseline value (beyond the baseline's spread:
  with one baseline run, than that run), and
- its median is worse than the baseline's median by more than the
  threshold (--max-regression, as a share); for a category, its growth
  is also more than the threshold's share of its side's baseline ns/B (a
  category of a few samples swings by more than its own size). From a
  baseline median of nothing, any worsening is past the threshold.
So noise within the baseline's own range never fails a check, and a
consistent shift smaller than the threshold does not either.

Pure: records in, verdict out (cli/check_cmd.py finds the records).
"""

import statistics
from typing import List, Optional, Tuple

from qprof import errors, figures
from qprof.describe import comparison
from qprof.figures import Figure


def held_to(records: List[dict]) -> List[Figure]:
    """The headline figures (core/figures.py), then each client and server
    category as a comparison of the same records shows it: only from a
    complete capture or a side weighted by its threads' on-CPU time, so
    that an undercounting capture can neither fail nor pass a check."""
    cats = [m for m in comparison.metrics(records) if m.category is not None and m.side in ("client", "server")]
    return list(figures.HEADLINE) + cats


def machine(rec: dict) -> Tuple:
    """(CPU model, CPU count, emulated): the record's values, whatever their type, as text."""
    env = rec.get("environment")
    return (
        _text(figures.get(env, "cpu_model")),
        _text(figures.get(env, "cpu_count")),
        bool(figures.get(env, "emulated")),
    )


def _text(v) -> Optional[str]:
    return None if v is None else str(v)


def comparable(run: List[dict], base: List[dict], force: bool) -> List[str]:
    """Refuse a baseline of another stack or machine (IncompatibleRuns),
    or with force return the warnings instead."""
    problems = []
    stacks = {r.get("stack") for r in run + base}
    if len(stacks) > 1:
        problems.append(f"the runs are of different stacks ({', '.join(sorted(map(str, stacks)))})")
    machines = {machine(r) for r in run + base}
    if len(machines) > 1:
        problems.append(
            "the runs were measured on different machines ("
            + "; ".join(f"{m[0]} x{m[1]}{' guest' if m[2] else ''}" for m in machines)
            + ")"
        )
    if problems and not force:
        raise errors.IncompatibleRuns(
            f"{' and '.join(problems)}, so their CPU per byte does not compare; "
            "pick a baseline of the same stack on the same machine, or pass --force to compare anyway."
        )
    return problems


def verdict(run: List[dict], base: List[dict], max_regression: float) -> List[dict]:
    """One row per figure both sides have: medians, the baseline's range,
    the change, and whether it regressed; a category row says whether any
    of its values was weighted by the threads' on-CPU time (`weighted`)."""
    rows = []
    for f in held_to(run + base):
        now = [v for v in (f.value(r) for r in run) if v is not None]
        was = [v for v in (f.value(r) for r in base) if v is not None]
        if not now or not was:
            continue
        med_now, med_was = statistics.median(now), statistics.median(was)
        change = (med_now - med_was) / med_was if med_was else None
        # From a baseline of nothing any growth is past every share (a
        # category no baseline sample fell in, drops where there were none).
        grew = med_now - med_was if f.lower_is_better else med_was - med_now
        worse = (change if f.lower_is_better else -change) > max_regression if change is not None else grew > 0
        beyond = min(now) > max(was) if f.lower_is_better else max(now) < min(was)
        if f.category is not None and worse:
            # A category's growth counts when it moved its side's total by
            # the threshold: a few samples in a small category are noise.
            side_total = figures.side_cpu(f.side)
            totals = [v for v in (side_total.value(r) for r in base) if v is not None]
            worse = bool(totals) and med_now - med_was > max_regression * statistics.median(totals)
        rows.append(
            {
                "figure": f.short,
                "unit": f.unit,
                "median": med_now,
                "baseline_median": med_was,
                "baseline_min": min(was),
                "baseline_max": max(was),
                "n": len(now),
                "baseline_n": len(was),
                "change": change,
                "beyond_spread": beyond,
                "regressed": bool(worse and beyond),
            }
        )
        if f.category is not None:
            rows[-1]["weighted"] = any(f.value(r) is not None and figures.weighted_side(r, f.side) for r in run + base)
    return rows
