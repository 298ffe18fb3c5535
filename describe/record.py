# SPDX-License-Identifier: GPL-2.0-only
"""run.json from a Measurement: one pure function, `describe`, that
derives every figure in one fixed order (each step reads only what the
steps before it wrote). Its inputs are the measurement and the folded
stacks beside it in the run directory; it reads no clock and no /proc, so
a stored measurement gives the same record again
(tests/test_record_golden.py).
"""

import copy
import statistics
from dataclasses import asdict, fields
from pathlib import Path
from typing import Dict, Optional

from qprof import errors
from qprof.describe import (
    cpu,
    derive,
    direction,
    external,
    floor,
    hosts,
    link,
    mix,
    netstat,
    offload,
    options,
    patterns,
    pinning,
    state,
    transports,
)
from qprof.describe.measurement import Measurement
from qprof.describe.transports import UDP_IP_HEADERS
from qprof.describe.window import Window, counter_delta, edge_sample, interval_figures
from qprof.flamegraphs import summary as flame_summary
from qprof.flamegraphs import weighting
from qprof.perbyte import side_bytes

MSQUIC_MAX_MTU = 1500  # msquic's default MaximumMtu


def run_options(m: Measurement) -> options.RunOptions:
    return _options(m.options)


def _options(kept: dict) -> options.RunOptions:
    known = {f.name for f in fields(options.RunOptions)}
    opts = {k: v for k, v in kept.items() if k in known}
    opts["probes"] = tuple(opts.get("probes", ()))
    return options.RunOptions(**opts)


def describe(m, run_path: Path) -> dict:
    """The record of a measurement: a run's (describe_run) or a mix's."""
    if m.is_mix:
        rec = {"stack": "mix", "config": m.options, **mix.describe(m)}
        for flow, fm in zip(rec["mix"]["flows"], m.flows):
            flow.update(mix_flow_proof(fm))
        rec["environment"] = m.environment
        rec["measured_at"] = m.measured_at
    else:
        rec = describe_run(m, run_path)
    if m.placement:
        rec.update(m.placement)
    return rec


def describe_run(m: Measurement, run_path: Path) -> dict:
    """The record of one run, in this order:
    1. the core: bytes, window, CPU, the workloads' counters (build_record);
    2. the probes' snapshots, the kernel's UDP and loss counters, the bind report;
    3. the stack samples: coverage, then per-side figures from the folded stacks
       (an incomplete capture weighted by the cputhread probe's threads, from 2);
    4. per-side syscall figures and cross-checks (need 1 and 2);
    5. what the observers cost (needs 2 and 3);
    6. the UDP drop cross-check (needs 2);
    7. GSO/GRO as observed (needs 4);
    8. the floor (needs 1's CPU);
    9. the emulated link, its counters, and what limited the run (needs 1);
    10. each download, its percentiles and costs (needs 1 and 2);
    11. request/response delays and what each request cost (needs 1 and 4);
        a video's playback and what each second of it cost (needs 1 and 3);
    12. each stream's share of a bulk transfer (needs 1);
    13. the window's intervals (needs 1)."""
    opts = run_options(m)
    rec = build_record(opts, m)
    if m.hosts is not None:
        rec["hosts"] = hosts.describe(m, rec["bytes"])
        rec["cpu"]["others"] = hosts.others(m, rec["bytes"])
    rec["probes"] = m.probes
    # The whole run's UDP counters of each namespace (the host's, on loopback).
    rec["kernel_udp"] = {side: counter_delta(m.udp["before"][side], m.udp["after"][side]) for side in m.udp["before"]}
    rec["listen"] = {"server_binds": m.server_binds}
    start, end = m.window.start.net, m.window.end.net
    rec["kernel_loss"] = netstat.losses(
        {side: counter_delta(start[side], end[side]) for side in ("client", "server")},
        counter_delta(start["softnet"], end["softnet"]),
        {side: counter_delta(m.devices["before"][side], m.devices["after"][side]) for side in m.devices["before"]},
    )
    loopback = m.environment["topology"]["kind"] == "loopback"
    if loopback:
        rec["kernel_loss"]["source"] += "; on loopback both sides read the host's namespace, other traffic included"
    flame = copy.deepcopy(m.perf)
    rec["flame"] = flame
    if flame is not None:
        flame.update(
            (rec.get("hosts") and hosts.sample_coverage(flame, rec, sample_coverage))
            or sample_coverage(
                flame["samples_per_cpu"], rec["cpu_window_s"], flame["sample_hz"], rec["environment"]["cpu_count"]
            )
        )
        flame.update(sides_sampled(flame, rec, m.pids))
        flame["sides"] = flame_summary.run_figures(rec, run_path / flame["stacks_dir"], m.pids)
        if flame["complete"] is False:
            # Usable where the cputhread probe could weight the client and
            # server by their threads' on-CPU time (compare/check: core/figures.py).
            weighted = any("weighting" in f for f in flame["sides"].values())
            flame["weighting"] = weighting.SOURCE if weighted else None
    sides = {side: transports.side_stack(opts, side) for side in ("client", "server")}
    rec.update(derive_probe_figures(rec, m.pids, direction.senders(opts), sides))
    rec["observers"] = derive.observer_cost(m.probes, rec["bytes"], flame)
    if transports.datagram(opts.stack) and not loopback:
        rec["crosscheck"].setdefault("server", {})["udp_drops"] = udp_drops(rec, m.done["client"], m.done["server"])
    rec["offload"] = offload_record(opts, m, rec)
    rec["floor"] = floor_record(opts, m, rec)
    rec["link"] = link_record(opts, m, rec)
    own = patterns.row(opts).sections
    for key in SECTIONS:
        rec[key] = own[key](opts, m, rec) if key in own else None
    rec["intervals"] = intervals_record(opts, m)
    rec["placement"] = pinning.record(opts.cpus, rec["cpu_threads"])
    return rec


