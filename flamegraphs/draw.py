# SPDX-License-Identifier: GPL-2.0-only
"""Flame graphs drawn by inferno from folded stacks scaled per unit
(whole fs/B, or ps/request for request/response runs, see normalize.py);
this module only composes titles and runs the tools.

Frames are labelled a thousand counts to the unit (`--factor 0.001
--countname ps/B`, or ns/request), not in the titles' ns/B: inferno 0.12.8
rounds each frame's scaled count to a whole number and computes its
percentage from that rounded number, so with `--factor 1e-6` a 0.4 ns/B
frame would read "0 ns/B, 0.00%" and a 1.6 ns/B graph "2 ns/B" with
shares off by up to a quarter. In ps/B the rounding is at most 0.5 ps/B
(0.5 ns/request). Titles give ns/B (us/request), computed here.

Differential graphs: `inferno-diff-folded A B | inferno-flamegraph`, both
inputs in the same unit, so the difference is per byte (per request)
whatever each run's length or throughput. Widths are B's; inferno colours
a frame red where B's count is higher (B costs more per unit) and blue
where it is lower, which is what we want, so no --negate.
"""

import subprocess
import tempfile
from pathlib import Path
from typing import Mapping, Optional, Sequence

from qprof import paths
from qprof.errors import NotBuilt
from qprof.figures import get, number
from qprof.files import write_text_atomic

from . import folded
from .normalize import BYTE, SideFigures, Unit

FACTOR = "0.001"  # counts -> labels: fs/B -> ps/B, ps/request -> ns/request


def _run(argv: Sequence[str], text: Optional[str] = None) -> str:
    r = subprocess.run([str(a) for a in argv], input=text, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        raise NotBuilt(f"{Path(argv[0]).name} failed ({last}); rebuild it with `make inferno`.")
    return r.stdout


def _flamegraph(folded_text: str, out: Path, title: str, subtitle: str, unit: Unit) -> Path:
    svg = _run(
        [
            paths.inferno_tool("flamegraph"),
            "--countname",
            unit.label,
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


def render(stacks: Mapping[str, int], out: Path, title: str, subtitle: str, unit: Unit = BYTE) -> Path:
    """One flame graph; stacks in unit.count (normalize.scaled)."""
    return _flamegraph("".join(folded.lines(stacks)), out, title, subtitle, unit)


def render_diff(
    a: Mapping[str, int], b: Mapping[str, int], out: Path, title: str, subtitle: str, unit: Unit = BYTE
) -> Path:
    """A differential graph of B against A, both in unit.count."""
    with tempfile.TemporaryDirectory(prefix="qprof-flame-") as tmp:
        fa, fb = Path(tmp) / "a.folded", Path(tmp) / "b.folded"
        folded.write(a, fa)
        folded.write(b, fb)
        diff = _run([paths.inferno_tool("diff-folded"), fa, fb])
    return _flamegraph(diff, out, title, subtitle, unit)


def describe_run(record: dict) -> str:
    """The stack, its QUIC library's GSO state, and the throughput; for
    request/response the messages' sizes and the schedule (or the closed
    loop's requests in flight); for handshakes those at once."""
    what = str(record.get("stack") or "?")
    env = record.get("environment")
    lib = get(env, "quic_library")
    if lib is not None or what == "quic":
        # Records before quic_library said msquic's alone.
        gso = (
            get(lib, "send_segmentation", "client")
            if lib is not None
            else get(env, "msquic_send_segmentation", "client")
        )
        what += " (GSO " + ("on" if gso else "off" if gso is False else "unknown") + ")"
    rr = record.get("rr")
    if rr:
        req, resp = rr.get("request", rr.get("payload")), rr.get("response", rr.get("payload"))
        size = f"{req} B request" if req == resp else f"{req} B request, {resp} B response"
        if rr.get("mode") == "closed":
            return what + f", {size}, {rr.get('in_flight')} in flight (closed loop)"
        period = number(rr.get("period_s"))
        return what + f", a {size} every " + ("? ms" if period is None else f"{period * 1e3:g} ms")
    hs = record.get("handshakes")
    if hs:
        return what + f", handshakes, {hs.get('conns')} at once" + (", resuming" if hs.get("resume") else "")
    gbps = number(record.get("throughput_gbps"))
    return what + (f", {gbps:.2f} Gbit/s" if gbps is not None else "")


def _pct(v: Optional[float], fmt: str) -> str:
    return "—" if v is None else fmt.format(v)


def _per(fig: SideFigures) -> str:
    """What the figures are per: nothing to add per byte (ns/B says it),
    the requests they are divided by per request."""
    if fig.unit == BYTE:
        return ""
    return f"CPU per request: {fig.divisor:,} requests answered in the window; "


def side_title(record: dict, side: str, fig: SideFigures) -> str:
    return f"{describe_run(record)}: {side} {fig.shown:.3f} {fig.unit.figure}"


def side_subtitle(
    run_id: str,
    fig: SideFigures,
    measured_ns: Optional[float],
    gap: Optional[float],
    incomplete: Optional[str],
) -> str:
    u = fig.unit
    measured = None if measured_ns is None else u.shown(measured_ns)
    text = (
        f"{_per(fig)}measured {_pct(measured, '{:.3f}')} {u.figure} "
        f"({'collectors' if u == BYTE else 'schedstat'}), gap {_pct(gap, '{:+.1f}%')}; "
        f"stack quality {_pct(None if fig.stack_quality is None else fig.stack_quality * 100, '{:.1f}%')}; "
        f"{fig.samples:,} samples of {fig.sample_period_ns / 1e6:g} ms; run {run_id}; frames in {u.label}"
    )
    if incomplete:
        text += "; UNDERCOUNTS: " + incomplete
    return text


def diff_title(side: str, rec_a: dict, fig_a: SideFigures, rec_b: dict, fig_b: SideFigures) -> str:
    u = fig_a.unit
    a, b = fig_a.ns_per_unit, fig_b.ns_per_unit
    change = (b - a) / a * 100 if a else None
    return (
        f"{side}: A {rec_a.get('stack')} {fig_a.shown:.3f} {u.figure} -> B {rec_b.get('stack')} "
        f"{fig_b.shown:.3f} {u.figure} ({_pct(change, '{:+.1f}%')})"
    )


def diff_subtitle(id_a: str, rec_a: dict, id_b: str, rec_b: dict, unit: Unit = BYTE) -> str:
    return (
        f"A = run {id_a} ({describe_run(rec_a)}), B = run {id_b} ({describe_run(rec_b)}); "
        f"widths are B's; red: B costs more per {unit.name}, blue: less; frames in {unit.label}"
    )
