#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: seed 002's tables (Krinkin & Dronnikov) for quic, tcp-tls
and tcp, with what the seed did not have: CPU per download, and the
sender's retransmissions.

  profiles   --vary link=wifi,lte,3g,2g             (their tables I-IV, one file size)
  rtt        --link loss=0.5%,rate=2.2mbit --vary rtt=10ms,...,1s      (table V)
  loss       --link rtt=100ms,rate=2.2mbit --vary loss=0.5%,...,2.5%   (table VI)
  rate       --link rtt=100ms,loss=0.5% --vary rate=0.2mbit,...,2.2mbit (table VII)

Each table is one `qprof compare --pattern download` (configurations
interleaved, --repeat times), in the QEMU guest where the kernel has no
netem (--guest; on a kernel with sch_netem, --host runs it here). The
figure is the seed's: the time to get a file of --size (`complete_s`,
from the connect to the last byte checked, on a new connection each
time), here the median of every download of the point (--count x
--repeat, 20 by default) with its 95% confidence interval: the
distribution-free one for a median, from the binomial order statistics
(download times are skewed; no normal assumption). A verdict between two
stacks is written only where their intervals do not overlap. Beside it:
the lower bound size / rate (no download over the link can be faster),
CPU per download (on-CPU ms of every task, schedstat), the server's
retransmissions per download, and what limited the run.

USAGE: .venv/bin/python benchmarks/links.py [--tables profiles,rtt,loss,rate] [--size 250K]
       [--count 5] [--repeat 4] [--stacks quic,tcp-tls,tcp] [--host] [--runs-dir DIR]
Prints one markdown table per table, for RESULTS.md.
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QPROF = str(REPO / ".venv" / "bin" / "qprof")

TABLES = {
    "profiles": (None, "link", ["wifi", "lte", "3g", "2g"]),
    "rtt": ("loss=0.5%,rate=2.2mbit", "rtt", ["10ms", "50ms", "100ms", "250ms", "500ms", "750ms", "1s"]),
    "loss": ("rtt=100ms,rate=2.2mbit", "loss", ["0.5%", "1%", "1.5%", "2%", "2.5%"]),
    "rate": ("rtt=100ms,loss=0.5%", "rate", ["0.2mbit", "0.6mbit", "1mbit", "1.4mbit", "1.8mbit", "2.2mbit"]),
}
PRESET_RATE_BIT = {"wifi": 2.2e6, "lte": 2.0e6, "3g": 1.0e6, "2g": 0.2e6}


def size_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def rate_of(key: str, value: str) -> float:
    if key == "link":
        return PRESET_RATE_BIT[value]
    if key == "rate":
        return float(value.removesuffix("mbit")) * 1e6
    return 2.2e6


