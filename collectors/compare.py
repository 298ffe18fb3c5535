# SPDX-License-Identifier: GPL-2.0-only
"""`qprof compare`: a matrix of configurations run interleaved and
repeated (A B C A B C ...), each configuration summarised by its median
and spread, with ratios against the first and a flag where a difference
is larger than the run-to-run spread.

Interleaving spreads this shared machine's drift over every
configuration alike, so ratios taken within one comparison hold even
when absolute figures wander between sessions.
"""

import statistics
from dataclasses import asdict, dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Callable, Dict, List, Optional

from qprof import errors, remains
from qprof.rundir import COMPARISON_RECORD, COMPARISONS_SUBDIR, RunDir

from . import environment, link, options, runner, transports

# The --vary keys: the options collectors/options.py marks as variable,
# each parsed and range-checked by its own Option, then the whole
# configuration by runner.check_options like `qprof run`'s flags.
VARY_KEYS = options.VARY_KEYS


@dataclass
class Config:
    stack: str
    overrides: Dict[str, str]  # vary key -> value as the user wrote it
    opts: options.RunOptions

    @property
    def label(self) -> str:
        return " ".join([self.stack] + [f"{k}={v}" for k, v in self.overrides.items()])


def parse_vary(items: List[str]) -> Dict[str, List[str]]:
    """['gso=on,off'] -> {'gso': ['on', 'off']}, refusing unknown keys,
    empty or repeated values and keys given twice."""
    out: Dict[str, List[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise errors.BadValue(f"--vary '{item}' is not KEY=V1,V2; write it like gso=on,off.")
        if key not in VARY_KEYS:
            raise errors.BadValue(f"unknown --vary key '{key}'; the keys are: {', '.join(VARY_KEYS)}.")
        if key in out:
            raise errors.BadValue(f"--vary {key} is given twice; list all its values in one: {key}=V1,V2.")
        vals = [v.strip() for v in values.split(",")]
        if not all(vals):
            raise errors.BadValue(f"--vary {key} has an empty value in '{values}'; write it like {key}=V1,V2.")
        if len(set(vals)) != len(vals):
            raise errors.BadValue(f"--vary {key} lists a value twice ('{values}'); give each once.")
        out[key] = vals
    return out


def build_matrix(
    base: options.RunOptions, stack_names: List[str], vary: Dict[str, List[str]], fixed_flags: List[str]
) -> List[Config]:
    """Every configuration, each checked as `qprof run` would check it,
    before anything runs. fixed_flags: the vary keys the user also gave
    as plain flags (a conflict)."""
    for key in vary:
        if key in fixed_flags:
            raise errors.BadValue(f"--{key} is both fixed and varied; drop one of --{key} and --vary {key}.")
    configs = []
    keys = list(vary)
    for stack in stack_names:
        for values in product(*(vary[k] for k in keys)):
            overrides = dict(zip(keys, values))
            label = Config(stack, overrides, base).label
            try:
                fields = {
                    options.BY_NAME[k].field: options.BY_NAME[k].parse(v)
                    for k, v in overrides.items()
                    if k not in options.LINK_PARTS
                }
                fields["link"] = fields.get("link", base.link)
                for k in options.LINK_PARTS:
                    if k in overrides:
                        fields["link"] = link.with_key(fields["link"], k, overrides[k])
                opts = replace(base, stack=stack, **fields)
                runner.check_options(opts)
            except errors.QprofError as e:
                raise type(e)(f"configuration '{label}': {e.sentence}")
            configs.append(Config(stack, overrides, opts))
    if len(configs) < 2:
        raise errors.BadValue("a comparison needs at least two configurations; add --vary KEY=V1,V2 or --stacks S1,S2.")
    return configs


def parse_stacks(text: str) -> List[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise errors.BadValue("--stacks is empty; list them like --stacks quic,tcp-tls,tcp.")
    if len(set(names)) != len(names):
        raise errors.BadValue(f"--stacks lists a stack twice ('{text}'); give each once.")
    for n in names:
        if n not in transports.STACKS:
            raise errors.UnknownStack(f"unknown stack '{n}'; valid stacks are: {', '.join(transports.STACKS)}.")
    return names


# --- figures --------------------------------------------------------------------


def _get(rec: dict, *path):
    v = rec
    for p in path:
        if not isinstance(v, dict) or v.get(p) is None:
            return None
        v = v[p]
    return v


def _loss_share(rec: dict) -> Optional[float]:
    w = _get(rec, "workload", "server", "window")
    if not w or w.get("lost") is None or w.get("datagrams") is None:
        return None
    total = w["datagrams"] + w["lost"]
    return w["lost"] / total if total else None


def _ms(s: Optional[float]) -> Optional[float]:
    return None if s is None else s * 1e3


def _us(s: Optional[float]) -> Optional[float]:
    return None if s is None else s * 1e6


def _ms_ns(ns: Optional[float]) -> Optional[float]:
    return None if ns is None else ns / 1e6


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    get: Callable[[dict], Optional[float]]
    lower_is_better: bool = True
    side: Optional[str] = None  # a flame category's: its side
    category: Optional[str] = None  # and the category


METRICS: List[Metric] = [
    Metric("throughput_gbps", "throughput", "Gbit/s", lambda r: r.get("throughput_gbps"), lower_is_better=False),
    *[
        Metric(
            f"{s}_ns_per_byte", f"{s} CPU", "ns/B", (lambda s: lambda r: _get(r, "cpu", s, "ns_per_byte", "total"))(s)
        )
        for s in ("client", "server", "system")
    ],
    *[
        Metric(
            f"{s}_syscalls_per_mb",
            f"{s} syscalls",
            "per MB",
            (lambda s: lambda r: _get(r, "syscalls", s, "syscalls_per_mb"))(s),
        )
        for s in ("client", "server")
    ],
    *[
        Metric(
            f"download_{t}_p{q}",
            f"{label} p{q}",
            "ms",
            (lambda t, q: lambda r: _ms(_get(r, "downloads", "percentiles", f"{t}_s", f"p{q}")))(t, q),
        )
        for t, label in (("handshake", "handshake"), ("first_byte", "first byte"), ("complete", "download time"))
        for q in (50, 95)
    ],
    Metric(
        "download_cpu_ms",
        "CPU per download",
        "ms",
        lambda r: _ms(_get(r, "downloads", "cpu_per_download_s", "all")),
    ),
    *[
        Metric(
            f"rr_delay_p{q}",
            f"response delay {q}",
            "ms",
            (lambda q: lambda r: _ms_ns(_get(r, "rr", "delay_ns", q)))(q),
        )
        for q in ("p50", "p95", "p99")
    ],
    Metric("rr_jitter_percent", "jitter", "%", lambda r: _get(r, "rr", "jitter_percent")),
    *[
        Metric(
            f"rr_{s}_cpu_us",
            f"{s} CPU per request",
            "us",
            (lambda s: lambda r: _us(_get(r, "rr", "per_request", "cpu_s", s)))(s),
        )
        for s in ("client", "server")
    ],
    Metric(
        "rr_connections_per_1000",
        "connections per 1000 requests",
        "",
        lambda r: _get(r, "rr", "connections_per_1000_requests"),
    ),
    Metric(
        "streams_jain_index",
        "streams' fairness (Jain)",
        "",
        lambda r: _get(r, "streams", "jain_index"),
        lower_is_better=False,
    ),
    Metric(
        "link_utilisation",
        "link utilisation",
        "share",
        lambda r: _get(r, "link", "saturation", "link_utilisation"),
        lower_is_better=False,
    ),
    Metric(
        "client_bytes_per_send_call",
        "client bytes/send call",
        "B",
        lambda r: _get(r, "syscalls", "client", "bytes_per_send_call"),
        lower_is_better=False,
    ),
    Metric(
        "server_bytes_per_recv_call",
        "server bytes/recv call",
        "B",
        lambda r: _get(r, "syscalls", "server", "bytes_per_recv_call"),
        lower_is_better=False,
    ),
    Metric(
        "client_datagrams_per_send_call",
        "client packets/send call",
        "",
        lambda r: _get(r, "syscalls", "client", "datagrams_per_send_call"),
        lower_is_better=False,
    ),
    Metric(
        "server_datagrams_per_recv_call",
        "server packets/recv call",
        "",
        lambda r: _get(r, "syscalls", "server", "datagrams_per_recv_call"),
        lower_is_better=False,
    ),
    Metric(
        "client_tx_gso_share",
        "client GSO super-packet share",
        "",
        lambda r: _get(r, "offload", "observed", "evidence", "client_tx_gso_share"),
        lower_is_better=False,
    ),
    Metric("udp_loss_share", "datagrams lost", "share", _loss_share),
]
METRIC = {m.key: m for m in METRICS}


def _complete_flame(rec: dict) -> bool:
    """A capture in which some CPU missed samples undercounts every frame
    on it; its categories are left out (absent), not taken as measured."""
    return bool(rec.get("flame")) and rec["flame"].get("complete") is not False


def category_metrics(records: List[dict]) -> List[Metric]:
    """ns/B per flame category per side, for the categories any run has;
    only from complete captures."""
    seen = []
    for rec in records:
        for side, fig in (_get(rec, "flame", "sides") or {}).items():
            for cat in fig.get("categories_ns_per_byte") or {}:
                if (side, cat) not in seen:
                    seen.append((side, cat))
    return [
        Metric(
            f"{side}_{cat}_ns_per_byte",
            f"{side}: {cat}",
            "ns/B",
            (
                lambda side, cat: (
                    lambda r: (
                        _get(r, "flame", "sides", side, "categories_ns_per_byte", cat) if _complete_flame(r) else None
                    )
                )
            )(side, cat),
            side=side,
            category=cat,
        )
        for side, cat in seen
    ]


def summarize(values: List[Optional[float]]) -> dict:
    """Median and spread of the measured values; unmeasured ones are left
    out and counted, never taken as zero."""
    got = [v for v in values if v is not None]
    if not got:
        return {"n": 0, "absent": len(values), "median": None, "min": None, "max": None, "values": values}
    return {
        "n": len(got),
        "absent": len(values) - len(got),
        "median": statistics.median(got),
        "min": min(got),
        "max": max(got),
        "values": values,
    }


def beyond_spread(a: dict, b: dict) -> Optional[bool]:
    """True when the two configurations' ranges do not overlap, so the
    difference is larger than the run-to-run spread (for n runs each, a
    chance of 2/C(2n, n) under no difference: 0.1 at n=3, 0.008 at n=5).
    None with fewer than three measured runs each (at two, disjoint ranges
    happen by chance one time in three)."""
    if a["n"] < 3 or b["n"] < 3:
        return None
    return a["max"] < b["min"] or b["max"] < a["min"]


def table(configs: List[Config], runs: List[dict], metrics: List[Metric]) -> Dict[str, List[dict]]:
    """metric key -> per configuration: summary, ratio to the first, beyond_spread."""
    out = {}
    for m in metrics:
        rows = []
        for i, _ in enumerate(configs):
            rows.append(summarize([m.get(r["record"]) for r in runs if r["config"] == i]))
        base = rows[0]
        for row in rows:
            row["ratio"] = row["median"] / base["median"] if row["median"] is not None and base["median"] else None
            row["beyond_spread"] = beyond_spread(base, row) if row is not base else None
        if any(r["n"] for r in rows):
            out[m.key] = rows
    return out


def representative(runs: List[dict], config: int) -> Optional[dict]:
    """The configuration's run with the median system CPU per byte (the
    lower middle for an even count) among those with a complete capture
    if any: the one its flame graph stands for."""
    mine = [
        r
        for r in runs
        if r["config"] == config and _get(r["record"], "cpu", "system", "ns_per_byte", "total") is not None
    ]
    if any(_complete_flame(r["record"]) for r in mine):
        mine = [r for r in mine if _complete_flame(r["record"])]
    if not mine:
        return None
    mine.sort(key=lambda r: r["record"]["cpu"]["system"]["ns_per_byte"]["total"])
    return mine[(len(mine) - 1) // 2]


# --- running ----------------------------------------------------------------------


@dataclass
class CompareOptions:
    configs: List[Config]
    repeat: int = 3
    runs_dir: str = "runs"
    vary: Dict[str, List[str]] = field(default_factory=dict)


def flame_diff(runs_dir: Path, out_dir: Path, a: dict, b: dict) -> dict:
    """The differential graphs of two runs (B against A, per byte, or per
    request for rr runs: the keys say which), or why there are none; a
    comparison without stacks is still a comparison."""
    from qprof.flamegraphs import diff, sides

    try:
        run_a, run_b = sides.load_run(runs_dir, a["id"]), sides.load_run(runs_dir, b["id"])
        drawn = diff.render(run_a, run_b, sides.SIDES, lambda side: out_dir / f"flame-diff-{side}.svg")
    except (errors.NoStacks, errors.BadStacks, errors.IncompatibleRuns) as e:
        return {"a": a["id"], "b": b["id"], "absent": e.sentence}
    return {
        "a": a["id"],
        "b": b["id"],
        "sides": {
            d.side: {
                "svg": d.svg.name if d.svg else None,
                f"a_ns_per_{d.unit.name}": d.a_ns_per_unit,
                f"b_ns_per_{d.unit.name}": d.b_ns_per_unit,
                "change_percent": d.change_percent,
            }
            for d in drawn
        },
    }


def run(copts: CompareOptions, on_run: Callable[[int, int, Config], None], on_done: Callable[[dict], None]) -> dict:
    """Every configuration `repeat` times, interleaved; the comparison
    record, written as it goes so a failure leaves what was done."""
    root = Path(copts.runs_dir) / COMPARISONS_SUBDIR
    with remains.exclusive("compare"), RunDir(root, record_name=COMPARISON_RECORD) as cdir:
        cdir.record.update(
            {
                "kind": "comparison",
                "order": "interleaved",
                "repeat": copts.repeat,
                "vary": copts.vary,
                "configs": [
                    {"label": c.label, "stack": c.stack, "overrides": c.overrides, "options": asdict(c.opts)}
                    for c in copts.configs
                ],
                "runs": [],
            }
        )
        cdir.save()
        runs = []
        total = copts.repeat * len(copts.configs)
        for rep in range(copts.repeat):
            for i, cfg in enumerate(copts.configs):
                on_run(len(runs) + 1, total, cfg)
                rec = runner.run(replace(cfg.opts), on_progress=lambda msg: None)
                entry = {
                    "id": rec["id"],
                    "config": i,
                    "repeat": rep,
                    "path": str(Path("..") / ".." / rec["id"]),
                    "record": rec,
                }
                runs.append(entry)
                cdir.record["runs"].append({k: v for k, v in entry.items() if k != "record"})
                cdir.save()
                on_done(entry)
        records = [r["record"] for r in runs]
        metrics = METRICS + category_metrics(records)
        result = {
            **{k: v for k, v in cdir.record.items() if k not in ("id", "status")},
            "path": str(cdir.path),
            "environment": environment.describe(),
            "metrics": table(copts.configs, runs, metrics),
            "incomplete_captures": [
                r["id"] for r in runs if r["record"].get("flame") and not _complete_flame(r["record"])
            ],
            "metric_units": {
                m.key: {"label": m.label, "unit": m.unit, "lower_is_better": m.lower_is_better} for m in metrics
            },
        }
        a, b = representative(runs, 0), representative(runs, 1)
        result["flame_diff"] = (
            flame_diff(Path(copts.runs_dir), cdir.path, a["record"], b["record"])
            if a and b
            else {"absent": "no run of the first two configurations has CPU figures"}
        )
        cdir.complete(result)
        return cdir.record
