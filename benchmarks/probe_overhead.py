#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: what qprof's instruments cost the transfer they measure.

Runs the same `qprof run` with and without the instrument, interleaved,
--pairs times, each pair in the other order from the last (A B, B A, ...)
so a drift on this shared machine does not favour one side; prints each
pair's ratio, then for throughput and system CPU ns/B (with / without) the
ratio of medians and the median of the pairs' ratios with a 95% bootstrap
interval, so a reader sees whether a target is met or lost in the noise. --what probes: the eBPF
probes (all, or --probes LIST) against none (target: at most 2% of
throughput); --what stacks:
perf stack sampling at --sample-hz against none (probes off in both);
--what default: the instruments a plain `qprof run` has (all probes, 99 Hz
DWARF stacks) against none of them.

USAGE: benchmarks/probe_overhead.py [--what probes|stacks|default] [--probes LIST] [--sample-hz HZ] [--pairs N]
                                    [--duration S] [--topology netns|loopback] [--stack S]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# $QPROF: another qprof (a worktree's, through a wrapper), as the benchmark's subject.
QPROF = os.environ.get("QPROF", str(REPO / ".venv" / "bin" / "qprof"))


def run(extra, duration_s, topology, stack, runs_dir):
    r = subprocess.run(
        [QPROF, "run", "--json", "--duration", f"{duration_s}s", "--topology", topology, "--stack", stack, *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "QPROF_RUNS_DIR": runs_dir},
    )
    if r.returncode != 0:
        sys.exit(f"qprof run failed: {r.stderr.strip()}")
    rec = json.loads(r.stdout)
    absent = [n for n, p in (rec.get("probes") or {}).items() if p["status"] != "present"]
    if absent:
        sys.exit(f"probes absent: {absent}; the benchmark needs them all")
    obs = (rec.get("observers") or {}).get("ns_per_byte")
    return rec["throughput_gbps"], rec["cpu"]["system"]["ns_per_byte"]["total"], obs


def median_interval(ratios, rounds=10000, seed=1):
    """The median of the ratios and a 95% percentile-bootstrap interval for it."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(rounds))
    return statistics.median(ratios), meds[int(0.025 * rounds)], meds[int(0.975 * rounds) - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--topology", default="netns")
    ap.add_argument("--stack", default="quic")
    ap.add_argument("--what", choices=("probes", "stacks", "default"), default="probes")
    ap.add_argument("--sample-hz", type=int, default=1000)
    ap.add_argument(
        "--probes",
        default="syscalls,packets,cputhread",
        help="--what probes: the probes turned on (default: all three)",
    )
    args = ap.parse_args()
    with_p, without = [], []
    with tempfile.TemporaryDirectory() as runs_dir:
        for i in range(args.pairs):
            if args.what == "probes":
                off = ("--probes", "none", "--sample-hz", "0")
                on = ("--probes", args.probes, "--sample-hz", "0")
            elif args.what == "stacks":
                off = ("--probes", "none", "--sample-hz", "0")
                on = ("--probes", "none", "--sample-hz", str(args.sample_hz))
            else:
                off = ("--probes", "none", "--sample-hz", "0")
                on = ()
            if i % 2 == 0:
                a = run(off, args.duration, args.topology, args.stack, runs_dir)
                b = run(on, args.duration, args.topology, args.stack, runs_dir)
            else:
                b = run(on, args.duration, args.topology, args.stack, runs_dir)
                a = run(off, args.duration, args.topology, args.stack, runs_dir)
            without.append(a)
            with_p.append(b)
            print(
                f"pair {i + 1}: without {a[0]:.2f} Gbit/s {a[1]:.3f} ns/B | with {b[0]:.2f} Gbit/s "
                f"{b[1]:.3f} ns/B | throughput ratio {b[0] / a[0]:.3f}",
                flush=True,
            )
    tput = statistics.median(b[0] for b in with_p) / statistics.median(a[0] for a in without)
    nspb = statistics.median(b[1] for b in with_p) / statistics.median(a[1] for a in without)
    what = {
        "probes": f"probes {args.probes}",
        "stacks": f"stacks at {args.sample_hz} Hz",
        "default": "the default instruments",
    }[args.what]
    print(
        f"{args.stack} over {args.topology}, {args.pairs} pairs of {args.duration:g} s: throughput with/without {what} "
        f"{tput:.3f} ({(1 - tput) * 100:+.1f}% cost), system CPU ns/B with/without {nspb:.3f} (ratios of medians)"
    )
    for name, ratios in (
        ("throughput", [b[0] / a[0] for a, b in zip(without, with_p)]),
        ("system CPU ns/B", [b[1] / a[1] for a, b in zip(without, with_p)]),
    ):
        med, lo, hi = median_interval(ratios)
        print(f"  {name} with/without, median of the pairs: {med:.3f} (95% interval {lo:.3f}-{hi:.3f})")
    obs = [b[2] for b in with_p if b[2] is not None]
    if obs:
        print(
            f"  the probes' own run time (record's observers), median: {statistics.median(obs):.4f} ns/B, "
            f"{statistics.median(obs) / statistics.median(b[1] for b in with_p) * 100:.2f}% of system CPU ns/B"
        )


if __name__ == "__main__":
    main()
