#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: what `qprof run --stack quic` reaches here, and how much of
the CPU the workload's own code (outside msquic and the kernel) takes.

Configurations run interleaved (A B A B ...) so drift on this shared
machine hits all alike; each prints median and spread. The workload's
share comes from `perf record -a` over part of one run per topology,
counting samples whose DSO is qprof-wl itself.

USAGE: benchmarks/quic_speed.py [--repeat N] [--duration S]
EXAMPLE OUTPUT:
  netns     lowlat   tput 7.41 Gbit/s (6.9-7.6)  system 1.99 ns/B  ...
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QPROF = [str(REPO / ".venv" / "bin" / "qprof")]
CONFIGS = [
    ("netns", "lowlat"),
    ("loopback", "lowlat"),
    ("netns", "maxtput"),
    ("loopback", "maxtput"),
]


def qprof_run(topology, profile, duration_s, runs_dir, port):
    r = subprocess.run(
        QPROF
        + [
            "run",
            "--json",
            "--topology",
            topology,
            "--exec-profile",
            profile,
            "--duration",
            f"{duration_s}s",
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "QPROF_RUNS_DIR": runs_dir},
    )
    if r.returncode != 0:
        sys.exit(f"qprof run failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def workload_share(topology, runs_dir, port):
    """Share of all samples, and of the workload processes' samples, in qprof-wl's own code."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        run = subprocess.Popen(
            QPROF + ["run", "--json", "--topology", topology, "--duration", "6s", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            env={**os.environ, "QPROF_RUNS_DIR": runs_dir},
        )
        time.sleep(3)  # past the handshake and warm-up
        subprocess.run(
            ["perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-a", "-o", str(data), "--", "sleep", "3"],
            check=True,
            stderr=subprocess.DEVNULL,
        )
        run.wait()
        rep = subprocess.run(
            [
                "perf",
                "report",
                "-i",
                str(data),
                "--no-children",
                "--sort",
                "comm,dso",
                "--stdio",
                "-F",
                "overhead,comm,dso",
            ],
            capture_output=True,
            text=True,
        ).stdout
    total = wl_total = wl_own = 0.0
    for line in rep.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        pct, comm, dso = line.split(None, 2)
        pct = float(pct.rstrip("%"))
        total += pct
        if comm == "qprof-wl":
            wl_total += pct
        if dso.strip() == "qprof-wl":
            wl_own += pct
    return wl_own / total, wl_own / wl_total if wl_total else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as runs_dir:
        results = {c: [] for c in CONFIGS}
        for i in range(args.repeat):
            for c in CONFIGS:
                results[c].append(qprof_run(*c, args.duration, runs_dir, 24500 + i))
        print(
            f"{'TOPOLOGY':9} {'PROFILE':8} {'Gbit/s median (min-max)':>24} {'client ns/B':>11} "
            f"{'server ns/B':>11} {'system ns/B':>11}"
        )
        for (topo, prof), recs in results.items():
            tput = [r["throughput_gbps"] for r in recs]
            med = lambda side: statistics.median(r["cpu"][side]["ns_per_byte"]["total"] for r in recs)
            print(
                f"{topo:9} {prof:8} {statistics.median(tput):12.2f} ({min(tput):.2f}-{max(tput):.2f})"
                f" {med('client'):11.3f} {med('server'):11.3f} {med('system'):11.3f}"
            )
        for topo in ("netns", "loopback"):
            of_all, of_wl = workload_share(topo, runs_dir, 24600)
            print(
                f"{topo}: workload's own code {of_all * 100:.2f}% of all samples, "
                f"{of_wl * 100:.2f}% of the workload processes' samples"
            )


if __name__ == "__main__":
    main()
