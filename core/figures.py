# SPDX-License-Identifier: GPL-2.0-only
"""The headline figures, each declared once: its key, where the record
holds it, its unit, which way is better, its label, and what capture it
needs. `qprof compare` (describe/comparison.py), `qprof check`
(describe/check.py), the run history's figure columns (history.py),
OpenMetrics (flamegraphs/openmetrics.py) and the report's charts
(present/html.py) all read this table; a new figure is one row here.

A figure is read from one place in a record (`path`), converted where
the record keeps another unit (seconds shown as ms) or derived from the
dict found there (the share of datagrams lost). A flame category's ns/B
counts only from a usable capture: a complete one, or, where a CPU missed
samples (`flame.complete` false), a side the cputhread probe weighted by
its threads' on-CPU time (`flame.weighting`, `flame.sides.<side>.weighting`;
flamegraphs/weighting.py), which readers mark as weighted. Any other
side of an incomplete capture undercounts, so its categories are left
out (absent), never taken as measured.

Pure: records in, numbers out.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

SIDES = ("client", "server", "system")  # whose CPU a per-side figure divides


def get(obj, *path):
    """The value at path (dict keys, or list indices), None where any step
    is missing or null."""
    for p in path:
        if isinstance(obj, dict):
            obj = obj.get(p)
        elif isinstance(obj, list) and isinstance(p, int) and -len(obj) <= p < len(obj):
            obj = obj[p]
        else:
            return None
        if obj is None:
            return None
    return obj


def number(v) -> Optional[float]:
    """v when it is a number (a bool is not), else None."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def complete_capture(rec: dict) -> bool:
    """A record with a flame capture on which no CPU missed samples."""
    flame = get(rec, "flame")
    return isinstance(flame, dict) and bool(flame) and flame.get("complete") is not False


def weighted_side(rec: dict, side: Optional[str]) -> bool:
    """An incomplete capture whose side was weighted by its threads' on-CPU time."""
    return (
        not complete_capture(rec)
        and get(rec, "flame", "weighting") is not None
        and isinstance(get(rec, "flame", "sides", side, "weighting"), dict)
    )


def weighted_capture(rec: dict) -> bool:
    """An incomplete capture with at least one weighted side."""
    return any(weighted_side(rec, s) for s in (get(rec, "flame", "sides") or {}))


def usable_capture(rec: dict, side: Optional[str]) -> bool:
    """Whether the side's flame categories may be read: complete, or weighted."""
    return complete_capture(rec) or weighted_side(rec, side)


# --- conversions: the record's unit to the figure's ---------------------------------


def _s_to_ms(v) -> Optional[float]:
    return None if number(v) is None else v * 1e3


def _s_to_us(v) -> Optional[float]:
    return None if number(v) is None else v * 1e6


def _ns_to_ms(v) -> Optional[float]:
    return None if number(v) is None else v / 1e6


def _loss_share(window) -> Optional[float]:
    """Of the datagrams the server's window saw or lost, the share lost."""
    if not isinstance(window, dict):
        return None
    lost, got = number(window.get("lost")), number(window.get("datagrams"))
    if lost is None or got is None:
        return None
    total = got + lost
    return lost / total if total else None


@dataclass(frozen=True)
class Figure:
    key: str  # the comparison record's metrics key
    label: str
    unit: str  # as printed: "ns/B", "ms", "share" (0..1), "" for a count or an index
    path: Tuple[Any, ...]  # where in run.json
    convert: Optional[Callable[[Any], Optional[float]]] = None  # the value at path -> the figure
    lower_is_better: bool = True
    needs_complete_capture: bool = False  # a flame category: absent where a CPU missed samples, unless weighted
    headline: bool = False  # check holds a run to it; the history and OpenMetrics carry it
    short: str = ""  # its name in `qprof check`'s verdict
    side: Optional[str] = None  # a per-side CPU figure's side, or a category's
    category: Optional[str] = None  # a flame category's name
    column: Optional[str] = None  # its column in the run history, where it is indexed
    family: Optional[str] = None  # its OpenMetrics family, qprof_<family>_<base unit>
    about: str = ""  # one sentence: what it is (OpenMetrics' HELP)

    def value(self, rec: dict) -> Optional[float]:
        """The figure in a record, or None where the record does not hold it
        (or holds it from a capture it may not be read from)."""
        if self.needs_complete_capture and not usable_capture(rec, self.side):
            return None
        v = get(rec, *self.path)
        return self.convert(v) if self.convert else number(v)


