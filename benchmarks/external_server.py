#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: a side run through --server-cmd or --client-cmd against
the same side built in, and msquic's secnetperf in that side's place.

Every round runs each case once, in an order that rotates from round to
round: qprof run --stack S (the perf protocol, qprof's default), --role
server: --direction down, its server qprof-wl's S transport (a) as qprof
starts it and (b) as a plain program through --server-cmd, S's qprof-wl
client asking for the bytes either way; --role client: --direction up,
the client so (--client-cmd), S's qprof-wl server counting. The two
differ only in how qprof starts and stops the side and in what it reads
of it (no marks, no report), and the program is given the flags a run
gives its own side, so each side's CPU per byte should agree within the
rounds' spread; the record's own instruments measure both, the default
probes and sampling on (their cost is in both alike).

--role pair: a program pair (--client-cmd and --server-cmd both,
--stack external), qprof-wl's S transport as both programs and, with
--secnetperf, secnetperf as both (its client -down:{duration_ms}ms),
beside the same download built in. A pair's bytes are the UDP payload
its client's receive calls took (the syscalls probe), so every case's
CPU is also given per such byte (the "per payload" columns), which is
what the pair's own ns/B are.

With --secnetperf PATH, a third case: secnetperf in that place, its
server (-bind:{addr}:{port}) against --stack quic's client (msquic's,
the only one of qprof's besides ngtcp2's that takes secnetperf 2.5.1's
certificate; RESULTS.md says why), or its client (-target:{addr}
-port:{port} -up:{duration_ms}ms) against msquic's server. secnetperf is
msquic's tool, in msquic's repository only: build it by hand and pass its
path; qprof never downloads it. It finds its libmsquic.so by its own
RUNPATH.

USAGE: .venv/bin/python benchmarks/external_server.py [--rounds N] [--duration S] [--stack S]
       [--role server|client|pair] [--secnetperf PATH]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from median_range import spread

from fidelity import QPROF, REPO

WL = f"{REPO / 'build' / 'bin' / 'qprof-wl'} --addr {{addr}} --port {{port}} --proto {{alpn}} --io-size 65536"


def record(stack: str, role: str, cmd, duration: float, runs_dir: str) -> dict:
    way = "up" if role == "client" else "down"
    if role == "pair":
        ext = ["--client-cmd", cmd[0], "--server-cmd", cmd[1]] if cmd else ["--stack", stack]
    else:
        ext = ["--stack", stack, *([f"--{role}-cmd", cmd] if cmd else [])]
    r = subprocess.run(
        [*QPROF.split(), "run", "--json", "--direction", way, "--duration", f"{duration}s", *ext],
        capture_output=True,
        text=True,
        env={**os.environ, "QPROF_RUNS_DIR": runs_dir},
    )
    if r.returncode != 0:
        sys.exit(f"qprof run --stack {stack} {' '.join(ext)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--stack", default="quic")
    ap.add_argument("--role", choices=("server", "client", "pair"), default="server")
    ap.add_argument("--secnetperf")
    a = ap.parse_args()
    role, way = a.role, "up" if a.role == "client" else "down"

    def wl(side: str) -> str:
        """The flags a run gives its own side (endpoints.workload_argv), so the two differ in how they start only."""
        out = f"{WL} --stack {a.stack} --role {side} --direction {way}" + (
            " --exec-profile lowlat" if a.stack == "quic" else ""
        )
        if side == "client" and role == "pair":
            out += " --verify size"  # its server, a program too, sends no pattern of qprof's
        return out + (" --cert {cert} --key {key}" if side == "server" else " --duration-ms {duration_ms}")

    sec_server = f"{a.secnetperf} -bind:{{addr}}:{{port}} -exec:lowlat"
    sec_client = f"{a.secnetperf} -target:{{addr}} -port:{{port}} -inctarget:0 -exec:lowlat -{way}:{{duration_ms}}ms"
    if role == "pair":
        cases = {"built in": None, "pair qprof-wl": (wl("client"), wl("server"))}
        if a.secnetperf:
            cases["pair secnetperf"] = (sec_client, sec_server)
    else:
        cases = {"built in": None, f"--{role}-cmd qprof-wl": wl(role)}
        if a.secnetperf:
            cases[f"--{role}-cmd secnetperf"] = sec_server if role == "server" else sec_client
    recs = {name: [] for name in cases}
    with tempfile.TemporaryDirectory(prefix="qprof-bench-ext-") as runs_dir:
        for k in range(a.rounds):
            names = list(cases)
            names = names[k % len(names) :] + names[: k % len(names)]
            for name in names:
                stack = "quic" if "secnetperf" in name else a.stack
                rec = record(stack, role, cases[name], a.duration, runs_dir)
                # Each side's CPU per UDP payload byte the receiver's receive calls took (a pair's own unit).
                payload = rec["syscalls"]["server" if way == "up" else "client"]["recv_bytes"]
                rec["per_payload"] = {
                    side: rec["cpu"][side]["oncpu_schedstat_s"] * 1e9 / payload for side in ("client", "server")
                }
                recs[name].append(rec)
                print(
                    f"round {k + 1} {name}: {rec['throughput_gbps']:.2f} Gbit/s, ns/B client "
                    f"{rec['cpu']['client']['ns_per_byte']['oncpu']:.3f} server "
                    f"{rec['cpu']['server']['ns_per_byte']['oncpu']:.3f}",
                    file=sys.stderr,
                )
    other = {"server": "client", "client": "server", "pair": "both sides"}[role]
    head = f"{role} ({a.stack} {other}, {way}, {a.duration:g} s, {a.rounds} rounds)"
    print(
        f"| {head} | Gbit/s | client ns/B | server ns/B | client ns/B per payload | server ns/B per payload "
        "| verification |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, rs in recs.items():
        cells = [
            spread(rs, "throughput_gbps", spec="{:.2f}"),
            spread(rs, "cpu", "client", "ns_per_byte", "oncpu", spec="{:.3f}"),
            spread(rs, "cpu", "server", "ns_per_byte", "oncpu", spec="{:.3f}"),
            spread(rs, "per_payload", "client", spec="{:.3f}"),
            spread(rs, "per_payload", "server", spec="{:.3f}"),
            ", ".join(sorted({r["verification"] for r in rs})),
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
