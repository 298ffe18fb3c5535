# SPDX-License-Identifier: GPL-2.0-only
"""A run or a comparison as one self-contained HTML page: `qprof report`.

The page opens without a network: Vega, Vega-Lite and vega-embed are
inlined from the installed vl-convert-python wheel (its
`javascript_bundle`, about 0.9 MB), each chart's data is inlined in its
Vega-Lite spec (plain JSON, written here: no spec-building library), and
each flame graph is inferno's own SVG in an iframe of its own (a data:
URL), so its search and zoom scripts run as in the file `qprof flame`
writes and the several graphs' element ids never meet.

The page reads top down as a report: a summary card (the answer, a
sentence per finding with its figures and how far to trust them, from
present/summary.py's findings, so the terminal and the page say the
same thing), the CPU by category per side, the flame graphs, the other
charts, and last every table `qprof run` or `qprof compare` prints, as
HTML tables drawn from the same printers (present/tables.py), so a
figure reads the same in both.

Gathering (records -> Page: card, tables, chart specs, flame SVGs,
problems) is kept apart from writing (Page -> HTML, `html`). Nothing is
measured, and a figure a record does not hold is left out, never drawn
as zero.
"""

import base64
import functools
import html as _html
import io
import json
import re
import shutil
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Union

from rich.console import Console
from rich.table import Table
from rich.terminal_theme import DEFAULT_TERMINAL_THEME
from rich.text import Text

from qprof import __version__, figures
from qprof.describe.patterns import rr
from qprof.errors import QprofError
from qprof.flamegraphs import categories, draw, normalize, sides
from qprof.present import summary
from qprof.present.format import ABSENT, binary_size, compact, duration_ns, num
from qprof.present.tables import DAMAGED

CHART_WIDTH = 520
CHART_HEIGHT = 220
# rich's columns for what the printers print: wide enough that a comparison
# keeps its configurations as columns (the browser scrolls a wide table).
TABLE_WIDTH = 100_000


@dataclass
class Chart:
    name: str  # a stable id for tests and anchors
    title: str
    spec: dict  # Vega-Lite, data inlined
    note: str = ""
    section: str = "charts"  # "categories": drawn under the summary card, before the flame graphs


@dataclass
class Fig:
    """A figure in a sentence of the summary card: its text, and the value
    it was written from (the page's data-key and data-value)."""

    key: str
    value: Optional[float]
    text: str
    beyond: Optional[bool] = None  # a comparison's ratio: the ranges do not overlap (None: one run, no range)


@dataclass
class Finding:
    """One sentence of the summary card: text and figures."""

    name: str
    parts: List[Union[str, Fig]]
    warn: bool = False


@dataclass
class Flame:
    name: str
    title: str
    svg: Optional[str]  # inferno's SVG, or None with note saying why
    note: str = ""


@dataclass
class Page:
    kind: str  # run | comparison
    id: str
    title: str
    status: str
    problems: List[str] = field(default_factory=list)  # marked at the top when not empty
    card: List[Finding] = field(default_factory=list)  # the summary card, first on the page
    tables_html: str = ""
    charts: List[Chart] = field(default_factory=list)
    flames: List[Flame] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)


# --- small helpers ------------------------------------------------------------------


_get = figures.get
_num = figures.number


def log2_rows(hist: List[int], label: Callable[[float], str], **extra) -> List[dict]:
    """The probes' log2 histograms (bucket i holds [2^i, 2^(i+1)); bucket 0
    also 0) as rows, empty buckets past the last filled one left out."""
    last = max((i for i, c in enumerate(hist) if c), default=-1)
    return [
        {**extra, "bucket": i, "from": label(0 if i == 0 else 2**i), "count": c} for i, c in enumerate(hist[: last + 1])
    ]


def _histogram_spec(rows: List[dict], x_title: str, color: str, column: Optional[str] = None) -> dict:
    """Bars per log2 bucket, in bucket order, coloured by `color`."""
    order = [r["from"] for r in sorted({r["bucket"]: r for r in rows}.values(), key=lambda r: r["bucket"])]
    spec = {
        "data": {"values": rows},
        "mark": {"type": "bar"},
        "encoding": {
            "x": {"field": "from", "type": "ordinal", "sort": order, "title": x_title},
            "y": {"field": "count", "type": "quantitative", "title": "count"},
            "xOffset": {"field": color},
            "color": {"field": color, "type": "nominal"},
            "tooltip": [{"field": f} for f in (color, "from", "count")],
        },
        "width": CHART_WIDTH // 2 if column else CHART_WIDTH,
        "height": CHART_HEIGHT,
    }
    if column:
        spec["encoding"]["column"] = {"field": column, "type": "nominal", "title": None}
    return spec


class _Kept(Console):
    """A console that keeps what a printer prints (its tables and lines)
    instead of drawing it, so the page can write each as HTML."""

    def __init__(self):
        super().__init__(file=io.StringIO(), width=TABLE_WIDTH, force_terminal=True, highlight=False)
        self.printed: List[tuple] = []

    def print(self, *objects, **kwargs):  # noqa: A003 (rich's name)
        self.printed.append((objects, kwargs))


def _style_css(style) -> str:
    return style.get_html_style(DEFAULT_TERMINAL_THEME) if style else ""


def _text_html(console: Console, renderable, markup: bool = True) -> str:
    """A line or a cell (markup, a Text) as HTML: its styles inline, its
    line breaks kept."""
    if renderable is None:
        return ""
    if isinstance(renderable, str):
        renderable = Text.from_markup(renderable) if markup else Text(renderable)
    if not isinstance(renderable, Text):
        return _pre_html(renderable)
    out = []
    for seg in renderable.render(console):
        text = _html.escape(seg.text).replace("\n", "<br>")
        css = _style_css(seg.style)
        out.append(f'<span style="{css}">{text}</span>' if css and text else text)
    return "".join(out)


def _pre_html(renderable) -> str:
    """Anything else a printer prints, as the terminal draws it."""
    console = Console(record=True, file=io.StringIO(), width=150, force_terminal=True, color_system="truecolor")
    console.print(renderable, crop=False)
    return console.export_html(inline_styles=True, code_format='<pre class="qp-pre"><code>{code}</code></pre>')


def table_html(console: Console, table: Table) -> str:
    """A rich Table as an HTML table: its title, header and cells, numbers
    right-aligned as the terminal aligns them, a section's end ruled."""
    e = _html.escape
    cols = table.columns
    align = [' class="qp-r"' if c.justify == "right" else "" for c in cols]
    title = f"<caption>{_text_html(console, table.title)}</caption>" if table.title else ""
    head = ""
    if table.show_header:
        head = (
            "<thead><tr>"
            + "".join(f"<th{a}>{_text_html(console, c.header)}</th>" for c, a in zip(cols, align))
            + "</tr></thead>"
        )
    cells = [list(c.cells) for c in cols]
    rows = []
    for i in range(table.row_count):
        end = ' class="qp-end"' if i < len(table.rows) and table.rows[i].end_section else ""
        tds = "".join(
            f"<td{a}>{_text_html(console, col[i] if i < len(col) else None)}</td>" for col, a in zip(cells, align)
        )
        rows.append(f"<tr{end}>{tds}</tr>")
    name = e(Text.from_markup(table.title).plain if isinstance(table.title, str) else getattr(table.title, "plain", ""))
    return f'<table class="qp-table" data-title="{name}">{title}{head}<tbody>{"".join(rows)}</tbody></table>'