TABLE: Tuple[Figure, ...] = (
    Figure(
        "throughput_gbps",
        "throughput",
        "Gbit/s",
        ("throughput_gbps",),
        lower_is_better=False,
        headline=True,
        short="throughput",
        column="throughput_gbps",
        family="throughput",
        about="Receiver goodput over the window.",
    ),
    *(
        Figure(
            f"{s}_ns_per_byte",
            f"{s} CPU",
            "ns/B",
            ("cpu", s, "ns_per_byte", "total"),
            headline=True,
            short=f"{s} ns/B",
            side=s,
            column=f"{s}_ns_per_byte",
            family="cpu",
        )
        for s in SIDES
    ),
    *(
        Figure(f"{s}_syscalls_per_mb", f"{s} syscalls", "per MB", ("syscalls", s, "syscalls_per_mb"))
        for s in ("client", "server")
    ),
    *(
        Figure(
            f"download_{t}_p{q}",
            f"{label} p{q}",
            "ms",
            ("downloads", "percentiles", f"{t}_s", f"p{q}"),
            _s_to_ms,
            column="download_p50_ms" if (t, q) == ("complete", 50) else None,
        )
        for t, label in (("handshake", "handshake"), ("first_byte", "first byte"), ("complete", "download time"))
        for q in (50, 95)
    ),
    Figure("download_cpu_ms", "CPU per download", "ms", ("downloads", "cpu_per_download_s", "all"), _s_to_ms),
    # The key's doubled p ("rr_delay_pp50") is what stored comparisons hold.
    *(
        Figure(
            f"rr_delay_p{q}",
            f"response delay {q}",
            "ms",
            ("rr", "delay_ns", q),
            _ns_to_ms,
            column="rr_delay_p50_ms" if q == "p50" else None,
        )
        for q in ("p50", "p95", "p99", "p99.9", "p99.99")
    ),
    Figure("rr_jitter_percent", "jitter", "%", ("rr", "jitter_percent")),
    Figure("rr_requests_per_s", "requests per second", "/s", ("rr", "requests_per_s"), lower_is_better=False),
    *(
        Figure(f"rr_{s}_cpu_us", f"{s} CPU per request", "us", ("rr", "per_request", "cpu_s", s), _s_to_us)
        for s in ("client", "server", "machine")
    ),
    Figure("rr_connections_per_1000", "connections per 1000 requests", "", ("rr", "connections_per_1000_requests")),
    # Seed 003's data volume: what each request and each response put on the
    # wire (the sender's device, all of it), and HTTP's share (--app).
    *(
        Figure(f"rr_{w}_wire_bytes", f"wire bytes per {n}", "B", ("rr", "data_volume", way, "wire_bytes"))
        for w, n, way in (("request", "request", "client_to_server"), ("response", "response", "server_to_client"))
    ),
    *(
        Figure(f"rr_{w}_framing_bytes", f"HTTP framing per {n}", "B", ("rr", "data_volume", way, "framing_bytes"))
        for w, n, way in (("request", "request", "client_to_server"), ("response", "response", "server_to_client"))
    ),
    # Seed 001's video QoE (--pattern video), and what a second of media cost.
    Figure("video_startup_delay_ms", "video startup delay", "ms", ("video", "startup_delay_s"), _s_to_ms),
    Figure("video_stall_s", "video stall time", "s", ("video", "stall_s")),
    Figure("video_stalls", "video stalls", "", ("video", "stalls")),
    *(
        Figure(
            f"video_{s}_cpu_ms_per_media_s",
            f"{s} CPU per second of video",
            "ms",
            ("video", "cpu_s_per_media_s", s),
            _s_to_ms,
        )
        for s in ("client", "server")
    ),
    Figure("handshakes_per_s", "handshakes per second", "/s", ("handshakes", "per_s"), lower_is_better=False),
    *(
        Figure(
            f"handshake_{s}_cpu_us",
            f"{s} CPU per handshake",
            "us",
            ("handshakes", "per_handshake", "cpu_s", s),
            _s_to_us,
        )
        for s in ("client", "server", "machine")
    ),
    *(
        Figure(f"handshake_time_{q}", f"handshake time {q}", "ms", ("handshakes", "handshake_ns", q), _ns_to_ms)
        for q in ("p50", "p99")
    ),
    Figure("streams_jain_index", "streams' fairness (Jain)", "", ("streams", "jain_index"), lower_is_better=False),
    Figure(
        "link_utilisation",
        "link utilisation",
        "share",
        ("link", "saturation", "link_utilisation"),
        lower_is_better=False,
    ),
    Figure(
        "client_bytes_per_send_call",
        "client bytes/send call",
        "B",
        ("syscalls", "client", "bytes_per_send_call"),
        lower_is_better=False,
    ),
    Figure(
        "server_bytes_per_recv_call",
        "server bytes/recv call",
        "B",
        ("syscalls", "server", "bytes_per_recv_call"),
        lower_is_better=False,
    ),
    Figure(
        "client_datagrams_per_send_call",
        "client packets/send call",
        "",
        ("syscalls", "client", "datagrams_per_send_call"),
        lower_is_better=False,
    ),
    Figure(
        "server_datagrams_per_recv_call",
        "server packets/recv call",
        "",
        ("syscalls", "server", "datagrams_per_recv_call"),
        lower_is_better=False,
    ),
    Figure(
        "client_tx_gso_share",
        "client GSO super-packet share",
        "",
        ("offload", "observed", "evidence", "client_tx_gso_share"),
        lower_is_better=False,
    ),
    Figure("udp_loss_share", "datagrams lost", "share", ("workload", "server", "window"), _loss_share),
)
FIGURE: Dict[str, Figure] = {f.key: f for f in TABLE}


