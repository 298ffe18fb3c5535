# SPDX-License-Identifier: GPL-2.0-only
"""What `qprof run` stores of its own stack samples: per side, the graph's
CPU per byte against the collectors' measured figure (the gap means
missing samples), stack quality, and ns/B by category."""

from pathlib import Path
from typing import Dict

from qprof.perbyte import side_bytes

from . import folded, normalize, sides


def run_figures(record: dict, stacks_dir: Path) -> Dict[str, dict]:
    period_ns = record["flame"]["sample_period_ns"]
    out = {}
    for side in sides.SIDES:
        data = folded.read(stacks_dir / f"{side}.folded")
        nbytes = side_bytes(record, side)
        if nbytes <= 0:
            out[side] = _no_bytes(data.stacks)
            continue
        fig = normalize.figures(data.stacks, period_ns, nbytes)
        measured = sides.measured_ns_per_byte(record, side)
        out[side] = {
            "samples": fig.samples,
            "ns_per_byte": fig.ns_per_byte,
            "measured_ns_per_byte": measured,
            "gap_percent": normalize.gap_percent(
                fig.ns_per_byte, measured, normalize.base_samples(measured, nbytes, period_ns)
            ),
            "stack_quality": fig.stack_quality,
            "categories_ns_per_byte": fig.categories_ns_per_byte,
        }
    return out


def _no_bytes(stacks) -> dict:
    """A side whose window moved no bytes: its samples, and no figure per byte."""
    samples = sum(stacks.values())
    complete = sum(n for s, n in stacks.items() if normalize.stack_complete(s))
    return {
        "samples": samples,
        "ns_per_byte": None,
        "measured_ns_per_byte": None,
        "gap_percent": None,
        "stack_quality": complete / samples if samples else None,
        "categories_ns_per_byte": None,
    }
