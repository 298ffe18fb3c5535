# SPDX-License-Identifier: GPL-2.0-only
"""Figures per unit of work (a request, a handshake) instead of per byte:
the window's CPU, system calls and wire over the units it completed, and
the flame graph's totals and categories the same way. A window with no
unit has none (None), never a division by zero."""

from typing import Dict, Optional

from qprof.perbyte import side_bytes


def flame(rec: dict, n: int) -> Optional[dict]:
    """The stack samples per unit instead of per byte: each side's graph
    total and its categories, samples x period / the window's units (the
    flame's per-byte figures times the side's bytes)."""
    flame = rec.get("flame") or {}
    if not n or not flame.get("sides"):
        return None
    out = {}
    for side, fig in flame["sides"].items():
        nbytes = side_bytes(rec, side)
        if fig["ns_per_byte"] is None:  # the side moved no bytes (its samples' time), or left no sample
            total = fig["samples"] * rec["flame"]["sample_period_ns"] / n if fig["samples"] else None
            out[side] = {"total": total, "categories": None}
            continue
        out[side] = {
            "total": fig["ns_per_byte"] * nbytes / n,
            "categories": {c: v * nbytes / n for c, v in (fig.get("categories_ns_per_byte") or {}).items()},
        }
    return out


def costs(rec: dict, n: int, wire: Optional[Dict[str, dict]]) -> Optional[dict]:
    """What each unit cost: on-CPU time (schedstat) per side and the
    machine's CPU time (/proc/stat, every CPU), system calls per side, and
    wire bytes and packets each way (the packets probe: headers, ACKs and
    control frames included)."""
    if not n:
        return None
    out = {"cpu_s": {}, "syscalls": {}, "wire": None}
    for side in ("client", "server"):
        on = rec["cpu"][side].get("oncpu_schedstat_s")
        out["cpu_s"][side] = on / n if on is not None else None
        by = ((rec.get("syscalls") or {}).get(side) or {}).get("by_syscall")
        out["syscalls"][side] = sum(c["calls"] for c in by.values()) / n if by is not None else None
    machine = (rec["cpu"].get("system") or {}).get("total_s")
    out["cpu_s"]["machine"] = machine / n if machine is not None else None
    if wire:
        out["wire"] = {d: {"bytes": w["wire_bytes"] / n, "packets": w["wire_packets"] / n} for d, w in wire.items()}
    return out
