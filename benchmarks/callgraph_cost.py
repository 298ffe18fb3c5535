#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: what each of perf's stack walks costs the transfer, and how
complete the stacks it gives are.

Runs the same `qprof run` (probes off) without stack sampling, with
frame-pointer sampling and with DWARF sampling at the same rate,
interleaved (none fp dwarf, none fp dwarf, ... --rounds times), and prints
per configuration the median throughput and system CPU ns/B with their
ratio to no sampling, and the median stack quality per side; then each
round, so drift on this shared machine is visible. A complete capture
(every CPU sampled in full) is marked so a sampling gap is not mistaken
for a walk's cost.

USAGE: .venv/bin/python benchmarks/callgraph_cost.py [--stack S] [--sample-hz HZ] [--rounds N]
           [--duration S] [--topology netns|loopback] [--dwarf-bytes N]

EXAMPLES:
    .venv/bin/python benchmarks/callgraph_cost.py --stack tcp-tls --rounds 4 --duration 4
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import qprof_launch

SIDES = ("client", "server")


def run(qprof, extra, args, runs_dir):
    r = subprocess.run(
        [
            *qprof,
            "run",
            "--json",
            "--duration",
            f"{args.duration}s",
            "--topology",
            args.topology,
            "--stack",
            args.stack,
            "--probes",
            "none",
            *extra,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "QPROF_RUNS_DIR": runs_dir},
    )
    if r.returncode != 0:
        sys.exit(f"qprof run failed: {r.stderr.strip()}")
    rec = json.loads(r.stdout)
    flame = rec.get("flame") or {}
    quality = {s: flame["sides"][s]["stack_quality"] for s in SIDES} if flame else {}
    return {
        "gbps": rec["throughput_gbps"],
        "ns_per_byte": rec["cpu"]["system"]["ns_per_byte"]["total"],
        "quality": quality,
        "complete": flame.get("complete"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stack", default="quic")
    ap.add_argument("--sample-hz", type=int, default=99)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--topology", default="netns")
    ap.add_argument("--dwarf-bytes", type=int, help="user stack bytes copied per sample (default: DWARF_STACK_BYTES)")
    args = ap.parse_args()
    if args.sample_hz <= 0:
        sys.exit("--sample-hz must be positive: the benchmark compares ways of sampling.")
    configs = {
        "none": (qprof_launch.qprof(), ("--sample-hz", "0")),
        "fp": (qprof_launch.qprof("fp"), ("--sample-hz", str(args.sample_hz))),
        "dwarf": (qprof_launch.qprof("dwarf", args.dwarf_bytes), ("--sample-hz", str(args.sample_hz))),
    }
    results = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as runs_dir:
        for i in range(args.rounds):
            line = []
            for name, (qprof, extra) in configs.items():
                res = run(qprof, extra, args, runs_dir)
                results[name].append(res)
                q = " ".join(f"{s} {res['quality'][s] * 100:.1f}%" for s in SIDES if res["quality"].get(s) is not None)
                line.append(
                    f"{name} {res['gbps']:.2f} Gbit/s {res['ns_per_byte']:.3f} ns/B"
                    + (f" [{q}{'' if res['complete'] else ', incomplete capture'}]" if q else "")
                )
            print(f"round {i + 1}: " + " | ".join(line), flush=True)
    base = {k: statistics.median(r[k] for r in results["none"]) for k in ("gbps", "ns_per_byte")}
    dwarf = qprof_launch.describe("dwarf", args.dwarf_bytes)
    print(f"{args.stack} over {args.topology}, {args.rounds} rounds of {args.duration:g} s, {args.sample_hz} Hz:")
    for name, rs in results.items():
        gbps = statistics.median(r["gbps"] for r in rs)
        nspb = statistics.median(r["ns_per_byte"] for r in rs)
        quality = " ".join(
            f"{s} {statistics.median(r['quality'][s] for r in rs) * 100:.1f}%"
            for s in SIDES
            if all(r["quality"].get(s) is not None for r in rs)
        )
        print(
            f"  {dwarf if name == 'dwarf' else name:12s} {gbps:6.2f} Gbit/s ({gbps / base['gbps']:.3f} of none) "
            f"system {nspb:.3f} ns/B ({nspb / base['ns_per_byte']:.3f} of none)"
            + (f"; stack quality {quality}" if quality else "")
        )


if __name__ == "__main__":
    main()
