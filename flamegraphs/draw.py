# SPDX-License-Identifier: GPL-2.0-only
"""Flame graphs drawn by inferno from per-byte folded stacks (whole fs/B,
see normalize.py); this module only composes titles and runs the tools.

Frames are labelled in picoseconds per byte (`--factor 0.001 --countname
ps/B`), not ns/B: inferno 0.12.8 rounds each frame's scaled count to a
whole number and computes its percentage from that rounded number, so
with `--factor 1e-6` a 0.4 ns/B frame would read "0 ns/B, 0.00%" and a
1.6 ns/B graph "2 ns/B" with shares off by up to a quarter. In ps/B the
rounding is at most 0.5 ps/B. Titles give ns/B, computed here.

Differential graphs: `inferno-diff-folded A B | inferno-flamegraph`, both
inputs in fs/B, so the difference is per byte whatever each run's length
or throughput. Widths are B's; inferno colours a frame red where B's count
is higher (B costs more per byte) and blue where it is lower, which is
what we want, so no --negate.
"""

import subprocess
import tempfile
from pathlib import Path
from typing import Mapping, Optional, Sequence

from qprof import paths
from qprof.errors import NotBuilt
from qprof.rundir import write_text_atomic

from . import folded
from .normalize import SideFigures

COUNT_NAME = "ps/B"
FACTOR = "0.001"  # fs/B counts -> ps/B labels


def _run(argv: Sequence[str], text: Optional[str] = None) -> str:
    r = subprocess.run([str(a) for a in argv], input=text, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        raise NotBuilt(f"{Path(argv[0]).name} failed ({last}); rebuild it with `make inferno`.")
    return r.stdout


def _flamegraph(folded_text: str, out: Path, title: str, subtitle: str) -> Path:
    svg = _run(
        [
            paths.inferno_tool("flamegraph"),
            "--countname",
            COUNT_NAME,
            "--factor",
            FACTOR,
            "--hash",
            "--title",
            title,
            "--subtitle",
            subtitle,
        ],
        folded_text,
    )
    write_text_atomic(out, svg)
    return out


def render(per_byte_stacks: Mapping[str, int], out: Path, title: str, subtitle: str) -> Path:
    """One flame graph; per_byte_stacks in fs/B."""
    return _flamegraph("".join(folded.lines(per_byte_stacks)), out, title, subtitle)


def render_diff(
    a_per_byte: Mapping[str, int], b_per_byte: Mapping[str, int], out: Path, title: str, subtitle: str
) -> Path:
    """A differential graph of B against A, both in fs/B."""
    with tempfile.TemporaryDirectory(prefix="qprof-flame-") as tmp:
        fa, fb = Path(tmp) / "a.folded", Path(tmp) / "b.folded"
        folded.write(a_per_byte, fa)
        folded.write(b_per_byte, fb)
        diff = _run([paths.inferno_tool("diff-folded"), fa, fb])
    return _flamegraph(diff, out, title, subtitle)


def describe_run(record: dict) -> str:
    """The stack, msquic's GSO state for quic, and the throughput."""
    what = record.get("stack", "?")
    if what == "quic":
        gso = (record.get("environment") or {}).get("msquic_send_segmentation", {}).get("client")
        what += " (GSO " + ("on" if gso else "off" if gso is False else "unknown") + ")"
    gbps = record.get("throughput_gbps")
    return what + (f", {gbps:.2f} Gbit/s" if gbps is not None else "")


def _pct(v: Optional[float], fmt: str) -> str:
    return "—" if v is None else fmt.format(v)


def side_title(record: dict, side: str, fig: SideFigures) -> str:
    return f"{describe_run(record)}: {side} {fig.ns_per_byte:.3f} ns/B"


def side_subtitle(
    run_id: str, fig: SideFigures, measured: Optional[float], gap: Optional[float], incomplete: Optional[str]
) -> str:
    text = (
        f"measured {_pct(measured, '{:.3f}')} ns/B (collectors), gap {_pct(gap, '{:+.1f}%')}; "
        f"stack quality {_pct(None if fig.stack_quality is None else fig.stack_quality * 100, '{:.1f}%')}; "
        f"{fig.samples:,} samples of {fig.sample_period_ns / 1e6:g} ms; run {run_id}; frames in {COUNT_NAME}"
    )
    if incomplete:
        text += "; UNDERCOUNTS: " + incomplete
    return text


def diff_title(side: str, rec_a: dict, fig_a: SideFigures, rec_b: dict, fig_b: SideFigures) -> str:
    change = (fig_b.ns_per_byte - fig_a.ns_per_byte) / fig_a.ns_per_byte * 100 if fig_a.ns_per_byte else None
    return (
        f"{side}: A {rec_a.get('stack')} {fig_a.ns_per_byte:.3f} ns/B -> B {rec_b.get('stack')} "
        f"{fig_b.ns_per_byte:.3f} ns/B ({_pct(change, '{:+.1f}%')})"
    )


def diff_subtitle(id_a: str, rec_a: dict, id_b: str, rec_b: dict) -> str:
    return (
        f"A = run {id_a} ({describe_run(rec_a)}), B = run {id_b} ({describe_run(rec_b)}); "
        f"widths are B's; red: B costs more per byte, blue: less; frames in {COUNT_NAME}"
    )
