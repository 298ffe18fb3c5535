#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: the QUIC performance protocol (--proto perf), against qprof's
own protocol and against msquic's secnetperf.

Two networks namespaces joined by veth (qprof's own Topology), every
round running each case once, in an order that rotates from round to
round.

Part 1, always: what the protocol costs. qprof run --stack S --direction
D, --proto qprof against --proto perf, probes and sampling off: the
record's throughput and the machine's CPU per byte over the window after
the warm-up. The two differ on the wire only in an up stream being
bidirectional (perf's answer is its FIN) and a timed download ending in
the client's abort rather than the server's FIN.

Part 2, with --secnetperf PATH: the four pairings of a secnetperf and a
qprof-wl (--stack quic --proto perf) as client and server, each direction,
timed for --duration: secnetperf against itself, secnetperf's client
against qprof-wl's server, qprof-wl's client against secnetperf's server,
and qprof-wl against itself. Each process's own CPU is its rusage (user +
system of all its threads, its whole life, by wait4; the server's less
what it had used before the client started), over the bytes the
receiving side counted (secnetperf's client prints its upload's or its
download's; qprof-wl's client reports what it sent or checked), so both
sides' CPU per byte include the handshake and slow start alike. The
throughput is those bytes over the client's whole run. secnetperf's
server runs with -cipher:1 (AES-128-GCM, qprof's AEAD) and both with
-exec:lowlat (qprof-wl's default profile); secnetperf runs on qprof's own
libmsquic.so, so both sides' library is one build. Its client takes
-inctarget:0 (else it adds a worker number to the server's name).

secnetperf is msquic's own perf tool, in msquic's repository only: build
it by hand at the commit of qprof's msquic (the crate's, 2.5.1) and pass
--secnetperf PATH; qprof never downloads it. Only qprof-wl's msquic and
ngtcp2 clients take secnetperf 2.5.1's server certificate, whose X.509
version field says v4 (msquic fixed it after 2.5.1, #6259); its client
takes every qprof-wl server (tests/test_wl_perf.py holds every pair of
qprof's libraries and an aioquic peer).

USAGE: .venv/bin/python benchmarks/perf_protocol.py [--rounds N] [--duration S] [--stacks LIST]
       [--secnetperf PATH]
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

from qprof.collectors import endpoints
from qprof.collectors.topology import Topology

from fidelity import QPROF, REPO, qprof_record

WL = str(REPO / "build" / "bin" / "qprof-wl")
PORT = 4433
DIRECTIONS = ("up", "down")


def cpu_s(pid: int) -> float:
    """A child's CPU over its whole life, all its threads: wait4's rusage."""
    _, _, ru = os.wait4(pid, 0)
    return ru.ru_utime + ru.ru_stime


def cpu_so_far_s(pid: int) -> float:
    """A running process's CPU so far, all its threads (/proc/PID/stat's utime and stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def secnetperf_server(topo, path, env):
    return subprocess.Popen(
        topo.server.command([path, "-exec:lowlat", "-cipher:1", f"-bind:{topo.server.addr}:{PORT}"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def qprof_server(topo, cert, direction):
    argv = [WL, "--stack", "quic", "--role", "server", "--addr", topo.server.addr, "--port", str(PORT)]
    argv += ["--proto", "perf", "--direction", direction, "--verify", "size", "--cert", str(cert[0])]
    argv += ["--key", str(cert[1])]
    return subprocess.Popen(topo.server.command(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def secnetperf_client(topo, path, env, direction, duration):
    argv = [path, f"-target:{topo.server.addr}", f"-port:{PORT}", "-inctarget:0", "-exec:lowlat"]
    argv += [f"-{direction}:{duration:g}s", "-pctput:1"]
    return subprocess.Popen(topo.client.command(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)


def qprof_client(topo, direction, duration):
    argv = [WL, "--stack", "quic", "--role", "client", "--addr", topo.server.addr, "--port", str(PORT)]
    argv += ["--proto", "perf", "--direction", direction, "--verify", "size"]
    argv += ["--duration-ms", str(int(duration * 1000))]
    return subprocess.Popen(topo.client.command(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def client_bytes(who: str, out: str, direction: str) -> int:
    if who == "secnetperf":
        m = re.search(rf"{'Upload' if direction == 'up' else 'Download'} (\d+) bytes @", out)
        if not m:
            sys.exit(f"secnetperf printed no result: {out.strip()[-300:]}")
        return int(m.group(1))
    done = [e for e in map(json.loads, out.splitlines()) if e.get("event") == "done"]
    if not done or done[0]["exit_code"] != 0:
        sys.exit(f"qprof-wl's client failed: {out.strip()[-300:]}")
    return done[0]["sent_bytes" if "sent_bytes" in done[0] else "app_bytes"]


def pairing(topo, path, env, cert, client: str, server: str, direction: str, duration: float) -> dict:
    """One run of a client against a server: bytes, throughput, each side's CPU per byte."""
    srv = secnetperf_server(topo, path, env) if server == "secnetperf" else qprof_server(topo, cert, direction)
    try:
        time.sleep(0.5)
        # The server's start (secnetperf's makes an RSA key for its certificate) is not the transfer's.
        server_start_cpu = cpu_so_far_s(srv.pid)
        t0 = time.monotonic()
        cli = (
            secnetperf_client(topo, path, env, direction, duration)
            if client == "secnetperf"
            else qprof_client(topo, direction, duration)
        )
        out = cli.stdout.read()
        out = out.decode() if isinstance(out, bytes) else out
        client_cpu = cpu_s(cli.pid)
        wall = time.monotonic() - t0
        cli.returncode = 0
        if server == "secnetperf":
            srv.kill()  # it serves until stopped; its rusage stands
        server_cpu = cpu_s(srv.pid) - server_start_cpu
        srv.returncode = 0
    finally:
        for p in (srv,):
            if p.returncode is None:
                p.kill()
                p.wait()
    nbytes = client_bytes(client, out, direction)
    return {
        "bytes": nbytes,
        "gbps": nbytes * 8 / wall / 1e9,
        "client_ns_per_byte": client_cpu * 1e9 / nbytes,
        "server_ns_per_byte": server_cpu * 1e9 / nbytes,
    }


def med(xs, spec="{:.3f}") -> str:
    return f"{spec.format(statistics.median(xs))} ({spec.format(min(xs))}-{spec.format(max(xs))})"


def part1(args, runs_dir) -> None:
    jobs = [(s, d, p) for s in args.stacks.split(",") for d in DIRECTIONS for p in ("qprof", "perf")]
    got = {j: [] for j in jobs}
    for rnd in range(args.rounds):
        for job in jobs[rnd % len(jobs) :] + jobs[: rnd % len(jobs)]:
            stack, direction, proto = job
            rec = qprof_record(stack, ["--direction", direction, "--proto", proto], args.duration, runs_dir, QPROF)
            got[job].append((rec["throughput_gbps"], rec["cpu"]["system"]["ns_per_byte"]["total"]))
    print("\n| stack | direction | protocol | Gbit/s | machine ns/B |")
    print("|---|---|---|---|---|")
    for (stack, direction, proto), xs in got.items():
        print(f"| {stack} | {direction} | {proto} | {med([x[0] for x in xs], '{:.2f}')} | {med([x[1] for x in xs])} |")


def part2(args) -> None:
    env = {**os.environ, "LD_LIBRARY_PATH": str(REPO / "build" / "msquic" / "lib")}
    ends = ("secnetperf", "qprof-wl")
    jobs = [(c, s, d) for d in DIRECTIONS for c in ends for s in ends]
    got = {j: [] for j in jobs}
    with tempfile.TemporaryDirectory() as tmp, Topology("netns", f"pp{os.getpid() % 10000}") as topo:
        cert = endpoints.make_certificate(Path(tmp))
        for rnd in range(args.rounds):
            for job in jobs[rnd % len(jobs) :] + jobs[: rnd % len(jobs)]:
                client, server, direction = job
                got[job].append(pairing(topo, args.secnetperf, env, cert, client, server, direction, args.duration))
    print("\n| direction | client | server | Gbit/s | client ns/B | server ns/B |")
    print("|---|---|---|---|---|---|")
    for (client, server, direction), xs in got.items():
        cells = [med([x[k] for x in xs], s) for k, s in (("gbps", "{:.2f}"), ("client_ns_per_byte", "{:.3f}"))]
        cells.append(med([x["server_ns_per_byte"] for x in xs]))
        print(f"| {direction} | {client} | {server} | {' | '.join(cells)} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--stacks", default="quic,quinn", help="part 1's stacks")
    ap.add_argument("--secnetperf", help="path of a secnetperf built from msquic 2.5.1 (part 2)")
    ap.add_argument("--skip-part1", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (namespaces)")
    if not args.skip_part1:
        with tempfile.TemporaryDirectory() as runs_dir:
            part1(args, runs_dir)
    if args.secnetperf:
        part2(args)
    else:
        print("no --secnetperf: the pairings with secnetperf not run (see the docstring)")


if __name__ == "__main__":
    main()