def intervals_record(opts: options.RunOptions, m: Measurement) -> Optional[dict]:
    """The window cut into --interval pieces (the last one shorter), each
    one's goodput, CPU and transport state per side (describe/state.py),
    why a state value is null (once), and how steady the goodput was: the
    coefficient of variation over the whole intervals (None with fewer
    than two)."""
    if m.intervals is None:
        return None
    start = m.window.start.t_ns
    r = m.window.receiver
    points = [edge_sample(m.window.start, r), *m.intervals, edge_sample(m.window.end, r)]
    sources = state.sources_of(opts)
    samples = [
        {
            "start_s": (a["t_ns"] - start) / 1e9,
            "end_s": (b["t_ns"] - start) / 1e9,
            **interval_figures(a, b),
            "state": state.sides_interval(a, b, sources),
        }
        for a, b in zip(points, points[1:])
    ]
    whole = [s["gbps"] for s in samples[:-1] if s["gbps"] is not None]
    cv = statistics.stdev(whole) / statistics.fmean(whole) if len(whole) > 1 and statistics.fmean(whole) else None
    absent = state.absent_record(opts, samples)
    return {"interval_s": opts.interval_s, "samples": samples, "gbps_cv": cv, "state_absent": absent}


def link_record(opts: options.RunOptions, m: Measurement, rec: dict):
    """The emulated link (None without --link): what was asked, what the
    kernel has, each direction's qdisc counters over the window, and
    whether the link or the CPU limited the run. A run whose CPU saturated
    while its link was not full measured the emulator, not the link."""
    if m.link is None:
        return None
    spec = link.parse(opts.link)
    out = link.describe(opts.link, spec, m.link, {"start": m.window.start.qdiscs, "end": m.window.end.qdiscs})
    seconds = rec["cpu_window_s"]
    # schedstat's nanoseconds, exact over a window of any length (ticks are not).
    oncpu = max(rec["cpu"][s]["oncpu_schedstat_s"] for s in ("client", "server"))
    busiest = oncpu / seconds if seconds > 0 else None
    fills = patterns.row(opts).fills_link
    link.add_saturation(out, seconds, rec["cpu"]["system"].get("utilisation"), busiest, fills)
    return out


# Every pattern's own sections of the record, in the rows' order: a run's
# are its row's, the others null.
SECTIONS = tuple(dict.fromkeys(key for p in patterns.PATTERNS.values() for key in p.sections))


