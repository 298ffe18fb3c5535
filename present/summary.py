# SPDX-License-Identifier: GPL-2.0-only
"""A run's answer on one screen: what ran, how fast, what each side's CPU
cost per byte (or per request, per handshake) and against the floor,
where it went, what to be wary of, and where to look next.

`findings(rec)` reads the record into a Summary (figures and short
sentences, nothing drawn); the terminal (`qprof run`, `qprof show`) and
the HTML report's summary card each draw it their own way, so the two
say the same thing. Every table `qprof run` printed before is `qprof
show RUN --all`; why a figure is a dash is `qprof show RUN --why`
(absences)."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from rich.console import Console
from rich.markup import escape

from qprof import figures
from qprof.describe import transports
from qprof.present.format import ABSENT, num

SIDES = ("client", "server", "system")
# The categories a side's summary names, largest first.
TOP_CATEGORIES = 3
# At most this many lines on a terminal (issue 43): tests/test_summary.py holds every stored record to it.
MAX_LINES = 25


@dataclass
class Summary:
    run_id: str
    what: str  # stack, library and version
    where: str  # pattern, where, link, placement
    rate: str  # throughput or the pattern's own rate, the window, the bytes and how they were checked
    unit: str  # "ns/B", "us/request", "us/handshake"
    cpu: Dict[str, Optional[float]]  # side -> CPU per unit (client, server, system = the machine)
    floor: Dict[str, Optional[float]]  # side -> times the floor, or {} where there is none
    floor_absent: Optional[str]
    top: Dict[str, List[Tuple[str, float, float]]]  # side -> [(category, per unit, share of its graph)]
    pattern: List[str] = field(default_factory=list)  # the pattern's own figures, a line each
    warnings: List[str] = field(default_factory=list)
    absent: bool = False  # some figure shown is a dash: --why says why
    dashes: List[Tuple[str, str]] = field(default_factory=list)  # (what is a dash, its place in the record)
    next: List[str] = field(default_factory=list)
    # The figures the lines above are written from, for a reader that draws
    # them its own way (the report's card): core/figures.py's keys -> value.
    headline: Dict[str, Optional[float]] = field(default_factory=dict)
    moved: str = ""  # the rate's line after its throughput: the window, the bytes and how they were checked


def _library(rec: dict) -> str:
    env, stack = rec["environment"], transports.STACKS.get(rec["stack"])
    if stack is not None and stack.programs:
        names = [
            Path((env.get("quic_library") or {}).get(s, {}).get("program") or ABSENT).name for s in ("client", "server")
        ]
        return f"your programs: client {names[0]}, server {names[1]}"
    if transports.msquic(rec["stack"]):
        out = f"msquic {env.get('msquic_version') or ABSENT}"
    elif env.get("quic_library"):
        lib = env["quic_library"]
        out = f"{lib.get('name') or ABSENT} {lib.get('version') or ABSENT}"
    else:
        tr = rec.get("transport") or {}
        out = "kernel TCP" if tr.get("protocol") == "tcp" else "kernel UDP"
        if tr.get("tls") in ("user", "kernel"):
            out += f", TLS {tr.get('tls_version')} {tr.get('tls_cipher') or ''}".rstrip()
            if tr["tls"] == "kernel":
                out += f" (kTLS {tr.get('ktls_label')})"
    server = (env.get("quic_library") or {}).get("server")
    if server and server.get("name") and rec["config"].get("server_stack"):
        out += f" → server {server['name']} {server.get('version') or ABSENT}"
    return out


def _where(rec: dict) -> str:
    cfg, env = rec["config"], rec["environment"]
    topo = env.get("topology") or {}
    out = topo.get("kind", ABSENT)
    if cfg.get("server"):
        out = f"server on {cfg['server']}"
    if env.get("emulated"):
        out += " in the guest"
    out += f", link {cfg['link']}" if cfg.get("link") else ", no link"
    out += f", pinned {cfg['cpus']}" if cfg.get("cpus") else ", not pinned"
    return out


def _pattern_name(rec: dict) -> str:
    cfg = rec["config"]
    name = cfg.get("pattern") or "bulk"
    if name == "bulk":
        way = (rec.get("direction") or {}).get("direction") or cfg.get("direction")
        name += f" {way}" if way else ""
        if cfg.get("proto"):
            name += f" ({cfg['proto']})"
    if cfg.get("app"):
        name += f" over {cfg['app']}"
    return name


def _moved(rec: dict) -> str:
    how = {"content": "verified", "sizes": "counted (sizes)", "none": "counted by eBPF, not verified"}
    said = how.get(rec.get("verification") or "content", "verified")
    if rec.get("verified") is False:
        said = "NOT verified"
    return f"over {num(rec.get('window_s'), '{:.2f}')} s, {_size(rec['bytes'])} {said}"


def rate_text(gbps: Optional[float]) -> str:
    """A throughput in Gbit/s from 1 Gbit/s, in Mbit/s below."""
    return f"{num(gbps, '{:.2f}')} Gbit/s" if gbps is None or gbps >= 1 else f"{gbps * 1e3:.3g} Mbit/s"


def _size(n: int) -> str:
    """Bytes in the largest binary unit they reach, three figures."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


