# SPDX-License-Identifier: GPL-2.0-only
"""Differential flame graphs of two runs, both in CPU time per byte (or
both per request, for two request/response runs): red where B costs more
per unit than A, blue where less (inferno). A run drawn per request and
one drawn per byte are refused, as inferno refuses to merge sample types."""

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, List, Optional

from qprof.errors import BadValue, IncompatibleRuns

from . import categories, draw, folded, normalize, sides


@dataclass
class SideDiff:
    side: str
    unit: normalize.Unit  # both runs'
    a_ns_per_unit: Optional[float]  # None: no sample on this side (no graph to divide)
    b_ns_per_unit: Optional[float]
    change_percent: Optional[float]
    svg: Optional[Path]  # None: B has no samples on this side


def check_compatible(run_a: sides.Run, run_b: sides.Run) -> None:
    """Refuse what cannot share one graph; warn about what may mislead."""
    if run_a.path == run_b.path:
        raise BadValue(f"--diff needs two different runs; both name run {run_a.id}.")
    if run_a.unit != run_b.unit:
        a, b = ((r.record.get("config") or {}).get("pattern") or "bulk" for r in (run_a, run_b))
        raise IncompatibleRuns(
            f"run {run_a.id} is {a}, drawn in CPU per {run_a.unit.name}, and run {run_b.id} is {b}, drawn in "
            f"CPU per {run_b.unit.name}, so they cannot share one graph; diff two runs drawn in the same unit."
        )
    emulated = [bool((r.record.get("environment") or {}).get("emulated")) for r in (run_a, run_b)]
    if emulated[0] != emulated[1]:
        guest = run_a.id if emulated[0] else run_b.id
        raise IncompatibleRuns(
            f"run {guest} was measured in an emulated guest and the other on the host, "
            "so their CPU per byte cannot share one graph; diff two guest runs or two host runs."
        )
    walks = [r.flame.get("call_graph") or "fp" for r in (run_a, run_b)]  # records before the field: fp
    if walks[0] != walks[1]:
        folded.warn_stderr(
            f"runs {run_a.id} and {run_b.id} walked user stacks differently ({walks[0]}, {walks[1]}); "
            "frames below code without frame pointers differ by the walk, not the stack."
        )
    kernels = [(r.record.get("environment") or {}).get("kernel_release") for r in (run_a, run_b)]
    if kernels[0] != kernels[1]:
        folded.warn_stderr(
            f"runs {run_a.id} and {run_b.id} ran on different kernels ({kernels[0]}, "
            f"{kernels[1]}); frames that differ may be the kernel's, not the stack's."
        )


def render(run_a: sides.Run, run_b: sides.Run, which: Iterable[str], svg_for: Callable[[str], Path]) -> List[SideDiff]:
    check_compatible(run_a, run_b)
    # Each run's stacks by its own rules (its --categories, then qprof's).
    rules_a, rules_b = categories.for_run(run_a.path), categories.for_run(run_b.path)
    loaded = {
        side: (sides.load_side(run_a, side).stacks, sides.load_side(run_b, side).stacks) for side in which
    }  # all checked before drawing
    out = []
    unit = run_a.unit
    for side, (sa, sb) in loaded.items():
        da, db = run_a.divisor(side), run_b.divisor(side)
        fa = normalize.figures(sa, run_a.period_ns, da, rules_a, unit)
        fb = normalize.figures(sb, run_b.period_ns, db, rules_b, unit)
        svg = None
        if fb.samples:
            svg = svg_for(side)
            draw.render_diff(
                normalize.scaled(sa, run_a.period_ns, da, unit),
                normalize.scaled(sb, run_b.period_ns, db, unit),
                svg,
                draw.diff_title(side, run_a.record, fa, run_b.record, fb),
                draw.diff_subtitle(run_a.id, run_a.record, run_b.id, run_b.record, unit),
                unit,
            )
        # A side with no sample has no figure, as its record says (summary._no_samples).
        a = fa.ns_per_unit if fa.samples else None
        b = fb.ns_per_unit if fb.samples else None
        change = normalize.gap_percent(b, a) if a is not None and b is not None else None
        out.append(SideDiff(side, unit, a, b, change, svg))
    return out