def tables_html(printer: Callable, rec: dict) -> str:
    """What printer prints for the terminal (present/tables.py: the same
    figures, formatted by the same code), as HTML: each table an HTML
    table, each line a paragraph."""
    console = _Kept()
    printer(rec, console)
    out = []
    for objects, kwargs in console.printed:
        for obj in objects:
            if isinstance(obj, Table):
                out.append(table_html(console, obj))
            elif isinstance(obj, (str, Text)):
                out.append(
                    f'<p class="qp-line">{_text_html(console, obj, kwargs.get("markup", True) is not False)}</p>'
                )
            else:
                out.append(_pre_html(obj))
    return '<div class="qp-tables">' + "\n".join(out) + "</div>"


# --- the summary card ----------------------------------------------------------------


def _sentence(parts: List[Union[str, Fig]]) -> List[Union[str, Fig]]:
    """parts as a sentence: a capital first, a full stop last."""
    parts = list(parts)
    if parts and isinstance(parts[0], str):
        parts[0] = parts[0][:1].upper() + parts[0][1:]
    if parts and not (isinstance(parts[-1], str) and parts[-1].rstrip().endswith((".", "…"))):
        parts.append(".")
    return parts


def _joined(items: List[List[Union[str, Fig]]], sep: str = ", ") -> List[Union[str, Fig]]:
    out: List[Union[str, Fig]] = []
    for i, item in enumerate(items):
        out += ([sep] if i else []) + item
    return out


SIDE_NAMES = {"client": "client", "server": "server", "system": "the whole machine"}


def run_card(rec: dict) -> List[Finding]:
    """The run's answer, a sentence per finding, from summary.findings: the
    same figures `qprof run` and `qprof show` print on the terminal."""
    s = summary.findings(rec)
    cpu_fmt = "{:.3f}" if s.unit == "ns/B" else "{:,.1f}"
    rate = figures.FIGURE["throughput_gbps"].key
    out = [
        Finding("what", _sentence([f"ran {s.what}; {s.where}"])),
        Finding(
            "rate",
            _sentence(
                ["moved ", Fig(rate, s.headline.get(rate), summary.rate_text(s.headline.get(rate))), f" {s.moved}"]
            ),
        ),
    ]
    lines = summary.PATTERN_LINES.get(rec["config"].get("pattern") or "bulk")
    if lines:
        out.append(
            Finding(
                "pattern",
                _sentence(
                    [
                        p
                        for pre, key, post in lines
                        for p in (pre, Fig(key, s.headline.get(key), num(s.headline.get(key), "{:,.3g}")), post)
                    ]
                ),
            )
        )
    out.append(
        Finding(
            "cpu",
            _sentence(
                [f"CPU {s.unit}, on CPU: "]
                + _joined(
                    [[f"{SIDE_NAMES[k]} ", Fig(f"cpu.{k}", s.cpu[k], num(s.cpu[k], cpu_fmt))] for k in summary.SIDES]
                )
                + [" (each side by schedstat, the machine by /proc/stat)" if s.unit == "ns/B" else ""]
            ),
        )
    )
    if s.unit == "ns/B" and s.floor:
        out.append(
            Finding(
                "floor",
                _sentence(
                    ["times the floor (a copy per side and the AEAD, what no implementation can skip): "]
                    + _joined(
                        [
                            [
                                f"{SIDE_NAMES[k]} ",
                                Fig(f"floor.{k}", s.floor.get(k), num(s.floor.get(k), "{:.1f}×")),
                            ]
                            for k in summary.SIDES
                        ]
                    )
                ),
            )
        )
    elif s.unit == "ns/B" and s.floor_absent:
        out.append(Finding("floor", _sentence([f"times the floor: {ABSENT} ({s.floor_absent.rstrip('.')})"])))
    for side, cats in s.top.items():
        out.append(
            Finding(
                f"top-{side}",
                _sentence(
                    [f"the {side}'s stack samples went to "]
                    + _joined(
                        [
                            [
                                f"{c} ",
                                Fig(f"top.{side}.{c}", share, f"{share * 100:.0f}%"),
                                " (",
                                Fig(f"top.{side}.{c}.{s.unit}", per, f"{per:.3f} {s.unit}"),
                                ")",
                            ]
                            for c, per, share in cats
                        ]
                    )
                ),
            )
        )
    out.append(
        Finding(
            "confidence",
            _sentence(
                [
                    "one run: its figures have no spread to be judged by; "
                    "qprof compare --repeat N gives each configuration's median and range"
                ]
            ),
        )
    )
    out += [Finding("warning", _sentence([w]), warn=True) for w in s.warnings]
    if s.dashes:
        found = summary.absences(rec)
        out.append(
            Finding(
                "dashes",
                _sentence(
                    [f"{ABSENT} = not measured: "]
                    + _joined(
                        [
                            [Fig(f"absent.{what}", None, f"{what} ({place})")]
                            + (
                                [f": {'; '.join(r.rstrip('.') for r in summary.reasons_for(found, place))}"]
                                if summary.reasons_for(found, place)
                                else []
                            )
                            for what, place in s.dashes
                        ],
                        "; ",
                    )
                ),
            )
        )
    return out


def comparison_card(rec: dict) -> List[Finding]:
    """The comparison's answer as `qprof show ID` prints it
    (summary.comparison_findings): each figure per configuration, the
    ratio of medians to the first, and whether the ranges overlap."""
    c = summary.comparison_findings(rec)
    first = c.labels[0] if c.labels else ABSENT
    out = [
        Finding(
            "what",
            _sentence(
                [
                    f"{len(c.labels)} configurations × {c.repeat} run{'s' * (c.repeat != 1)} each, "
                    f"interleaved ({c.runs} runs): " + ", ".join(c.labels)
                ]
            ),
        )
    ]
    for f in c.figures:
        name = f.label + (f" ({f.unit}" if f.unit and f.unit != "share" else " (")
        name += ", lower is better)" if f.lower_is_better else ", higher is better)"
        items = []
        for i, x in enumerate(f.configs):
            item: List[Union[str, Fig]] = [
                f"{x.label} ",
                Fig(f"median.{f.key}.{i}", x.median, compact(x.median, f.unit)),
            ]
            if x.n > 1 and x.median and x.low is not None and x.high is not None:
                item.append(f" ±{(x.high - x.low) / 2 / abs(x.median) * 100:.0f}%")
            if i and x.ratio is not None:
                mark = "*" if x.beyond_spread else ""
                item += [" ", Fig(f"ratio.{f.key}.{i}", x.ratio, f"×{x.ratio:.2f}{mark}", x.beyond_spread)]
                item += [" (ranges apart)"] if x.beyond_spread else []
            items.append(item)
        out.append(Finding(f"figure-{f.key}", _sentence([f"{name}: "] + _joined(items, "; "))))
    out.append(
        Finding(
            "confidence",
            _sentence(
                [
                    f"each figure is the median of a configuration's runs, ± half their range; × is its ratio "
                    f"to {first}'s, marked * (ranges apart) where the ranges of the runs do not overlap"
                    + (
                        "; unmarked, they overlap and the ratio may be the runs' spread"
                        if c.repeat > 1
                        else "; one run each has no range, so no ratio can be marked"
                    )
                ]
            ),
        )
    )
    out += [Finding("warning", _sentence([w]), warn=True) for w in c.warnings]
    return out


