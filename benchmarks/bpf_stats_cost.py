#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: what the kernel's BPF run-time statistics cost the probes.

Every probe turns BPF_ENABLE_STATS on so each run records what its
programs cost (run.json `observers`); the kernel then reads the clock
twice around every program run. This runs a tight loop of write(2)
calls (each one runs qprof-syscalls' sys_enter and sys_exit programs)
under qprof-syscalls with statistics on and off (--no-bpf-stats),
interleaved, each pair in the other order from the last, and prints the
added nanoseconds per program run, and per run the programs' own
measured time for scale.

USAGE: benchmarks/bpf_stats_cost.py [--pairs N] [--calls N]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBE = str(REPO / "build" / "bin" / "qprof-syscalls")
LOOP = (
    "import os, sys, time\n"
    "fd = os.open('/dev/null', os.O_WRONLY)\n"
    "sys.stdin.readline()\n"
    "t = time.perf_counter_ns()\n"
    "for _ in range(int(sys.argv[1])): os.write(fd, b'x')\n"
    "print(time.perf_counter_ns() - t, flush=True)\n"
)


def one(calls: int, stats: bool) -> tuple:
    """(loop ns per call, programs' own ns per run or None)."""
    loop = subprocess.Popen(
        [sys.executable, "-c", LOOP, str(calls)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    probe = subprocess.Popen(
        [PROBE, "-p", str(loop.pid), "--control", *([] if stats else ["-S"])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    ready = json.loads(probe.stdout.readline())
    assert ready["bpf_stats"] is stats, ready
    loop.stdin.write("go\n")
    loop.stdin.flush()
    ns = int(loop.stdout.readline())
    loop.wait()
    probe.stdin.write("mark end\nexit\n")
    probe.stdin.flush()
    mark = json.loads(probe.stdout.readline())
    probe.wait()
    runs = sum(p["run_cnt"] for p in mark["progs"])
    own = sum(p["run_time_ns"] for p in mark["progs"]) / runs if stats and runs else None
    return ns / calls, own


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--calls", type=int, default=300_000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (BPF)")
    diffs, owns = [], []
    for i in range(args.pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {s: one(args.calls, s) for s in order}
        on, off = got[True][0], got[False][0]
        diffs.append((on - off) / 2)  # two programs run per call
        owns.append(got[True][1])
        print(
            f"pair {i + 1}: ns per call with stats {on:.0f}, without {off:.0f}; "
            f"programs' own time {got[True][1]:.0f} ns per run",
            flush=True,
        )
    print(
        f"statistics add {statistics.median(diffs):.0f} ns per program run (median of {args.pairs} pairs; "
        f"range {min(diffs):.0f} to {max(diffs):.0f}); the programs themselves take "
        f"{statistics.median(owns):.0f} ns per run with statistics on"
    )


if __name__ == "__main__":
    main()
