#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: what qprof's instruments cost, switched on and off inside one transfer.

benchmarks/probe_overhead.py compares whole runs, with and without the
instruments; on a shared VM whose speed drifts by 10-20% between runs
(and with each run's own thread placement), 30 pairs of runs could not
resolve a 2% cost. This one runs a single long `qprof run --probes none
--sample-hz 0` and, beside it, switches the instruments under test on
and off in short alternating segments (ON OFF, OFF ON, ...), so each
pair of segments shares the transfer's placement and the machine's
moment. Per segment it reads:

  - the client's veth: bytes sent (/proc/PID/net/dev of the client
    workload, in its namespace), so throughput;
  - the machine's busy CPU (/proc/stat: user, nice, system, irq,
    softirq; steal apart), so machine CPU ns per byte, the instruments'
    own processes included.

The instruments are the ones a plain `qprof run` starts, started the same
way: each probe tool on the run's two workload pids (and, for packets,
its two veths), `perf record -a` on cpu-clock with DWARF call graphs at
--sample-hz, started once, disabled, and switched on and off through its
control fifo as qprof does at a window's edges. A probe is attached for
an ON segment and detached after it, outside the measured part (--settle
before each measured part).

Prints each pair's on/off ratio, then the median of the pairs with a
95% bootstrap interval for throughput and machine ns/B.

USAGE: benchmarks/observer_toggle.py [--stack S] [--what LIST] [--against LIST] [--pairs N] [--segment S] [--settle S]
                                     [--sample-hz HZ] [--call-graph dwarf|fp|none] [--no-bpf-stats]
                                     [--run-args ARGS] [--runs N] [--json FILE]

--what (on) and --against (off, default none): each a comma list of
syscalls, cputhread, packets and perf, or "default" (all four, as a
plain `qprof run`), or "none". --what none against none switches
nothing, so the pairs show the method's own bias and spread (an A/A
test); --what default --against LIST is what the default set costs
beyond LIST, in the same pairs.

Results: RESULTS.md, "The instruments switched on and off inside one
transfer". Needs the machine lock free (it runs a `qprof run`).

EXAMPLES:
    benchmarks/observer_toggle.py --stack quic --what default --pairs 30 --runs 2 --segment 1
    benchmarks/observer_toggle.py --stack tcp --what default --against syscalls,cputhread,perf --pairs 30
    benchmarks/observer_toggle.py --what none --pairs 15    # the method's own spread
    benchmarks/observer_toggle.py --stack tcp --what perf --sample-hz 9 --pairs 30 --segment 1
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QPROF = os.environ.get("QPROF", str(REPO / ".venv" / "bin" / "qprof"))
BIN = REPO / "build" / "bin"
INSTRUMENTS = ("syscalls", "cputhread", "packets", "perf")
DWARF_BYTES = 8192
CALL_GRAPH = {"dwarf": ["--call-graph", f"dwarf,{DWARF_BYTES}"], "fp": ["--call-graph", "fp"], "none": []}


def busy_ticks():
    """(busy, steal) USER_HZ ticks of the whole machine."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = f[:8]
    return user + nice + system + irq + softirq, steal


def tx_bytes(pid: int, ifname: str) -> int:
    for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == ifname:
            return int(rest.split()[8])
    raise SystemExit(f"no {ifname} in /proc/{pid}/net/dev")


def workload_pids(run: subprocess.Popen, timeout_s: float = 60.0) -> dict:
    """role -> pid of the run's qprof-wl processes (descendants of run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if run.poll() is not None:
            raise SystemExit(f"qprof run ended early (exit {run.returncode})")
        found = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if not argv or not argv[0].endswith(b"qprof-wl"):
                continue
            a = [x.decode() for x in argv]
            if "--role" in a:
                found[a[a.index("--role") + 1]] = int(d.name)
        if set(found) == {"client", "server"}:
            return found
        time.sleep(0.1)
    raise SystemExit("the run's workloads did not appear")