def mix_card(rec: dict) -> List[Finding]:
    """A mix's flows: each one's goodput, its share and its CPU per byte."""
    mix = rec.get("mix") or {}
    out = [
        Finding(
            "what", _sentence([f"a mix of {mix.get('spec') or ABSENT}: {len(mix.get('flows') or [])} flows at once"])
        )
    ]
    for f in mix.get("flows") or []:
        k = f"mix.{f.get('flow')}"
        ns = f.get("ns_per_byte") or {}
        out.append(
            Finding(
                f"flow-{f.get('flow')}",
                _sentence(
                    [
                        f"flow {f.get('flow')} ({f.get('stack')}): ",
                        Fig(
                            f"{k}.goodput_mbps", f.get("goodput_mbps"), num(f.get("goodput_mbps"), "{:.3g}") + " Mbit/s"
                        ),
                        " goodput (",
                        Fig(
                            f"{k}.share",
                            f.get("share"),
                            num(None if f.get("share") is None else f["share"] * 100, "{:.0f}") + "%",
                        ),
                        " of all the flows'), CPU client ",
                        Fig(f"{k}.client", ns.get("client"), num(ns.get("client")) + " ns/B"),
                        ", server ",
                        Fig(f"{k}.server", ns.get("server"), num(ns.get("server")) + " ns/B"),
                    ]
                ),
            )
        )
    return out


# --- a run ----------------------------------------------------------------------------


def _categories_chart(rec: dict) -> Optional[Chart]:
    """CPU per category per side, from the flame summary (per request for
    rr runs, where the record has it so)."""
    per_request = _get(rec, "rr", "flame_ns_per_request")
    rows, unit = [], "ns/B"
    if per_request:
        unit = "us/request"
        for side, fig in per_request.items():
            for cat, ns in (_get(fig, "categories") or {}).items():
                if _num(ns) is not None:
                    rows.append({"side": side, "category": cat, "value": ns / 1e3})
    else:
        for side, fig in (_get(rec, "flame", "sides") or {}).items():
            for cat, ns in (_get(fig, "categories_ns_per_byte") or {}).items():
                if _num(ns) is not None:
                    rows.append({"side": side, "category": cat, "value": ns})
    if not rows:
        return None
    note = ""
    if _get(rec, "flame", "complete") is False:
        note = f"The capture undercounts: {_get(rec, 'flame', 'incomplete_reason') or 'a CPU missed samples'}."
        weighted = [s for s, f in (_get(rec, "flame", "sides") or {}).items() if _get(f, "weighting")]
        if weighted and _get(rec, "flame", "weighting"):
            note += (
                f" The {' and '.join(weighted)} are weighted: each thread's samples scaled to its on-CPU time "
                "(cputhread probe); the other sides undercount."
            )
    return Chart(
        "categories",
        f"CPU {unit} by flame category, per side (stack samples)",
        {
            "data": {"values": rows},
            "mark": {"type": "bar"},
            "encoding": {
                "y": {"field": "side", "type": "nominal", "sort": list(sides.SIDES), "title": None},
                "x": {"field": "value", "type": "quantitative", "stack": "zero", "title": unit},
                "color": {"field": "category", "type": "nominal", "sort": list(categories.CATEGORIES)},
                "order": {"field": "category"},
                "tooltip": [
                    {"field": "side"},
                    {"field": "category"},
                    {"field": "value", "format": ".3f", "title": unit},
                ],
            },
            "width": CHART_WIDTH,
            "height": 30 * len({r["side"] for r in rows}) + 20,
        },
        note,
        "categories",
    )


NOT_CLASSES = ("total", "oncpu")


def _cpu_chart(rec: dict) -> Optional[Chart]:
    """The collectors' CPU per byte by class per side, stacked; a class a
    side cannot have measured (a process's softirq) is absent, not zero.
    Neither the total nor schedstat's on-CPU time (another instrument of
    the same whole) is a class."""
    rows = []
    for side in ("client", "server", "system"):
        for cls, v in (_get(rec, "cpu", side, "ns_per_byte") or {}).items():
            if cls not in NOT_CLASSES and _num(v) is not None:
                rows.append({"side": side, "class": cls, "ns_per_byte": v})
    if not rows:
        return None
    return Chart(
        "cpu",
        "CPU ns/B by class, per side (/proc; system is the whole machine)",
        {
            "data": {"values": rows},
            "mark": "bar",
            "encoding": {
                "y": {"field": "side", "type": "nominal", "sort": ["client", "server", "system"], "title": None},
                "x": {"field": "ns_per_byte", "type": "quantitative", "stack": "zero", "title": "ns/B"},
                "color": {"field": "class", "type": "nominal"},
                "tooltip": [{"field": "side"}, {"field": "class"}, {"field": "ns_per_byte", "format": ".3f"}],
            },
            "width": CHART_WIDTH,
            "height": 110,
        },
        section="categories",
    )


def _syscall_charts(rec: dict) -> List[Chart]:
    out = []
    rows = []
    for side in ("client", "server"):
        for name, s in (_get(rec, "syscalls", side, "by_syscall") or {}).items():
            if s.get("calls") and s.get("time_hist_ns"):
                rows += log2_rows(s["time_hist_ns"], duration_ns, side=side, syscall=name)
    if rows:
        out.append(
            Chart(
                "syscall_time",
                "Time inside each system call (log2 buckets, syscalls probe)",
                _histogram_spec(rows, "from (ns)", "syscall", column="side"),
            )
        )
    untimed = next(
        (r for r in (_get(rec, "syscalls", side, "time_absent_reason") for side in ("client", "server")) if r), None
    )
    sizes = []
    for side in ("client", "server"):
        for key, what in (("bytes_per_send_call", "send"), ("bytes_per_recv_call", "receive")):
            v = _num(_get(rec, "syscalls", side, key))
            if v is not None:
                sizes.append({"side": side, "call": what, "bytes": v})
    if sizes:
        out.append(
            Chart(
                "syscall_size",
                "Bytes per send and receive call (syscalls probe)",
                {
                    "data": {"values": sizes},
                    "mark": "bar",
                    "encoding": {
                        "y": {"field": "side", "type": "nominal", "title": None},
                        "yOffset": {"field": "call"},
                        "x": {"field": "bytes", "type": "quantitative", "title": "bytes per call"},
                        "color": {"field": "call", "type": "nominal"},
                        "tooltip": [{"field": "side"}, {"field": "call"}, {"field": "bytes", "format": ",.0f"}],
                    },
                    "width": CHART_WIDTH,
                    "height": 120,
                },
                "The syscalls probe counts each call's bytes into totals, not a size histogram: "
                "these are the window's means (bytes over calls)."
                + (f" No chart of the time inside each call: {untimed}." if untimed else ""),
            )
        )
    return out


