# SPDX-License-Identifier: GPL-2.0-only
"""The benchmarks' table cell: a figure's median (min-max) over a point's
runs, read from their records with qprof's own path reader."""

import statistics

from qprof.figures import get


def spread(recs, *path, scale=1.0, spec="{:,.1f}") -> str:
    """The median (min-max) of the figure at path over the records; the
    median alone from one; "—" where none holds it."""
    xs = [v * scale for v in (get(r, *path) for r in recs) if isinstance(v, (int, float))]
    if not xs:
        return "—"
    m = spec.format(statistics.median(xs))
    return m if len(xs) == 1 else f"{m} ({spec.format(min(xs))}-{spec.format(max(xs))})"