def udp_drops(rec: dict, client_done: dict, server_done: dict) -> dict:
    """Every datagram the receiver's sequence numbers call lost was dropped
    by its kernel, in its own namespace (whole run). The kernel counts skbs
    (InErrors includes RcvbufErrors): with GSO and GRO each reaches the
    socket whole, carrying a batch."""
    k = rec["kernel_udp"]["server"] or {}
    per_skb = client_done.get("batch", 1) if client_done.get("send_mode") == "gso" and server_done.get("gro") else 1
    dropped = k["InErrors"] * per_skb if "InErrors" in k else None
    lost = server_done.get("lost")
    return {
        "kernel": dropped,
        "own": lost,
        "ratio": dropped / lost if dropped is not None and lost else None,
        "source": f"kernel Udp InErrors x {per_skb} datagrams per skb (server namespace, whole run) "
        "against the receiver's sequence gaps",
    }


def offload_record(opts, m: Measurement, record: dict) -> dict:
    """Requested, set up, and observed GSO/GRO, with each instrument's evidence."""
    if transports.datagram(opts.stack):
        max_dgram = record["workload"]["client"]["report"].get("dgram_size") or opts.dgram_size
    else:
        netns = m.environment["topology"]["kind"] == "netns"
        max_dgram = min(opts.mtu if netns else MSQUIC_MAX_MTU, MSQUIC_MAX_MTU) - UDP_IP_HEADERS
    return {**m.offload, "observed": offload.observe(record, max_dgram)}


# A CPU that recorded less than this share of window x rate lost samples.
SAMPLE_COVERAGE_MIN = 0.95
# A side's samples short of its on-CPU time by more than this many standard
# deviations of sampling (sqrt of the periods expected) are missing ones.
SAMPLED_SIGMAS = 3.0


def sample_coverage(per_cpu: dict, window_s: float, hz: int, ncpu: int) -> dict:
    """Each CPU's samples against window x rate (idle samples included)."""
    expected = window_s * hz
    coverage = {str(c): per_cpu.get(str(c), 0) / expected for c in range(ncpu)}
    short = [c for c, v in coverage.items() if v < SAMPLE_COVERAGE_MIN]
    return {
        "coverage_per_cpu": coverage,
        "complete": not short,
        "incomplete_reason": (
            f"CPU {', '.join(short)} recorded "
            + ", ".join(f"{coverage[c] * 100:.0f}%" for c in short)
            + " of its expected samples: its cpu-clock timer did not fire "
            "every period, so graphs on it undercount"
        )
        if short
        else None,
    }


def sides_sampled(flame: dict, rec: dict, pids: Dict[str, int]) -> dict:
    """Each workload side's samples against its threads' on-CPU time over
    the window (the cputhread probe's sched_switch timing): `sampled_share`.
    A CPU can record all its samples and still miss a side's: on this VM
    (2026-11-24, a 2 s quic run at 1000 Hz) every CPU recorded 97-100% of
    its samples, yet the server's came to 84% of its on-CPU time, and idle
    had as many more as the server lacked, less CPU 1's 3%.
    A side short by more than a CPU may be (SAMPLE_COVERAGE_MIN) and more
    than sampling explains (SAMPLED_SIGMAS standard deviations of a count
    of that many periods) makes the capture incomplete, so it is weighted
    like one that lost samples. None for a side the probe did not time."""
    share, short = {}, []
    period_ns = flame["sample_period_ns"]
    for side in weighting.WEIGHED_SIDES:
        probed = weighting.probe_threads(rec, pids.get(side)) if pids.get(side) else None
        oncpu_ns = sum(t["oncpu_ns"] for t in probed.values()) if probed else 0
        if not oncpu_ns:
            share[side] = None
            continue
        expected = oncpu_ns / period_ns
        got = flame["samples"].get(side, 0)
        share[side] = got / expected
        if expected - got > max((1 - SAMPLE_COVERAGE_MIN) * expected, SAMPLED_SIGMAS * expected**0.5):
            short.append(f"the {side}'s samples came to {share[side] * 100:.0f}% of its threads' on-CPU time")
    out = {"sampled_share": share}
    if short:
        graphs = "its graph undercounts" if len(short) == 1 else "their graphs undercount"
        why = "; ".join(short) + f" (sched_switch timing), so {graphs}"
        out["complete"] = False
        out["incomplete_reason"] = "; ".join(r for r in (flame.get("incomplete_reason"), why) if r)
    return out