# The packets probe without its receive side (records from 2026-11-24 on).
TX_ONLY = (
    "Transmit side only: the run counted no received packets (qprof run --packets-rx); over veth each skb "
    "arrives as the peer's transmit sent it."
)


def _packet_charts(rec: dict) -> List[Chart]:
    devices = _get(rec, "probes", "packets", "window", "devices") or []
    note = TX_ONLY if _get(rec, "probes", "packets", "rx") is False else ""
    lens, segs = [], []
    for d in devices:
        for direction in ("tx", "rx"):
            h = _get(d, direction) or {}
            dev = f"{d.get('dev', '?').split('@')[0]} {direction}"
            if h.get("len_hist_bytes"):
                lens += log2_rows(h["len_hist_bytes"], binary_size, device=dev, direction=direction)
            if h.get("gso_segs_hist"):
                segs += log2_rows(h["gso_segs_hist"], lambda v: f"{max(v, 1):g}", device=dev, direction=direction)
    out = []
    if lens:
        out.append(
            Chart(
                "packet_size",
                "Packet (skb) length per device and direction (log2 buckets, packets probe)",
                _histogram_spec(lens, "from", "device", column="direction"),
                note,
            )
        )
    if segs:
        out.append(
            Chart(
                "gso_segments",
                "GSO segments per skb (log2 buckets; the first holds 0 or 1)",
                _histogram_spec(segs, "segments from", "device", column="direction"),
                note,
            )
        )
    return out


def _download_charts(rec: dict, label: str = "") -> List[Chart]:
    each = _get(rec, "downloads", "each") or []
    rows = []
    for d in each:
        for key, what in (("handshake_s", "handshake"), ("first_byte_s", "first byte"), ("complete_s", "complete")):
            v = _num(d.get(key))
            if v is not None:
                rows.append({"download": d.get("i"), "time": what, "ms": v * 1e3})
    if not rows:
        return []
    times = Chart(
        "download_times",
        "Each download's times from its connect (ms)",
        {
            "data": {"values": rows},
            "mark": {"type": "line", "point": True},
            "encoding": {
                "x": {"field": "download", "type": "ordinal", "title": "download"},
                "y": {"field": "ms", "type": "quantitative", "title": "ms"},
                "color": {"field": "time", "type": "nominal", "sort": ["handshake", "first byte", "complete"]},
                "tooltip": [{"field": "download"}, {"field": "time"}, {"field": "ms", "format": ".3f"}],
            },
            "width": CHART_WIDTH,
            "height": CHART_HEIGHT,
        },
    )
    series = {label or rec.get("stack") or "run": [d["complete_s"] * 1e3 for d in each if _num(d.get("complete_s"))]}
    return [times, cdf_chart("download_cdf", "Download time, CDF (ms)", series, "download time (ms)")]


def cdf_points(values: Iterable[float], **extra) -> List[dict]:
    vs = sorted(values)
    return [{**extra, "x": v, "fraction": (i + 1) / len(vs)} for i, v in enumerate(vs)]


def hdr_cdf(*encoded: str, **extra) -> List[dict]:
    """The delays' CDF (ms) of one or more rr records' HDR histograms, pooled."""
    return [{**extra, "x": ms, "fraction": f} for ms, f in rr.delay_cdf_ms(*encoded)]


def cdf_chart(name: str, title: str, series: Dict[str, List[float]], x_title: str, points=None) -> Chart:
    """Step CDFs, one per series; points when given are already (x,
    fraction) rows (an HDR histogram's). x on a log scale: delays span
    decades, and a tail is what these charts are for."""
    rows = points if points is not None else [p for k, vs in series.items() for p in cdf_points(vs, series=k)]
    return Chart(
        name,
        title,
        {
            "data": {"values": rows},
            "mark": {"type": "line", "interpolate": "step-after", "point": len(rows) <= 60},
            "encoding": {
                "x": {"field": "x", "type": "quantitative", "title": x_title, "scale": {"type": "log"}},
                "y": {"field": "fraction", "type": "quantitative", "title": "fraction", "scale": {"domain": [0, 1]}},
                "color": {"field": "series", "type": "nominal", "title": None},
                "tooltip": [
                    {"field": "series"},
                    {"field": "x", "format": ".3f"},
                    {"field": "fraction", "format": ".3f"},
                ],
            },
            "width": CHART_WIDTH,
            "height": CHART_HEIGHT,
        },
    )


def _rr_charts(rec: dict) -> List[Chart]:
    enc = _get(rec, "rr", "histogram")
    if not enc:
        return []
    return [
        cdf_chart(
            "rr_cdf",
            "Response delay from each request's due time, CDF (HDR histogram, ms)",
            {},
            "delay (ms)",
            points=hdr_cdf(enc, series=rec.get("stack") or "run"),
        )
    ]


# Each interval's figures (record.intervals.samples) by chart: (key, series).
INTERVAL_SERIES = {
    "intervals_gbps": [("gbps", "goodput")],
    "intervals_cpu": [(f"{side}_ns_per_byte", side) for side in ("client", "server")],
}


def _interval_charts(rec: dict) -> List[Chart]:
    """The window over time (`--interval`, as iperf3 -i): each interval's
    goodput, and each side's CPU per byte (schedstat), at the interval's
    end from the window's start."""
    samples = _get(rec, "intervals", "samples") or []
    titles = {
        "intervals_gbps": ("Goodput per interval (Gbit/s, the receiver's verified bytes)", "Gbit/s"),
        "intervals_cpu": ("CPU ns/B per interval, per side (on CPU, schedstat)", "ns/B"),
    }
    cv = _num(_get(rec, "intervals", "gbps_cv"))
    out = []
    for name, series in INTERVAL_SERIES.items():
        rows = [
            {"s": x["end_s"], "series": what, "value": x[key]}
            for x in samples
            if isinstance(x, dict) and _num(x.get("end_s")) is not None
            for key, what in series
            if _num(x.get(key)) is not None
        ]
        if not rows:
            continue
        title, unit = titles[name]
        note = f"The goodput's coefficient of variation over the whole intervals: {cv:.3f}." if cv is not None else ""
        out.append(_over_time(name, title, unit, rows, ".3f", note if name == "intervals_gbps" else ""))
    return out + _state_charts(rec, samples)


