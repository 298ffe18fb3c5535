# SPDX-License-Identifier: GPL-2.0-only
"""--cpus: each side's workload held to a set of CPUs, as iperf3 -A and
secnetperf -affinitize, and where its threads then ran.

The option reads `client=LIST,server=LIST`, LIST as `taskset -c` takes it
(`0`, `0,2`, `4-7`); a side left out runs where the scheduler puts it. The
workload starts under `taskset -c LIST` (util-linux), so every thread it
makes inherits the mask; a library that set its own threads' affinity
would leave it, and the record would show that: the cputhread probe times
each thread's slices on the CPU they ran on. Pure: text and the probe's
figures in, the plan and the record's `placement` out.
"""

import re
from typing import Dict, List, Optional

from qprof import errors

ROLES = ("client", "server")
SYNTAX = "client=LIST,server=LIST, LIST as taskset -c takes it (0,2-3)"
# Linux runs at most 8192 CPUs (CONFIG_NR_CPUS): a larger number is no
# CPU, and a range up to it would be a list of billions.
MAX_CPU = 8191
_ITEM = re.compile(r"(\d+)(?:-(\d+))?", re.ASCII)


def parse(text: str) -> Dict[str, List[int]]:
    """role -> its CPUs, ascending. A comma starts a new role's list only
    where the next item has an '=', so `client=0,2,server=1` is 0 and 2
    for the client."""
    out: Dict[str, List[int]] = {}
    role = None
    for item in (text or "").split(","):
        item = item.strip()
        if "=" in item:
            role, _, item = item.partition("=")
            role = role.strip()
            if role not in ROLES:
                raise errors.BadCpus(f"--cpus names '{role}', which is not client or server; write {SYNTAX}.")
            if role in out:
                raise errors.BadCpus(f"--cpus gives the {role} twice; write {SYNTAX}.")
            out[role] = []
        if role is None:
            raise errors.BadCpus(f"--cpus '{text}' names no side; write {SYNTAX}.")
        out[role] += _cpus(item.strip(), text)
    return {r: sorted(set(c)) for r, c in out.items()}


def _cpus(item: str, text: str) -> List[int]:
    m = _ITEM.fullmatch(item)
    if not m:
        raise errors.BadCpus(f"--cpus '{text}' has '{item}', which is not a CPU or a range like 2-3; write {SYNTAX}.")
    ends = [g.lstrip("0") or "0" for g in m.groups() if g is not None]
    if any(len(e) > len(str(MAX_CPU)) or int(e) > MAX_CPU for e in ends):
        raise errors.BadCpus(f"--cpus '{text}' has '{item}', past CPU {MAX_CPU}, the last Linux runs; write {SYNTAX}.")
    lo, hi = int(ends[0]), int(ends[-1])
    if hi < lo:
        raise errors.BadCpus(f"--cpus '{text}' has '{item}', which is not a CPU or a range like 2-3; write {SYNTAX}.")
    return list(range(lo, hi + 1))


def check_host(pinned: Dict[str, List[int]], allowed: set, where: str = "this host") -> None:
    """Refuse a CPU the workload could not run on here (offline, or outside
    qprof's own affinity, which the workload inherits)."""
    for role, cpus in pinned.items():
        missing = [c for c in cpus if c not in allowed]
        if missing:
            raise errors.BadCpus(
                f"--cpus puts the {role} on CPU {', '.join(map(str, missing))}, which {where} cannot run it on "
                f"(it can: {_list_text(sorted(allowed))}); pick from those."
            )


def _list_text(cpus: List[int]) -> str:
    """0,1,2,5 -> 0-2,5: as taskset -c takes it."""
    spans: List[List[int]] = []
    for c in cpus:
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def wrapped(argv: List[str], cpus: Optional[List[int]]) -> List[str]:
    """The role's command started under taskset, which execs it (its pid
    stays the workload's)."""
    return ["taskset", "-c", _list_text(cpus), *argv] if cpus else list(argv)


def record(text: Optional[str], threads: Optional[dict]) -> dict:
    """The record's `placement`: what --cpus asked (None: nothing) and, per
    pinned side, the share of its on-CPU time on the CPUs asked, from where
    its threads ran (`cpu_threads.<side>.cpus`; None without the probe or
    unpinned)."""
    pinned = parse(text) if text else {}
    share: Dict[str, Optional[float]] = {}
    for side in ROLES:
        by_cpu = ((threads or {}).get(side) or {}).get("cpus")
        total = sum(by_cpu.values()) if by_cpu else 0
        on = sum(s for c, s in by_cpu.items() if int(c) in pinned[side]) if total and side in pinned else None
        share[side] = on / total if on is not None else None
    return {
        "requested": pinned or None,
        "on_requested_share": share,
        "source": "cpu_threads.<side>.cpus: the cputhread probe's slices summed on the CPU each ran on",
    }