def build_record(opts, m: Measurement) -> dict:
    """The run's core figures: bytes, window, CPU per side, the workloads' counters."""
    window, connected, tls_before, pids = m.window, m.connected, m.tls_before, m.pids
    client_done, server_done = m.done["client"], m.done["server"]
    nbytes = window.bytes
    stack = transports.STACKS[opts.stack]
    # A program of the user's in one side's place (--server-cmd, --client-cmd), or None;
    # outside: every side that is one (a pair's two).
    ext, outside = external.role_of(opts), external.roles(opts)
    # None: the server is such a program.
    server_stack = transports.STACKS.get(transports.side_stack(opts, "server"))
    env = copy.deepcopy(m.environment)
    if stack.is_quic:
        # (An external client's "connected" is its server's: --stack's library.)
        env["quic_library"] = quic_library(opts, stack, connected, client_done, server_done)
        for side in outside:
            env["quic_library"][side] = {
                "name": None,
                "version": None,
                "crypto": None,
                "program": m.done[side].get("program"),
                "absent_reason": external.absent_reason(side),
            }
        if not outside and server_stack is not stack:
            # A pair (--server-stack): the server's own, as its report says it.
            env["quic_library"]["server"] = library_named(opts, server_stack, server_done)
    if stack.msquic or (server_stack is not None and server_stack.msquic):
        # The msquic side's report (both, unless a pair).
        said = connected if stack.msquic else server_done
        env["msquic_version"] = said.get("msquic_version")
        # msquic says "Unknown" where its build embedded no hash (the project's: the crate's source has no git).
        git_hash = said.get("msquic_git_hash")
        env["msquic_git_hash"] = None if git_hash in (None, "", MSQUIC_NO_HASH) else git_hash
        env["msquic_library"] = loaded_msquic(opts, client_done, server_done)
        env["msquic_send_segmentation"] = {
            "client": client_done.get("send_segmentation"),
            "server": server_done.get("send_segmentation"),
        }
        env["msquic_recv_coalescing"] = {
            "client": client_done.get("recv_coalescing"),
            "server": server_done.get("recv_coalescing"),
        }

    # Bulk: the sender by --direction (both ways: each side checks what the
    # other sent, on --streams each way); a download: the server sends, once per connection.
    receiver, sender = window.receiver, window.sender
    row = patterns.row(opts)
    what, expected = row.unit, row.expected(opts)
    if receiver != "both":
        got, gave = m.done[receiver], m.done[sender]
    if stack.programs:
        # A program pair: nothing on either side verified a byte; the probe counted them.
        got, verified = {"app_bytes": None}, None
    elif receiver == "both":
        for got_role in window.receivers:
            got, gave = m.done[got_role], m.done[direction.other(got_role)]
            if not (
                got.get("verified") is True
                and got["app_bytes"] == gave["sent_bytes"]
                and got["streams_completed"] == 2 * expected
            ):
                raise errors.VerifyFailed(
                    f"the {got_role} verified {got['app_bytes']} bytes, {got['streams_completed']} streams done "
                    f"of {2 * expected}, but the {direction.other(got_role)} sent {gave.get('sent_bytes')}; "
                    "see the run's logs."
                )
        got = {"app_bytes": window.end.client_mark["app_bytes"] + window.end.server_mark["app_bytes"]}
        verified = True
    elif stack.datagram:
        # No reliability (its one pattern is bulk): every datagram that
        # arrived passed the content check, and no more arrived than were
        # sent; loss is a figure.
        verified = got.get("verified") is True and got["app_bytes"] <= gave["app_bytes"]
    elif ext == "server":
        # --server-cmd: the client counted the answer's bytes, each stream
        # whole (--verify size); the program's own count is not seen.
        verified = got.get("verified") is True and got["streams_completed"] == expected
    elif ext == "client":
        # --client-cmd: the server counted each stream whole, as many as the program opened.
        verified = got.get("verified") is True and got["streams_completed"] >= 1
    else:
        verified = row.verified(got, gave, opts, expected)
    if receiver != "both" and verified is not None and not verified:
        raise errors.VerifyFailed(
            f"the {receiver} verified {got['app_bytes']} bytes on {got['streams_completed']} {what} "
            f"but the {sender} sent {gave.get('app_bytes')} on {expected}; see the run's logs."
        )

    # The sender's CPU is per byte it sent; for reliable stacks that is the
    # bytes received, for raw UDP it includes what was lost. Both ways, each
    # side's CPU is per byte moved either way.
    sent = window.sent
    client_bytes = sent if stack.datagram else nbytes
    transport = transport_record(stack, client_done, server_done, tls_before, window, server_stack)
    prove_knobs(opts, stack, transport)
    return {
        "stack": opts.stack,
        "config": asdict(opts),
        "environment": env,
        "transport": transport,
        "bytes": nbytes,
        "bytes_total": got["app_bytes"],
        "bytes_sent": sent,
        "direction": direction_record(opts, window),
        "verified": verified,
        "verification": "none" if stack.programs else "sizes" if ext is not None else "content",
        **({"counted_by": external.PAIR_COUNT.format(receiver=receiver)} if stack.programs else {}),
        "window_s": window.seconds,
        "cpu_window_s": window.cpu_seconds,
        "throughput_gbps": nbytes * 8 / window.seconds / 1e9 if window.seconds > 0 else None,
        "cpu": {
            "client": cpu.process_figures(window.end.client - window.start.client, client_bytes, window.cpu_seconds),
            "server": cpu.process_figures(window.end.server - window.start.server, nbytes, window.cpu_seconds),
            "system": cpu.system_figures(window.end.system - window.start.system, nbytes, window.cpu_seconds),
            "others": cpu.others_figures(window.start.tasks, window.end.tasks, set(pids.values()), nbytes),
        },
        "workload": {
            side: {
                "window": (
                    None
                    if getattr(window.end, f"{side}_mark").get("external")
                    else _mark_delta(getattr(window.start, f"{side}_mark"), getattr(window.end, f"{side}_mark"))
                ),
                "report": done,
            }
            for side, done in (("client", client_done), ("server", server_done))
        },
        "measured_at": m.measured_at,
    }