def _over_time(name: str, title: str, unit: str, rows: list, value_format: str, note: str) -> Chart:
    """A line per series over the window: rows of {s (from the window's start), series, value}."""
    return Chart(
        name,
        title,
        {
            "data": {"values": rows},
            "mark": {"type": "line", "point": True},
            "encoding": {
                "x": {"field": "s", "type": "quantitative", "title": "s from the window's start"},
                "y": {"field": "value", "type": "quantitative", "title": unit},
                "color": {"field": "series", "type": "nominal", "title": None},
                "tooltip": [
                    {"field": "series"},
                    {"field": "s", "format": ".2f"},
                    {"field": "value", "format": value_format},
                ],
            },
            "width": CHART_WIDTH,
            "height": CHART_HEIGHT,
        },
        note,
    )


# The transport's state at each interval (record.intervals.samples[].state,
# describe/state.py): chart name -> (its fields, title, unit). A gauge is
# its value at the interval's end, a count its difference over it.
STATE_CHARTS = {
    "state_cwnd": (("cwnd_bytes",), "Congestion window at each interval's end, per side (KB)", "KB", 1e-3),
    "state_rtt": (("rtt_us",), "Smoothed RTT at each interval's end, per side (µs)", "µs", 1.0),
    "state_in_flight": (("in_flight_bytes",), "Bytes in flight at each interval's end, per side (KB)", "KB", 1e-3),
    "state_losses": (
        ("lost_packets", "retransmitted_packets"),
        "Packets lost and sent again over each interval, per side",
        "packets",
        1.0,
    ),
}


def _state_charts(rec: dict, samples: list) -> List[Chart]:
    """The transport's state over the window, per side, as its library
    gave it; a value it does not give is left out, and the note says why
    (intervals.state_absent)."""
    absent = _get(rec, "intervals", "state_absent") or {}
    out = []
    for name, (fields, title, unit, scale) in STATE_CHARTS.items():
        rows = [
            {
                "s": x["end_s"],
                "series": f"{side} {field.split('_')[0]}" if len(fields) > 1 else side,
                "value": v * scale,
            }
            for x in samples
            if isinstance(x, dict) and _num(x.get("end_s")) is not None
            for side in ("client", "server")
            for field in fields
            if (v := _num(((x.get("state") or {}).get(side) or {}).get(field))) is not None
        ]
        why = [
            f"{side}'s {field}: {absent[side][field]}"
            for side in ("client", "server")
            for field in fields
            if isinstance(absent.get(side), dict) and absent[side].get(field)
        ]
        if not rows:
            continue
        out.append(_over_time(name, title, unit, rows, ",.1f", ("Not given: " + "; ".join(why) + ".") if why else ""))
    return out


def _mix_charts(rec: dict) -> List[Chart]:
    rows = [
        {"flow": f"{f.get('flow')} {f.get('stack')}", "stack": f.get("stack"), "goodput_mbps": f["goodput_mbps"]}
        for f in _get(rec, "mix", "flows") or []
        if _num(f.get("goodput_mbps")) is not None
    ]
    if not rows:
        return []
    return [
        Chart(
            "mix_goodput",
            "Goodput per flow over the window (Mbit/s)",
            {
                "data": {"values": rows},
                "mark": "bar",
                "encoding": {
                    "y": {"field": "flow", "type": "nominal", "sort": None, "title": None},
                    "x": {"field": "goodput_mbps", "type": "quantitative", "title": "Mbit/s"},
                    "color": {"field": "stack", "type": "nominal"},
                    "tooltip": [{"field": "flow"}, {"field": "goodput_mbps", "format": ".3f"}],
                },
                "width": CHART_WIDTH,
                "height": 24 * len(rows) + 20,
            },
        )
    ]


def _link_charts(rec: dict) -> List[Chart]:
    rows = []
    for direction, d in (_get(rec, "link", "directions") or {}).items():
        for key, what in (("utilisation", "utilisation of the rate"), ("netem_drops_percent", "netem drops")):
            v = _num(d.get(key))
            if v is not None:
                rows.append({"direction": direction, "figure": what, "percent": v * 100 if key == "utilisation" else v})
    if not rows:
        return []
    return [
        Chart(
            "link",
            f"The emulated link ({_get(rec, 'link', 'spec') or '?'}) over the window, per direction (%)",
            {
                "data": {"values": rows},
                "mark": "bar",
                "encoding": {
                    "y": {"field": "direction", "type": "nominal", "title": None},
                    "yOffset": {"field": "figure"},
                    "x": {"field": "percent", "type": "quantitative", "title": "%"},
                    "color": {"field": "figure", "type": "nominal"},
                    "tooltip": [{"field": "direction"}, {"field": "figure"}, {"field": "percent", "format": ".2f"}],
                },
                "width": CHART_WIDTH,
                "height": 120,
            },
        )
    ]


def _svg_of(path: Path) -> Optional[str]:
    try:
        return path.read_text()
    except OSError:
        return None


def run_flames(run_dir: Path, rec: dict) -> List[Flame]:
    """Each side's flame graph: RUNS_DIR/<id>/flame-<side>.svg as `qprof
    flame` wrote it, or drawn there now by the same library calls."""
    if not rec.get("flame"):
        return []
    flames = {side: _svg_of(run_dir / f"flame-{side}.svg") for side in sides.SIDES}
    why = {}
    if not all(flames.values()):
        try:
            run = sides.load_run(run_dir.parent, run_dir.name)
            classifier = categories.for_run(run.path)
            incomplete = sides.incomplete_reason(run)
            for side in (s for s, svg in flames.items() if not svg):
                stacks = sides.load_side(run, side, warn=lambda msg: None).stacks
                divisor = run.divisor(side)
                fig = normalize.figures(stacks, run.period_ns, divisor, classifier, run.unit)
                measured = run.measured_ns_per_unit(side)
                gap = normalize.gap_percent(
                    fig.ns_per_unit, measured, normalize.base_samples(measured, divisor, run.period_ns)
                )
                scaled = normalize.scaled(stacks, run.period_ns, divisor, run.unit)
                if not scaled:
                    why[side] = "no stack samples on this side"
                    continue
                out = draw.render(
                    scaled,
                    run_dir / f"flame-{side}.svg",
                    draw.side_title(run.record, side, fig),
                    draw.side_subtitle(run.id, fig, measured, gap, incomplete),
                    run.unit,
                )
                flames[side] = _svg_of(out)
        except QprofError as e:
            why = {side: e.sentence for side, svg in flames.items() if not svg}
    return [
        Flame(f"flame-{side}", f"{side}: flame graph", svg, "" if svg else why.get(side, "not drawn"))
        for side, svg in flames.items()
    ]


