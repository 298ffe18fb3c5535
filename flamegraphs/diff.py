# SPDX-License-Identifier: GPL-2.0-only
"""Differential flame graphs of two runs, both in CPU time per byte: red
where B costs more per byte than A, blue where less (inferno)."""

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, List, Optional

from qprof.errors import BadValue, IncompatibleRuns

from . import categories, draw, folded, normalize, sides


@dataclass
class SideDiff:
    side: str
    a_ns_per_byte: float
    b_ns_per_byte: float
    change_percent: Optional[float]
    svg: Optional[Path]  # None: B has no samples on this side


def check_compatible(run_a: sides.Run, run_b: sides.Run) -> None:
    """Refuse what cannot share one graph; warn about what may mislead."""
    if run_a.path == run_b.path:
        raise BadValue(f"--diff needs two different runs; both name run {run_a.id}.")
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
    classifier = categories.Classifier()
    loaded = {
        side: (sides.load_side(run_a, side).stacks, sides.load_side(run_b, side).stacks) for side in which
    }  # all checked before drawing
    out = []
    for side, (sa, sb) in loaded.items():
        ba, bb = run_a.bytes_for(side), run_b.bytes_for(side)
        fa = normalize.figures(sa, run_a.period_ns, ba, classifier)
        fb = normalize.figures(sb, run_b.period_ns, bb, classifier)
        svg = None
        if fb.samples:
            svg = svg_for(side)
            draw.render_diff(
                normalize.per_byte(sa, run_a.period_ns, ba),
                normalize.per_byte(sb, run_b.period_ns, bb),
                svg,
                draw.diff_title(side, run_a.record, fa, run_b.record, fb),
                draw.diff_subtitle(run_a.id, run_a.record, run_b.id, run_b.record),
            )
        out.append(
            SideDiff(side, fa.ns_per_byte, fb.ns_per_byte, normalize.gap_percent(fb.ns_per_byte, fa.ns_per_byte), svg)
        )
    return out
