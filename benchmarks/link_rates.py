#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: what a rate-only --link delivers of its rate, per stack, and
what the record says limited it (link.saturation.limited_by). The
emulator must not be the limit: at least 0.95 of the rate, or the CPU
saturated first.

Each point is a `qprof run --link rate=R` bulk upload (no probes, no
stack samples, no interval lines: nothing but the transfer), the stacks
and rates interleaved, --rounds times; the table gives the median of
each point's runs.

USAGE: .venv/bin/python benchmarks/link_rates.py [--stacks quic,tcp] [--rates 100mbit,1gbit,...]
       [--rounds 3] [--duration 2s]
Prints one markdown table, for RESULTS.md.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QPROF = str(REPO / ".venv" / "bin" / "qprof")


def run(stack: str, rate: str, args, runs_dir: str) -> dict:
    argv = [QPROF, "run", "--json", "--stack", stack, "--link", f"rate={rate}", "--duration", args.duration]
    argv += ["--warmup", "1s", "--probes", "none", "--sample-hz", "0", "--interval", "0", "--runs-dir", runs_dir]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qprof run failed (exit {r.returncode}): {r.stderr.strip()}")
    rec = json.loads(r.stdout)
    s = rec["link"]["saturation"]
    return {
        "gbps": rec["throughput_gbps"],
        "util": rec["link"]["directions"]["client_to_server"]["utilisation"],
        "limited_by": s["limited_by"],
        "cpu_busy": s["cpu_busy"],
        "busiest": s["busiest_process_cpus"],
        "plan": rec["link"]["plan"],
        "warned": bool(r.stderr.strip()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stacks", default="quic,tcp,tcp-tls")
    ap.add_argument("--rates", default="100mbit,500mbit,1gbit,5gbit,10gbit,100gbit")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", default="2s")
    args = ap.parse_args()
    runs_dir = tempfile.mkdtemp(prefix="qprof-link-rates-")
    points = [(s, r) for r in args.rates.split(",") for s in args.stacks.split(",")]
    got = {p: [] for p in points}
    for i in range(args.rounds):
        for p in points:
            got[p].append(run(*p, args, runs_dir))
            print(
                f"# round {i + 1}: {p[0]} {p[1]}: {got[p][-1]['util']:.3f} {got[p][-1]['limited_by']}", file=sys.stderr
            )
    print(
        "| stack | `--link rate=` | tbf burst | queue (packets) | delivered (Gbit/s) | link utilisation | limited_by |"
    )
    print("|---|---|---|---|---|---|---|")
    for (stack, rate), rs in got.items():
        plan = rs[0]["plan"]
        limits = "/".join(sorted({r["limited_by"] for r in rs}))
        warned = sum(r["warned"] for r in rs)
        print(
            f"| {stack} | {rate} | {plan['tbf_burst_bytes']:,} B | {plan['queue_packets']:,} "
            f"| {statistics.median(r['gbps'] for r in rs):.3f} | {statistics.median(r['util'] for r in rs):.3f} "
            f"| {limits}{f' ({warned} warned)' if warned else ''} |"
        )


if __name__ == "__main__":
    main()
