#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: seed 001's video quality of experience (connect time,
prebuffering time, startup delay, stalls, download rate), QUIC against
TLS over TCP, over seed 002's links, with the CPU per second of video the
seed did not have.

For each link preset, one `qprof compare --stacks quic,tcp-tls --pattern
video` (the stacks interleaved, --repeat runs each); with --sweeps, seed
002's RTT and loss sweeps too, at --sweep-base (one compare each,
--vary rtt=... and --vary loss=...); all in the QEMU guest,
whose kernel has netem (--host: here, on a kernel with sch_netem). The
bitrate is the link's rung (--bitrates): a fixed bitrate below the
link's rate, as a player's adaptive choice would settle on, since qprof
does not adapt (docs/run.md, video). Every figure is the median of the
runs with the range (min-max).

USAGE: .venv/bin/python benchmarks/seed001.py [--links wifi,lte,3g,2g]
       [--bitrates wifi=1.5mbit,lte=1.5mbit,3g=0.75mbit,2g=0.15mbit] [--duration 20s]
       [--repeat 3] [--sweeps] [--host] [--runs-dir DIR]
"""

import argparse
import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import median_range

REPO = Path(__file__).resolve().parent.parent
QPROF = str(REPO / ".venv" / "bin" / "qprof")
STACKS = ("quic", "tcp-tls")


def compare(args, link: str, bitrate: str, runs_dir: str, vary=None) -> dict:
    """stack (and, with vary, the varied value) -> the run records of its point."""
    argv = [QPROF, "compare", "--json", "--stacks", ",".join(STACKS), "--pattern", "video"]
    argv += ["--bitrate", bitrate, "--duration", args.duration, "--repeat", str(args.repeat)]
    argv += ["--link", link, "--probes", "packets", "--sample-hz", "0", "--runs-dir", runs_dir]
    argv += [] if args.host else ["--guest"]
    argv += ["--vary", f"{vary[0]}={','.join(vary[1])}"] if vary else []
    print("#", " ".join(argv[1:]), file=sys.stderr, flush=True)
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qprof compare failed (exit {r.returncode}): {r.stderr.strip()}")
    comparison = json.loads(r.stdout)
    out = {}
    per_stack = len(vary[1]) if vary else 1
    for entry in comparison["runs"]:
        rec = json.loads((Path(runs_dir) / entry["id"] / "run.json").read_text())
        key = (rec["stack"], vary[1][entry["config"] % per_stack]) if vary else rec["stack"]
        out.setdefault(key, []).append(rec)
    return out


def cells(recs) -> list:
    return [
        spread(recs, "video", "connect_s", scale=1e3),
        spread(recs, "video", "prebuffering_s", scale=1e3),
        spread(recs, "video", "startup_delay_s", scale=1e3),
        spread(recs, "video", "stalls", spec="{:.0f}"),
        spread(recs, "video", "stall_s", spec="{:.2f}"),
        spread(recs, "video", "download_rate_bit", scale=1e-6, spec="{:.2f}"),
        spread(recs, "video", "cpu_s_per_media_s", "client", scale=1e3, spec="{:.1f}"),
        spread(recs, "video", "cpu_s_per_media_s", "server", scale=1e3, spec="{:.1f}"),
    ]


HEAD = (
    "| connect | prebuffering | startup delay | stalls | stall time, s | fetch rate, Mbit/s "
    "| client CPU per s of video, ms | server CPU per s of video, ms |"
)


spread = functools.partial(median_range.spread, spec="{:,.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--links", default="wifi,lte,3g,2g", help="the presets ('' for none: the sweeps alone)")
    ap.add_argument("--bitrates", default="wifi=1.5mbit,lte=1.5mbit,3g=0.75mbit,2g=0.15mbit")
    ap.add_argument("--duration", default="20s", help="the media's length")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sweeps", action="store_true", help="seed 002's RTT and loss sweeps too")
    ap.add_argument("--sweep-base", default="rtt=100ms,loss=0.5%,rate=2.2mbit", help="the link the sweeps vary")
    ap.add_argument("--sweep-bitrate", default="1.5mbit")
    ap.add_argument("--rtts", default="50ms,100ms,250ms,500ms")
    ap.add_argument("--losses", default="0.5%,1%,2%")
    ap.add_argument("--host", action="store_true", help="netem on this kernel, not the guest")
    ap.add_argument("--runs-dir", default=None)
    args = ap.parse_args()
    bitrates = dict(kv.split("=") for kv in args.bitrates.split(","))
    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="qprof-seed001-")
    print(f"\n**Video over seed 002's links** ({args.duration} of media in 2 s segments; ms unless said)\n")
    links = [k for k in args.links.split(",") if k]
    if links:
        print("| link | bitrate | stack " + HEAD)
        print("|---|---|---|---|---|---|---|---|---|---|---|")
    for link in links:
        points = compare(args, link, bitrates[link], runs_dir)
        for stack in STACKS:
            print(f"| {link} | {bitrates[link]} | {stack} | " + " | ".join(cells(points.get(stack, []))) + " |")
    if args.sweeps:
        for key, values in (("rtt", args.rtts.split(",")), ("loss", args.losses.split(","))):
            base = ",".join(kv for kv in args.sweep_base.split(",") if not kv.startswith(key + "="))
            print(f"\n**{key} sweep** (--link {base}, bitrate {args.sweep_bitrate})\n")
            print(f"| {key} | stack " + HEAD)
            print("|---|---|---|---|---|---|---|---|---|---|")
            points = compare(args, base, args.sweep_bitrate, runs_dir, (key, values))
            for v in values:
                for stack in STACKS:
                    print(f"| {v} | {stack} | " + " | ".join(cells(points.get((stack, v), []))) + " |", flush=True)
    print(f"\nruns: {runs_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
