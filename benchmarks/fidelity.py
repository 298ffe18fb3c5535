#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: are qprof's workloads as efficient as the reference tools?

qprof's verdicts are only as good as its workloads, so each one is run
beside the reference implementation of its stack, on the same machine and
topology (two namespaces, veth, MTU 1500), interleaved: every round runs
each tool once, in an order that rotates from round to round.

  tcp      qprof run --stack tcp      vs  iperf3 (always)
  quic     qprof run --stack quic     vs  secnetperf -exec:lowlat -cipher:1 -up:Ns
  tcp-tls  qprof run --stack tcp-tls  vs  secnetperf -tcp:1 (TLS 1.3 via quictls, 16 KiB records)

Both use AES-128-GCM (secnetperf's -cipher:1; its default lets quictls
choose AES-256-GCM).

--direction down turns every pair round: qprof run --direction down
against secnetperf -down:Ns (its download scenario) and iperf3 -R.

secnetperf is msquic's own perf tool. It is not in the crates.io crate
and qprof never downloads it: build it from msquic's repository at the
tag of qprof's msquic (v2.5.1) and pass --secnetperf PATH. By default it
runs on qprof's own libmsquic.so (LD_LIBRARY_PATH), so both sides use
the same library build; --secnetperf-own-msquic uses the one beside it.