# The pattern's own headline figures (core/figures.py's keys), as one short line: (text, key, format) each.
PATTERN_LINES = {
    "download": (
        ("downloads: p50 ", "download_complete_p50", " ms"),
        (", p95 ", "download_complete_p95", " ms"),
        (" (handshake p50 ", "download_handshake_p50", " ms)"),
    ),
    "rr": (
        ("requests: ", "rr_requests_per_s", "/s"),
        (", delay p50 ", "rr_delay_pp50", " ms"),
        (", p99 ", "rr_delay_pp99", " ms"),
    ),
    "handshakes": (
        ("handshakes: ", "handshakes_per_s", "/s"),
        (", time p50 ", "handshake_time_p50", " ms"),
        (", p99 ", "handshake_time_p99", " ms"),
    ),
    "video": (
        ("video: startup ", "video_startup_delay_ms", " ms"),
        (", ", "video_stalls", " stalls"),
        (", ", "video_stall_s", " s stalled"),
    ),
}


def _pattern_lines(rec: dict) -> List[str]:
    parts = PATTERN_LINES.get(rec["config"].get("pattern") or "bulk")
    if not parts:
        return []
    return ["  " + "".join(f"{pre}{num(figures.FIGURE[k].value(rec), '{:,.3g}')}{post}" for pre, k, post in parts)]


def _cpu(rec: dict) -> Tuple[str, Dict[str, Optional[float]]]:
    """Each side's CPU per the run's unit: per byte, or per unit of work (us)."""
    work = figures.unit_of_work(rec["config"].get("pattern"))
    if work is None:
        # The sides by schedstat (exact at any length), the machine by /proc/stat's ticks.
        per = {s: (rec["cpu"].get(s) or {}).get("ns_per_byte") or {} for s in SIDES}
        return "ns/B", {s: per[s].get("total" if s == "system" else "oncpu") for s in SIDES}
    per = figures.get(rec, *work.cpu_s) or {}
    us = lambda v: None if v is None else v * 1e6  # noqa: E731
    return f"us/{work.one}", {s: us(per.get("machine" if s == "system" else s)) for s in SIDES}


def _top(rec: dict, unit: str) -> Dict[str, List[Tuple[str, float, float]]]:
    """Each side's largest categories: its per-unit share of the side's graph."""
    out = {}
    sides = ((rec.get("flame") or {}).get("sides")) or {}
    for side in ("client", "server"):
        fig = sides.get(side) or {}
        cats = fig.get("categories_ns_per_byte") or {}
        total = sum(cats.values())
        if not total:
            continue
        scale = 1.0
        work = figures.unit_of_work(rec["config"].get("pattern"))
        if work is not None:
            n = figures.get(rec, *work.count)
            scale = rec["bytes"] / n / 1e3 if n else 0.0  # ns/B -> us per unit
        ranked = sorted(((c, v) for c, v in cats.items() if v > 0), key=lambda cv: -cv[1])[:TOP_CATEGORIES]
        out[side] = [(c, v * scale, v / total) for c, v in ranked]
    return out


# A warning's line at most (the rest is in `qprof show RUN --all`).
WARNING_CHARS = 74


def _short(text: str) -> str:
    return text if len(text) <= WARNING_CHARS else text[: WARNING_CHARS - 1].rstrip() + "…"


