#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: what HTTP costs per request, over each transport, beside the
bare messages: rr's closed loop (secnetperf's rps shape: --conns
connections, --streams requests in flight on each), 128-byte requests and
responses, on the host.

Configurations (each one `qprof run`, --repeat rounds, the order within a
round rotating so each takes each place):
  quic          bare messages, a stream per request
  quic+h3       HTTP/3 (nghttp3)
  tcp-tls       bare messages, one request in flight per connection
  tcp-tls+h1    HTTP/1.1 (http-parser), the same connections
  tcp-tls+h2    HTTP/2 (nghttp2), --streams in flight on each connection
Printed, the median (min-max) of the rounds: requests per second, CPU per
request (client, server, machine; schedstat and /proc/stat), the flame
graphs' HTTP framing per request per side, and the wire bytes per request
and per response (the packets probe).

USAGE: .venv/bin/python benchmarks/http_cost.py [--repeat 5] [--duration 5s] [--conns 4] [--streams 4]
       [--sample-hz 499] [--runs-dir DIR]
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
CONFIGS = {
    "quic": ["--stack", "quic"],
    "quic+h3": ["--stack", "quic", "--app", "h3"],
    "tcp-tls": ["--stack", "tcp-tls"],
    "tcp-tls+h1": ["--stack", "tcp-tls", "--app", "h1"],
    "tcp-tls+h2": ["--stack", "tcp-tls", "--app", "h2"],
}


def run(args, name: str, runs_dir: str) -> dict:
    argv = [QPROF, "run", "--json", *CONFIGS[name], "--pattern", "rr", "--rr-mode", "closed", "--payload", "128"]
    argv += ["--conns", str(args.conns), "--streams", str(args.streams), "--duration", args.duration]
    argv += ["--sample-hz", str(args.sample_hz), "--runs-dir", runs_dir]
    print("#", " ".join(argv[1:]), file=sys.stderr, flush=True)
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qprof run failed (exit {r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--duration", default="5s")
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--sample-hz", type=int, default=499)
    ap.add_argument("--runs-dir", default=None)
    args = ap.parse_args()
    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="qprof-http-")
    names = list(CONFIGS)
    recs = {n: [] for n in names}
    for k in range(args.repeat):
        for n in names[k % len(names) :] + names[: k % len(names)]:
            recs[n].append(run(args, n, runs_dir))
    print(
        "| | requests/s | client CPU/request, us | server CPU/request, us | machine CPU/request, us "
        "| client HTTP framing, us | server HTTP framing, us | wire bytes per request | per response |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in names:
        rs = recs[n]
        cells = [
            spread(rs, "rr", "requests_per_s", spec="{:,.0f}"),
            *(spread(rs, "rr", "per_request", "cpu_s", s, scale=1e6) for s in ("client", "server", "machine")),
            *(
                spread(rs, "rr", "flame_ns_per_request", s, "categories", "HTTP framing", scale=1e-3, spec="{:.2f}")
                for s in ("client", "server")
            ),
            spread(rs, "rr", "data_volume", "client_to_server", "wire_bytes", spec="{:,.0f}"),
            spread(rs, "rr", "data_volume", "server_to_client", "wire_bytes", spec="{:,.0f}"),
        ]
        print(f"| {n} | " + " | ".join(cells) + " |")
    print(f"\nruns: {runs_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