def run_page(rec: Optional[dict], run_dir: Path, run_id: str, problems: List[str], printer: Callable) -> Page:
    """Everything a run's report shows; `problems` (an incomplete or
    corrupt record) are marked at its top and the rest is what can be
    read."""
    rec = rec or {}
    page = Page(
        "run",
        run_id,
        f"qprof run {run_id}: {rec.get('stack') or 'unknown stack'}",
        str(rec.get("status") or "unreadable"),
        list(problems),
    )
    try:
        page.tables_html = tables_html(printer, rec) if rec else _fields_html(rec)  # none to draw from nothing
    except DAMAGED as e:
        page.problems.append(f"its tables cannot be drawn from this record ({type(e).__name__}: {e})")
        page.tables_html = _fields_html(rec)
    if rec.get("status") == "complete" or not problems:
        try:
            page.card = mix_card(rec) if rec.get("stack") == "mix" else run_card(rec)
        except DAMAGED as e:
            page.problems.append(f"its summary cannot be drawn from this record ({type(e).__name__}: {e})")
    builders = (
        _categories_chart,
        _cpu_chart,
        _interval_charts,
        _syscall_charts,
        _packet_charts,
        _download_charts,
        _rr_charts,
        _link_charts,
    )
    for build in builders + (_mix_charts,):
        try:
            got = build(rec)
        except DAMAGED as e:
            page.problems.append(f"a chart ({build.__name__.strip('_')}) cannot be drawn ({type(e).__name__}: {e})")
            continue
        page.charts += got if isinstance(got, list) else [got] if got else []
    if rec.get("status") == "complete":
        page.flames = run_flames(run_dir, rec)
    if rec.get("stack") == "mix":
        page.notes.append("A mix runs without the eBPF probes and perf: no flame graphs or probe histograms.")
    return page


def _fields_html(rec: dict) -> str:
    """A record the tables cannot be drawn from: its top-level fields."""
    rows = []
    for k, v in rec.items():
        text = json.dumps(v) if not isinstance(v, str) else v
        if len(text) > 300:
            text = text[:300] + " …"
        rows.append(f"<tr><th>{_html.escape(k)}</th><td><code>{_html.escape(text)}</code></td></tr>")
    return f'<table class="qp-fields">{"".join(rows)}</table>' if rows else "<p>The record holds nothing.</p>"


# --- a comparison ---------------------------------------------------------------------------


def _config_axes(rec: dict) -> List[dict]:
    """Per configuration: its label, stack and what it varies (x)."""
    out = []
    for c in rec.get("configs") or []:
        over = c.get("overrides") or {}
        x = " ".join(f"{k}={v}" for k, v in over.items()) or c.get("stack") or c.get("label")
        out.append({"label": c.get("label"), "stack": c.get("stack"), "x": x})
    return out


def is_category(key: str, units: dict) -> bool:
    """A flame category's metric (figures.categories: "side: category")."""
    return ": " in ((units.get(key) or {}).get("label") or "") and key.endswith("_ns_per_byte")


def metric_charts(rec: dict) -> List[Chart]:
    """One chart per metric: each configuration's median, its range
    (min-max) and runs, against what the configuration varies, coloured by
    stack, with the ratio of medians to the first configuration (* where
    the ranges do not overlap). Labelled and in units as the table of
    figures (core/figures.py) declares them; a key it does not declare
    (an older record's) as the record's metric_units say."""
    axes = _config_axes(rec)
    units = rec.get("metric_units") or {}
    order = list(dict.fromkeys(a["x"] for a in axes))
    charts = []
    for key, per_config in (rec.get("metrics") or {}).items():
        if is_category(key, units):
            continue  # one stacked chart for them all (comparison_category_chart)
        rows, runs = [], []
        for i, r in enumerate(per_config):
            if i >= len(axes) or _num(r.get("median")) is None:
                continue
            ratio = _num(r.get("ratio"))
            mark = "*" if r.get("beyond_spread") else ""
            rows.append(
                {
                    **axes[i],
                    "median": r["median"],
                    "min": r.get("min"),
                    "max": r.get("max"),
                    "n": r.get("n"),
                    "ratio": "" if ratio is None else f"×{ratio:.2f}{mark}",
                }
            )
            runs += [{**axes[i], "value": v} for v in r.get("values") or [] if _num(v) is not None]
        if not rows:
            continue
        fig = figures.FIGURE.get(key)
        u = {"label": fig.label, "unit": fig.unit} if fig else units.get(key) or {}
        unit = u.get("unit") or ""
        title = (u.get("label") or key) + (f" ({unit})" if unit else "")
        x = {"field": "x", "type": "nominal", "sort": order, "title": None, "axis": {"labelAngle": -30}}
        y_title = unit or "value"
        color = {"field": "stack", "type": "nominal"}
        charts.append(
            Chart(
                f"metric-{key}",
                title,
                {
                    "layer": [
                        {
                            # a sweep's medians joined per stack: delivery time against RTT, loss or rate
                            "data": {"values": rows},
                            "mark": {"type": "line", "opacity": 0.5},
                            "encoding": {
                                "x": x,
                                "y": {"field": "median", "type": "quantitative"},
                                "color": color,
                                "detail": {"field": "stack"},
                            },
                        },
                        {
                            "data": {"values": rows},
                            "mark": {"type": "rule"},
                            "encoding": {
                                "x": x,
                                "y": {"field": "min", "type": "quantitative"},
                                "y2": {"field": "max"},
                                "color": color,
                            },
                        },
                        {
                            "data": {"values": runs},
                            "mark": {"type": "tick", "opacity": 0.6},
                            "encoding": {"x": x, "y": {"field": "value", "type": "quantitative"}, "color": color},
                        },
                        {
                            "data": {"values": rows},
                            "mark": {"type": "point", "filled": True, "size": 70},
                            "encoding": {
                                "x": x,
                                "y": {
                                    "field": "median",
                                    "type": "quantitative",
                                    "title": y_title,
                                    "scale": {"zero": False},
                                },
                                "color": color,
                                "tooltip": [
                                    {"field": "label", "title": "configuration"},
                                    {"field": "median", "format": ".4g"},
                                    {"field": "min", "format": ".4g"},
                                    {"field": "max", "format": ".4g"},
                                    {"field": "n", "title": "runs"},
                                    {"field": "ratio", "title": "to the first"},
                                ],
                            },
                        },
                        {
                            "data": {"values": rows},
                            "mark": {"type": "text", "dy": -12, "fontSize": 10},
                            "encoding": {
                                "x": x,
                                "y": {"field": "median", "type": "quantitative"},
                                "text": {"field": "ratio"},
                            },
                        },
                    ],
                    "width": max(160, 70 * len(order)),
                    "height": 160,
                },
            )
        )
    return charts


def comparison_category_chart(rec: dict) -> Optional[Chart]:
    """The median ns/B per flame category, stacked per configuration and side."""
    units = rec.get("metric_units") or {}
    axes = _config_axes(rec)
    rows = []
    for key, per_config in (rec.get("metrics") or {}).items():
        if not is_category(key, units):
            continue
        side, cat = units[key]["label"].split(": ", 1)
        for i, r in enumerate(per_config):
            if i < len(axes) and _num(r.get("median")) is not None:
                rows.append(
                    {"configuration": axes[i]["label"], "side": side, "category": cat, "ns_per_byte": r["median"]}
                )
    if not rows:
        return None
    return Chart(
        "categories",
        "CPU ns/B by flame category: each configuration's median, per side",
        {
            "data": {"values": rows},
            "mark": "bar",
            "encoding": {
                "row": {"field": "side", "type": "nominal", "sort": list(sides.SIDES), "title": None},
                "y": {"field": "configuration", "type": "nominal", "sort": [a["label"] for a in axes], "title": None},
                "x": {"field": "ns_per_byte", "type": "quantitative", "stack": "zero", "title": "ns/B (median)"},
                "color": {"field": "category", "type": "nominal", "sort": list(categories.CATEGORIES)},
                "tooltip": [
                    {"field": "configuration"},
                    {"field": "side"},
                    {"field": "category"},
                    {"field": "ns_per_byte", "format": ".3f"},
                ],
            },
            "width": CHART_WIDTH,
        },
        section="categories",
    )