def compare(args, base_link, key, values, runs_dir) -> dict:
    argv = [QPROF, "compare", "--json", "--stacks", args.stacks, "--pattern", "download"]
    argv += ["--size", args.size, "--count", str(args.count), "--repeat", str(args.repeat)]
    argv += ["--probes", "packets", "--sample-hz", "0", "--runs-dir", runs_dir]
    argv += [] if args.host else ["--guest"]
    argv += ["--link", base_link] if base_link else []
    argv += ["--vary", f"{key}={','.join(values)}"]
    print("#", " ".join(argv[1:]), file=sys.stderr, flush=True)
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qprof compare failed (exit {r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def run_records(comparison: dict, runs_dir: str) -> dict:
    """config index -> the run records (each run's run.json)."""
    out = {}
    for entry in comparison["runs"]:
        rec = json.loads((Path(runs_dir) / entry["id"] / "run.json").read_text())
        out.setdefault(entry["config"], []).append(rec)
    return out


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def median_ci(values, confidence=0.95):
    """(median, low, high): the distribution-free interval for a median,
    x(j) to x(n-j+1) with j the largest rank such that P(B < j) <= (1 -
    confidence)/2 for B ~ Binomial(n, 1/2). None for low and high when n is
    too small to give one (n < 6 at 95%)."""
    xs = sorted(v for v in values if v is not None)
    n = len(xs)
    if not n:
        return None, None, None
    tail = (1 - confidence) / 2
    j, cum = 0, 0.0
    while j < n:
        p = math.comb(n, j) / 2**n  # P(B = j)
        if cum + p > tail:
            break
        cum += p
        j += 1
    if j == 0:
        return statistics.median(xs), None, None
    return statistics.median(xs), xs[j - 1], xs[n - j]


def verdict(cis: dict) -> str:
    """Which stacks' medians differ, where their intervals do not overlap."""
    said = []
    names = [s for s, ci in cis.items() if ci[1] is not None]
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (_, alo, ahi), (_, blo, bhi) = cis[a], cis[b]
            if ahi < blo:
                said.append(f"{a} < {b}")
            elif bhi < alo:
                said.append(f"{b} < {a}")
    return ", ".join(said) or "no difference shown"


def fmt(v, spec="{:,.0f}"):
    return "—" if v is None else spec.format(v)


def fmt_ci(ci) -> str:
    m, lo, hi = ci
    if m is None:
        return "—"
    return f"{m * 1e3:,.0f} [{lo * 1e3:,.0f}–{hi * 1e3:,.0f}]" if lo is not None else f"{m * 1e3:,.0f} [n too small]"


def table(args, name, comparison, runs_dir) -> str:
    base_link, key, values = TABLES[name]
    stacks = args.stacks.split(",")
    recs = run_records(comparison, runs_dir)
    size = size_bytes(args.size)
    head = f"| {key} | size/rate ms | " + " | ".join(f"{s} ms [95% CI] | {s} CPU ms/dl | {s} retx/dl" for s in stacks)
    head += " | n per stack | verdict (medians, where the intervals do not overlap) |"
    lines = [head, "|" + "---|" * (4 + 3 * len(stacks))]
    limits = set()
    for v in values:
        cells = [v, fmt(size * 8 / rate_of(key, v) * 1e3)]
        cis, counts = {}, []
        for s in stacks:
            i = next(j for j, c in enumerate(comparison["configs"]) if c["stack"] == s and c["overrides"].get(key) == v)
            rs = recs.get(i, [])
            dl = [r["downloads"] for r in rs]
            times = [e["complete_s"] for d in dl for e in d["each"]]
            cis[s] = median_ci(times)
            counts.append(len([t for t in times if t is not None]))
            cells.append(fmt_ci(cis[s]))
            cells.append(fmt(median([(d["cpu_per_download_s"]["all"] or 0) * 1e3 for d in dl]), "{:.1f}"))
            retx = [d["server_retransmits"] / d["count"] if d["server_retransmits"] is not None else None for d in dl]
            cells.append(fmt(median(retx), "{:.1f}"))
            limits |= {f"{s} {v}: {r['link']['saturation']['limited_by']}" for r in rs if r.get("link")}
        cells.append("/".join(str(c) for c in counts))
        cells.append(verdict(cis))
        lines.append("| " + " | ".join(cells) + " |")
    cpu_first = [x for x in limits if x.endswith(": cpu")]
    lines.append("")
    lines.append(f"runs whose CPU, not the link, was the limit: {', '.join(sorted(cpu_first)) or 'none'}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", default="profiles,rtt,loss,rate")
    ap.add_argument("--size", default="250K")
    # 20 downloads a point, in 4 interleaved rounds: enough for a 95% interval
    # on each median (ranks 6 and 15 of 20).
    ap.add_argument("--count", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--stacks", default="quic,tcp-tls,tcp")
    ap.add_argument("--host", action="store_true", help="run on this kernel (it must have sch_netem)")
    ap.add_argument("--runs-dir", default=None)
    args = ap.parse_args()
    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="qprof-links-")
    for name in args.tables.split(","):
        t0 = time.monotonic()
        c = compare(args, *TABLES[name], runs_dir)
        print(
            f"\n### {name} ({args.size} per download, {args.count} downloads x {args.repeat} runs per point; "
            f"{time.monotonic() - t0:.0f} s; comparison {c['id']})\n"
        )
        print(table(args, name, c, runs_dir), flush=True)


if __name__ == "__main__":
    main()
