# SPDX-License-Identifier: GPL-2.0-only
"""`qprof check`: has a run (or a comparison's configuration) regressed
against a baseline? For a transport developer's CI to gate on.

Each side's CPU per byte (client, server, and the whole machine's), the
throughput, and each side's CPU per byte by category of work (the stack
samples' breakdown) are compared. A figure regressed when both hold:
- it is worse than every baseline value (beyond the baseline's spread:
  with one baseline run, than that run), and
- its median is worse than the baseline's median by more than the
  threshold (--max-regression, as a share; from a median of 0, any
  growth is more than any share); for a category, its growth
  is also more than the threshold's share of its side's baseline ns/B (a
  category of a few samples swings by more than its own size).
So noise within the baseline's own range never fails a check, and a
consistent shift smaller than the threshold does not either.

Only like runs are compared: a baseline of another stack, pattern or
machine is refused (--force compares anyway), and one measured with other
options (every option of the table, describe/options.py, but those that
only say how long, where to or how reported: FREE) is refused too, the
sentence naming each option that differs (--allow-differences compares
anyway, the verdict naming them).

Pure: records in, verdict out (cli/check_cmd.py finds the records).
"""

import json
import statistics
from typing import List, Optional, Tuple

from qprof import errors, figures
from qprof.describe import comparison, options
from qprof.figures import Figure

# Options a run and its baseline may differ in: they set how long the
# window is (a figure per byte, request or handshake is a rate over it),
# where the record goes, how it is reported or how a host is reached, not
# the work measured. Every other option of the table is held equal.
FREE = ("duration", "warmup", "count", "interval", "port", "runs-dir", "keep-perf-data", "ssh-config")
# Held apart: another stack or pattern is another measurement (--force).
OWN = ("stack", "pattern")


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


def setting(rec: dict, o: options.Option):
    """The option's value in a record's config, comparable: the table's
    fill where it is unset (a record written before a default was filled
    in), a list as a tuple, anything else unhashable as its JSON."""
    cfg = rec.get("config") if isinstance(rec.get("config"), dict) else {}
    v = cfg.get(o.field, o.default)
    if v is None:
        v = o.fill
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return tuple(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v, sort_keys=True)
    return v


def differences(run: List[dict], base: List[dict]) -> List[dict]:
    """Each held option whose values differ between the run's records and
    the baseline's: {option, run, baseline}, each a sorted list of values."""
    out = []
    for o in options.OPTIONS:
        if o.name in FREE + OWN:
            continue
        now, was = ({setting(r, o) for r in recs} for recs in (run, base))
        if now != was:
            out.append({"option": o.name, "run": _sorted(now), "baseline": _sorted(was)})
    return out


def _sorted(values: set) -> list:
    return [list(v) if isinstance(v, tuple) else v for v in sorted(values, key=lambda v: (str(type(v)), str(v)))]


def shown(name: str, values: list) -> str:
    """A difference's values as a user would write them: 64K, 10ms, on."""
    o = options.BY_NAME[name]
    return " or ".join(_value_text(o, v) for v in values)


def _value_text(o: options.Option, v) -> str:
    if v is None:
        return "default"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, list):
        return ",".join(map(str, v)) or "none"
    if (o.kind == "duration" and isinstance(v, (int, float))) or (o.kind in ("size", "rate") and isinstance(v, int)):
        return o.value_text(v)
    return str(v)


def differ_text(diffs: List[dict]) -> str:
    """--conns 1 against 32, --gso off against default"""
    return ", ".join(
        f"--{d['option']} {shown(d['option'], d['run'])} against {shown(d['option'], d['baseline'])}" for d in diffs
    )


def comparable(run: List[dict], base: List[dict], force: bool, allow_differences: bool = False) -> List[str]:
    """Refuse a baseline of another stack, pattern or machine, or measured
    with other options (IncompatibleRuns), or, with force (allow_differences:
    other options only), return the warnings instead."""
    problems = []
    stacks = {r.get("stack") for r in run + base}
    if len(stacks) > 1:
        problems.append(f"the runs are of different stacks ({', '.join(sorted(map(str, stacks)))})")
    patterns = {setting(r, options.BY_NAME["pattern"]) for r in run + base}
    if len(patterns) > 1:
        problems.append(f"the runs are of different patterns ({', '.join(sorted(map(str, patterns)))})")
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
            "pick a baseline of the same stack and pattern on the same machine, or pass --force to compare anyway."
        )
    warnings = [f"{p}; compared anyway (--force)" for p in problems]
    diffs = differences(run, base)
    if diffs and not (force or allow_differences):
        raise errors.IncompatibleRuns(
            f"the run and its baseline were measured with different options ({differ_text(diffs)}), "
            "so their figures do not compare; pick a baseline measured with the same options, "
            "or pass --allow-differences to compare them anyway."
        )
    if diffs:
        flag = "--allow-differences" if allow_differences else "--force"
        warnings.append(f"the runs differ in {differ_text(diffs)}; compared anyway ({flag})")
    return warnings


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
        if change is not None:
            worse = (change if f.lower_is_better else -change) > max_regression
        else:  # grown from nothing (a category the baseline's samples never hit): by more than any share
            worse = f.lower_is_better and med_now > med_was
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