LOAD_PERCENTILES = ("p50", "p99", "p99.9")


def rr_load_points(rec: dict, records: Dict[str, dict]) -> List[dict]:
    """The latency against load curve of an rr comparison (a --vary of the
    period, the streams in flight, ...): per configuration, the median
    over its runs of the requests answered a second and of each delay
    percentile. Fewer than two configurations with requests: none."""
    axes = _config_axes(rec)
    per: Dict[int, List[dict]] = {}
    for r in rec.get("runs") or []:
        rr = _get(records.get(r.get("id")) or {}, "rr")
        i = r.get("config")
        if rr and isinstance(i, int) and i < len(axes) and _num(rr.get("requests_per_s")) is not None:
            per.setdefault(i, []).append(rr)
    if len(per) < 2:
        return []
    out = []
    for i, rrs in sorted(per.items()):
        load = statistics.median(x["requests_per_s"] for x in rrs)
        for p in LOAD_PERCENTILES:
            vals = [x["delay_ns"][p] for x in rrs if _num((x.get("delay_ns") or {}).get(p)) is not None]
            if vals:
                out.append(
                    {
                        "configuration": axes[i]["label"],
                        "requests_per_s": load,
                        "percentile": p,
                        "delay_ms": statistics.median(vals) / 1e6,
                    }
                )
    return out


def rr_load_chart(points: List[dict]) -> Chart:
    return Chart(
        "rr_load",
        "Response delay against load: each configuration's median requests/s and delay percentiles (ms)",
        {
            "data": {"values": points},
            "mark": {"type": "line", "point": True},
            "encoding": {
                "x": {"field": "requests_per_s", "type": "quantitative", "title": "requests answered per second"},
                "y": {"field": "delay_ms", "type": "quantitative", "title": "delay (ms)", "scale": {"type": "log"}},
                "color": {"field": "percentile", "type": "nominal", "title": None, "sort": list(LOAD_PERCENTILES)},
                "order": {"field": "requests_per_s", "type": "quantitative"},
                "tooltip": [
                    {"field": "configuration"},
                    {"field": "percentile"},
                    {"field": "requests_per_s", "format": ",.0f"},
                    {"field": "delay_ms", "format": ".3f"},
                ],
            },
            "width": CHART_WIDTH,
            "height": CHART_HEIGHT,
        },
    )


def comparison_distribution_charts(rec: dict, records: Dict[str, dict]) -> List[Chart]:
    """Latency and download-time CDFs per configuration, pooled over its
    runs (read from their run directories), and an rr comparison's delay
    against its load."""
    axes = _config_axes(rec)
    rr_points, downloads = [], {}
    histograms: Dict[str, List[str]] = {}
    for r in rec.get("runs") or []:
        run = records.get(r.get("id"))
        i = r.get("config")
        if run is None or not isinstance(i, int) or i >= len(axes):
            continue
        label = axes[i]["label"]
        enc = _get(run, "rr", "histogram")
        if enc:
            histograms.setdefault(label, []).append(enc)
        for d in _get(run, "downloads", "each") or []:
            if _num(d.get("complete_s")) is not None:
                downloads.setdefault(label, []).append(d["complete_s"] * 1e3)
    for label, encoded in histograms.items():
        rr_points += hdr_cdf(*encoded, series=label)
    out = []
    load = rr_load_points(rec, records)
    if load:
        out.append(rr_load_chart(load))
    if rr_points:
        out.append(
            cdf_chart("rr_cdf", "Response delay per configuration, CDF over its runs (ms)", {}, "delay (ms)", rr_points)
        )
    if downloads:
        out.append(
            cdf_chart(
                "download_cdf",
                "Download time per configuration, CDF over its runs (ms)",
                downloads,
                "download time (ms)",
            )
        )
    return out


def comparison_flames(cdir: Path, rec: dict) -> List[Flame]:
    fd = rec.get("flame_diff")
    fd = fd if isinstance(fd, dict) else {}
    out = []
    for side, d in (fd.get("sides") if isinstance(fd.get("sides"), dict) else {}).items():
        d = d if isinstance(d, dict) and isinstance(d.get("svg"), (str, type(None))) else {}
        svg = _svg_of(cdir / d["svg"]) if d.get("svg") else None
        note = "" if svg else ("no samples on this side" if not d.get("svg") else f"{d['svg']} is missing")
        out.append(
            Flame(
                f"flame-diff-{side}",
                f"{side}: run {fd.get('b')} against run {fd.get('a')} (red: B costs more)",
                svg,
                note,
            )
        )
    return out


