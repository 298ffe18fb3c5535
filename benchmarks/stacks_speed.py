#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: what each stack reaches here, beside iperf3 on the same topology.

Host: tcp, tcp-tls and quic through `qprof run` (probes and stack
sampling on, as by default), tcp once more bare (--probes none
--sample-hz 0: the workload alone), and iperf3 (plain TCP, one stream)
between the same kind of namespaces, interleaved --repeat times; prints
median and spread, and qprof tcp / iperf3 both ways. Guest (--guest):
all four stacks in the QEMU guest, one after another.

USAGE: benchmarks/stacks_speed.py [--repeat N] [--duration S] [--guest]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = str(REPO / ".venv" / "bin" / "python")
HOST_STACKS = ("tcp", "tcp-tls", "quic")
GUEST_STACKS = ("tcp", "tcp-tls", "tcp-ktls", "quic")


def qprof(stack, duration_s, runs_dir, guest=False, extra=()):
    argv = [PY, "-m", "qprof", "run", "--json", "--stack", stack, "--duration", f"{duration_s}s", *extra]
    if guest:
        argv.append("--guest")
    r = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "QPROF_RUNS_DIR": runs_dir})
    if r.returncode != 0:
        sys.exit(f"qprof run --stack {stack} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def iperf3(duration_s):
    """iperf3 -c over qprof's own netns topology; receiver Gbit/s."""
    sys.path.insert(0, str(REPO))
    from qprof.collectors.topology import Topology

    with Topology("netns", "bench" + str(os.getpid() % 10000)) as topo:
        server = subprocess.Popen(
            topo.server.command(["iperf3", "-s", "-1", "-B", topo.server.addr]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            import time

            time.sleep(0.5)
            r = subprocess.run(
                topo.client.command(["iperf3", "-c", topo.server.addr, "-t", str(duration_s), "-O", "1", "-J"]),
                capture_output=True,
                text=True,
            )
            out = json.loads(r.stdout)
            return out["end"]["sum_received"]["bits_per_second"] / 1e9
        finally:
            server.kill()
            server.wait()


def summary(values):
    return f"{statistics.median(values):7.2f} ({min(values):.2f}-{max(values):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--guest", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as runs_dir:
        if args.guest:
            print(f"{'GUEST STACK':12} {'Gbit/s':>8} {'client ns/B':>11} {'server ns/B':>11} {'system ns/B':>11}  kTLS")
            for stack in GUEST_STACKS:
                r = qprof(stack, args.duration, runs_dir, guest=True)
                cpu = r["cpu"]
                print(
                    f"{stack:12} {r['throughput_gbps']:8.3f} {cpu['client']['ns_per_byte']['total']:11.2f} "
                    f"{cpu['server']['ns_per_byte']['total']:11.2f} {cpu['system']['ns_per_byte']['total']:11.2f}"
                    f"  {r.get('transport', {}).get('ktls_label', '-')}"
                )
            return
        res = {s: [] for s in HOST_STACKS + ("tcp bare", "iperf3")}
        for _ in range(args.repeat):
            for stack in HOST_STACKS:
                res[stack].append(qprof(stack, args.duration, runs_dir))
            res["tcp bare"].append(
                qprof("tcp", args.duration, runs_dir, extra=("--probes", "none", "--sample-hz", "0"))
            )
            res["iperf3"].append(iperf3(args.duration))
        print(
            f"{'HOST STACK':10} {'Gbit/s median (min-max)':>24} "
            f"{'client ns/B':>11} {'server ns/B':>11} {'system ns/B':>11}"
        )
        for stack in HOST_STACKS + ("tcp bare",):
            recs = res[stack]
            med = lambda side: statistics.median(r["cpu"][side]["ns_per_byte"]["total"] for r in recs)
            print(
                f"{stack:10} {summary([r['throughput_gbps'] for r in recs]):>24} {med('client'):11.3f} "
                f"{med('server'):11.3f} {med('system'):11.3f}"
            )
        print(f"{'iperf3':10} {summary(res['iperf3']):>24}")
        ip = statistics.median(res["iperf3"])
        for name in ("tcp", "tcp bare"):
            tcp = statistics.median(r["throughput_gbps"] for r in res[name])
            print(f"qprof {name} / iperf3 = {tcp / ip:.3f}")


if __name__ == "__main__":
    main()
