#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: seed 000's fairness table (Kyratzis & Cottis, Table 2) with
qprof's real stacks through one rate-limited bottleneck: 2 QUIC; 1 QUIC
vs 2 TCP; 1 QUIC vs 5 TCP; 2 QUIC vs 2 TCP. Beside the seed's
throughput per flow and its standard deviation: Jain's index over all
flows, each stack's share, the senders' retransmissions per MB and CPU
per byte (each flow's client and server processes, schedstat).

Each mix is one `qprof run --mix` with --link rate=R (a tbf: runs on this
host; with --rtt, netem under it, so --guest where netem is missing).
The mixes run interleaved, --repeat rounds; the figures are medians over
the rounds (a flow's own figures first averaged over its stack's flows).

USAGE: .venv/bin/python benchmarks/fairness.py [--rate 10mbit] [--queue 50] [--rtt 50ms]
       [--duration 20s] [--repeat 3] [--tcp tcp] [--tcp-cc cubic] [--guest] [--runs-dir DIR]
Prints a markdown table for RESULTS.md.
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
MIXES = ("quic:2", "quic:1,{tcp}:2", "quic:1,{tcp}:5", "quic:2,{tcp}:2")


def run_mix(args, spec: str, runs_dir: str) -> dict:
    link = (
        f"rate={args.rate}" + (f",queue={args.queue}" if args.queue else "") + (f",rtt={args.rtt}" if args.rtt else "")
    )
    argv = [QPROF, "run", "--mix", spec, "--link", link, "--duration", args.duration, "--runs-dir", runs_dir, "--json"]
    argv += ["--tcp-cc", args.tcp_cc] if args.tcp_cc and args.tcp in spec else []
    argv += ["--guest"] if args.guest else []
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"fairness: `{' '.join(argv)}` failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, spec="{:.2f}"):
    return "—" if v is None else spec.format(v)


def summarise(recs) -> dict:
    """Per stack, medians over the rounds of each round's figure."""
    out = {"jain": median([r["mix"]["jain_index"] for r in recs]), "stacks": {}, "limited_by": set()}
    for r in recs:
        out["limited_by"].add(r["link"]["saturation"]["limited_by"])
    for stack in recs[0]["mix"]["by_stack"]:
        rows = []
        for r in recs:
            flows = [f for f in r["mix"]["flows"] if f["stack"] == stack]
            s = r["mix"]["by_stack"][stack]
            rows.append(
                {
                    "mean": s["goodput_mbps_mean"],
                    "stdev": s["goodput_mbps_stdev"],
                    "share": s["share"],
                    "retrans": statistics.fmean(f["retransmits_per_mb"] or 0 for f in flows),
                    "ns_client": statistics.fmean(f["ns_per_byte"]["client"] for f in flows),
                    "ns_server": statistics.fmean(f["ns_per_byte"]["server"] for f in flows),
                    "cc": flows[0]["tcp_congestion_control"],
                }
            )
        out["stacks"][stack] = {k: median([row[k] for row in rows]) for k in rows[0] if k != "cc"}
        out["stacks"][stack]["flows"] = len([f for f in recs[0]["mix"]["flows"] if f["stack"] == stack])
        out["stacks"][stack]["cc"] = rows[0]["cc"] or "cubic (msquic)"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", default="10mbit")
    ap.add_argument("--queue", type=int, default=50, help="packets in the bottleneck's queue")
    ap.add_argument("--rtt", default=None)
    ap.add_argument("--duration", default="20s")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tcp", default="tcp", help="the TCP stack to mix in: tcp or tcp-tls")
    ap.add_argument("--tcp-cc", default="cubic")
    ap.add_argument("--guest", action="store_true")
    ap.add_argument("--runs-dir", default=None)
    args = ap.parse_args()
    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="qprof-fairness-")
    mixes = [m.format(tcp=args.tcp) for m in MIXES]
    recs = {m: [] for m in mixes}
    for round_ in range(args.repeat):
        for m in mixes:
            print(f"fairness: round {round_ + 1}/{args.repeat}: --mix {m}", file=sys.stderr, flush=True)
            recs[m].append(run_mix(args, m, runs_dir))
    env = recs[mixes[0]][0]["environment"]
    print(
        f"rate {args.rate}, queue {args.queue} packets"
        + (f", rtt {args.rtt}" if args.rtt else "")
        + f"; {args.duration} windows, median of {args.repeat} interleaved rounds; "
        f"{'guest' if args.guest else 'host'} {env['kernel_release']}, {env['cpu_count']} CPUs; runs in {runs_dir}\n"
    )
    print(
        "| flows | stack (cc) | Mbit/s per flow | std. dev. | share | Jain (all flows) | retrans/MB "
        "| client ns/B | server ns/B | limited by |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in mixes:
        s = summarise(recs[m])
        for i, (stack, v) in enumerate(s["stacks"].items()):
            print(
                f"| {m if i == 0 else ''} | {v['flows']} {stack} ({v['cc']}) | {fmt(v['mean'])} | {fmt(v['stdev'])} "
                f"| {fmt(v['share'] and v['share'] * 100, '{:.0f}%')} | {fmt(s['jain']) if i == 0 else ''} "
                f"| {fmt(v['retrans'], '{:.1f}')} | {fmt(v['ns_client'], '{:.1f}')} | {fmt(v['ns_server'], '{:.1f}')} "
                f"| {'/'.join(sorted(s['limited_by'])) if i == 0 else ''} |"
            )


if __name__ == "__main__":
    main()
