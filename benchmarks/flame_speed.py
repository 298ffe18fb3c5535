#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: folding, normalising and drawing a 60 s capture of both CPUs
at the default rate (target: under 3 s).

Makes the capture with `qprof run --duration 60s --keep-perf-data`, then
times, on that perf.data: perf script | inferno-collapse-perf and the
split into sides (fold), per-side figures and categories (normalise), and
inferno-flamegraph for the three sides (draw).

--call-graph fp|dwarf (and --dwarf-bytes) choose perf's stack walk for the
capture; the fold is then timed as PerfRecorder does it for that walk.

USAGE: .venv/bin/python benchmarks/flame_speed.py [--duration S] [--run-dir DIR]
                                                  [--call-graph fp|dwarf] [--dwarf-bytes N]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import qprof_launch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main():
    from qprof.collectors.perf import PerfRecorder
    from qprof.flamegraphs import draw, folded, normalize, sides, summary

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--run-dir", help="reuse a run made with --keep-perf-data")
    qprof_launch.add_arguments(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as runs_dir:
        if args.run_dir:
            run_dir = Path(args.run_dir)
        else:
            r = subprocess.run(
                [
                    *qprof_launch.qprof(args.call_graph, args.dwarf_bytes),
                    "run",
                    "--json",
                    "--duration",
                    f"{args.duration}s",
                    "--keep-perf-data",
                ],
                capture_output=True,
                text=True,
                env={**os.environ, "QPROF_RUNS_DIR": runs_dir},
            )
            if r.returncode != 0:
                sys.exit(r.stderr.strip())
            run_dir = Path(runs_dir) / json.loads(r.stdout)["id"]
        rec = json.loads((run_dir / "run.json").read_text())
        pids = {side: _pid(rec, side) for side in ("client", "server")}
        perf = PerfRecorder.__new__(PerfRecorder)
        perf.data = run_dir / "perf.data"
        perf.call_graph = args.call_graph
        out = Path(runs_dir) / "stacks"
        t0 = time.perf_counter()
        samples, _ = perf.fold(pids, out)
        t1 = time.perf_counter()
        figs = summary.run_figures(rec, out)
        t2 = time.perf_counter()
        for side in sides.SIDES:
            data = folded.read(out / f"{side}.folded")
            scaled = normalize.per_byte(data.stacks, rec["flame"]["sample_period_ns"], rec["bytes"])
            if scaled:
                draw.render(scaled, Path(runs_dir) / f"{side}.svg", f"{side}", "benchmark")
        t3 = time.perf_counter()
        total = sum(samples.values())
        print(
            f"capture: {rec['window_s']:.0f} s window, {rec['flame']['sample_hz']} Hz, "
            f"{'call graph as recorded' if args.run_dir else qprof_launch.describe(args.call_graph, args.dwarf_bytes)}"
            f", {total:,} samples (idle excluded), "
            f"{(run_dir / 'perf.data').stat().st_size / 1e6:.0f} MB perf.data"
        )
        print(f"fold {t1 - t0:.2f} s, normalise {t2 - t1:.2f} s, draw {t3 - t2:.2f} s: total {t3 - t0:.2f} s")
        print(
            {s: round(f["ns_per_byte"], 3) for s, f in figs.items()},
            "ns/B; samples per CPU / expected",
            {c: round(v, 2) for c, v in rec["flame"]["coverage_per_cpu"].items()},
        )
        print(
            "stack quality",
            {s: None if f["stack_quality"] is None else round(f["stack_quality"] * 100, 1) for s, f in figs.items()},
        )


def _pid(rec, side):
    """The side's pid, from the syscalls probe's window (tgid of its threads)."""
    threads = rec["probes"]["syscalls"]["window"]["threads"]
    by_tgid = {}
    for t in threads:
        by_tgid.setdefault(t["tgid"], 0)
        by_tgid[t["tgid"]] += t["bytes"] if t["sys"] in (("sendmsg",) if side == "client" else ("recvmmsg",)) else 0
    return max(by_tgid, key=by_tgid.get)


if __name__ == "__main__":
    main()
