# SPDX-License-Identifier: GPL-2.0-only
"""What `qprof run` stores of its own stack samples: per side, the graph's
CPU per byte against the collectors' measured figure (the gap means
missing samples), stack quality, and ns/B by category. A capture that
missed samples has its client's and server's figures weighted by each
thread's on-CPU time where the cputhread probe measured it
(weighting.py); such a side says so in `weighting`."""

from pathlib import Path
from typing import Dict, Optional

from qprof.perbyte import side_bytes

from . import categories, folded, normalize, sides, weighting


def run_figures(record: dict, stacks_dir: Path, pids: Optional[Dict[str, int]] = None) -> Dict[str, dict]:
    """Per side; pids (side -> the workload's pid) lets an incomplete
    capture be weighted by the cputhread probe's threads."""
    period_ns = record["flame"]["sample_period_ns"]
    classifier = categories.for_run(stacks_dir.parent)
    out = {}
    for side in sides.SIDES:
        data = folded.read(stacks_dir / f"{side}.folded")
        nbytes = side_bytes(record, side)
        if nbytes <= 0:
            out[side] = _no_bytes(data.stacks)
            continue
        fig = normalize.figures(data.stacks, period_ns, nbytes, classifier)
        if not fig.samples:
            out[side] = _no_samples(sides.measured_ns_per_byte(record, side))
            continue
        w = weighting.side_weights(record, stacks_dir, side, (pids or {}).get(side))
        shown = normalize.figures(w[0], period_ns, nbytes, classifier) if w else fig
        measured = sides.measured_ns_per_byte(record, side)
        out[side] = {
            "samples": fig.samples,
            "ns_per_byte": shown.ns_per_byte,
            "measured_ns_per_byte": measured,
            "gap_percent": normalize.gap_percent(
                shown.ns_per_byte, measured, normalize.base_samples(measured, nbytes, period_ns)
            ),
            "stack_quality": fig.stack_quality,
            "categories_ns_per_byte": shown.categories_ns_per_byte,
        }
        if w:
            # What the samples alone came to: the undercount the weighting made up.
            out[side]["sampled_ns_per_byte"] = fig.ns_per_byte
            out[side]["weighting"] = w[1]
    return out


def _no_figures(samples: int, measured: Optional[float], stack_quality: Optional[float], reason: str) -> dict:
    """A side with no graph to divide: its samples, and no figure drawn from them, with why."""
    return {
        "samples": samples,
        "ns_per_byte": None,
        "measured_ns_per_byte": measured,
        "gap_percent": None,
        "stack_quality": stack_quality,
        "categories_ns_per_byte": None,
        "absent_reason": reason,
    }


def _no_samples(measured: Optional[float]) -> dict:
    """A side that moved bytes but left no stack sample in the window (its
    CPU's timer lost them all, or the window was shorter than a sample
    period): no graph, so no figure drawn from one, rather than zeros."""
    return _no_figures(0, measured, None, "perf recorded no stack sample of this side in the window")


def _no_bytes(stacks) -> dict:
    """A side whose window moved no bytes: its samples, and no figure per byte."""
    samples = sum(stacks.values())
    complete = sum(n for s, n in stacks.items() if normalize.stack_complete(s))
    return _no_figures(samples, None, complete / samples if samples else None, "this side moved no bytes in the window")
