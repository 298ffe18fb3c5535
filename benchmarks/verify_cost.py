#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: what the receiver's content check costs (issue 25).

The receiver checks every byte it gets against the payload pattern
(wl_pattern_check, and through it --pattern rr's wl_rr_rx_feed). `qprof
flame` shows that work as the category "verification"; iperf3's receiver
has none.

The check alone (the default; no root, no transfer): a small driver is
built into a temporary directory with the Makefile's CFLAGS_WL against the
workload's file that defines wl_pattern_check (workloads/wl_common.c), and
calls it as qprof-wl does (through the ifunc: the clone the resolver picks
for this CPU) on buffers of each of --sizes, each just written by a memcpy
as recv's copy or msquic's decryption leaves it. The checks are timed
(CLOCK_MONOTONIC, less the clock's own cost; sizes under 64 KiB as many
buffers as make 64 KiB, written and then checked); a line per size gives the
check's ns per checked byte, median (min-max) of --repeats. The receiver
checks each byte it receives once, so the figure compares with the server's
verification ns/B in a run's flame graph.

--transfers N (root; hold the machine lock, `flock /tmp/qprof-machine.lock`)
then runs N rounds, each in an order that rotates: `qprof run --stack S
--probes none --sample-hz 0` (benchmarks/fidelity.py's measurement) with
qprof-wl as workloads/ builds it, the same with the check linked out
(-Wl,--wrap=wl_pattern_check to a function that returns true, so the
receiver reads nothing it received, as iperf3's), and for tcp iperf3. Both
workloads are built here by the Makefile's own recipe (`make -n` prints
it), beside a copy of the build's other tools. The medians say how much of
qprof's distance to iperf3 is the check.

$QPROF is the qprof command (default .venv/bin/qprof), QPROF_BUILD_DIR the
build whose msquic, probes and tools the transfers use (default build/).

USAGE: benchmarks/verify_cost.py [--sizes LIST] [--bytes N] [--repeats N]
       benchmarks/verify_cost.py --transfers N [--stacks tcp,quic] [--duration S]   (the venv's Python, as root)
"""

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QPROF = os.environ.get("QPROF", str(REPO / ".venv" / "bin" / "qprof"))
BUILD = Path(os.environ.get("QPROF_BUILD_DIR", REPO / "build")).resolve()
WORKLOADS = REPO / "workloads"
# tcp's receive sizes on this host are 512 B to 128 KiB (the buffer is the
# 128 KiB --io-size), quic's one packet's payload (1-2 KiB) to megabytes
# (msquic hands over what its receive buffer holds); 256 B is an rr payload.
SIZES = "256,1280,16K,64K,128K,1M,4M"
PERIOD = 128 << 10  # the pattern's period is --io-size (tcp's); the check computes, never loads, the pattern

DRIVER = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wl.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * argv: period size bytes repeats; prints one JSON object. Buffers of a
 * small size are written and then checked BATCH bytes at a time, so that
 * the clock's own cost stays small beside what it times.
 */
#define BATCH (64u << 10)
int main(int argc, char **argv)
{
	uint32_t period;
	size_t size, nbuf, i, k;
	uint64_t rounds, off = 0;
	const uint8_t *pat;
	uint8_t *src, **buf;
	int r, reps, bad = 0;

	if (argc != 5)
		return 2;
	period = (uint32_t)strtoul(argv[1], NULL, 0);
	size = strtoull(argv[2], NULL, 0);
	nbuf = size < BATCH ? BATCH / size : 1;
	rounds = strtoull(argv[3], NULL, 0) / (nbuf * size) + 1;
	reps = atoi(argv[4]);
	wl_pattern_init(period);
	pat = wl_pattern_region();
	src = malloc(period + size);
	buf = calloc(nbuf, sizeof(*buf));
	if (!src || !buf)
		return 1;
	for (i = 0; i < period + size; i++)
		src[i] = pat[i % period];
	for (k = 0; k < nbuf; k++)
		if (!(buf[k] = malloc(size))) /* as the receiver's buffer */
			return 1;
	printf("{\"clone\": \"%s\", \"ns_per_byte\": [", __builtin_cpu_supports("avx2") ? "avx2" : "default");
	for (r = 0; r < reps; r++) {
		uint64_t n, inside = 0, clock = 0;

		for (n = 0; n < rounds; n++) {
			uint64_t t0, t1, t2, o = off;

			for (k = 0; k < nbuf; k++, o += size)
				memcpy(buf[k], src + o % period, size);
			t0 = now_ns();
			for (k = 0; k < nbuf; k++, off += size)
				bad |= !wl_pattern_check(off, buf[k], size);
			t1 = now_ns();
			t2 = now_ns();
			inside += t1 - t0;
			clock += t2 - t1;
		}
		printf("%s%.6f", r ? ", " : "", (double)(inside - clock) / (double)(rounds * nbuf * size));
	}
	printf("], \"bad\": %d}\n", bad);
	return bad;
}
"""

# What --wrap=wl_pattern_check calls instead of the check.
NO_CHECK = r"""
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

bool __wrap_wl_pattern_check(uint64_t off, const uint8_t *p, size_t len);

bool __wrap_wl_pattern_check(uint64_t off, const uint8_t *p, size_t len)
{
	(void)off, (void)p, (void)len;
	return true;
}
"""


def size_arg(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KM]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (N, NK or NM)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20}[m.group(2)]


def size_list(text: str) -> list:
    return [size_arg(s) for s in text.split(",") if s]


def makefile_cflags() -> str:
    m = re.search(r"^CFLAGS_WL\s*:?=\s*(.+)$", (REPO / "Makefile").read_text(), re.M)
    if not m:
        sys.exit("the Makefile has no CFLAGS_WL: how qprof-wl is compiled changed; update this benchmark")
    return m.group(1)


def check_source() -> Path:
    """The workload's file that defines wl_pattern_check."""
    for path in sorted(WORKLOADS.glob("*.c")):
        if re.search(r"\bbool\s+wl_pattern_check\s*\(", path.read_text()):
            return path
    sys.exit(f"no file in {WORKLOADS} defines wl_pattern_check: update this benchmark")


def check_alone(sizes, nbytes: int, repeats: int) -> None:
    src = check_source()
    with tempfile.TemporaryDirectory(prefix="verify-cost-") as tmp:
        driver = Path(tmp) / "driver.c"
        driver.write_text(DRIVER)
        exe = Path(tmp) / "driver"
        cc = [os.environ.get("CC", "cc"), *shlex.split(makefile_cflags()), f"-I{WORKLOADS}"]
        r = subprocess.run([*cc, "-o", str(exe), str(driver), str(src), "-lpthread"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"building the driver against {src.relative_to(REPO)} failed:\n{r.stderr.strip()}")
        print(f"wl_pattern_check from {src.relative_to(REPO)}, {nbytes:,} bytes a repeat, {repeats} repeats")
        print(f"{'size (B)':>10} {'clone':>8} {'ns/B median':>12} {'(min-max)':>17} {'GB/s':>6}")
        for size in sizes:
            out = subprocess.run([str(exe), str(PERIOD), str(size), str(nbytes), str(repeats)], capture_output=True)
            if out.returncode != 0:
                sys.exit(f"the driver failed at {size} B (exit {out.returncode}): a buffer failed the check")
            got = json.loads(out.stdout)
            v = got["ns_per_byte"]
            med = statistics.median(v)
            print(f"{size:>10} {got['clone']:>8} {med:12.4f} ({min(v):.4f}-{max(v):.4f}) {1 / med:6.1f}", flush=True)


def workload_recipe() -> str:
    """The Makefile's command for $(BUILD)/bin/qprof-wl, as `make -n` prints it."""
    target = f"{BUILD}/bin/qprof-wl"
    first = sorted(WORKLOADS.glob("*.c"))[0].relative_to(REPO)
    r = subprocess.run(
        ["make", "-s", "-n", "-W", str(first), f"BUILD={BUILD}", target],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    cmds = [c for c in r.stdout.replace("\\\n", " ").splitlines() if f"-o {target} " in c]
    if r.returncode != 0 or len(cmds) != 1:
        sys.exit(f"`make -n {target}` gave no single command for qprof-wl:\n{r.stdout}{r.stderr}")
    return cmds[0]


def build_variant(tmp: Path, name: str, no_check: bool) -> Path:
    """A build directory: BUILD's entries linked, and a qprof-wl of its own."""
    d = tmp / name
    (d / "bin").mkdir(parents=True)
    for entry in BUILD.iterdir():
        if entry.name != "bin":
            (d / entry.name).symlink_to(entry.resolve())
    for tool in (BUILD / "bin").iterdir():
        if tool.name != "qprof-wl":
            (d / "bin" / tool.name).symlink_to(tool.resolve())
    cmd = workload_recipe().replace(f"-o {BUILD}/bin/qprof-wl ", f"-o {d}/bin/qprof-wl ")
    if no_check:
        stub = tmp / "no_check.c"
        stub.write_text(NO_CHECK)
        # --trace-symbol: the linker names each object whose call it redirected.
        cmd += f" {stub} -Wl,--wrap=wl_pattern_check -Wl,--trace-symbol=__wrap_wl_pattern_check"
    r = subprocess.run(["bash", "-c", cmd], cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"building qprof-wl ({name}) failed:\n{r.stderr.strip()}")
    if no_check and "reference to __wrap_wl_pattern_check" not in r.stdout + r.stderr:
        sys.exit("--wrap=wl_pattern_check redirected no call: the workload no longer calls it across files")
    return d


def transfers(rounds: int, stacks, duration: float) -> None:
    from qprof.collectors.topology import Topology

    import fidelity  # the venv's Python: it imports qprof

    if os.geteuid() != 0:
        sys.exit("--transfers needs root (namespaces)")
    with tempfile.TemporaryDirectory(prefix="verify-cost-") as tmp:
        builds = {
            "with check": build_variant(Path(tmp), "with", False),
            "check linked out": build_variant(Path(tmp), "without", True),
        }
        runs_dir = Path(tmp) / "runs"
        runs_dir.mkdir()
        jobs = [(s, who) for s in stacks for who in (*builds, *(["iperf3"] if s == "tcp" else []))]
        got = {job: [] for job in jobs}
        for rnd in range(rounds):
            for stack, who in jobs[rnd % len(jobs) :] + jobs[: rnd % len(jobs)]:
                if who == "iperf3":
                    with Topology("netns", f"vc{os.getpid() % 10000}") as topo:
                        res = fidelity.run_iperf3(topo, duration)
                else:
                    qprof = f"env QPROF_BUILD_DIR={builds[who]} {QPROF}"
                    res = fidelity.run_qprof(stack, duration, str(runs_dir), qprof)
                got[(stack, who)].append(res)
                print(f"round {rnd + 1}: {stack:5} {who:16} {res[0]:6.2f} Gbit/s {res[1]:.3f} ns/B", flush=True)
    print(f"\n{rounds} rounds of {duration:g} s, netns + veth, probes and sampling off, interleaved; median (min-max)")
    print(f"{'stack':5} {'workload':16} {'Gbit/s':>20} {'system ns/B':>20} {'Gbit/s ratio':>13} {'ns/B ratio':>11}")
    for stack in stacks:
        base = "iperf3" if stack == "tcp" else "with check"
        ref = [statistics.median(x[i] for x in got[(stack, base)]) for i in (0, 1)]
        for who in (w for s, w in jobs if s == stack):
            v = got[(stack, who)]
            (gm, gl, gh), (cm, cl, ch) = (fidelity.summary([x[i] for x in v]) for i in (0, 1))
            print(
                f"{stack:5} {who:16} {gm:6.2f} ({gl:.2f}-{gh:.2f}) {cm:6.3f} ({cl:.3f}-{ch:.3f}) "
                f"{gm / ref[0]:13.3f} {cm / ref[1]:11.3f}"
            )
        print(f"{'':5} (ratios to {base})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--sizes", type=size_list, default=size_list(SIZES), help=f"buffer sizes, N, NK or NM (default {SIZES})"
    )
    ap.add_argument("--bytes", type=size_arg, default=size_arg("1024M"), help="bytes checked a repeat (default 1024M)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--transfers", type=int, metavar="N", help="then N interleaved rounds of transfers (root)")
    ap.add_argument("--stacks", default="tcp", help="for --transfers: tcp, quic or both (default tcp)")
    ap.add_argument("--duration", type=float, default=8.0, help="for --transfers: seconds a run (default 8)")
    args = ap.parse_args()
    stacks = [s for s in args.stacks.split(",") if s]
    if not set(stacks) <= {"tcp", "quic"} or not stacks:
        sys.exit(f"--stacks is tcp, quic or both, not '{args.stacks}'")
    if args.repeats < 1 or (args.transfers is not None and args.transfers < 1):
        sys.exit("--repeats and --transfers must be at least 1")
    check_alone(args.sizes, args.bytes, args.repeats)
    if args.transfers:
        print()
        transfers(args.transfers, stacks, args.duration)


if __name__ == "__main__":
    main()
