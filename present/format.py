# SPDX-License-Identifier: GPL-2.0-only
"""The one number formatter (pyperf's _formatter.py is the model): every
figure the terminal tables, `qprof ls`, `qprof show`, `qprof flame` and
the HTML report show is written by these functions. A figure the record
does not hold is ABSENT, never 0."""

import json
from typing import Optional

ABSENT = "—"


def num(v: Optional[float], fmt: str = "{:.3f}") -> str:
    """v as fmt writes it, or ABSENT."""
    return ABSENT if v is None else fmt.format(v)


def field(v) -> str:
    """A record field of any type on one line: a float as num writes it,
    a list or dict as JSON, anything else as text; None is ABSENT."""
    if v is None:
        return ABSENT
    if isinstance(v, float):
        return num(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def count(v: Optional[int]) -> str:
    """A count with thousands separators, or ABSENT."""
    return ABSENT if v is None else f"{v:,}"


def compact(v: Optional[float], unit: str) -> str:
    """A figure whose size is not known in advance (a comparison's median
    of any metric): three decimals below 10, one below 1,000, none above;
    a share as a percentage."""
    if v is None:
        return ABSENT
    if unit == "share":
        return f"{v * 100:.2f}%"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3f}"


def binary_size(size_bytes: float) -> str:
    """A size in the largest binary unit it reaches: 64 KiB, 1.5 MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g} {unit}"
    return f"{size_bytes:g} B"


def duration_ns(ns: float) -> str:
    """A duration in the largest unit it reaches: 512 ns, 2.048 us, 1 s."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:g} {unit}"
    return f"{ns:g} ns"
