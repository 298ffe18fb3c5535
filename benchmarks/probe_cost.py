#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: what each eBPF program of qprof's probes costs per event.

Runs one `qprof run` with all probes and the kernel's BPF statistics on
(sysctl kernel.bpf_stats_enabled=1, restored after), polls `bpftool prog
show -j` during it for the probe programs (by name, loaded after it started),
and prints per program: events (run_cnt), ns per event (run_time_ns /
run_cnt) and the CPU share of the machine they took. The clock is the
kernel's, around each program run; the trampoline that calls it and the
statistics themselves are not in it, so the real cost per event is higher.

USAGE: benchmarks/probe_cost.py [--stack S] [--duration S] [--topology netns|loopback] [--json]

EXAMPLES:
    benchmarks/probe_cost.py --stack tcp --duration 4
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QPROF = str(REPO / ".venv" / "bin" / "qprof")
STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")
POLL_S = 0.2


@contextmanager
def bpf_stats_enabled():
    old = STATS_SYSCTL.read_text().strip()
    STATS_SYSCTL.write_text("1")
    try:
        yield
    finally:
        STATS_SYSCTL.write_text(old)


def program_names():
    """BPF program name -> probe, from probes/NAME.bpf.c (bpftool here cannot name a program's owner)."""
    names = {}
    for src in sorted((REPO / "probes").glob("*.bpf.c")):
        for prog in re.findall(r"BPF_PROG\((\w+)", src.read_text()):
            for n in (prog, prog[:15]):  # bpftool gives the BTF name if it has it, else the kernel's 15 characters
                names[n] = src.name[: -len(".bpf.c")]
    return names


def bpf_progs():
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def probe_progs(names, before):
    """id -> (probe, prog name, run_cnt, run_time_ns) for probe programs loaded since `before`."""
    return {
        p["id"]: (names[p["name"]], p["name"], p.get("run_cnt", 0), p.get("run_time_ns", 0))
        for p in bpf_progs()
        if p["id"] not in before and p.get("name") in names
    }


def poll(stop, names, before, last, seen_s):
    """Keeps the newest reading of every probe program until stop is set."""
    t0 = time.monotonic()
    while not stop.is_set():
        for pid, v in probe_progs(names, before).items():
            last[pid] = v
            seen_s.setdefault(pid, [time.monotonic() - t0, 0])[1] = time.monotonic() - t0
        stop.wait(POLL_S)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stack", default="tcp")
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--topology", default="netns")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("probe_cost.py needs root: it sets kernel.bpf_stats_enabled and loads the probes")
    last, seen_s, stop = {}, {}, threading.Event()
    with tempfile.TemporaryDirectory() as runs_dir, bpf_stats_enabled():
        poller = threading.Thread(
            target=poll, args=(stop, program_names(), {p["id"] for p in bpf_progs()}, last, seen_s), daemon=True
        )
        poller.start()
        r = subprocess.run(
            [
                QPROF,
                "run",
                "--json",
                "--duration",
                f"{args.duration}s",
                "--topology",
                args.topology,
                "--stack",
                args.stack,
                "--probes",
                "syscalls,packets,cputhread",
                "--sample-hz",
                "0",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "QPROF_RUNS_DIR": runs_dir},
        )
        stop.set()
        poller.join()
    if r.returncode != 0:
        sys.exit(f"qprof run failed: {r.stderr.strip()}")
    if not last:
        sys.exit("no probe program was seen in bpftool's list; are the probes built (make probes)?")
    gbps = json.loads(r.stdout)["throughput_gbps"]
    ncpu = os.cpu_count()
    rows = []
    for pid, (probe, name, cnt, ns) in sorted(last.items(), key=lambda kv: -kv[1][3]):
        if not cnt:
            continue
        first, lastseen = seen_s[pid]
        span = max(lastseen - first, POLL_S)
        rows.append(
            {
                "probe": probe,
                "program": name,
                "run_cnt": cnt,
                "ns_per_event": ns / cnt,
                "run_time_ns": ns,
                "cpu_share": ns / (span * 1e9 * ncpu),
            }
        )
    total_share = sum(x["cpu_share"] for x in rows)
    if args.json:
        json.dump(
            {
                "stack": args.stack,
                "topology": args.topology,
                "duration_s": args.duration,
                "throughput_gbps": gbps,
                "programs": rows,
                "cpu_share_total": total_share,
            },
            sys.stdout,
        )
        print()
        return
    print(f"{'probe':<10} {'program':<28} {'events':>10} {'ns/event':>9} {'CPU share':>9}")
    for x in rows:
        print(
            f"{x['probe']:<10} {x['program']:<28} {x['run_cnt']:>10} {x['ns_per_event']:>9.0f} "
            f"{x['cpu_share'] * 100:>8.2f}%"
        )
    print(
        f"{args.stack} over {args.topology}, {args.duration:g} s window at {gbps:.2f} Gbit/s: "
        f"probe programs took {total_share * 100:.2f}% of {ncpu} CPUs"
    )


if __name__ == "__main__":
    main()