def floor_record(opts, m: Measurement, rec: dict) -> dict:
    """The floor multiple where one library's crypto runs both sides (floor.figures), else absent, saying why."""
    outside = external.roles(opts)
    if outside:
        return {"absent": f"{external.absent_reason(outside[0])}, so its library's crypto, the floor's, is not known"}
    if not floor.measured_for(opts):
        return {"absent": "a pair of libraries (--server-stack) has no one floor: each side's is its own library's"}
    return floor.figures(opts.stack, m.floor_parts, rec["cpu"], opts.sendfile)


def library_named(opts, stack, said: dict) -> dict:
    """A QUIC implementation's name, version and crypto, as its workload's
    report (its connected or its done) says them."""
    if stack.msquic:
        return {
            "name": "msquic",
            "version": said.get("msquic_version"),
            # The project's build links quictls; a --msquic build's crypto is its own.
            "crypto": "quictls, as msquic's build links it" if opts.msquic is None else None,
        }
    lib = said.get("quic_library") or {}
    return {k: lib.get(k) for k in ("name", "version", "crypto")}


def quic_library(opts, stack, connected: dict, client_done: dict, server_done: dict) -> dict:
    """Which QUIC implementation ran (the client's; a pair's server's under
    "server"), its version and its crypto, as its workload said, and
    whether each side's library found GSO (sending) and GRO (receiving) on
    its socket: one shape for every implementation."""
    own = library_named(opts, stack, connected)
    dones = {"client": client_done, "server": server_done}
    for key in ("send_segmentation", "recv_coalescing"):
        own[key] = {side: d.get(key) for side, d in dones.items()}
    return own


def direction_record(opts, window: Window) -> Optional[dict]:
    """Bulk: which side sent, and each direction's verified bytes and
    goodput over the window (up: client to server). Each side's CPU per
    byte (cpu.*) is per byte moved, both ways together with --direction both.
    None for a pattern whose row says who sends (no --direction)."""
    if patterns.row(opts).senders is not None:
        return None
    seconds = window.seconds
    out = {
        "direction": direction.bulk_direction(opts),
        "senders": list(direction.senders(opts)),
        "receivers": list(window.receivers),
    }
    for way, role in (("up", "server"), ("down", "client")):
        if role in window.receivers:
            b = window.bytes if window.receiver == role else window.mark_delta(role, "app_bytes")
            out[way] = {"bytes": b, "gbps": b * 8 / seconds / 1e9 if seconds > 0 else None}
        else:
            out[way] = None
    return out


