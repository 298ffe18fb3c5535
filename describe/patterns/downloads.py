# SPDX-License-Identifier: GPL-2.0-only
"""The record's `downloads` for `--pattern download`: every download as
the client reported it (workloads/wl.h, the "download" event), their
percentiles, and what each cost: CPU per side and bytes and packets on
the wire each way, over the window that holds all of them.

Times are the client's, from the start of its connect: the handshake
(QUIC: to CONNECTED; TCP: connect() returned; TLS: SSL_connect() returned),
the first payload byte, and the last byte received and checked (the
download time). A figure a stack does not give is absent, never zero.
"""

import statistics
from dataclasses import replace
from typing import Dict, List, Optional

from qprof import errors
from qprof.describe import derive, options, transports
from qprof.describe.patterns import Pattern

PERCENTILES = (5, 25, 50, 75, 95)
TIMES = {
    "tcp_handshake_ns": "tcp_handshake_s",
    "handshake_ns": "handshake_s",
    "first_byte_ns": "first_byte_s",
    "complete_ns": "complete_s",
}
COUNTS = ("retransmits", "lost_packets", "packets_sent", "packets_received")


def percentiles(values: List[float]) -> Optional[Dict[str, float]]:
    """p5 ... p95 by linear interpolation between closest ranks (numpy's
    default, `statistics.quantiles(method="inclusive")`); None without values."""
    if not values:
        return None
    if len(values) == 1:
        return {f"p{p}": values[0] for p in PERCENTILES}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {f"p{p}": cuts[p - 1] for p in PERCENTILES}


def each(event: dict, served: Optional[dict]) -> dict:
    """One download: the client's times and what it was told of resumption,
    and each side's own connection counters (the server's are the data's:
    it sent them, so its retransmissions are the download's)."""
    out = {"i": event["i"], "bytes": event["bytes"]}
    for key, name in TIMES.items():
        out[name] = event[key] / 1e9 if key in event else None
    for key in ("resumed", "early_data"):
        out[key] = event.get(key)
    out["client"] = {k: event.get(k) for k in COUNTS}
    out["server"] = None
    if served is not None:
        out["server"] = {k: served.get(k) for k in COUNTS + ("resumed", "early_data")}
    return out


def describe(reports: Dict[str, list], size: int, count: int, resume: bool, rec: dict) -> dict:
    """From the client's download events and the record's core (bytes, CPU)
    and probe figures; refuses a set of downloads that is not the one asked
    for (VerifyFailed: the workload already checked every byte)."""
    events = [e for e in reports["client"] if e["event"] == "download"]
    served = {e["i"]: e for e in reports["server"] if e["event"] == "served"}
    rows = [each(e, served.get(e["i"])) for e in events]
    if [r["i"] for r in rows] != list(range(count)) or any(r["bytes"] != size for r in rows):
        raise errors.VerifyFailed(
            f"the client reported {len(rows)} downloads of sizes {sorted({r['bytes'] for r in rows})}, "
            f"not {count} of {size} bytes in order; see the run's logs."
        )
    out = {
        "size": size,
        "count": count,
        "resume": resume,
        "each": rows,
        "percentiles": {name: percentiles([r[name] for r in rows if r[name] is not None]) for name in TIMES.values()},
        "resumed": _how_many(rows, "resumed"),
        "early_data": _how_many(rows, "early_data"),
        "served": len(served),
        "server_retransmits": _total(rows, "retransmits"),
        "server_lost_packets": _total(rows, "lost_packets"),
        "cpu_per_download_s": _cpu(rec, count),
        "wire_per_download": _wire(rec, count),
    }
    return out


def _cpu(rec: dict, count: int) -> dict:
    """On-CPU seconds per download from the kernel's schedstat (nanosecond
    resolution; /proc/stat's ticks are 10 ms, coarser than a download):
    each process, and every task but idle (`all`: the two and cpu.others)."""
    cpu = rec["cpu"]
    sides = {s: cpu[s].get("oncpu_schedstat_s") for s in ("client", "server")}
    sides["others"] = (cpu.get("others") or {}).get("oncpu_schedstat_s")
    out = {s: (v / count if v is not None else None) for s, v in sides.items()}
    out["all"] = sum(sides.values()) / count if None not in sides.values() else None
    return out


def _total(rows: List[dict], key: str) -> Optional[int]:
    """The server's counter summed over the downloads (None: never given)."""
    said = [r["server"][key] for r in rows if r["server"] and r["server"][key] is not None]
    return sum(said) if said else None


def _how_many(rows: List[dict], key: str) -> Optional[int]:
    """How many downloads the stack said yes for (None: it never said)."""
    said = [r[key] for r in rows if r[key] is not None]
    return sum(said) if said else None


def _wire(rec: dict, count: int) -> Optional[dict]:
    """Bytes and packets on the wire per download, each way, from the
    packets probe (headers, ACKs, handshakes and control included)."""
    dev = derive.packets_devices(rec)
    if not dev.get("client") or not dev.get("server"):
        return None
    out = {}
    for name, side in (("server_to_client", "server"), ("client_to_server", "client")):
        tx = dev[side]["tx"]
        out[name] = {"bytes": tx["wire_bytes"] / count, "packets": tx["wire_packets"] / count}
    return out


# --- its step of plan.resolve, and its section of the record ------------------


def resolve(opts: "options.RunOptions") -> "options.RunOptions":
    for name, given in (
        ("duration", opts.duration_s is not None),
        ("bytes", opts.bytes is not None),
        ("warmup", bool(opts.warmup_s)),
    ):
        if given:
            raise errors.StackCannot(
                f"--{name} does not apply to --pattern download, whose window is its --count downloads "
                f"of --size bytes each; drop --{name}."
            )
    if opts.streams != 1:
        raise errors.StackCannot("--pattern download uses one stream per connection; drop --streams.")
    if opts.resume:
        transports.refuse_resume(opts.stack)
    return replace(options.filled(opts, "size", "count"), warmup_s=0.0)


SECTIONS = {"downloads": lambda opts, m, rec: describe(m.reports, opts.size, opts.count, opts.resume, rec)}


ROW = Pattern(
    "download",
    ("server",),
    ("client",),
    None,
    "count",
    "the server sends --size bytes on a new connection, --count times, one after another",
    events=True,
    unit="downloads",
    event="download",
    server_event="served",
    counting=lambda o: f"{o.count} downloads of {o.size:,} bytes, each on a new connection",
    options=("size", "count", "resume"),
    resolve=resolve,
    sections=SECTIONS,
    connections="opens a connection per download",
)