def comparison_page(
    rec: Optional[dict], cdir: Path, cid: str, problems: List[str], printer: Callable, records: Dict[str, dict]
) -> Page:
    rec = rec or {}
    configs, runs = (v if isinstance(v, list) else [] for v in (rec.get("configs"), rec.get("runs")))
    labels = [c.get("label") for c in configs if isinstance(c, dict)]
    page = Page(
        "comparison",
        cid,
        f"qprof comparison {cid}: " + (", ".join(map(str, labels)) or "no configurations"),
        str(rec.get("status") or "unreadable"),
        list(problems),
    )
    try:
        page.tables_html = tables_html(printer, {**rec, "path": str(cdir)})
    except DAMAGED as e:
        page.problems.append(f"its tables cannot be drawn from this record ({type(e).__name__}: {e})")
        page.tables_html = _fields_html(rec)
    if not problems:
        try:
            page.card = comparison_card(rec)
        except DAMAGED as e:
            page.problems.append(f"its summary cannot be drawn from this record ({type(e).__name__}: {e})")
    try:
        cat = comparison_category_chart(rec)
        page.charts += ([cat] if cat else []) + metric_charts(rec) + comparison_distribution_charts(rec, records)
    except DAMAGED as e:
        page.problems.append(f"its charts cannot all be drawn ({type(e).__name__}: {e})")
    page.flames = comparison_flames(cdir, rec)
    missing = [r["id"] for r in runs if isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"] not in records]
    if missing:
        page.notes.append(
            f"{len(missing)} run directories could not be read ({', '.join(map(str, missing))}): "
            "the distributions leave them out; the figures come from comparison.json."
        )
    return page


# --- writing ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed in one script (window.vegaEmbed),
    from the installed vl-convert-python: nothing is fetched."""
    import vl_convert

    return vl_convert.javascript_bundle()


def _script_json(obj) -> str:
    """JSON safe inside <script>: no '</' can close it."""
    return json.dumps(obj, separators=(",", ":")).replace("</", "<\\/")


_SVG_HEIGHT = re.compile(rb'<svg[^>]*?\sheight="(\d+)')

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
.qp-problem { background: #fde8e8; border: 2px solid #c00; padding: .6em 1em; margin: 1em 0; }
.qp-problem strong { color: #c00; }
.qp-note { color: #555; font-size: .9em; }
.qp-card { border: 1px solid #b8c7d3; border-left: 6px solid #2a6f97; background: #f4f8fb; padding: .2em 1.2em .5em;
  margin: 1em 0; max-width: 80em; }
.qp-card h2 { border: none; margin: .4em 0 .2em 0; }
.qp-card ul { margin: .2em 0; padding-left: 1.2em; }
.qp-card li { margin: .2em 0; line-height: 1.35; }
.qp-fig { font-weight: 600; font-variant-numeric: tabular-nums; }
.qp-fig[data-beyond="true"] { color: #1a5e8a; }
li.qp-warn { color: #7a4d00; }
.qp-nav { font-size: .9em; }
.qp-tables { overflow-x: auto; }
table.qp-table { border-collapse: collapse; font-size: 13px; margin: .4em 0 1.2em 0; }
table.qp-table caption { text-align: left; font-weight: 600; padding: .2em 0; white-space: nowrap; }
table.qp-table th, table.qp-table td { padding: .15em .7em; border-bottom: 1px solid #e6e6e6; vertical-align: top; }
table.qp-table th { background: #f0f0f0; text-align: left; }
table.qp-table .qp-r { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.qp-table tr.qp-end td { border-bottom: 1px solid #888; }
.qp-line { margin: .3em 0; font-size: 13px; }
.qp-pre { font-size: 12px; line-height: 1.25; }
.qp-charts { display: flex; flex-wrap: wrap; gap: 1.2em; }
.qp-figure { border: 1px solid #ddd; padding: .5em; }
.qp-figure h3 { font-size: .95em; margin: 0 0 .4em 0; }
.qp-flame { width: 100%; border: 1px solid #ddd; }
table.qp-fields th { text-align: left; vertical-align: top; padding-right: 1em; }
"""

SCRIPT = """
(function () {
  const charts = JSON.parse(document.getElementById('qp-specs').textContent);
  for (const [id, spec] of Object.entries(charts)) {
    const el = document.getElementById(id);
    vegaEmbed(el, spec, {mode: 'vega-lite', renderer: 'svg', actions: false})
      .then(() => { el.dataset.rendered = '1'; })
      .catch((e) => { el.dataset.failed = String(e); console.error('chart ' + id + ': ' + e); });
  }
})();
"""


def _flame_html(f: Flame) -> str:
    e = _html.escape
    if f.svg is None:
        return f'<h3>{e(f.title)}</h3><p class="qp-note">Not drawn: {e(f.note)}</p>'
    raw = f.svg.encode()
    m = _SVG_HEIGHT.search(raw)
    height = int(m.group(1)) + 8 if m else 600
    src = "data:image/svg+xml;base64," + base64.b64encode(raw).decode()
    return (
        f'<h3>{e(f.title)}</h3><iframe class="qp-flame" id="{e(f.name)}" title="{e(f.title)}" '
        f'style="height:{height}px" src="{src}"></iframe>'
    )


def _fig_html(f: Fig) -> str:
    """A figure: its text, and the value it was written from (repr: every
    digit the record holds), for a reader of the page to check."""
    e = _html.escape
    value = "" if f.value is None else repr(float(f.value))
    beyond = "" if f.beyond is None else f' data-beyond="{str(f.beyond).lower()}"'
    return f'<span class="qp-fig" data-key="{e(f.key)}" data-value="{value}"{beyond}>{e(f.text)}</span>'


def card_html(page: Page) -> str:
    """The summary card: a sentence per finding, its figures marked."""
    items = []
    for f in page.card:
        text = "".join(_fig_html(p) if isinstance(p, Fig) else _html.escape(p) for p in f.parts)
        warn = " qp-warn" if f.warn else ""
        items.append(f'<li class="qp-finding{warn}" data-finding="{_html.escape(f.name)}">{text}</li>')
    return f'<section class="qp-card" id="qp-summary"><h2>Summary</h2><ul>{"".join(items)}</ul></section>'


def html(page: Page) -> str:
    """The page as one HTML document with every script and datum inlined."""
    e = _html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(page.title)}</title>",
        f"<style>{STYLE}</style>",
        f"<script>{vega_bundle()}</script>",
        "</head><body>",
        f'<h1>{e(page.title)}</h1><p class="qp-note" data-status="{e(page.status)}">{page.kind} {e(page.id)}, '
        f"status <b>{e(page.status)}</b>; written by qprof {e(__version__)}</p>",
    ]
    if page.problems:
        items = "".join(f"<li>{e(p)}</li>" for p in page.problems)
        parts.append(
            f'<div class="qp-problem" id="qp-problem"><strong>{e(page.status.upper())}</strong>: '
            f"this report shows only what the record holds.<ul>{items}</ul></div>"
        )
    if page.card:
        parts.append(card_html(page))
    sections = [("categories", "Where the CPU went"), ("flames", "Flame graphs"), ("charts", "Charts")]
    sections = [
        (k, t) for k, t in sections if (page.flames if k == "flames" else any(c.section == k for c in page.charts))
    ] + [("tables", "Every table")]
    parts.append(
        '<p class="qp-nav">On this page: '
        + " · ".join(f'<a href="#qp-{k}">{e(t.lower())}</a>' for k, t in sections)
        + "</p>"
    )
    specs = {}
    for key, title in sections:
        parts.append(f'<h2 id="qp-{key}">{e(title)}</h2>')
        if key == "tables":
            parts.append(page.tables_html)
        elif key == "flames":
            parts += [_flame_html(f) for f in page.flames]
        else:
            parts.append('<div class="qp-charts">')
            for c in (c for c in page.charts if c.section == key):
                cid = f"chart-{c.name}"
                specs[cid] = c.spec
                note = f'<p class="qp-note">{e(c.note)}</p>' if c.note else ""
                parts.append(
                    f'<div class="qp-figure"><h3>{e(c.title)}</h3><div class="qp-chart" id="{e(cid)}" '
                    f'data-chart="{e(c.name)}"></div>{note}</div>'
                )
            parts.append("</div>")
    for n in page.notes:
        parts.append(f'<p class="qp-note">{e(n)}</p>')
    parts.append(f'<script type="application/json" id="qp-specs">{_script_json(specs)}</script>')
    parts.append(f"<script>{SCRIPT}</script>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def open_in_browser(paths: List[Path], say: Callable[[str], None] = print) -> None:
    """Open each file (a report, a flame graph) with xdg-open, and say so;
    without xdg-open, say where the file is."""
    opener = shutil.which("xdg-open")
    for path in paths:
        if opener is None:
            say(f"xdg-open is not installed; open {path} in a web browser.")
            continue
        # Detached: a browser started by xdg-open outlives qprof and is the user's.
        subprocess.Popen(
            [opener, str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        say(f"opened {path}")
