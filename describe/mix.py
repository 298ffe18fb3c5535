# SPDX-License-Identifier: GPL-2.0-only
"""`qprof run --mix STACK:N,...`: flows of one or more stacks, each its
own client and server process, started together through one bottleneck
(the --link on the veth pair).

This module is pure: parsing and checking a mix, each flow's options, and
the record from a mix's Measurement (describe/measurement.py: each
flow's FlowMeasurement). collectors/runner.py measures it as it measures
a run: N flows of one plan (describe/plan.py).

Where a flow's figures come from:
- goodput: its receiver's own count of verified bytes, over the window by
  the receiver's clock (as a single run's throughput);
- retransmissions: its sender's stack's own count, TCP_INFO's
  tcpi_total_retrans (segments), msquic's SendSuspectedLostPackets or
  the other QUIC libraries' lost packets (the stack row's retransmits_source);
- CPU: its two processes' on-CPU time by schedstat, per byte it moved.
The eBPF probes and perf attach to one client and one server process, so
a mix runs without them (the record says so); a single run profiles a
stack, a mix measures how stacks share a link.
"""

import re
import statistics
from dataclasses import dataclass, replace
from typing import Dict, List, Optional

from qprof import errors
from qprof.describe import cpu, link, options, patterns, transports
from qprof.describe.derive import jain_index
from qprof.describe.patterns import rr

# Each flow is two processes (and msquic's a worker thread per CPU each):
# past this many flows per CPU they measure the scheduler, not the link.
MAX_FLOWS_PER_CPU = 16
# The patterns a mix's flows run: those whose row says they mix.
MIX_PATTERNS = tuple(p.name for p in patterns.PATTERNS.values() if p.mixes)
_ENTRY = re.compile(r"([a-z][a-z0-9-]*)(?::(\d+))?(?::([a-z]+))?", re.ASCII)


@dataclass(frozen=True)
class Flow:
    index: int  # 1-based, in the order the mix names them
    stack: str
    pattern: str  # bulk or rr
    port: int


def parse(text: str, default_pattern: str, base_port: int, cpus: int) -> List[Flow]:
    """The flows of `quic:1,tcp-tls:2,tcp:1:rr`: STACK[:COUNT[:PATTERN]],
    a count of 1 and the run's --pattern when left out. Ports follow
    --port, one per flow."""
    entries = []
    for item in (s.strip() for s in text.split(",")):
        m = _ENTRY.fullmatch(item)
        if not m:
            raise errors.BadMix(
                f"--mix entry '{item}' is not STACK:COUNT or STACK:COUNT:PATTERN; write it like quic:1,tcp:2."
            )
        if len((m.group(2) or "").lstrip("0")) > 6:  # past every cap below, and past what int() reads
            raise errors.BadMix(f"--mix entry '{item}' asks for more flows than any machine runs at once; lower it.")
        stack, count, pattern = m.group(1), int(m.group(2) or 1), m.group(3) or default_pattern
        if stack not in options.STACK_NAMES:
            raise errors.UnknownStack(
                f"--mix names an unknown stack '{stack}'; the stacks are: {', '.join(options.STACK_NAMES)}."
            )
        if count == 0:
            raise errors.BadMix(f"--mix entry '{item}' has no flows; give it a count of 1 or more, or drop it.")
        if pattern not in MIX_PATTERNS:
            raise errors.BadMix(
                f"--mix entry '{item}' asks for pattern '{pattern}'; a mix's flows are "
                f"{patterns.words(MIX_PATTERNS, 'or')}, each a flow beside the others "
                f"for one --duration; run --pattern {pattern} without --mix."
            )
        row = patterns.PATTERNS[pattern]
        if row.connections and transports.datagram(stack):
            raise errors.BadMix(
                f"--mix entry '{item}': --pattern {pattern} {row.connections}, and {stack} has no connection; "
                f"use quic or a TCP stack for {pattern}."
            )
        entries.append((Flow(0, stack, pattern, 0), count))
    n = sum(count for _, count in entries)  # the flows are made only once they fit
    cap = MAX_FLOWS_PER_CPU * cpus
    if n > cap:
        raise errors.BadMix(
            f"--mix asks for {n} flows, more than this machine runs at once ({cap}: "
            f"{MAX_FLOWS_PER_CPU} per CPU, each flow being two processes); lower the counts."
        )
    if base_port + n - 1 > 65535:
        raise errors.BadMix(
            f"--mix's {n} flows take ports {base_port} to {base_port + n - 1}, past 65535; lower --port."
        )
    flows = [f for f, count in entries for _ in range(count)]
    return [replace(f, index=i + 1, port=base_port + i) for i, f in enumerate(flows)]