def netns_of(pid: int) -> str:
    return subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True, text=True).stdout.strip()


def veth_of(ns: str) -> str:
    links = json.loads(
        subprocess.run(
            ["ip", "-n", ns, "-j", "link", "show", "type", "veth"], capture_output=True, text=True, check=True
        ).stdout
    )
    return links[0]["ifname"]


class Probe:
    """One probe tool attached for a segment: started, ready, then told to exit."""

    def __init__(self, name: str, argv: list):
        self.name = name
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{name} did not start")

    def stop(self):
        try:
            self.proc.stdin.write("exit\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=30)


class Perf:
    """perf record -a, disabled, switched on and off through its control fifo."""

    def __init__(self, hz: int, call_graph: str, tmp: Path):
        self.ctl, self.ack = tmp / "ctl", tmp / "ack"
        os.mkfifo(self.ctl)
        os.mkfifo(self.ack)
        self.proc = subprocess.Popen(
            [
                "perf",
                "record",
                "-q",
                "-a",
                *CALL_GRAPH[call_graph],
                "-e",
                "cpu-clock",
                "-c",
                str(int(round(1e9 / hz))),
                "-D",
                "-1",
                "--control",
                f"fifo:{self.ctl},{self.ack}",
                "-o",
                str(tmp / "perf.data"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.ctl_f = open(self.ctl, "w")
        self.ack_f = open(self.ack, "r")

    def cmd(self, c: str):
        self.ctl_f.write(c + "\n")
        self.ctl_f.flush()
        self.ack_f.readline()

    def stop(self):
        self.ctl_f.close()
        self.proc.send_signal(2)
        self.proc.wait(timeout=300)


def switch_on(what, pids, devs, perf, extra):
    """The instruments of the set what, attached (perf: enabled); what to switch off after."""
    probes = []
    p = ",".join(str(x) for x in pids.values())
    if "syscalls" in what:
        probes.append(Probe("syscalls", [str(BIN / "qprof-syscalls"), "-p", p, "--control", *extra]))
    if "cputhread" in what:
        probes.append(Probe("cputhread", [str(BIN / "qprof-cputhread"), "-p", p, "--control", *extra]))
    if "packets" in what:
        probes.append(
            Probe("packets", [str(BIN / "qprof-packets"), *sum((["-d", d] for d in devs), []), "--control", *extra])
        )
    if "perf" in what:
        perf.cmd("enable")
    return probes, "perf" in what


def switch_off(state, perf):
    probes, perf_on = state
    if perf_on:
        perf.cmd("disable")
    for pr in probes:
        pr.stop()


def measure(pids, ifname, seconds):
    b0, (t0, s0), w0 = tx_bytes(pids["client"], ifname), busy_ticks(), time.monotonic()
    time.sleep(seconds)
    b1, (t1, s1), w1 = tx_bytes(pids["client"], ifname), busy_ticks(), time.monotonic()
    hz = os.sysconf("SC_CLK_TCK")
    nbytes, wall = b1 - b0, w1 - w0
    return {
        "gbps": nbytes * 8 / wall / 1e9,
        "ns_per_byte": (t1 - t0) / hz * 1e9 / nbytes,
        "busy_cpus": (t1 - t0) / hz / wall,
        "steal_cpus": (s1 - s0) / hz / wall,
    }


def interval(xs, n=4000):
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def one_run(args, sets, pairs_out):
    seg = args.settle + args.segment
    duration = int(args.pairs * 2 * (seg + 1.5) + 15)
    with tempfile.TemporaryDirectory(prefix="qprof-toggle-") as tmp:
        run = subprocess.Popen(
            [QPROF, "run", "--stack", args.stack, "--probes", "none", "--sample-hz", "0", "--duration", f"{duration}s"]
            + args.run_args.split(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "QPROF_RUNS_DIR": tmp},
        )
        try:
            pids = workload_pids(run)
            ns = {r: netns_of(p) for r, p in pids.items()}
            ifname = veth_of(ns["client"])
            devs = [f"{veth_of(ns[r])}@{ns[r]}" for r in ("client", "server")]
            perf = Perf(args.sample_hz, args.call_graph, Path(tmp)) if any("perf" in w for w in sets.values()) else None
            # Past the run's start: the transfer at its pace.
            while tx_bytes(pids["client"], ifname) < 1 << 30:
                time.sleep(0.2)
            time.sleep(2)
            for k in range(args.pairs):
                pair = {}
                for state in ("on", "off") if k % 2 == 0 else ("off", "on"):
                    attached = switch_on(sets[state], pids, devs, perf, ["-S"] if args.no_bpf_stats else [])
                    time.sleep(args.settle)
                    pair[state] = measure(pids, ifname, args.segment)
                    switch_off(attached, perf)
                r = {m: pair["on"][m] / pair["off"][m] for m in ("gbps", "ns_per_byte")}
                pairs_out.append({"pair": pair, "ratio": r})
                print(
                    f"  pair {len(pairs_out):3d}: on {pair['on']['gbps']:6.2f} off {pair['off']['gbps']:6.2f} Gbit/s"
                    f" ratio {r['gbps']:.3f}; ns/B ratio {r['ns_per_byte']:.3f}"
                    f" (steal {pair['on']['steal_cpus']:.2f}/{pair['off']['steal_cpus']:.2f})",
                    flush=True,
                )
            if perf:
                perf.stop()
        finally:
            run.terminate()
            run.wait()


def instruments(text: str):
    """The set a --what or --against names, or None if it names something else."""
    if text in ("default", "none"):
        return set(INSTRUMENTS) if text == "default" else set()
    got = set(text.split(","))
    return got if got <= set(INSTRUMENTS) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack", default="quic")
    ap.add_argument("--what", default="default", help="the instruments switched on in the 'on' segments")
    ap.add_argument("--against", default="none", help="the instruments on in the 'off' segments")
    ap.add_argument("--pairs", type=int, default=12, help="pairs of segments per run")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--segment", type=float, default=2.0, help="measured seconds a segment")
    ap.add_argument("--settle", type=float, default=0.5, help="seconds after a switch before measuring")
    ap.add_argument("--sample-hz", type=int, default=99)
    ap.add_argument(
        "--run-args",
        default="",
        help="more `qprof run` options, e.g. '--link rate=6gbit': at a rate the CPUs can exceed, the instruments'"
        " cost is CPU per byte alone, free of the throughput's own swings",
    )
    ap.add_argument("--call-graph", choices=sorted(CALL_GRAPH), default="dwarf", help="perf's (qprof's default: dwarf)")
    ap.add_argument("--no-bpf-stats", action="store_true", help="the probe tools' -S: no run-time statistics")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sets = {"on": instruments(args.what), "off": instruments(args.against)}
    if None in sets.values():
        ap.error(f"--what and --against take default, none or a list of {', '.join(INSTRUMENTS)}")
    pairs = []
    for _ in range(args.runs):
        one_run(args, sets, pairs)
    out = {
        "stack": args.stack,
        "what": sorted(sets["on"]),
        "against": sorted(sets["off"]),
        "sample_hz": args.sample_hz,
        "call_graph": args.call_graph,
        "pairs": pairs,
    }
    for m, label in (("gbps", "throughput on/off"), ("ns_per_byte", "machine ns/B on/off")):
        xs = [p["ratio"][m] for p in pairs]
        lo, hi = interval(xs)
        out[m] = {"median": statistics.median(xs), "ci95": [lo, hi]}
        print(f"{label}: median of {len(xs)} pairs {statistics.median(xs):.3f} (95% {lo:.3f}-{hi:.3f})")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
