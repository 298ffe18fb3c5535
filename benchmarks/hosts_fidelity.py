# SPDX-License-Identifier: GPL-2.0-only
"""Does a run with its server on another host measure what a run between
two namespaces measures? Interleaved pairs on one machine: `qprof run`
between its own two namespaces, and `qprof run --server` against a host
made on this machine (tests/sshhosts.py: a namespace with its own sshd),
the client in this machine's namespace. Both are a veth between two
network namespaces of one kernel; what differs is the path a run on hosts
takes to measure: its instruments started and read over SSH, each side's
probes and perf a set of their own (so two of each run at once on one
kernel), each host's edge read by its agent.

Reported per stack: the median over the pairs of hosts/netns, with a 95%
bootstrap interval, for the throughput and each side's and the machine's
CPU per byte; and the hosts runs' clock offset, its uncertainty and the
windows' skew.

    flock /tmp/qprof-machine.lock .venv/bin/python benchmarks/hosts_fidelity.py --pairs 8
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
sys.path.insert(0, str(REPO / "tests"))

from probe_overhead import median_interval  # noqa: E402  (benchmarks/, the script's own folder)

from sshhosts import SshTestHost  # noqa: E402

PYTHON = str(REPO / ".venv" / "bin" / "python")
FIGURES = {
    "throughput": lambda r: r["throughput_gbps"],
    "client ns/B": lambda r: r["cpu"]["client"]["ns_per_byte"]["oncpu"],
    "server ns/B": lambda r: r["cpu"]["server"]["ns_per_byte"]["oncpu"],
    "system ns/B": lambda r: r["cpu"]["system"]["ns_per_byte"]["total"],
}


def run(args, runs_dir):
    env = {**os.environ, "QPROF_RUNS_DIR": str(runs_dir)}
    r = subprocess.run([PYTHON, "-m", "qprof", "run", "--json", *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"qprof run {' '.join(args)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--duration", default="5s")
    ap.add_argument("--stacks", default="quic,tcp-tls")
    ap.add_argument(
        "--bare",
        action="store_true",
        help="both runs without probes or perf (--probes none --sample-hz 0): the data path alone",
    )
    a = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="qprof-hosts-fidelity-"))
    with SshTestHost(scratch / "host") as host:
        remote = ["--server", host.destination, "--ssh-config", str(host.ssh_config)]
        for stack in a.stacks.split(","):
            base = ["--stack", stack, "-d", a.duration] + (["--probes", "none", "--sample-hz", "0"] if a.bare else [])
            ratios = {k: [] for k in FIGURES}
            clocks, skews = [], []
            for i in range(a.pairs):
                order = [("netns", []), ("hosts", remote)]
                if i % 2:
                    order.reverse()
                got = {name: run(base + extra, scratch / "runs") for name, extra in order}
                for k, f in FIGURES.items():
                    ratios[k].append(f(got["hosts"]) / f(got["netns"]))
                clocks.append(got["hosts"]["hosts"]["server"]["clock"])
                skews.append(got["hosts"]["hosts"]["skew_s"])
            print(f"{stack}: {a.pairs} interleaved pairs of {a.duration}, hosts / netns (median, 95% interval)")
            for k, rs in ratios.items():
                m, lo, hi = median_interval(rs)
                print(f"  {k:<12} {m:.3f} ({lo:.3f}-{hi:.3f})")
            offsets = [c["offset_ns"] / 1e3 for c in clocks]
            bounds = [c["uncertainty_ns"] / 1e3 for c in clocks]
            print(
                f"  clock offset {statistics.median(offsets):+.1f} us "
                f"(range {min(offsets):+.1f} to {max(offsets):+.1f}),"
                f" uncertainty median {statistics.median(bounds):.1f} us; window skew median "
                f"{statistics.median(skews) * 1e3:.2f} ms, max {max(skews) * 1e3:.2f} ms"
            )
    print(f"(runs in {scratch / 'runs'})")


if __name__ == "__main__":
    main()