def check(opts, cpus: int) -> List[Flow]:
    """What a mix refuses as a whole (each flow's own options are checked
    as a single run's by the caller; describe/plan.py also sets what a mix
    fixes: no probes and no stack samples, see the module's docstring)."""
    row = patterns.row(opts)
    if row.window != "timed":
        raise errors.BadMix(
            f"--mix runs flows side by side for --duration, and {row.unit} end one by one; "
            f"drop --pattern {row.name}, or run the {row.unit} without --mix."
        )
    if opts.bytes is not None:
        raise errors.BadMix("--mix runs for --duration, so its flows share one window; drop --bytes.")
    if opts.direction is not None:
        raise errors.BadMix("--mix's bulk flows upload through the one bottleneck; drop --direction.")
    if opts.conns is not None:
        raise errors.BadMix("--mix's flows are one connection each (more flows: raise the counts); drop --conns.")
    if opts.streams != 1:
        raise errors.BadMix(
            "--mix's flows are one connection of one stream each (more flows: raise the counts); drop --streams."
        )
    flows = parse(opts.mix, opts.pattern, opts.port, cpus)
    for o in options.OPTIONS:
        value = getattr(opts, o.field)
        if value in (None, False) or value == o.default or not (o.stacks or o.patterns):
            continue
        mixed = [p for p in o.patterns if p in MIX_PATTERNS]
        if o.patterns and not mixed:
            raise errors.BadMix(
                f"--{o.name} applies to --pattern {patterns.words(o.patterns)}, and a mix's flows are "
                f"{patterns.words(MIX_PATTERNS)}; drop --{o.name}."
            )
        if not any(takes(o, f) for f in flows):
            whose = f"{', '.join(o.stacks)} flows" if o.stacks else "flows"
            whose = f"{patterns.words(mixed)} {whose}" if mixed else whose
            fix = f"add :{mixed[0]} to one" if mixed and not o.stacks else "add such a flow"
            raise errors.BadMix(
                f"--{o.name} applies to {whose}, and --mix '{opts.mix}' has none; drop --{o.name} or {fix}."
            )
    return flows


def takes(o: options.Option, flow: Flow) -> bool:
    """Whether an option applies to a flow: its stack and its pattern."""
    return (not o.stacks or flow.stack in o.stacks) and (not o.patterns or flow.pattern in o.patterns)


def flow_options(opts, flow: Flow):
    """One flow's options: the run's, for its stack, pattern and port; an
    option of another stack or pattern is left out (the mix as a whole was
    checked to use it somewhere)."""
    values = {"stack": flow.stack, "pattern": flow.pattern, "port": flow.port, "mix": None}
    for o in options.OPTIONS:
        if not takes(o, flow):
            values[o.field] = o.default
    return replace(opts, **values)


# --- what a mix measured, and its record ------------------------------------------------