class UnitOfWork(NamedTuple):
    """A pattern whose CPU is drawn and exported per unit of work, not per
    byte (flamegraphs/sides.py): the unit's name, one and many, where the
    record counts the window's units, where it keeps each side's measured
    CPU for one (side keys below it), and the verb its units take."""

    one: str
    many: str
    count: Tuple[str, ...]
    cpu_s: Tuple[str, ...]
    done: str  # "answered", "completed"


# By pattern, beside the figures its section holds; every other pattern's
# CPU is per byte.
UNITS_OF_WORK: Dict[str, UnitOfWork] = {
    "rr": UnitOfWork("request", "requests", ("rr", "responses"), ("rr", "per_request", "cpu_s"), "answered"),
    "handshakes": UnitOfWork(
        "handshake", "handshakes", ("handshakes", "handshakes"), ("handshakes", "per_handshake", "cpu_s"), "completed"
    ),
}


def unit_of_work(pattern) -> Optional[UnitOfWork]:
    """The pattern's unit of work (a record's config.pattern, which may be
    anything a damaged record holds), or None: per byte."""
    return UNITS_OF_WORK.get(pattern) if isinstance(pattern, str) else None


HEADLINE: Tuple[Figure, ...] = tuple(f for f in TABLE if f.headline)
INDEXED: Tuple[Figure, ...] = tuple(f for f in TABLE if f.column)  # the run history's figure columns

# OpenMetrics names a family by its base unit: the table's unit -> (base unit, factor).
BASE_UNITS: Dict[str, Tuple[str, float]] = {"Gbit/s": ("bits_per_second", 1e9), "ns/B": ("nanoseconds_per_byte", 1.0)}


def side_cpu(side: str) -> Figure:
    """The side's CPU per byte: what its categories add up to."""
    return next(f for f in HEADLINE if f.side == side and f.category is None)


def categories(records: List[dict]) -> List[Figure]:
    """ns/B per flame category per side, for the categories any record has
    (in the order first seen); each counts only from a complete capture
    or a weighted side."""
    seen = []
    for rec in records:
        by_side = get(rec, "flame", "sides")
        for side, fig in by_side.items() if isinstance(by_side, dict) else ():
            cats = get(fig, "categories_ns_per_byte")
            for cat in cats if isinstance(cats, dict) else ():
                if (side, cat) not in seen:
                    seen.append((side, cat))
    return [
        Figure(
            f"{side}_{cat}_ns_per_byte",
            f"{side}: {cat}",
            "ns/B",
            ("flame", "sides", side, "categories_ns_per_byte", cat),
            needs_complete_capture=True,
            short=f"{side} {cat} ns/B",
            side=side,
            category=cat,
        )
        for side, cat in seen
    ]
