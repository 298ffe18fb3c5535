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

--baseline CMD: a second qprof (another build, e.g. main's, through a
wrapper) whose same instruments run in the same rounds, so a change is
measured against what it replaces under the same drift: each round then
has three runs (without, with, the baseline with), their order rotating
so each takes each place equally often, and the baseline's ratios to the
same "without" runs are printed beside, with the with/baseline ratio.

USAGE: benchmarks/probe_overhead.py [--what probes|stacks|default] [--probes LIST] [--sample-hz HZ] [--pairs N]
                                    [--duration S] [--topology netns|loopback] [--stack S] [--baseline CMD]
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


def run(extra, duration_s, topology, stack, runs_dir, qprof=QPROF):
    r = subprocess.run(
        [qprof, "run", "--json", "--duration", f"{duration_s}s", "--topology", topology, "--stack", stack, *extra],
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
    client = (rec.get("syscalls") or {}).get("client")
    if client is not None and not client["send_calls"]:
        sys.exit("the syscalls probe saw no send call of the client: it measured nothing")
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
    ap.add_argument(
        "--baseline",
        help="another qprof command whose same instruments run in each round too (a third run), "
        "e.g. a wrapper around main's build",
    )
    args = ap.parse_args()
    if args.what == "probes":
        on = ("--probes", args.probes, "--sample-hz", "0")
    elif args.what == "stacks":
        on = ("--probes", "none", "--sample-hz", str(args.sample_hz))
    else:
        on = ()
    off = ("--probes", "none", "--sample-hz", "0")
    arms = {"without": (off, QPROF), "with": (on, QPROF)}
    if args.baseline:
        arms["baseline"] = (on, args.baseline)
    names = list(arms)
    got = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as runs_dir:
        for i in range(args.pairs):
            # Two arms: A B, B A, ...; three: each arm in each place once every three rounds.
            k = i % len(names)
            order = names[k:] + names[:k] if len(names) > 2 else (names if i % 2 == 0 else names[::-1])
            res = {
                name: run(arms[name][0], args.duration, args.topology, args.stack, runs_dir, arms[name][1])
                for name in order
            }
            for name in names:
                got[name].append(res[name])
            a, b = res["without"], res["with"]
            line = (
                f"pair {i + 1}: without {a[0]:.2f} Gbit/s {a[1]:.3f} ns/B | with {b[0]:.2f} Gbit/s "
                f"{b[1]:.3f} ns/B | throughput ratio {b[0] / a[0]:.3f}"
            )
            if "baseline" in res:
                c = res["baseline"]
                line += f" | baseline {c[0]:.2f} Gbit/s {c[1]:.3f} ns/B, ratio {c[0] / a[0]:.3f}"
            print(line, flush=True)
    what = {
        "probes": f"probes {args.probes}",
        "stacks": f"stacks at {args.sample_hz} Hz",
        "default": "the default instruments",
    }[args.what]
    for arm, label in (("with", what), ("baseline", f"the baseline's ({args.baseline}) {what}")):
        if arm not in got:
            continue
        summarize(
            got["without"],
            got[arm],
            f"{args.stack} over {args.topology}, {args.pairs} pairs of {args.duration:g} s: {label}",
        )
    if "baseline" in got:
        summarize(got["baseline"], got["with"], "with against the baseline, both instrumented", "baseline")


def summarize(without, with_p, title, den="without"):
    """Ratio of medians, and the median of the pairs' ratios with its 95% interval."""
    tput = statistics.median(b[0] for b in with_p) / statistics.median(a[0] for a in without)
    nspb = statistics.median(b[1] for b in with_p) / statistics.median(a[1] for a in without)
    print(
        f"{title}: throughput with/{den} {tput:.3f} ({(1 - tput) * 100:+.1f}% cost), "
        f"system CPU ns/B with/{den} {nspb:.3f} (ratios of medians)"
    )
    for name, ratios in (
        ("throughput", [b[0] / a[0] for a, b in zip(without, with_p)]),
        ("system CPU ns/B", [b[1] / a[1] for a, b in zip(without, with_p)]),
    ):
        med, lo, hi = median_interval(ratios)
        print(f"  {name} with/{den}, median of the pairs: {med:.3f} (95% interval {lo:.3f}-{hi:.3f})")
    obs = [b[2] for b in with_p if b[2] is not None]
    if den == "without" and obs:
        print(
            f"  the probes' own run time (record's observers), median: {statistics.median(obs):.4f} ns/B, "
            f"{statistics.median(obs) / statistics.median(b[1] for b in with_p) * 100:.2f}% of system CPU ns/B"
        )


if __name__ == "__main__":
    main()