def _warnings(rec: dict) -> List[str]:
    from qprof.present.tables import record_warnings

    out = [_short(w) for w in record_warnings(rec)]
    flame = rec.get("flame") or {}
    if flame.get("complete") is False:
        how = "weighted by on-CPU time" if flame.get("weighting") else "undercount"
        out.append(f"stack samples missed CPU time: categories {how}")
    loss = rec.get("kernel_loss") or {}
    if loss.get("dropped") and not rec.get("link"):
        out.append(_short("the kernel dropped packets: " + "; ".join(loss.get("where") or [])))
    if rec.get("verification") == "none":
        out.append("nothing verified the bytes: the syscalls probe counted them (counted_by)")
    return out


def findings(rec: dict) -> Summary:
    unit, cpu = _cpu(rec)
    floor = rec.get("floor") or {}
    rid = rec.get("id") or ABSENT
    s = Summary(
        run_id=rid,
        what=f"{rec['stack']}: {_library(rec)}",
        where=f"{_pattern_name(rec)}, {_where(rec)}",
        rate=f"{rate_text(rec.get('throughput_gbps'))} {_moved(rec)}",
        unit=unit,
        cpu=cpu,
        floor=dict(floor.get("times_floor") or {}),
        floor_absent=floor.get("absent"),
        top=_top(rec, unit),
        pattern=_pattern_lines(rec),
        warnings=_warnings(rec),
    )
    where_cpu = lambda side: (  # noqa: E731
        f"cpu.{side}" if unit == "ns/B" else ".".join(figures.unit_of_work(rec["config"]["pattern"]).cpu_s)
    )
    s.dashes = [(f"{side} CPU {unit}", where_cpu(side)) for side, v in cpu.items() if v is None]
    if unit == "ns/B":
        s.dashes += [(f"{side} × the floor", "floor") for side, v in s.floor.items() if v is None]
        if s.floor_absent:
            s.dashes.append(("× the floor", "floor"))
    for _, key, _ in PATTERN_LINES.get(rec["config"].get("pattern") or "bulk", ()):
        if figures.FIGURE[key].value(rec) is None:
            s.dashes.append((figures.FIGURE[key].label, ".".join(map(str, figures.FIGURE[key].path))))
    s.absent = bool(s.dashes)
    s.headline = {"throughput_gbps": rec.get("throughput_gbps")}
    s.headline.update(
        (key, figures.FIGURE[key].value(rec))
        for _, key, _ in PATTERN_LINES.get(rec["config"].get("pattern") or "bulk", ())
    )
    s.moved = _moved(rec)
    s.next = [f"qprof show {rid} --all", f"qprof show {rid} --why", f"qprof flame {rid}", f"qprof report {rid}"]
    return s


def print_summary(rec: dict, console: Optional[Console] = None) -> None:
    """The summary on a terminal: at most MAX_LINES lines at 80 columns."""
    console = console or Console()
    s = findings(rec)
    console.print(f"[bold]{escape(s.what)}[/]")
    console.print(f"  {escape(s.where)}")
    console.print(f"  [bold]{escape(s.rate)}[/]")
    for line in s.pattern:
        console.print(escape(line))
    fmt = "{:.3f}" if s.unit == "ns/B" else "{:,.1f}"
    console.print(f"  {'CPU ' + s.unit:<16}{'client':>10}{'server':>10}{'machine':>10}")
    console.print(f"  {'on CPU':<16}" + "".join(f"{num(s.cpu[k], fmt):>10}" for k in SIDES))
    if s.unit != "ns/B":
        pass  # the floor is per byte: `qprof show RUN --all` has it
    elif s.floor:
        console.print(f"  {'× the floor':<16}" + "".join(f"{num(s.floor.get(k), '{:.1f}'):>10}" for k in SIDES))
    elif s.floor_absent:
        console.print(f"  {'× the floor':<16}" + "".join(f"{ABSENT:>10}" for _ in SIDES))
    for side, cats in s.top.items():
        shown = ", ".join(f"{c} {share * 100:.0f}%" for c, _, share in cats)
        console.print(f"  {side + ':':<8}{escape(shown)}")
    for w in s.warnings:
        console.print(f"  [yellow]! {escape(w)}[/]")
    if s.absent:
        console.print(f"  {ABSENT} = not measured (--why says why)")
    console.print(f"more: qprof show {s.run_id} --all (every table), --why (each {ABSENT})")
    console.print(f"      qprof flame {s.run_id}, qprof report {s.run_id}")


