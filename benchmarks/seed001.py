#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: seed 001's video quality of experience (connect time,
prebuffering time, startup delay, stalls, download rate), QUIC against
TLS over TCP, over seed 002's links, with the CPU per second of video the
seed did not have.

For each link preset, one `qprof compare --stacks quic,tcp-tls --pattern
video` (the stacks interleaved, --repeat runs each), in the QEMU guest,
whose kernel has netem (--host: here, on a kernel with sch_netem). The
bitrate is the link's rung (--bitrates): a fixed bitrate below the
link's rate, as a player's adaptive choice would settle on, since qprof
does not adapt (docs/run.md, video). Every figure is the median of the
runs with the range (min-max).

USAGE: .venv/bin/python benchmarks/seed001.py [--links wifi,lte,3g,2g]
       [--bitrates wifi=1.5mbit,lte=1.5mbit,3g=0.75mbit,2g=0.15mbit] [--duration 20s]
       [--repeat 3] [--app] [--host] [--runs-dir DIR]
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
STACKS = ("quic", "tcp-tls")


def compare(args, link: str, bitrate: str, runs_dir: str) -> dict:
    """stack -> the run records of its point."""
    argv = [QPROF, "compare", "--json", "--stacks", ",".join(STACKS), "--pattern", "video"]
    argv += ["--bitrate", bitrate, "--duration", args.duration, "--repeat", str(args.repeat)]
    argv += ["--link", link, "--probes", "packets", "--sample-hz", "0", "--runs-dir", runs_dir]
    argv += [] if args.host else ["--guest"]
    print("#", " ".join(argv[1:]), file=sys.stderr, flush=True)
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qprof compare failed (exit {r.returncode}): {r.stderr.strip()}")
    comparison = json.loads(r.stdout)
    out = {}
    for entry in comparison["runs"]:
        rec = json.loads((Path(runs_dir) / entry["id"] / "run.json").read_text())
        out.setdefault(rec["stack"], []).append(rec)
    return out


def spread(recs, *path, scale=1.0, spec="{:,.0f}") -> str:
    xs = []
    for r in recs:
        v = r
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if isinstance(v, (int, float)):
            xs.append(v * scale)
    if not xs:
        return "—"
    m = spec.format(statistics.median(xs))
    return m if len(xs) == 1 else f"{m} ({spec.format(min(xs))}-{spec.format(max(xs))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--links", default="wifi,lte,3g,2g")
    ap.add_argument("--bitrates", default="wifi=1.5mbit,lte=1.5mbit,3g=0.75mbit,2g=0.15mbit")
    ap.add_argument("--duration", default="20s", help="the media's length")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--host", action="store_true", help="netem on this kernel, not the guest")
    ap.add_argument("--runs-dir", default=None)
    args = ap.parse_args()
    bitrates = dict(kv.split("=") for kv in args.bitrates.split(","))
    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="qprof-seed001-")
    print(f"\n**Video over seed 002's links** ({args.duration} of media in 2 s segments; ms unless said)\n")
    print(
        "| link | bitrate | stack | connect | prebuffering | startup delay | stalls | stall time, s "
        "| fetch rate, Mbit/s | client CPU per s of video, ms | server CPU per s of video, ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for link in args.links.split(","):
        points = compare(args, link, bitrates[link], runs_dir)
        for stack in STACKS:
            recs = points.get(stack, [])
            cells = [
                spread(recs, "video", "connect_s", scale=1e3),
                spread(recs, "video", "prebuffering_s", scale=1e3),
                spread(recs, "video", "startup_delay_s", scale=1e3),
                spread(recs, "video", "stalls", spec="{:.0f}"),
                spread(recs, "video", "stall_s", spec="{:.2f}"),
                spread(recs, "video", "download_rate_bit", scale=1e-6, spec="{:.2f}"),
                spread(recs, "video", "cpu_s_per_media_s", "client", scale=1e3, spec="{:.1f}"),
                spread(recs, "video", "cpu_s_per_media_s", "server", scale=1e3, spec="{:.1f}"),
            ]
            print(f"| {link} | {bitrates[link]} | {stack} | " + " | ".join(cells) + " |", flush=True)
    print(f"\nruns: {runs_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