# The raw UDP workload's counters (workloads/wl_udp.c).
UDP_COUNTERS = ("datagrams", "lost", "reordered", "duplicates", "gro_segments")
# What --app's layer counted, each way (workloads/wl_app.h), as app_<name> in the marks.
APP_COUNTERS = (
    "tx_messages",
    "rx_messages",
    "tx_framing_bytes",
    "rx_framing_bytes",
    "tx_body_bytes",
    "rx_body_bytes",
)


def _mark_delta(a: dict, b: dict) -> dict:
    """The workload's own counters over the window: every counter group its
    marks carry (msquic's perf_counters and conn_stats, another QUIC
    implementation's quic_stats, or TCP_INFO)."""
    out = {"app_bytes": b["app_bytes"] - a["app_bytes"]}
    for k in ("io_calls",) + UDP_COUNTERS:
        if k in b and k in a:
            out[k] = b[k] - a[k]
    for group in ("perf_counters", "conn_stats", "quic_stats", "tcp_info"):
        if group in b:
            out[group] = counter_delta(a.get(group), b.get(group))
    if "app" in b:
        # --app: the application layer's own counts (workloads/wl_app.h).
        out["app"] = {"protocol": b["app"], **{k: b[f"app_{k}"] - a.get(f"app_{k}", 0) for k in APP_COUNTERS}}
    return out


def transport_settings(stack, client_done: dict, server_done: dict, server_stack=None) -> dict:
    """The transport, and what each side's connections ran with as its
    workload read them back: QUIC's settings, TCP's ECN (server_stack: a
    pair's server's row)."""
    rec = {"protocol": stack.transport, "tls": stack.tls}
    if stack.is_quic:
        # What each side's reported connection ran with, read back from msquic
        # (conn_settings); another implementation's workload says what it set.
        rows = {"client": stack, "server": server_stack or stack}
        dones = {"client": client_done, "server": server_done}
        rec["quic_settings"] = {
            side: dones[side].get("conn_settings" if rows[side].msquic else "quic_settings") for side in rows
        }
    if stack.transport == "tcp":
        # Each side's connections, and those whose TCP_INFO says they negotiated ECN.
        rec["tcp_ecn"] = {side: _ecn_counts(done) for side, done in (("client", client_done), ("server", server_done))}
    return rec


def transport_record(
    stack, client_done: dict, server_done: dict, tls_before: dict, window: Window, server_stack=None
) -> dict:
    """TLS as the sockets reported it, and the kernel's proof for kTLS."""
    rec = transport_settings(stack, client_done, server_done, server_stack)
    if not stack.configurable_tls:
        return rec
    ktls = {
        "client_send": client_done.get("ktls_send"),
        "client_recv": client_done.get("ktls_recv"),
        "server_send": server_done.get("ktls_send"),
        "server_recv": server_done.get("ktls_recv"),
    }
    tls_stat = {
        side: counter_delta(tls_before.get(side), window.end.tls_stat.get(side)) for side in ("client", "server")
    }
    rec.update(
        {
            "tls_version": client_done.get("tls_version"),
            "tls_cipher": client_done.get("tls_cipher"),
            "ktls": ktls,
            "ktls_label": transports.ktls_label(ktls["client_send"], ktls["server_recv"])
            if stack.tls == "kernel"
            else "none",
            "tls_stat_delta": tls_stat,
        }
    )
    if stack.tls == "kernel":
        _prove_ktls(ktls, tls_stat)
    return rec


def prove_knobs(opts, stack, transport: dict) -> None:
    """Each knob the run set is what both sides ran with (exit 35 otherwise)."""
    if stack.msquic:  # msquic's knobs, read back
        prove_quic_settings(opts, transport)
    elif opts.ecn is not None and "tcp_ecn" in transport:
        prove_tcp_ecn(opts.ecn, transport["tcp_ecn"])


def loaded_msquic(opts, client_done: dict, server_done: dict) -> dict:
    """The file each side's loader took msquic from; with --msquic, proved to be that one."""
    loaded = {side: done.get("msquic_library") for side, done in (("client", client_done), ("server", server_done))}
    if opts.msquic is not None:
        prove_msquic_library(opts.msquic, loaded)
    return loaded