def absences(rec, path: str = "") -> Dict[str, List[str]]:
    """Every reason the record gives for a figure it does not hold:
    reason -> the fields it explains ("absent", "*absent_reason", a
    probe's "reason" beside status "absent")."""
    out: Dict[str, List[str]] = {}

    def add(reason, where):
        if isinstance(reason, str) and reason:
            out.setdefault(reason, []).append(where)

    if isinstance(rec, dict):
        for k, v in rec.items():
            where = f"{path}.{k}" if path else k
            if k == "absent" or k.endswith("absent_reason") or (k == "reason" and rec.get("status") == "absent"):
                add(v, path or k)
            elif isinstance(v, (dict, list)):
                for reason, places in absences(v, where).items():
                    out.setdefault(reason, []).extend(places)
    elif isinstance(rec, list):
        for i, v in enumerate(rec):
            for reason, places in absences(v, f"{path}[{i}]").items():
                out.setdefault(reason, []).extend(places)
    return out


def reasons_for(found: Dict[str, List[str]], place: str) -> List[str]:
    """The reasons (of absences(rec)) that explain the figure at place."""
    return [r for r, places in found.items() if any(place.startswith(p) or p.startswith(place) for p in places)]


def print_why(rec: dict, console: Optional[Console] = None) -> None:
    """Why each dash of the summary is a dash, then every reason the
    record gives for a figure it does not hold, once per reason, with the
    fields it explains."""
    console = console or Console()
    found = absences(rec)
    dashes = findings(rec).dashes
    console.print(f"run {rec.get('id')}: the summary's {ABSENT} (not measured)" + (":" if dashes else ": none"))
    for what, place in dashes:
        why = reasons_for(found, place)
        console.print(f"[bold]{escape(what)}[/] ({escape(place)})")
        for r in why or [
            "the record gives no reason: it was made before qprof said why, or its pattern has no such figure"
        ]:
            console.print(f"  {escape(r)}", soft_wrap=True)
    if found:
        console.print(f"every reason in the record ({len(found)}), with the fields it explains:")
    for reason, places in found.items():
        console.print(f"[bold]{escape(', '.join(sorted(set(places))))}[/]")
        console.print(f"  {escape(reason)}", soft_wrap=True)


# --- a comparison -------------------------------------------------------------------


@dataclass
class Configured:
    """One configuration's figure in a comparison: the median of its runs,
    their range, and the ratio of medians to the first configuration."""

    label: str
    n: int
    median: Optional[float]
    low: Optional[float]
    high: Optional[float]
    ratio: Optional[float]  # None for the first, or where either median is absent
    beyond_spread: Optional[bool]  # the ranges do not overlap; None where a range is one run


@dataclass
class Compared:
    key: str
    label: str
    unit: str
    lower_is_better: Optional[bool]
    configs: List[Configured]


@dataclass
class ComparisonSummary:
    comparison_id: str
    labels: List[str]
    repeat: int
    runs: int
    figures: List[Compared]  # tables.RATIO_KEYS the record holds, in its order
    warnings: List[str] = field(default_factory=list)


def comparison_findings(rec: dict) -> ComparisonSummary:
    """A comparison's answer as `qprof show ID` prints it
    (tables.print_comparison_summary): each figure of RATIO_KEYS per
    configuration, the ratio of medians to the first and whether the
    ranges overlap; and what to be wary of (captures left out or weighted)."""
    from qprof.present.tables import RATIO_KEYS

    labels = [str(c["label"]) for c in rec["configs"]]
    units = rec["metric_units"]
    out = ComparisonSummary(rec.get("id") or ABSENT, labels, rec.get("repeat") or 1, len(rec.get("runs") or []), [])
    for key, rows in rec["metrics"].items():
        if key not in RATIO_KEYS:
            continue
        u = units[key]
        out.figures.append(
            Compared(
                key,
                u["label"],
                u["unit"],
                u.get("lower_is_better"),
                [
                    Configured(
                        label,
                        r["n"],
                        r["median"],
                        r.get("min"),
                        r.get("max"),
                        None if i == 0 else r.get("ratio"),
                        r.get("beyond_spread"),
                    )
                    for i, (label, r) in enumerate(zip(labels, rows))
                ],
            )
        )
    skipped = rec.get("incomplete_captures") or []
    if skipped:
        out.warnings.append(
            f"the categories leave out {len(skipped)} of {out.runs} runs whose capture missed samples on some CPU"
        )
    weighted = max((r.get("weighted") or 0 for rows in rec["metrics"].values() for r in rows), default=0)
    if weighted:
        out.warnings.append(
            f"categories from up to {weighted} run(s) per configuration are weighted by on-CPU time (flame.weighting)"
        )
    return out