@dataclass
class FlowMeasurement:
    flow: dict  # asdict(Flow)
    options: dict  # asdict of the flow's checked options
    pids: Dict[str, int]
    connected: dict  # the client's "connected" event
    marks: Dict[str, Dict[str, dict]]  # edge -> side -> the workload's mark
    cpu: Dict[str, Dict[str, dict]]  # edge -> side -> asdict(cpu.ProcessCpu)
    done: Dict[str, dict]  # side -> the workload's final report
    reports: Optional[List[dict]] = None  # rr: the client's events


def _delta(m: FlowMeasurement, side: str, key: str) -> int:
    return m.marks["end"][side][key] - m.marks["start"][side][key]


def _retransmits(m: FlowMeasurement, side: str) -> Optional[int]:
    a, b = m.marks["start"][side], m.marks["end"][side]
    if "conn_stats" in a and "conn_stats" in b:
        key = "send_suspected_lost_packets"
        return b["conn_stats"][key] - a["conn_stats"][key]
    if "tcp_info" in a and "tcp_info" in b:
        return b["tcp_info"]["total_retrans"] - a["tcp_info"]["total_retrans"]
    lost = [mark.get("quic_stats", {}).get("lost_packets") for mark in (a, b)]
    if None not in lost:
        return lost[1] - lost[0]
    return None


def _oncpu_s(m: FlowMeasurement, side: str) -> float:
    return m.cpu["end"][side]["oncpu_s"] - m.cpu["start"][side]["oncpu_s"]


def describe_flow(m: FlowMeasurement, cpu_window_s: float) -> dict:
    """One flow over the window: what its receiver verified, what its
    sender retransmitted, what its processes spent."""
    f = m.flow
    nbytes = _delta(m, "server", "app_bytes")
    seconds = _delta(m, "server", "t_ns") / 1e9
    oncpu = {side: _oncpu_s(m, side) for side in ("client", "server")}
    out = {
        "flow": f["index"],
        "stack": f["stack"],
        "pattern": f["pattern"],
        "port": f["port"],
        "bytes": nbytes,
        "window_s": seconds,
        "goodput_mbps": nbytes * 8 / seconds / 1e6 if seconds > 0 else None,
        "share": None,
        "tcp_congestion_control": m.done["client"].get("tcp_congestion_control"),
        "retransmits": _retransmits(m, "client"),
        "retransmits_source": transports.STACKS[f["stack"]].retransmits_source,
        "retransmits_per_mb": None,
        "oncpu_s": oncpu,
        "ns_per_byte": {side: oncpu[side] * 1e9 / nbytes if nbytes else None for side in oncpu},
        "cpu_utilisation": {side: oncpu[side] / cpu_window_s if cpu_window_s > 0 else None for side in oncpu},
        "rr": None,
    }
    if out["retransmits"] is not None and nbytes:
        out["retransmits_per_mb"] = out["retransmits"] / (nbytes / 1e6)
    if "rr" in patterns.PATTERNS[f["pattern"]].sections:  # its requests' figures, as a run's rr section
        o = m.options
        rec = {"cpu": {side: {"oncpu_schedstat_s": oncpu[side]} for side in oncpu}}
        out["rr"] = rr.describe(
            m.reports or [],
            m.marks["start"]["client"]["t_ns"],
            m.marks["end"]["client"]["t_ns"],
            o["period_s"],
            o["payload"],
            m.done["client"],
            rec,
            None,
            in_flight=o.get("streams", 1) if o.get("rr_mode") == "closed" else None,
        )
    return out


def by_stack(flows: List[dict]) -> Dict[str, dict]:
    """The bulk flows of each stack: how many, their mean goodput and its
    spread (sample standard deviation, as the seed's table), their share."""
    total = sum(f["bytes"] for f in flows)
    out: Dict[str, dict] = {}
    for stack in dict.fromkeys(f["stack"] for f in flows):
        mine = [f for f in flows if f["stack"] == stack]
        rates = [f["goodput_mbps"] for f in mine if f["goodput_mbps"] is not None]
        out[stack] = {
            "flows": len(mine),
            "goodput_mbps_mean": statistics.fmean(rates) if rates else None,
            "goodput_mbps_stdev": statistics.stdev(rates) if len(rates) > 1 else None,
            "share": sum(f["bytes"] for f in mine) / total if total else None,
            "jain_index": jain_index(f["bytes"] for f in mine),
        }
    return out


