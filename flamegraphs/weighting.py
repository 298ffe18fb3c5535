# SPDX-License-Identifier: GPL-2.0-only
"""A capture that missed samples, weighted by each thread's exact on-CPU
time.

On this VM the cpu-clock handler on one CPU drops some of its samples
inside the kernel (collectors/perf.py), so the threads running there are
undercounted and the categories of their side with them. The cputhread
probe times every workload thread on and off the CPU (sched_switch) over
the same window, so each thread's samples can be scaled to sum to its
on-CPU time: thread t's factor is oncpu_ns(t) / (samples(t) x period_ns).
This is per thread, not per CPU: a thread's samples are all of one task
whichever CPU it ran on. It assumes the missing samples are a random
thinning of the thread's own (a dropped sample is not of a particular
frame), which tests/test_weighting.py holds within the binomial error.

Only the client's and server's threads are probed; the `others` side has
no on-CPU time per thread and is not weighted. Pure: stacks and the
record in, figures out.
"""

from typing import Dict, Mapping, Optional

from . import folded

SOURCE = "cputhread"
WEIGHED_SIDES = ("client", "server")
THREADS_FILE = "threads.folded"  # collectors/perf.py writes it


def split_threads(stacks: Mapping[str, int]) -> Dict[str, Dict[int, Dict[str, int]]]:
    """threads.folded's stacks ("<side>/<tid>;comm;...") -> side -> tid ->
    the thread's stacks as its side's folded file has them."""
    out: Dict[str, Dict[int, Dict[str, int]]] = {}
    for stack, n in stacks.items():
        root, _, rest = stack.partition(";")
        side, _, tid = root.partition("/")
        if side not in WEIGHED_SIDES or not tid.isdigit() or not rest:
            continue
        mine = out.setdefault(side, {}).setdefault(int(tid), {})
        mine[rest] = mine.get(rest, 0) + n
    return out


def probe_threads(record: dict, pid: int) -> Optional[Dict[int, dict]]:
    """tid -> the cputhread probe's thread (comm, oncpu_ns) of process pid
    over the window; None without the probe."""
    probe = (record.get("probes") or {}).get(SOURCE) or {}
    window = probe.get("window") or {}
    if probe.get("status") != "present" or not window.get("threads"):
        return None
    return {t["tid"]: t for t in window["threads"] if t["tgid"] == pid}


def factors(by_tid: Mapping[int, Mapping[str, int]], probed: Mapping[int, dict], period_ns: int) -> dict:
    """Each sampled thread's factor (its on-CPU time over its samples'
    worth), and the on-CPU time of threads that left no sample, which no
    factor can place (their stacks are unknown)."""
    threads = []
    for tid in sorted(by_tid):
        n = sum(by_tid[tid].values())
        t = probed.get(tid)
        oncpu = t["oncpu_ns"] if t else None
        # A thread the probe did not see (it ended before the window's
        # end read, or is not the side's) keeps its samples as they are.
        factor = oncpu / (n * period_ns) if oncpu is not None and n else 1.0
        threads.append(
            {
                "tid": tid,
                "comm": t["comm"] if t else None,
                "samples": n,
                "oncpu_s": None if oncpu is None else oncpu / 1e9,
                "factor": factor,
            }
        )
    unsampled = sum(t["oncpu_ns"] for tid, t in probed.items() if tid not in by_tid)
    fs = [t["factor"] for t in threads]
    return {
        "source": SOURCE,
        "threads": threads,
        "factor_min": min(fs) if fs else None,
        "factor_max": max(fs) if fs else None,
        "unsampled_oncpu_s": unsampled / 1e9,
    }


def weighted(by_tid: Mapping[int, Mapping[str, int]], weights: dict) -> Dict[str, float]:
    """The side's stacks with each thread's samples times its factor."""
    factor = {t["tid"]: t["factor"] for t in weights["threads"]}
    out: Dict[str, float] = {}
    for tid, stacks in by_tid.items():
        for stack, n in stacks.items():
            out[stack] = out.get(stack, 0.0) + n * factor[tid]
    return out


def side_weights(record: dict, stacks_dir, side: str, pid: Optional[int]) -> Optional[tuple]:
    """(weighted stacks, weights) for the side (process pid) of an
    incomplete capture the cputhread probe can weight; None otherwise."""
    flame = record.get("flame") or {}
    path = stacks_dir / THREADS_FILE
    if flame.get("complete") is not False or side not in WEIGHED_SIDES or pid is None or not path.exists():
        return None
    probed = probe_threads(record, pid)
    by_tid = split_threads(folded.read(path).stacks).get(side)
    if probed is None or not by_tid:
        return None
    weights = factors(by_tid, probed, int(flame["sample_period_ns"]))
    return weighted(by_tid, weights), weights
