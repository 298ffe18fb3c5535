#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: a server run through --server-cmd against the same server
built in, and msquic's secnetperf as the server of a qprof run.

Every round runs each case once, in an order that rotates from round to
round: qprof run --stack S --direction down (the perf protocol, qprof's
default), its server qprof-wl's S transport (a) as qprof starts it and
(b) as a plain program through --server-cmd, S's qprof-wl client asking
for the bytes either way. The two differ only in how qprof starts and
stops the server and in what it reads of it (no marks, no report), so
each side's CPU per byte should agree within the rounds' spread; the
record's own instruments measure both, the default probes and sampling
on (their cost is in both alike).

With --secnetperf PATH, a third case: secnetperf's server
(-bind:{addr}:{port}) against --stack quic's client (msquic's, the only
one of qprof's besides ngtcp2's that takes secnetperf 2.5.1's certificate;
RESULTS.md says why). secnetperf is msquic's tool, in msquic's repository
only: build it by hand and pass its path; qprof never downloads it. It
finds its libmsquic.so by its own RUNPATH.

USAGE: .venv/bin/python benchmarks/external_server.py [--rounds N] [--duration S] [--stack S]
       [--secnetperf PATH]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from median_range import spread

from fidelity import QPROF, REPO

WL = f"{REPO / 'build' / 'bin' / 'qprof-wl'} --role server --addr {{addr}} --port {{port}}"


def record(stack: str, server_cmd, duration: float, runs_dir: str) -> dict:
    cmd = ["--server-cmd", server_cmd] if server_cmd else []
    r = subprocess.run(
        [*QPROF.split(), "run", "--json", "--stack", stack, "--direction", "down", "--duration", f"{duration}s", *cmd],
        capture_output=True,
        text=True,
        env={**os.environ, "QPROF_RUNS_DIR": runs_dir},
    )
    if r.returncode != 0:
        sys.exit(f"qprof run --stack {stack} {' '.join(cmd)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--stack", default="quic")
    ap.add_argument("--secnetperf")
    a = ap.parse_args()
    cases = {
        "built in": None,
        # The flags a run gives its own server (endpoints.workload_argv), so the two differ in how they start only.
        "--server-cmd qprof-wl": f"{WL} --stack {a.stack} --cert {{cert}} --key {{key}} --proto {{alpn}}"
        + " --direction down --io-size 65536"
        + (" --exec-profile lowlat" if a.stack == "quic" else ""),
    }
    if a.secnetperf:
        cases["--server-cmd secnetperf"] = f"{a.secnetperf} -bind:{{addr}}:{{port}} -exec:lowlat"
    recs = {name: [] for name in cases}
    with tempfile.TemporaryDirectory(prefix="qprof-bench-ext-") as runs_dir:
        for k in range(a.rounds):
            names = list(cases)
            names = names[k % len(names) :] + names[: k % len(names)]
            for name in names:
                rec = record(
                    a.stack if name != "--server-cmd secnetperf" else "quic", cases[name], a.duration, runs_dir
                )
                recs[name].append(rec)
                print(
                    f"round {k + 1} {name}: {rec['throughput_gbps']:.2f} Gbit/s, ns/B client "
                    f"{rec['cpu']['client']['ns_per_byte']['oncpu']:.3f} server "
                    f"{rec['cpu']['server']['ns_per_byte']['oncpu']:.3f}",
                    file=sys.stderr,
                )
    head = f"server ({a.stack} client, down, {a.duration:g} s, {a.rounds} rounds)"
    print(f"| {head} | Gbit/s | client ns/B | server ns/B | verification |")
    print("|---|---|---|---|---|")
    for name, rs in recs.items():
        cells = [
            spread(rs, "throughput_gbps", spec="{:.2f}"),
            spread(rs, "cpu", "client", "ns_per_byte", "oncpu", spec="{:.3f}"),
            spread(rs, "cpu", "server", "ns_per_byte", "oncpu", spec="{:.3f}"),
            ", ".join(sorted({r["verification"] for r in rs})),
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