def mix_flow_proof(fm: mix.FlowMeasurement) -> dict:
    """A mix's flow carries the proof a single run of its stack gives: the
    msquic each side loaded, and what each side's connections ran with,
    proved against the knobs the flow was given (exit 35 naming the flow)."""
    opts = _options(fm.options)
    stack = transports.STACKS[fm.flow["stack"]]
    client_done, server_done = fm.done["client"], fm.done["server"]
    try:
        loaded = loaded_msquic(opts, client_done, server_done) if stack.msquic else None
        transport = transport_settings(stack, client_done, server_done)
        prove_knobs(opts, stack, transport)
    except errors.SettingUnproven as e:
        raise errors.SettingUnproven(f"flow {fm.flow['index']} ({stack.name}): {e.sentence}") from None
    return {"msquic_library": loaded, "transport": transport}


# The quic knobs, and the key msquic's settings read back give each.
QUIC_KNOBS = {"pacing": "pacing", "quic_cc": "congestion_control", "ecn": "ecn", "encrypt": "encryption"}


def prove_quic_settings(opts, transport: dict) -> None:
    """Each quic knob the run set is what both sides' connections ran with
    (msquic's own settings, read back after the run); else the run measured
    something else (e.g. --encrypt off that one side did not ask for)."""
    ran = transport.get("quic_settings") or {}
    for field, key in QUIC_KNOBS.items():
        asked = getattr(opts, field, None)
        if asked is None:
            continue
        want = asked if field == "quic_cc" else asked == "on"
        for side in ("client", "server"):
            got = (ran.get(side) or {}).get(key)
            if got != want:
                flag = options.BY_FIELD[field].flag
                raise errors.SettingUnproven(
                    f"{flag} {asked} did not take effect on the {side}: msquic says its connection ran with "
                    f"{key} {got}, so the run is not recorded; check that both sides got {flag}."
                )


def _ecn_counts(done: dict) -> Optional[dict]:
    info = done.get("tcp_info") or {}
    if "ecn_connections" not in info:
        return None
    return {"connections": info["connections"], "ecn_connections": info["ecn_connections"]}


# What msquic's QUIC_PARAM_GLOBAL_LIBRARY_GIT_HASH gives for a build made
# with QUIC_EMBED_GIT_HASH off (src/inc/msquic.ver, VER_GIT_HASH_STR).
MSQUIC_NO_HASH = "Unknown"


def prove_msquic_library(asked: str, loaded: dict) -> None:
    """--msquic PATH: both sides ran on that file, as their loaders say."""
    want = str(Path(asked).expanduser().resolve())
    for side in ("client", "server"):
        if loaded.get(side) != want:
            raise errors.SettingUnproven(
                f"--msquic {asked} did not take effect on the {side}: it loaded msquic from {loaded.get(side)}, "
                "so the run is not recorded; check that the file is a libmsquic.so the workload can load."
            )


def prove_tcp_ecn(asked: str, counts: dict) -> None:
    """--ecn on a TCP stack: every connection of both sides negotiated ECN
    (on) or none did (off), as each one's TCP_INFO said; else the run
    measured something else."""
    for side in ("client", "server"):
        c = counts.get(side)
        want = c["connections"] if c and asked == "on" else 0
        if c is None or not c["connections"] or c["ecn_connections"] != want:
            said = f"{c['ecn_connections']} of its {c['connections']} connections" if c else "nothing"
            raise errors.SettingUnproven(
                f"--ecn {asked} did not take effect on the {side}: TCP_INFO says {said} negotiated ECN, so the "
                "run is not recorded; check net.ipv4.tcp_ecn in the run's namespaces."
            )


def _prove_ktls(ktls: dict, tls_stat: dict) -> None:
    """A direction is kTLS only if the kernel's own counters moved for it."""
    proofs = (("client_send", "client", "TlsTxSw"), ("server_recv", "server", "TlsRxSw"))
    claimed = [p for p in proofs if ktls[p[0]]]
    if not claimed:
        raise errors.KtlsUnproven(
            "OpenSSL enabled kernel TLS in neither direction of the upload; "
            "check that the cipher is AES-GCM and the guest has the tls and gcm modules."
        )
    for flag, side, counter in claimed:
        moved = (tls_stat.get(side) or {}).get(counter, 0)
        if moved <= 0:
            raise errors.KtlsUnproven(
                f"the {side} reported kernel TLS ({flag}) but /proc/net/tls_stat {counter} "
                "did not move, so the run is not kTLS and is not recorded; run `qprof doctor` to see whether "
                "this kernel's tls module and OpenSSL's kTLS can work together, or use --stack tcp-tls."
            )