qprof's figures are its own record's (the steady-state window after its
warm-up, probes and sampling off). A reference tool's are taken from
outside: /proc/stat's busy time over the client's whole run, divided by
the bytes the tool reports (iperf3: every interval, none omitted;
secnetperf: the connection's acknowledged bytes), so they include the
handshake and slow start, a small handicap at 10 s.

--qprof-before CMD adds a second qprof (another checkout's, on the same
build) to every round: a change to qprof's own code must leave its
figures where they were, measured side by side, interleaved.

USAGE: .venv/bin/python benchmarks/fidelity.py [--rounds N] [--duration S] [--secnetperf PATH] [--stacks LIST]
       [--qprof-before CMD] [--direction up|down]
(the venv's Python: it makes the namespaces with qprof's own Topology)
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QPROF = str(REPO / ".venv" / "bin" / "qprof")

from qprof.collectors import procfs  # noqa: E402
from qprof.collectors.topology import Topology  # noqa: E402


def busy_s(a, b) -> float:
    d = b - a
    return d.user_s + d.nice_s + d.system_s + d.irq_s + d.softirq_s + d.steal_s


def run_qprof(stack: str, duration: float, runs_dir: str, qprof: str = QPROF, direction: str = "up") -> tuple:
    way = ["--direction", direction] if direction != "up" else []
    r = subprocess.run(
        [
            *qprof.split(),
            "run",
            "--json",
            *way,
            "--stack",
            stack,
            "--duration",
            f"{duration}s",
            "--probes",
            "none",
            "--sample-hz",
            "0",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "QPROF_RUNS_DIR": runs_dir},
    )
    if r.returncode != 0:
        sys.exit(f"qprof run --stack {stack} failed: {r.stderr.strip()}")
    rec = json.loads(r.stdout)
    return rec["throughput_gbps"], rec["cpu"]["system"]["ns_per_byte"]["total"]


def _served(topo, server_argv, client_argv, env=None, settle_s=0.5, timeout_s=60.0):
    """Run a server in the server namespace and a client in the client
    namespace; /proc/stat around the client; the client's stdout."""
    server = subprocess.Popen(
        topo.server.command(server_argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        time.sleep(settle_s)
        before = procfs.read_system()
        try:
            r = subprocess.run(
                topo.client.command(client_argv), capture_output=True, text=True, env=env, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            # secnetperf -tcp:1 -down hung (no output, 2+ min) in 1 of its first 3 runs here: the round goes on.
            print(f"{client_argv[0]} did not finish in {timeout_s:g} s; this round has no reference", flush=True)
            return None, None
        after = procfs.read_system()
    finally:
        server.kill()
        server.wait()
    if r.returncode != 0:
        sys.exit(f"{client_argv[0]} failed: {r.stderr.strip()[-300:]}")
    return r.stdout, busy_s(before, after)


def run_iperf3(topo, duration: float, direction: str = "up") -> tuple:
    reverse = ["-R"] if direction == "down" else []
    out, busy = _served(
        topo,
        ["iperf3", "-s", "-1"],
        ["iperf3", "-c", topo.server.addr, "-t", str(duration), "-J", *reverse],
        timeout_s=duration + 60,
    )
    if out is None:
        return None
    j = json.loads(out)
    nbytes = sum(i["sum"]["bytes"] for i in j["intervals"])
    gbps = j["end"]["sum_received"]["bits_per_second"] / 1e9
    return gbps, busy * 1e9 / nbytes


def run_secnetperf(topo, duration: float, path: str, env, tcp: bool, direction: str = "up") -> tuple:
    # The server's -cipher:1 = QUIC_ALLOWED_CIPHER_SUITE_AES_128_GCM_SHA256,
    # qprof's AEAD (a client given it prints nothing); left alone, quictls
    # prefers AES-256-GCM.
    common = ["-exec:lowlat"] + (["-tcp:1"] if tcp else [])
    out, busy = _served(
        topo,
        [path, *common, "-cipher:1"],
        [path, f"-target:{topo.server.addr}", *common, f"-{direction}:{duration:g}s", "-pctput:1"],
        env=env,
        timeout_s=duration + 60,
    )
    if out is None:
        return None
    m = re.search(rf"{'Upload' if direction == 'up' else 'Download'} (\d+) bytes @ (\d+) kbps", out)
    if not m:
        sys.exit(f"secnetperf printed no result: {out.strip()[-300:]}")
    nbytes, kbps = int(m.group(1)), int(m.group(2))
    return kbps / 1e6, busy * 1e9 / nbytes


def summary(values):
    return statistics.median(values), min(values), max(values)


def pair_row(a, b) -> str:
    """Throughput and ns/B of a against b: each median (min-max), and their ratio."""
    at, bt = summary([x[0] for x in a]), summary([x[0] for x in b])
    ac, bc = summary([x[1] for x in a]), summary([x[1] for x in b])
    return (
        f"{at[0]:6.2f} ({at[1]:.2f}-{at[2]:.2f}) {bt[0]:6.2f} ({bt[1]:.2f}-{bt[2]:.2f}) {at[0] / bt[0]:6.3f} "
        f"{ac[0]:6.3f} ({ac[1]:.3f}-{ac[2]:.3f}) {bc[0]:6.3f} ({bc[1]:.3f}-{bc[2]:.3f}) {ac[0] / bc[0]:6.3f}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--stacks", default="tcp,quic,tcp-tls")
    ap.add_argument("--secnetperf", help="path of a secnetperf built from msquic v2.5.1")
    ap.add_argument(
        "--secnetperf-own-msquic", action="store_true", help="run secnetperf on the libmsquic beside it, not qprof's"
    )
    ap.add_argument("--qprof-before", metavar="CMD", help="another qprof to run beside this one, interleaved")
    ap.add_argument("--direction", choices=("up", "down"), default="up", help="down: the server sends, in every tool")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (namespaces)")
    stacks = [s for s in args.stacks.split(",") if s]
    if args.secnetperf is None:
        skipped = [s for s in stacks if s != "tcp"]
        if skipped:
            print(f"no --secnetperf: {', '.join(skipped)} not compared (secnetperf is msquic's; see the docstring)")
        if not args.qprof_before:
            stacks = [s for s in stacks if s == "tcp"]
    env = dict(os.environ)
    if args.secnetperf and not args.secnetperf_own_msquic:
        env["LD_LIBRARY_PATH"] = str(REPO / "build" / "msquic" / "lib")
    refs = {"tcp": "iperf3", "quic": "secnetperf", "tcp-tls": "secnetperf -tcp:1"}
    got = {s: {"qprof": [], "ref": [], "before": []} for s in stacks}
    has_ref = {s: s == "tcp" or args.secnetperf is not None for s in stacks}
    whos = ("qprof", "ref") + (("before",) if args.qprof_before else ())
    jobs = [(s, who) for s in stacks for who in whos if who != "ref" or has_ref[s]]
    with tempfile.TemporaryDirectory() as runs_dir:
        for rnd in range(args.rounds):
            order = jobs[rnd % len(jobs) :] + jobs[: rnd % len(jobs)]
            for stack, who in order:
                if who == "qprof":
                    res = run_qprof(stack, args.duration, runs_dir, direction=args.direction)
                elif who == "before":
                    res = run_qprof(stack, args.duration, runs_dir, args.qprof_before, args.direction)
                else:
                    with Topology("netns", f"fd{os.getpid() % 10000}") as topo:
                        if stack == "tcp":
                            res = run_iperf3(topo, args.duration, args.direction)
                        else:
                            res = run_secnetperf(
                                topo, args.duration, args.secnetperf, env, stack == "tcp-tls", args.direction
                            )
                if res is None:
                    continue
                got[stack][who].append(res)
                print(
                    f"round {rnd + 1}: {stack:8} {refs[stack] if who == 'ref' else who:18} "
                    f"{res[0]:6.2f} Gbit/s {res[1]:.3f} ns/B",
                    flush=True,
                )
    print(
        f"\n{args.rounds} rounds of {args.duration:g} s, direction {args.direction}, netns + veth, interleaved; "
        "median (min-max)"
    )
    print(
        f"{'stack':8} {'reference':18} {'qprof Gbit/s':>20} {'ref Gbit/s':>20} {'ratio':>6}"
        f" {'qprof ns/B':>20} {'ref ns/B':>20} {'ratio':>6}"
    )
    for s in (s for s in stacks if has_ref[s]):
        print(f"{s:8} {refs[s]:18} {pair_row(got[s]['qprof'], got[s]['ref'])}")
    if args.qprof_before:
        print(f"\nthis qprof against --qprof-before ({args.qprof_before}), same rounds")
        print(
            f"{'stack':8} {'Gbit/s':>20} {'before Gbit/s':>20} {'ratio':>6}"
            f" {'ns/B':>20} {'before ns/B':>20} {'ratio':>6}"
        )
        for s in stacks:
            print(f"{s:8} {pair_row(got[s]['qprof'], got[s]['before'])}")


if __name__ == "__main__":
    main()