def bottleneck(link_rec: Optional[dict], flows_bytes: int) -> Optional[dict]:
    """The bottleneck's own counters on the data's direction (client to
    server): what it passed and dropped, and how the flows' verified bytes
    compare with what crossed it (headers and retransmissions make it
    less than 1)."""
    if link_rec is None:
        return None
    d = link_rec["directions"]["client_to_server"]
    window = d.get("window") or {}
    root = window.get("tbf") or window.get("netem")
    if root is None:
        return None
    return {
        "qdisc": "tbf" if "tbf" in window else "netem",
        **{k: root[k] for k in link.COUNTERS},
        "utilisation": d.get("utilisation"),
        "netem_drops_percent": d.get("netem_drops_percent"),
        "flows_bytes": flows_bytes,
        "flows_bytes_over_wire_bytes": flows_bytes / root["bytes"] if root["bytes"] else None,
    }


def describe(m) -> dict:
    """The record's figures for a mix (the caller adds id, config and the
    environment): each flow, the stacks' shares, Jain's index over the
    bulk flows, the system's CPU and the bottleneck."""
    start, end = m.edges["start"], m.edges["end"]
    cpu_window_s = (end["t_ns"] - start["t_ns"]) / 1e9
    system = cpu.SystemCpu(**end["system"]) - cpu.SystemCpu(**start["system"])
    ticks_absent = cpu.ticks_absent_reason(cpu_window_s)
    busy, idle = (None, None) if ticks_absent else (system.busy_s, system.idle_total_s)
    utilisation = cpu.utilisation(system, cpu_window_s)
    flows = [describe_flow(f, cpu_window_s) for f in m.flows]
    # The flows that send as fast as they can share the bottleneck: each one's share of their bytes.
    filling = [f for f in flows if patterns.PATTERNS[f["pattern"]].fills_link]
    filling_bytes = sum(f["bytes"] for f in filling)
    for f in filling:
        f["share"] = f["bytes"] / filling_bytes if filling_bytes else None
    link_rec = None
    if m.link is not None:
        text = m.options["link"]
        link_rec = link.describe(text, link.parse(text), m.link, {"start": start["qdiscs"], "end": end["qdiscs"]})
        busiest = max((u for f in flows for u in f["cpu_utilisation"].values() if u is not None), default=None)
        link.add_saturation(link_rec, cpu_window_s, utilisation, busiest, bool(filling))
    seconds = statistics.fmean(f["window_s"] for f in flows)
    every_byte = sum(f["bytes"] for f in flows)
    return {
        "bytes": every_byte,
        "window_s": seconds,
        "cpu_window_s": cpu_window_s,
        "throughput_gbps": every_byte * 8 / seconds / 1e9 if seconds > 0 else None,
        "link": link_rec,
        "mix": {
            "spec": m.options["mix"],
            "instruments": "goodput from each receiver's verified bytes, retransmissions from each sender's "
            "stack, CPU from each process's schedstat; no eBPF probes or stack samples in a mix",
            "flows": flows,
            "jain_index": jain_index(f["bytes"] for f in filling),
            # A bulk flow that verified no byte in the window: starved by
            # the others (a finding, not a failure; record_warnings says it).
            "starved": [f["flow"] for f in filling if f["bytes"] == 0],
            "by_stack": by_stack(filling),
            "system_cpu": {
                "busy_s": busy,
                "idle_s": idle,
                "utilisation": utilisation,
                "ticks_absent_reason": ticks_absent,
            },
            "bottleneck": bottleneck(link_rec, every_byte),
        },
    }