def derive_probe_figures(rec: dict, pids: dict, senders=("client",), stacks: Optional[dict] = None) -> dict:
    """Per-side syscall figures and their cross-checks with the workload's
    own counts; senders: the roles that send the measured bytes."""
    stack = transports.STACKS[rec["stack"]]
    probes = rec["probes"]
    sys_probe = probes.get("syscalls", {})
    devices = derive.packets_devices(rec)
    # Tools before --rx counted what each device received and did not say so.
    rx_absent = derive.RX_ABSENT if devices and not probes["packets"].get("rx", True) else None
    # A UDP side's datagrams received are those its receive calls took from
    # its socket (the syscalls probe's datagrams, counted with the device's
    # receive side); tools before that gave the device's packets instead.
    socket_rx = stack.transport == "udp" and "datagrams" in sys_probe
    if socket_rx and not rx_absent and not sys_probe["datagrams"]:
        rx_absent = derive.DATAGRAMS_ABSENT
    nbytes = rec["bytes"]

    def figures(side: str, window: dict, devices: dict) -> tuple:
        """A side's syscall figures over a probe window, and their cross-checks."""
        calls = derive.by_syscall(window["threads"], pids[side])
        out_dgrams = in_dgrams = None
        dev = devices.get(side)
        if dev is not None:
            out_dgrams, in_dgrams = derive.ip_packets(dev["tx"]), derive.ip_packets(dev["rx"])
        if socket_rx:
            in_dgrams = derive.socket_datagrams(calls)
        f = derive.syscall_figures(
            calls,
            side_bytes(rec, side),
            rec["cpu"][side]["total_s"],
            out_dgrams,
            in_dgrams,
            stack.rw_is_network,
            # Tools before --time timed every call and did not say so.
            timed=sys_probe.get("call_time", True),
            rx_absent=rx_absent,
        )
        own = rec["workload"][side]["window"]
        if own is None:
            # A program of the user's (--server-cmd, --client-cmd): no count of its own to check.
            return calls, f, {"absent_reason": external.absent_reason(side)}
        sends = side in senders
        # Each side's own library's counters (a pair's two: --server-stack).
        name = (stacks or {}).get(side, stack.name)
        return calls, f, derive.crosscheck(name, sends, f, own, out_dgrams, in_dgrams, rx_absent)

    sides, checks = {}, {}
    for side in ("client", "server"):
        if sys_probe.get("status") != "present":
            sides[side] = None
            continue
        calls, f, checks[side] = figures(side, sys_probe["window"], devices)
        sides[side] = {"by_syscall": calls, **f}
        if "bracket" in sys_probe:
            # What the probes counted up to each workload's marks, at its
            # least and most (collectors/probes.py, bracket).
            least, most = (
                figures(side, sys_probe["bracket"][k], derive.packets_devices(rec, bracket=k))[2]
                for k in ("least", "most")
            )
            derive.bracket_checks(checks[side], least, most)
    thr = probes.get("cputhread", {})
    threads = (
        derive.thread_figures(thr["window"], pids, {side: side_bytes(rec, side) for side in pids}, nbytes)
        if thr.get("status") == "present"
        else None
    )
    if threads is not None:
        # Two instruments of one quantity: sched_switch timing against the
        # kernel's own sum_exec_runtime (/proc/<pid>/task/*/schedstat). The
        # kernel starts a woken task's clock before the switch when the
        # wake-up preempts idle, so schedstat lies between on-CPU and
        # on-CPU plus the wake-up latency (docs/probes.md, "Cross-checks").
        for side in pids:
            f = threads[side]
            f["oncpu_check"] = {
                **derive.agreement(f["oncpu_s"], rec["cpu"][side]["oncpu_schedstat_s"], "schedstat"),
                "ebpf_plus_runq": f["oncpu_s"] + f["runq_s"],
            }
    return {"syscalls": sides, "crosscheck": checks, "cpu_threads": threads}
