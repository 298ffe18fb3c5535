#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: seed 003's request/response measurements (its four servers
over a link of --rtt), with what the seed did not have: the bytes of each
request split by layer, and CPU per request.

The seed's servers, as qprof runs them (`--pattern rr --payload 128`):
  QUIC      --stack quic --rr-streams one       (single-stream QUIC)
  TCP       --stack tcp
  HTTP/3    --stack quic --app h3               (a stream per request)
  HTTP/1.1  --stack tcp-tls --app h1 --tcp-conns on-demand
            (a new connection whenever every open one waits, as its client)

Each server is one `qprof compare --vary period=...` (the periods
interleaved, --repeat runs each), in the QEMU guest, whose kernel has
netem (--host: here, on a kernel with sch_netem). Printed, for RESULTS.md:
  - Fig. 4: HTTP/1.1's connections per 1000 requests at each period;
  - Fig. 5: data volume per request and per response (what the client and
    the server sent, per answered request: the wire's bytes from the
    packets probe), HTTP/1.1 against HTTP/3, split into payload, HTTP
    framing and the transport's share, with packets and ACK-only packets;
  - the delay table at --delay-period: each server's response delay
    (p50, mean, p99) and the seed's jitter, with CPU per request.
Every figure is the median of the --repeat runs of its point, with the
range (min-max).

USAGE: .venv/bin/python benchmarks/seed003.py [--periods 5ms,10ms,25ms] [--delay-period 25ms]
       [--rtt 10ms] [--repeat 3] [--duration 10s] [--host] [--runs-dir DIR]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from median_range import spread

REPO = Path(__file__).resolve().parent.parent
QPROF = str(REPO / ".venv" / "bin" / "qprof")

SERVERS = {
    "QUIC": ["--stack", "quic", "--rr-streams", "one"],
    "TCP": ["--stack", "tcp"],
    "HTTP/3": ["--stack", "quic", "--app", "h3"],
    "HTTP/1.1": ["--stack", "tcp-tls", "--app", "h1", "--tcp-conns", "on-demand"],
}
WAYS = (("request", "client_to_server"), ("response", "server_to_client"))


def compare(args, server: str, periods: list, runs_dir: str) -> dict:
    """period -> the run records of that point."""
    argv = [QPROF, "compare", "--json", *SERVERS[server], "--pattern", "rr", "--payload", "128"]
    argv += ["--duration", args.duration, "--repeat", str(args.repeat), "--sample-hz", "0"]
    argv += ["--link", f"rtt={args.rtt}", "--vary", f"period={','.join(periods)}", "--runs-dir", runs_dir]
    argv += [] if args.host else ["--guest"]
    print("#", " ".join(argv[1:]), file=sys.stderr, flush=True)
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qprof compare failed (exit {r.returncode}): {r.stderr.strip()}")
    comparison = json.loads(r.stdout)
    out = {}
    for entry in comparison["runs"]:
        rec = json.loads((Path(runs_dir) / entry["id"] / "run.json").read_text())
        out.setdefault(periods[entry["config"]], []).append(rec)
    return out


def alternate(args, servers, period: str, runs_dir: str) -> dict:
    """One point for each server, --repeat `qprof run`s each, alternating
    (A B A B ...: a comparison needs two configurations of one stack)."""
    out = {s: {period: []} for s in servers}
    for _ in range(args.repeat):
        for server in servers:
            argv = [QPROF, "run", "--json", *SERVERS[server], "--pattern", "rr", "--payload", "128"]
            argv += ["--duration", args.duration, "--sample-hz", "0", "--period", period]
            argv += ["--link", f"rtt={args.rtt}", "--runs-dir", runs_dir] + ([] if args.host else ["--guest"])
            print("#", " ".join(argv[1:]), file=sys.stderr, flush=True)
            r = subprocess.run(argv, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"qprof run failed (exit {r.returncode}): {r.stderr.strip()}")
            out[server][period].append(json.loads(r.stdout))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--periods", default="5ms,10ms,25ms")
    ap.add_argument("--delay-period", default="25ms")
    ap.add_argument("--rtt", default="10ms")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--host", action="store_true", help="netem on this kernel, not the guest")
    ap.add_argument("--runs-dir", default=None)
    args = ap.parse_args()
    periods = args.periods.split(",")
    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="qprof-seed003-")
    points = {
        "HTTP/1.1": compare(args, "HTTP/1.1", periods, runs_dir),
        "HTTP/3": compare(args, "HTTP/3", periods, runs_dir),
    }
    points.update(alternate(args, ("QUIC", "TCP"), args.delay_period, runs_dir))

    print(f"\n**Fig. 4: HTTP/1.1's connections per 1000 requests** (rtt {args.rtt}, 128 B)\n")
    print("| period | connections per 1000 requests | requests answered |")
    print("|---|---|---|")
    for d in periods:
        recs = points["HTTP/1.1"][d]
        conns = spread(recs, "rr", "connections_per_1000_requests")
        print(f"| {d} | {conns} | {spread(recs, 'rr', 'responses', spec='{:,.0f}')} |")

    print(f"\n**Fig. 5: data volume per request and per response, bytes** (rtt {args.rtt}, 128 B)\n")
    print("| period | server | way | wire | payload | HTTP framing | transport | packets | ACK-only packets |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d in periods:
        for server in ("HTTP/1.1", "HTTP/3"):
            recs = points[server][d]
            for way, key in WAYS:
                dv = ("rr", "data_volume", key)
                cells = [
                    spread(recs, *dv, "wire_bytes"),
                    spread(recs, *dv, "payload_bytes"),
                    spread(recs, *dv, "framing_bytes"),
                    spread(recs, *dv, "transport_bytes"),
                    spread(recs, *dv, "wire_packets", spec="{:.2f}"),
                    spread(recs, *dv, "ack_only_packets", spec="{:.2f}"),
                ]
                print(f"| {d} | {server} | {way} | " + " | ".join(cells) + " |")

    d = args.delay_period
    print(f"\n**Response delay at d = {d}** (rtt {args.rtt}, 128 B; ms, jitter %)\n")
    print("| server | p50 | mean | p99 | jitter | client CPU per request, us | machine CPU per request, us |")
    print("|---|---|---|---|---|---|---|")
    for server in SERVERS:
        recs = points[server][d]
        cells = [
            spread(recs, "rr", "delay_ns", "p50", scale=1e-6, spec="{:.2f}"),
            spread(recs, "rr", "delay_ns", "mean", scale=1e-6, spec="{:.2f}"),
            spread(recs, "rr", "delay_ns", "p99", scale=1e-6, spec="{:.2f}"),
            spread(recs, "rr", "jitter_percent", spec="{:.1f}"),
            spread(recs, "rr", "per_request", "cpu_s", "client", scale=1e6, spec="{:,.0f}"),
            spread(recs, "rr", "per_request", "cpu_s", "machine", scale=1e6, spec="{:,.0f}"),
        ]
        print(f"| {server} | " + " | ".join(cells) + " |")
    print(f"\nruns: {runs_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
