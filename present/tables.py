# SPDX-License-Identifier: GPL-2.0-only
"""Records as short human tables (rich), on stdout: a run, a mix, a
comparison; the run history (`qprof ls`); what an incomplete or corrupt
record holds (`qprof show`); a run's flame figures (`qprof flame`)."""

import io
import sys
import textwrap
from pathlib import Path
from typing import Callable, List, Optional

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.errors import ConsoleError
from rich.markup import escape
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

from qprof import history
from qprof.describe import offload, options, transports
from qprof.files import COMPARISON_RECORD
from qprof.flamegraphs import categories, diff, normalize
from qprof.present.format import ABSENT, compact, count, field, num


def _headline(rec: dict) -> str:
    env, cfg, tr = rec["environment"], rec["config"], rec.get("transport") or {}
    topo = env["topology"]
    where = f"[bold]{rec['stack']}[/] over {topo['kind']}" + (f" (MTU {topo['mtu']})" if topo.get("mtu") else "")
    where += f", {cfg['streams']} stream(s)"
    if env.get("emulated"):
        where += ", [yellow]emulated guest: compare stacks within the guest only[/]"
    lib = env.get("quic_library")
    stack = transports.STACKS.get(rec["stack"])
    if stack is not None and stack.programs:
        # A program pair: both sides the user's.
        names = [Path((lib or {}).get(side, {}).get("program") or ABSENT).name for side in ("client", "server")]
        return where + f"; your programs: client {names[0]}, server {names[1]}"
    if lib is not None and not transports.msquic(rec["stack"]):
        return (
            where + f"; {lib.get('name')} {lib.get('version') or ABSENT} ({lib.get('crypto') or ABSENT})"
            f", GSO {offload.onoff(lib['send_segmentation'].get('client')) or ABSENT}"
            f", GRO {offload.onoff(lib['recv_coalescing'].get('server')) or ABSENT}"
        )
    if transports.msquic(rec["stack"]):
        return (
            where + f"; msquic {env.get('msquic_version') or ABSENT}"
            f", GSO {offload.onoff(env.get('msquic_send_segmentation', {}).get('client')) or ABSENT}"
            f", GRO {offload.onoff(env.get('msquic_recv_coalescing', {}).get('server')) or ABSENT}"
            " (msquic's own report)"
        )
    if transports.datagram(rec["stack"]):
        c = rec["workload"]["client"]["report"]
        return where + f"; raw UDP, {c.get('send_mode')} × {c.get('batch')}, {c.get('dgram_size')}-byte datagrams"
    if tr.get("tls") in ("user", "kernel"):
        where += f"; {tr.get('tls_version')} {tr.get('tls_cipher')}"
        if tr["tls"] == "kernel":
            where += f", kTLS: {tr.get('ktls_label')}"
    if cfg.get("sendfile"):
        where += ", sendfile"
    return where


def print_run(rec: dict, console: Optional[Console] = None) -> None:
    console = console or Console()
    env = rec["environment"]
    console.print(_headline(rec))
    console.print(
        f"window {rec['window_s']:.2f} s: {rec['bytes']:,} bytes "
        + (
            "counted by the syscalls probe (not verified), "
            if rec.get("verification") == "none"
            else f"verified={rec['verified']}, "
        )
        + f"[bold]{num(rec['throughput_gbps'], '{:.2f}')} Gbit/s[/]"
    )

    t = Table(title="CPU over the window", title_justify="left")
    for col in ("SIDE", "CPU (s)", "USER ns/B", "SYS ns/B", "SOFTIRQ ns/B", "TOTAL ns/B", "ON-CPU ns/B"):
        t.add_column(col, justify="left" if col == "SIDE" else "right")
    for side in ("client", "server", "system"):
        c = rec["cpu"][side]
        n = c["ns_per_byte"]
        t.add_row(
            side,
            num(c["total_s"]),
            num(n["user"]),
            num(n["system"]),
            num(n["softirq"]),
            num(n["total"], "[bold]{:.3f}[/]"),
            num(n.get("oncpu")),
        )
    console.print(t)
    absent = rec["cpu"]["system"].get("ticks_absent_reason")
    if absent:
        console.print(f"[yellow]{ABSENT} in the tick columns: {absent}[/]")
    util = rec["cpu"]["system"].get("utilisation")
    if util is not None:
        console.print(
            f"system busy {util * 100:.0f}% of {env['cpu_count']} CPUs; "
            f"{ABSENT} = not measured (per-process softirq: see docs/platform.md)"
        )
    _print_hosts(rec, console)
    _print_streams(rec, console)
    _print_downloads(rec, console)
    _print_rr(rec, console)
    _print_video(rec, console)
    _print_handshakes(rec, console)
    if not getattr(transports.STACKS.get(rec["stack"]), "programs", False):  # a pair's own counters: none
        console.print(_own_counters(rec))
    _print_link(rec, console)
    _print_loss(rec, console)
    _print_floor(rec, console)
    _print_offload(rec, console)
    _print_probes(rec, console)
    _print_flame(rec, console)
    console.print(f"run {rec['id']}")


def _print_hosts(rec: dict, console: Console) -> None:
    """A run on two hosts: each host, its CPU in its own clock, its NIC, and the clocks' offset."""
    hosts = rec.get("hosts")
    if not hosts:
        return
    t = Table(title="hosts (each read in its own clock)", title_justify="left")
    for col in ("SIDE", "HOST", "KERNEL", "NIC", "BUSY", "IRQ/MB", "NIC DROPS"):
        t.add_column(col, justify="left" if col in ("SIDE", "HOST", "KERNEL", "NIC") else "right")
    for role in ("client", "server"):
        h = hosts[role]
        env, n = h["environment"], h.get("nic") or {}
        dev = env.get("nic") or {}
        speed = f" {dev['speed_mbit']} Mbit/s" if dev.get("speed_mbit") else ""
        irq = (n.get("interrupts") or {}).get("per_mb")
        drops = (n.get("drops") or {}).get("device")
        t.add_row(
            role,
            escape(h["host"]),
            env.get("kernel_release") or ABSENT,
            escape(f"{dev.get('device') or ABSENT} ({dev.get('driver') or ABSENT}{speed})"),
            num(h["cpu"].get("utilisation"), "{:.0%}"),
            num(irq, "{:.1f}"),
            ABSENT if drops is None else str(sum(drops.values())),
        )
    console.print(t)
    clock = hosts["server"]["clock"] or hosts["client"]["clock"]
    one = "; one kernel: machine-wide figures counted once" if hosts["same_kernel"] else ""
    if clock:
        console.print(
            f"clock offset {clock['offset_ns'] / 1e3:+.1f} ± {clock['uncertainty_ns'] / 1e3:.1f} us "
            f"(best of {clock['rounds']} round trips); windows within {hosts['skew_s'] * 1e3:.2f} ms{one}"
        )


def _print_streams(rec: dict, console: Console) -> None:
    """Each stream's (connection's) goodput, when there is more than one."""
    s = rec.get("streams")
    if not s or len(s["bytes"]) < 2:
        return
    what = "stream" if offload.is_quic(rec["stack"]) else "connection"
    each = ", ".join(f"{g:.3f}" for g in s["gbps"])
    console.print(
        f"per {what} Gbit/s: {each}; Jain's index {num(s['jain_index'])}, "
        f"smallest share {num(s['min_share'], '{:.1%}')}"
    )


def _print_downloads(rec: dict, console: Console) -> None:
    """Per-download times as percentiles, and what each download cost."""
    d = rec.get("downloads")
    if not d:
        return
    t = Table(
        title=f"{d['count']} downloads of {d['size']:,} bytes, each on a new connection (ms from connect)",
        title_justify="left",
    )
    for col in ("", "p5", "p25", "p50", "p75", "p95"):
        t.add_column(col, justify="left" if not col else "right")
    names = {"tcp_handshake_s": "TCP handshake", "handshake_s": "handshake", "first_byte_s": "first byte"}
    names["complete_s"] = "download"
    for key, label in names.items():
        p = d["percentiles"].get(key)
        if p:
            t.add_row(label, *(f"{p[f'p{q}'] * 1e3:.2f}" for q in (5, 25, 50, 75, 95)))
    console.print(t)
    cpu, wire = d["cpu_per_download_s"], d["wire_per_download"]
    line = "per download: CPU " + ", ".join(f"{k} {num(v and v * 1e3, '{:.2f}')} ms" for k, v in cpu.items())
    if wire:
        line += "; wire " + ", ".join(
            f"{k.replace('_', ' ')} {w['bytes']:,.0f} B in {w['packets']:.1f} packets" for k, w in wire.items()
        )
    console.print(line)
    said = []
    if d["resume"]:
        said.append(f"resumed {count(d['resumed'])} of {d['count']}, 0-RTT/early data {count(d['early_data'])}")
    said.append(f"server retransmissions {count(d['server_retransmits'])}")
    console.print("; ".join(said))


def _print_handshakes(rec: dict, console: Console) -> None:
    """The handshake rate, its times as percentiles, and what one cost."""
    h = rec.get("handshakes")
    if not h:
        return
    t = Table(
        title=f"{h['handshakes']:,} handshakes in the window, {num(h['per_s'], '{:,.0f}')}/s, "
        f"{h['conns']} at once, each a new connection (ms from connect)",
        title_justify="left",
    )
    keys = ("p5", "p50", "p95", "p99", "p99.9", "max")
    t.add_column("")
    for k in keys:
        t.add_column(k, justify="right")
    for key, label in (("tcp_handshake_ns", "TCP handshake"), ("handshake_ns", "handshake"), ("complete_ns", "echo")):
        p = h.get(key)
        if p:
            t.add_row(label, *(num(p[k] / 1e6, "{:.3f}") for k in keys))
    console.print(t)
    per = h["per_handshake"]
    if per:
        cpu = ", ".join(f"{s} {num(v and v * 1e6, '{:.1f}')} us" for s, v in per["cpu_s"].items())
        console.print(f"per handshake: CPU {cpu}")
    if h["resume"]:
        console.print(
            f"resumed {count(h['resumed'])} of {h['handshakes']:,}, 0-RTT/early data {count(h['early_data'])}"
        )


def _rr_sizes(r: dict) -> str:
    """ "256 B each way", or "512 B up, 4,000 B down" (a record from before the two sizes: its payload)."""
    req, resp = r.get("request", r.get("payload")), r.get("response", r.get("payload"))
    return f"{req:,} B each way" if req == resp else f"{req:,} B up, {resp:,} B down"


def _rr_load(r: dict) -> str:
    """What was asked and answered: an open loop's schedule, or a closed
    loop's requests in flight and the rate it gave."""
    if r.get("mode") == "closed":
        rate = num(r["requests_per_s"], "{:,.0f}")
        return (
            f"{r['responses']:,} requests answered in the window, {rate}/s "
            f"({_rr_sizes(r)}, closed loop, {num(r['in_flight'], '{}')} in flight"
        )
    return (
        f"{r['responses']:,} of {r['requests_due']:,} requests due in the window answered "
        f"({_rr_sizes(r)} every {r['period_s'] * 1e3:g} ms"
    )


def _late(r: dict) -> str:
    return f"late {ABSENT} (a closed loop has no schedule)" if r["late"] is None else f"late {r['late']:,}"


def _print_rr(rec: dict, console: Console) -> None:
    """Response delays (from each request's due time) and what a request cost."""
    r = rec.get("rr")
    if not r:
        return
    cfg = rec["config"]
    how = cfg.get("rr_streams") or cfg.get("tcp_conns") or ("per-request" if transports.msquic(rec["stack"]) else "one")
    t = Table(
        title=f"{_rr_load(r)}, {how}); response delay in ms",
        title_justify="left",
    )
    keys = ("p5", "p25", "p50", "p75", "p95", "p99", "p99.9", "p99.99", "max")
    for k in keys:
        t.add_column(k, justify="right")
    t.add_row(*(num(r["delay_ns"].get(k) and r["delay_ns"][k] / 1e6, "{:.3f}") for k in keys))
    console.print(t)
    line = f"jitter {num(r['jitter_percent'], '{:.1f}')}% of the mean delay; {_late(r)}"
    lag = r["send_lag_ns_max"]
    if r.get("mode") != "closed":
        line += f"; the client sent at most {num(lag and lag / 1e6, '{:.3f}')} ms after a request was due"
    if r["connections_opened"] is not None:
        line += f"; connections opened {r['connections_opened']:,}"
    if r.get("connections"):
        line += f" (answers Jain's index {num(r['connections']['jain_index'], '{:.3f}')})"
    console.print(line)
    per = r["per_request"]
    if per:
        cpu = ", ".join(f"{s} {num(v and v * 1e6, '{:.1f}')} us" for s, v in per["cpu_s"].items())
        calls = ", ".join(f"{s} {num(v, '{:.1f}')}" for s, v in per["syscalls"].items())
        line = f"per request: CPU {cpu}; syscalls {calls}"
        if per["wire"]:
            line += "; wire " + ", ".join(
                f"{k.replace('_', ' ')} {w['bytes']:,.0f} B in {w['packets']:.1f} packets"
                for k, w in per["wire"].items()
            )
        console.print(line)
    dv = r.get("data_volume")
    if dv and dv["client_to_server"]["wire_bytes"] is not None:
        app = f"{dv['app']} " if dv["app"] else ""
        console.print(
            "data volume, bytes: "
            + "; ".join(
                f"per {n} {w['wire_bytes']:,.0f} = payload {w['payload_bytes']:,.0f} + {app}framing "
                f"{w['framing_bytes']:,.0f} + transport {w['transport_bytes']:,.0f}"
                for n, w in (("request", dv["client_to_server"]), ("response", dv["server_to_client"]))
            )
        )


def _print_video(rec: dict, console: Console) -> None:
    """The player's startup and stalls, the fetch rate, and CPU per second of media."""
    v = rec.get("video")
    if not v:
        return
    t = Table(
        title=f"video: {v['segments']} segments of {v['segment_s']:g} s at {v['bitrate'] / 1e6:g} Mbit/s "
        f"({v['segment_bytes']:,} B), prebuffer {v['prebuffer_s']:g} s",
        title_justify="left",
    )
    for col in ("CONNECT", "PREBUFFERING", "STARTUP DELAY", "STALLS", "STALL TIME", "FETCH RATE"):
        t.add_column(col, justify="right")
    t.add_row(
        num(v["connect_s"] and v["connect_s"] * 1e3, "{:.1f} ms"),
        num(v["prebuffering_s"] * 1e3, "{:.1f} ms"),
        num(v["startup_delay_s"] * 1e3, "[bold]{:.1f} ms[/]"),
        str(v["stalls"]),
        num(v["stall_s"], "[bold]{:.2f} s[/]"),
        num(v["download_rate_bit"] and v["download_rate_bit"] / 1e6, "{:.2f} Mbit/s"),
    )
    console.print(t)
    cpu = ", ".join(f"{s} {num(c and c * 1e3, '{:.2f}')} ms" for s, c in v["cpu_s_per_media_s"].items())
    console.print(f"CPU per second of media: {cpu}")


def interval_text(i: dict) -> str:
    """One interval, one greppable line, as iperf3 -i prints them."""
    return (
        f"[{i['start_s']:6.2f}-{i['end_s']:6.2f} s] {i['bytes'] / 1e6:10.2f} MB {num(i['gbps'], '{:8.3f}')} Gbit/s"
        f"  CPUs client {num(i['client_cpus'], '{:.2f}')} server {num(i['server_cpus'], '{:.2f}')}"
        f"  ns/B client {num(i['client_ns_per_byte'], '{:.3f}')} server {num(i['server_ns_per_byte'], '{:.3f}')}"
        f"  machine {num(i['system_utilisation'], '{:.0%}')} busy"
        + "".join(_state_text(side, i["state"][side]) for side in i.get("senders", ()) if i.get("state"))
    )


def _state_text(side: str, s: dict) -> str:
    """A sender's transport state at an interval's end, compactly: its
    window, RTT, bytes in flight and what it lost (TCP: retransmitted)."""
    resent = s["lost_packets"] is None and s["retransmitted_packets"] is not None
    lost, word = (s["retransmitted_packets"], "retrans") if resent else (s["lost_packets"], "lost")
    cwnd, flight = (num(None if v is None else v / 1e6, "{:.2f}") for v in (s["cwnd_bytes"], s["in_flight_bytes"]))
    return f"  {side} cwnd {cwnd} MB rtt {num(s['rtt_us'], '{:.0f}')} us in flight {flight} MB {word} {count(lost)}"


def print_interval(i: dict) -> None:
    print(interval_text(i), flush=True)


def print_mix_summary(rec: dict, console: Optional[Console] = None) -> None:
    """A --mix run as `qprof run` ends it: its flows and the bottleneck;
    the stacks' shares and the link's counters are `qprof show ID --all`."""
    print_mix(rec, console, every=False)


def print_mix(rec: dict, console: Optional[Console] = None, every: bool = True) -> None:
    """A --mix run: each flow's goodput, share, retransmissions and CPU,
    the stacks' shares and Jain's index, then the bottleneck (every:
    False, the flows and the bottleneck alone)."""
    console = console or Console()
    env, m = rec["environment"], rec["mix"]
    topo = env["topology"]
    where = f"[bold]mix {m['spec']}[/] over {topo['kind']}" + (f" (MTU {topo['mtu']})" if topo.get("mtu") else "")
    if env.get("emulated"):
        where += ", [yellow]emulated guest: compare stacks within the guest only[/]"
    console.print(where)
    console.print(
        f"window {rec['window_s']:.2f} s: the flows verified {rec['bytes']:,} bytes, "
        f"[bold]{num(rec['throughput_gbps'] and rec['throughput_gbps'] * 1e3, '{:.2f}')} Mbit/s[/] together; "
        f"Jain's index {num(m['jain_index'])}"
    )
    t = Table(title="each flow over the window (CPU: its processes' schedstat)", title_justify="left")
    cols = ("FLOW", "STACK", "PATTERN", "GOODPUT Mbit/s", "SHARE", "RETRANS", "CLIENT ns/B", "SERVER ns/B")
    for col in cols:
        t.add_column(col, justify="left" if col in ("STACK", "PATTERN") else "right")
    for f in m["flows"]:
        t.add_row(
            str(f["flow"]),
            f["stack"],
            f["pattern"],
            num(f["goodput_mbps"], "{:.3f}"),
            num(f["share"], "{:.1%}"),
            count(f["retransmits"]),
            num(f["ns_per_byte"]["client"], "{:.2f}"),
            num(f["ns_per_byte"]["server"], "{:.2f}"),
        )
    console.print(t)
    t = Table(title="bulk flows by stack", title_justify="left")
    for col in ("STACK", "FLOWS", "MEAN Mbit/s", "STD. DEV.", "SHARE", "JAIN"):
        t.add_column(col, justify="left" if col == "STACK" else "right")
    for stack, s in m["by_stack"].items():
        t.add_row(
            stack,
            str(s["flows"]),
            num(s["goodput_mbps_mean"]),
            num(s["goodput_mbps_stdev"]),
            num(s["share"], "{:.1%}"),
            num(s["jain_index"]),
        )
    if every:
        console.print(t)
    for f in m["flows"]:
        r = f["rr"]
        if r:
            d = r["delay_ns"]
            console.print(
                f"flow {f['flow']} ({f['stack']} rr): {_rr_load(r)}); delay ms p50 "
                f"{num(d['p50'] and d['p50'] / 1e6)}, p95 {num(d['p95'] and d['p95'] / 1e6)}, "
                f"p99 {num(d['p99'] and d['p99'] / 1e6)}; {_late(r)}"
            )
    b = m["bottleneck"]
    if b:
        console.print(
            f"bottleneck ({b['qdisc']}, client to server): {b['bytes']:,} bytes in {b['packets']:,} packets, "
            f"{b['drops']:,} dropped, utilisation {num(b['utilisation'], '{:.1%}')}; the flows' verified bytes "
            f"are {num(b['flows_bytes_over_wire_bytes'], '{:.1%}')} of it"
        )
    if every:
        _print_link(rec, console)
        console.print(f"run {rec['id']}")
    else:
        console.print(f"more: qprof show {rec['id']} --all (the stacks' shares, the link's counters)")


def cell(row: dict, unit: str, first: bool) -> str:
    """median ±half the range (as a share of the median), ×ratio to the
    first configuration, * where the ranges do not overlap."""
    if not row["n"]:
        return ABSENT
    text = compact(row["median"], unit)
    if row["n"] > 1 and row["median"]:
        text += f" ±{(row['max'] - row['min']) / 2 / abs(row['median']) * 100:.0f}%"
    if not first and row.get("ratio") is not None:
        text += f" ×{row['ratio']:.2f}" + ("*" if row.get("beyond_spread") else "")
    if row.get("weighted"):
        text += WEIGHTED_MARK
    return text


# A flame category's cell whose runs include a capture weighted by its threads' on-CPU time.
WEIGHTED_MARK = " w"


# Category rows whose medians all stay under this are left out of the table (not the record).
CATEGORY_FLOOR_NS_PER_BYTE = 0.005


def print_comparison(rec: dict, console: Optional[Console] = None) -> None:
    """Figures as rows and configurations as columns where that fits the
    console; where it does not (seven stacks at 80 columns, piped or a
    narrow terminal), configurations as rows, one per line as iperf3's and
    flent's summaries give a stream or a series, and the figures in as
    many tables of columns as it takes. No number and no name is cut."""
    console = console or Console()
    labels = [str(c["label"]) for c in rec["configs"]]
    console.print(
        f"[bold]{len(labels)} configurations × {rec['repeat']} runs, interleaved[/]: "
        "median ±half its range, ×ratio of medians to the first, * where the ranges do not overlap"
    )
    main, cats = _comparison_figures(rec)
    wide = [_figures_as_rows(title, labels, figs) for title, figs in (("figures", main), (_CATEGORIES, cats)) if figs]
    if all(_natural_width(console, t) <= console.width for t in wide):
        for t in wide:
            console.print(t)
    else:
        _print_configurations_as_rows(console, labels, main, cats)
    weighted = max((r.get("weighted") or 0 for rows in rec["metrics"].values() for r in rows), default=0)
    if weighted:
        console.print(
            f"[yellow]{WEIGHTED_MARK.strip()}: categories from up to {weighted} run(s) per configuration whose capture "
            "missed samples on some CPU, each thread's samples weighted to its on-CPU time (cputhread probe; "
            "flame.weighting)[/]"
        )
    skipped = rec.get("incomplete_captures") or []
    if skipped:
        console.print(
            f"[yellow]categories leave out {len(skipped)} of {len(rec['runs'])} runs whose capture "
            f"missed samples on some CPU (flame.complete false): {', '.join(skipped)}[/]"
        )
    fd = rec.get("flame_diff") or {}
    cdir = Path(rec.get("path", ""))
    if fd.get("sides"):
        for side, d in fd["sides"].items():
            where = d["svg"] or "nothing drawn (no samples)"
            # Diffed per byte, or per unit of work (ns, shown in us): the keys say which.
            per = next((k[len("a_ns_per_") :] for k in d if k.startswith("a_ns_per_")), "byte")
            a, b = d[f"a_ns_per_{per}"], d[f"b_ns_per_{per}"]
            scale, unit = (1, "ns/B") if per == "byte" else (1e3, f"us/{per}")
            a, b = (None if v is None else v / scale for v in (a, b))
            console.print(
                f"flame diff {side}: {labels[0]} (run {fd['a']}) {num(a)} {unit} -> "
                f"{labels[1]} (run {fd['b']}) {num(b)} {unit}: {cdir / where if d['svg'] else where}"
            )
    elif fd:
        console.print(f"flame diff: none ({fd.get('absent')})")
    console.print(f"comparison {rec['id']}: {len(rec['runs'])} runs, record {cdir / COMPARISON_RECORD}")


_CATEGORIES = "CPU ns/B by flame category"

# A comparison's summary: the figures each configuration is judged by, as ratios to the first.
RATIO_KEYS = (
    "throughput_gbps",
    "client_ns_per_byte",
    "server_ns_per_byte",
    "system_ns_per_byte",
    "download_complete_p50",
    "download_cpu_ms",
    "rr_requests_per_s",
    "rr_delay_pp50",
    "rr_delay_pp99",
    "rr_client_cpu_us",
    "rr_server_cpu_us",
    "handshakes_per_s",
    "handshake_client_cpu_us",
    "handshake_server_cpu_us",
)


def print_comparison_summary(rec: dict, console: Optional[Console] = None) -> None:
    """The comparison's ratio table first (RATIO_KEYS: median, ×ratio to
    the first configuration, * where the ranges do not overlap); every
    figure and category is `qprof show ID --all`."""
    console = console or Console()
    labels = [str(c["label"]) for c in rec["configs"]]
    console.print(
        f"[bold]{len(labels)} configurations × {rec['repeat']} runs, interleaved[/]: "
        "median ±half its range, ×ratio of medians to the first, * where the ranges do not overlap"
    )
    main, _ = _comparison_figures(rec, RATIO_KEYS)
    t = _figures_as_rows("the ratios", labels, main)
    if _natural_width(console, t) <= console.width:
        console.print(t)
    else:
        _print_configurations_as_rows(console, labels, main, [])
    console.print(f"more: qprof show {rec['id']} --all (every figure, the flame diff)")


def _comparison_figures(rec: dict, keys=None):
    """The comparison's figures to show, as (label, unit, cells): the
    headline ones, then the flame categories (label 'side: category')
    that reach CATEGORY_FLOOR_NS_PER_BYTE in some configuration; keys:
    only these metrics."""
    main, cats = [], []
    units = rec["metric_units"]
    for key, rows in rec["metrics"].items():
        if keys is not None and key not in keys:
            continue
        u = units[key]
        cells = [cell(r, u["unit"], i == 0) for i, r in enumerate(rows)]
        if ": " not in u["label"]:
            main.append((u["label"], u["unit"], cells))
        elif any((r["median"] or 0) >= CATEGORY_FLOOR_NS_PER_BYTE for r in rows):
            cats.append((u["label"], u["unit"], cells))
    return main, cats


def _figure_name(label: str, unit: str) -> str:
    return label + (f" ({unit})" if unit and unit != "share" else "")


def _figures_as_rows(title: str, labels: List[str], figs: list) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("FIGURE", no_wrap=True)
    for label in labels:
        t.add_column(Text(label), justify="right")
    for label, unit, cells in figs:
        t.add_row(_figure_name(label, unit), *cells)
    return t


def _natural_width(console: Console, table: Table) -> int:
    """The columns the table takes when none of its cells wraps."""
    return Measurement.get(console, console.options.update_width(1 << 16), table).maximum


def _print_configurations_as_rows(console: Console, labels: List[str], main: list, cats: list) -> None:
    """One row per configuration, its label whole (wrapped only at its
    spaces); the figures as columns, as many per table as fit the
    console, each cell on one line. A column too wide for the console
    even alone is printed at its own width, for the terminal to wrap,
    never cut."""
    # A label holds a stack and its key=value settings; wrapped between them where long.
    longest_word = max((cell_len(w) for lb in labels for w in lb.split()), default=0)
    label_width = max(1, longest_word, min(max(map(cell_len, labels)), console.width // 3))
    rows = [
        Text("\n".join(textwrap.wrap(lb, label_width, break_long_words=False, break_on_hyphens=False))) for lb in labels
    ]
    groups = [("figures, one row per configuration", [(_figure_name(lb, u), cells) for lb, u, cells in main])]
    by_side: dict = {}
    for label, _unit, cells in cats:
        side, category = label.split(": ", 1)
        by_side.setdefault(side, []).append((category, cells))
    groups += [(f"{side} CPU ns/B by flame category", figs) for side, figs in by_side.items()]
    for title, figs in groups:
        blocks = [[]]
        for fig in figs:
            if blocks[-1] and _natural_width(console, _rows_table(title, rows, blocks[-1] + [fig])) > console.width:
                blocks.append([])
            blocks[-1].append(fig)
        for i, block in enumerate(blocks):
            _print_block(console, _rows_table(title + (" (continued)" if i else ""), rows, block))


def _rows_table(title: str, rows: List[Text], figs: list) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("", no_wrap=True)
    for name, cells in figs:
        # The heading wraps at its spaces to its widest cell (or longest word).
        width = max([1] + [cell_len(c) for c in cells] + [cell_len(w) for w in name.split()])
        heading = "\n".join(textwrap.wrap(name, width, break_long_words=False, break_on_hyphens=False))
        t.add_column(Text(heading), justify="right", no_wrap=True)
    for i, label in enumerate(rows):
        t.add_row(label, *(cells[i] for _, cells in figs))
    return t


def _print_block(console: Console, table: Table) -> None:
    width = _natural_width(console, table)
    if width <= console.width:
        console.print(table)
    else:  # rendered at its own width, and not cropped to the console's
        console.print(Segments(console.render(table, console.options.update_width(width))), crop=False)


def _print_link(rec: dict, console: Console) -> None:
    """The emulated link as the kernel holds it, its counters over the
    window, and what limited the run."""
    lk = rec.get("link")
    if not lk:
        return
    r = lk["requested"]
    parts = [f"rtt {r['rtt_s'] * 1e3:g} ms"] if r["rtt_s"] else []
    parts += [f"loss {r['loss_percent']:g}%"] if r["loss_percent"] else []
    parts += [f"rate {r['rate_bit'] / 1e6:g} Mbit/s"] if r["rate_bit"] else []
    parts += [f"jitter {r['jitter_s'] * 1e3:g} ms"] if r["jitter_s"] else []
    q = lk["plan"]["queue_packets"]
    parts += [f"queue {q} packets ({lk['plan']['queue_source']})"] if q else []
    name = f"{lk['preset']}: " if lk["preset"] else ""
    console.print(f"link {name}{', '.join(parts)}")
    t = Table(title="the link over the window (tc qdisc counters)", title_justify="left")
    for col in ("DIRECTION", "QDISCS", "PACKETS", "DROPS", "NETEM DROPS", "UTILISATION", "AS ASKED"):
        t.add_column(col, justify="left" if col in ("DIRECTION", "QDISCS", "AS ASKED") else "right")
    for name, d in lk["directions"].items():
        root = next(iter((d["window"] or {}).values()), None)
        t.add_row(
            name.replace("_", " "),
            "+".join(d["applied"]["kinds"]) if d["applied"] else ABSENT,
            count(root["packets"]) if root else ABSENT,
            count(root["drops"]) if root else ABSENT,
            num(d["netem_drops_percent"], "{:.2f}%"),
            num(d["utilisation"], "{:.0%}"),
            ABSENT
            if d["differs"] is None
            else ("yes" if not d["differs"] else "[red]" + "; ".join(d["differs"]) + "[/]"),
        )
    console.print(t)
    s = lk["saturation"]
    line = f"limited by: [bold]{s['limited_by']}[/]" + (
        f" ({s['limited_by_means']})" if s.get("limited_by_means") else ""
    )
    if s["cpu_saturated_first"]:
        line += " [yellow](the CPU saturated before the link: these times describe the emulator, not the link)[/]"
    console.print(line)


def record_warnings(rec: dict) -> list:
    """What a record itself warns of, for stderr: a link the emulation held
    back (link.saturation.warning); a mix's bulk flows that verified no
    byte in the window (mix.starved)."""
    s = (rec.get("link") or {}).get("saturation") or {}
    out = [s["warning"]] if s.get("warning") else []
    mix = rec.get("mix") or {}
    flows = {f["flow"]: f for f in mix.get("flows", [])}
    for i in mix.get("starved") or []:
        out.append(
            f"flow {i} ({flows[i]['stack']}) verified no byte in the {rec['window_s']:.3g} s window: "
            "starved by the flows beside it (a longer --duration gives each its share, or shows it never gets one)"
        )
    return out


def warn_record(rec: dict) -> None:
    for w in record_warnings(rec):
        print(f"qprof: warning: run {rec.get('id')}: {w}.", file=sys.stderr, flush=True)


def _own_counters(rec: dict) -> Table:
    """The workload's own counters: msquic's for QUIC, TCP_INFO for TCP."""
    if transports.msquic(rec["stack"]):
        w = Table(title="msquic's own counters over the window (UDP)", title_justify="left")
        cols = ("SIDE", "SEND CALLS", "DGRAMS OUT", "RECV CALLS", "DGRAMS IN", "LOST", "CONG")
    elif transports.has_quic_stats(rec["stack"]):
        # The library's own counters (quic_stats): its calls and datagrams each way, losses.
        w = Table(title=f"{rec['stack']}'s own counters over the window (UDP)", title_justify="left")
        cols = ("SIDE", "SEND CALLS", "DGRAMS OUT", "DGRAMS IN", "LOST", "CONG")
    elif transports.datagram(rec["stack"]):
        w = Table(title="the workload's own counters over the window (raw UDP)", title_justify="left")
        cols = ("SIDE", "IO CALLS", "DATAGRAMS", "LOST", "REORDERED", "COALESCED MSGS")
    else:
        w = Table(title="the workload's own counters over the window (TCP_INFO)", title_justify="left")
        cols = ("SIDE", "IO CALLS", "SEGS OUT", "SEGS IN", "RETRANS")
    for col in cols:
        w.add_column(col, justify="left" if col == "SIDE" else "right")
    for side in ("client", "server"):
        win = rec["workload"][side]["window"]
        if win is None:
            # --server-cmd: a program qprof cannot see into.
            w.add_row(side, "not seen: an external program", *[""] * (len(cols) - 2))
            continue
        if transports.msquic(rec["stack"]):
            pc, cs = win.get("perf_counters") or {}, win.get("conn_stats") or {}
            w.add_row(
                side,
                count(pc.get("udp_send_calls")),
                count(pc.get("udp_send")),
                count(pc.get("udp_recv_events")),
                count(pc.get("udp_recv")),
                count(cs.get("send_suspected_lost_packets")),
                count(cs.get("send_congestion_count")),
            )
        elif transports.has_quic_stats(rec["stack"]):
            qs = win.get("quic_stats") or {}
            w.add_row(
                side,
                *(
                    count(qs.get(k))
                    for k in (
                        "udp_tx_ios",
                        "udp_tx_datagrams",
                        "udp_rx_datagrams",
                        "lost_packets",
                        "congestion_events",
                    )
                ),
            )
        elif transports.datagram(rec["stack"]):
            w.add_row(
                side,
                count(win.get("io_calls")),
                count(win.get("datagrams")),
                count(win.get("lost")),
                count(win.get("reordered")),
                count(win.get("gro_segments")),
            )
        else:
            ti = win.get("tcp_info") or {}
            w.add_row(
                side,
                count(win.get("io_calls")),
                count(ti.get("segs_out")),
                count(ti.get("segs_in")),
                count(ti.get("total_retrans")),
            )
    return w


def _print_floor(rec: dict, console: Console) -> None:
    """The run's CPU per byte as a multiple of the machine's floor."""
    f = rec.get("floor")
    if not f or "absent" in f:
        return
    x, n = f["times_floor"], f["ns_per_byte"]
    console.print(
        f"floor ({f['includes']}; {f['record_bytes']:,}-byte records, {f['library']}): "
        f"client {n['client']:.3f}, server {n['server']:.3f}, system {n['system']:.3f} ns/B; "
        f"this run [bold]{num(x['system'], '{:.1f}')}×[/] the floor "
        f"(client {num(x['client'], '{:.1f}')}×, server {num(x['server'], '{:.1f}')}×)"
    )


def _print_loss(rec: dict, console: Console) -> None:
    """The kernel's own drop and retransmit counters over the window."""
    k = rec.get("kernel_loss")
    if not k or k.get("dropped") is None:
        return
    if k["dropped"] and rec.get("link"):
        # The emulated link drops by design (its loss, its queue's limit).
        line = "the kernel dropped packets (with the emulated link's qdiscs): " + "; ".join(k["where"])
    elif k["dropped"]:
        line = "[red]the kernel dropped packets:[/] " + "; ".join(k["where"])
    else:
        line = "kernel drops: none (snmp, softnet, qdisc and veth counters)"
    retr, dup = k.get("retransmitted_segments"), k.get("duplicate_segments")
    if retr:
        line += f"; TCP retransmitted {retr:,} segments"
        if dup:
            line += f", {dup:,} of them reported back as duplicates (spurious: the originals arrived"
            line += ", reordered)" if k.get("reordering_seen") else ")"
    console.print(line)


def _print_offload(rec: dict, console: Console) -> None:
    """GSO/GRO as asked, and as the probes saw them."""
    off = rec.get("offload")
    if not off:
        return
    obs, ev = off["observed"], off["observed"]["evidence"]
    parts = []
    for k in ("gso", "gro"):
        want = off["effective"].get(k)
        parts.append(f"{k.upper()} {want or 'default'} -> seen {obs.get(k) or ABSENT}")
    share = ev.get("client_tx_gso_share")
    detail = []
    if share is not None:
        detail.append(f"{share * 100:.0f}% of the client's packets left as super-packets")
    if ev.get("recv_bytes_per_message") is not None:
        detail.append(f"{ev['recv_bytes_per_message']:,.0f} bytes per received message")
    if ev.get("server_rx_gro_entries") is not None:
        detail.append(f"{ev['server_rx_gro_entries']:,} GRO entries on the server's veth")
    if obs.get("gro_absent_reason"):
        detail.append("GRO not seen: the packets probe counted no receive side (--packets-rx)")
    console.print("offload: " + ", ".join(parts) + (f" ({'; '.join(detail)})" if detail else ""))
    for note in off.get("notes") or []:
        console.print(f"  {note}")


def _ratio(check: dict) -> str:
    return num(check.get("ratio"))


def _print_probes(rec: dict, console: Console) -> None:
    for name, p in (rec.get("probes") or {}).items():
        if p["status"] != "present":
            console.print(f"[yellow]probe {name} absent[/]: {p['reason']}")
    sides = rec.get("syscalls") or {}
    if not any(sides.values()):
        return
    t = Table(title="Network syscalls over the window (eBPF)", title_justify="left")
    for col in ("", "CLIENT", "SERVER"):
        t.add_column(col, justify="right" if col else "left")
    rows = (
        ("send calls", "send_calls", count),
        ("recv calls", "recv_calls", count),
        ("  with data", "recv_calls_with_data", count),
        ("  EAGAIN", "recv_eagain", count),
        ("syscalls per MB", "syscalls_per_mb", lambda v: num(v, "{:.1f}")),
        ("bytes per send call", "bytes_per_send_call", lambda v: num(v, "{:,.0f}")),
        ("bytes per recv call", "bytes_per_recv_call", lambda v: num(v, "{:,.0f}")),
        ("datagrams per send call", "datagrams_per_send_call", lambda v: num(v, "{:.1f}")),
        ("datagrams per recv call", "datagrams_per_recv_call", lambda v: num(v, "{:.1f}")),
        ("in-syscall ns/B", "in_syscall_ns_per_byte", num),
        # Wall time, blocked time included: not a share of CPU, and may exceed 1.
        ("wall s in send calls per CPU s", "send_wall_s_per_cpu_s", lambda v: num(v, "{:.2f}")),
        ("wall s in recv calls per CPU s", "recv_wall_s_per_cpu_s", lambda v: num(v, "{:.2f}")),
    )
    for label, key, fmt in rows:
        t.add_row(label, *(fmt(sides[side][key]) if sides.get(side) else ABSENT for side in ("client", "server")))
    console.print(t)
    untimed = next((f["time_absent_reason"] for f in sides.values() if f and f.get("time_absent_reason")), None)
    if untimed:
        console.print(f"[yellow]{ABSENT} in the time rows: {untimed}[/]")
    no_rx = next((f["rx_absent_reason"] for f in sides.values() if f and f.get("rx_absent_reason")), None)
    if no_rx:
        console.print(f"[yellow]{ABSENT} in datagrams per recv call: {no_rx}[/]")
    _print_threads(rec, console)
    checks = rec.get("crosscheck") or {}
    parts = []
    for side in ("client", "server"):
        c = checks.get(side)
        if not c:
            continue
        if "absent_reason" in c and "source" not in c:
            parts.append(f"{side} absent ({c['absent_reason']})")
            continue
        names = [k for k in c if k != "source"]
        parts.append(f"{side} " + ", ".join(f"{k} {_ratio(c[k])}" for k in names))
    if parts:
        source = next((c["source"] for c in checks.values() if c and "source" in c), "own counts")
        console.print(f"eBPF / {source}: " + "; ".join(parts))


def _print_threads(rec: dict, console: Console) -> None:
    ct = rec.get("cpu_threads")
    if not ct:
        return
    t = Table(title="CPU by thread and softirq (eBPF), ns/B", title_justify="left")
    for col in ("SIDE", "ON-CPU", "SOFTIRQ ON ITS STACK", "OWN WORK", "BUSIEST THREAD"):
        t.add_column(col, justify="left" if col in ("SIDE", "BUSIEST THREAD") else "right")
    for side in ("client", "server"):
        f = ct[side]
        n = f["ns_per_byte"]
        top = f["threads"][0] if f["threads"] else None
        t.add_row(
            side,
            num(n["oncpu"]),
            num(n["softirq_in_context"]),
            num(n["own_work"]),
            f"{top['comm']}/{top['tid']} {top['share'] * 100:.0f}%" if top and top["share"] is not None else ABSENT,
        )
    console.print(t)
    if ct.get("softirq_absent_reason"):
        console.print(
            f"[yellow]{ABSENT} in the softirq columns, and no softirq by vector: {ct['softirq_absent_reason']}[/]"
        )
    vecs = ", ".join(
        f"{k} {v['ns_per_byte']:.3f}" for k, v in (ct["softirq"] or {}).items() if (v["ns_per_byte"] or 0) >= 0.0005
    )
    if vecs:
        nested = " (hardirqs that interrupted them included)" if ct.get("softirq_includes_hardirqs") else ""
        console.print(f"softirq by vector, system-wide, ns/B: {vecs}{nested}")
    checks = [
        f"{side} {_ratio(ct[side]['oncpu_check'])}" for side in ("client", "server") if ct[side].get("oncpu_check")
    ]
    if checks:
        console.print("eBPF on-CPU / the kernel's schedstat: " + "; ".join(checks))


def _print_flame(rec: dict, console: Console) -> None:
    flame = rec.get("flame")
    sides = flame.get("sides") if isinstance(flame, dict) else None
    if not isinstance(sides, dict) or not sides:
        return
    t = Table(
        title=f"CPU per byte by category (perf {flame['event']} stacks, {flame['sample_hz']} Hz), ns/B",
        title_justify="left",
    )
    t.add_column("CATEGORY")
    for side in sides:
        t.add_column(side.upper(), justify="right")
    # A side with no bytes or no sample has no figure drawn (— = not measured).
    cats = next((f["categories_ns_per_byte"] for f in sides.values() if f["categories_ns_per_byte"]), {})
    for cat in cats:
        t.add_row(cat, *(num((sides[s]["categories_ns_per_byte"] or {}).get(cat), "{:.3f}") for s in sides))
    t.add_row("[bold]graph total[/]", *(num(sides[s]["ns_per_byte"], "[bold]{:.3f}[/]") for s in sides))
    t.add_row("measured", *(num(sides[s]["measured_ns_per_byte"]) for s in sides))
    t.add_row("gap", *(num(sides[s]["gap_percent"], "{:+.1f}%") for s in sides))
    t.add_row(
        "stack quality",
        *(num(sides[s]["stack_quality"] and sides[s]["stack_quality"] * 100, "{:.0f}%") for s in sides),
    )
    console.print(t)
    if flame.get("complete") is False:
        console.print(f"[yellow]the capture undercounts: {flame['incomplete_reason']}[/]")
        weighted = [s for s in sides if sides[s].get("weighting")]
        if weighted:
            console.print(
                f"[yellow]{' and '.join(weighted)} weighted: each thread's samples scaled to its on-CPU time "
                f"(cputhread probe), factors {_factor_range(sides, weighted)}; the other sides undercount[/]"
            )
    console.print("flame graphs: qprof flame " + rec["id"])


def _factor_range(sides: dict, weighted: list) -> str:
    lo = min(sides[s]["weighting"]["factor_min"] for s in weighted)
    hi = max(sides[s]["weighting"]["factor_max"] for s in weighted)
    return f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}"


# `qprof ls`: the run history as one table.

# Piped, the table keeps its columns whole (a terminal wraps its own).
PIPED_WIDTH = 200


def _list_state(row: dict) -> str:
    if row["problem"]:
        return f"[red]{history.CORRUPT}[/]"
    shown = {"complete": "complete", "incomplete": "[yellow]incomplete[/]"}
    return shown.get(row["status"], f"[dim]{row['status']}[/]")


def _list_note(row: dict) -> str:
    """What the figures columns do not say: a comparison's shape, an rr
    run's delay, a download's time, fairness, or why it is not complete."""
    if row["problem"]:
        return row["problem"]
    if row["status"] != "complete":
        return row["error"] or ""
    if row["kind"] == "comparison":
        vary = " ".join(f"{k}={','.join(v)}" for k, v in (row["vary"] or {}).items())
        n = len(row["configs"] or ())
        return f"{n} configurations × {row['repeat']}" + (f", vary {vary}" if vary else "")
    said = []
    if row["rr_delay_p50_ms"] is not None:
        said.append(f"delay p50 {row['rr_delay_p50_ms']:.3f} ms")
    if row["download_p50_ms"] is not None:
        said.append(f"download p50 {row['download_p50_ms']:.2f} ms")
    if row["jain_index"] is not None:
        said.append(f"Jain {row['jain_index']:.3f}")
    if row["link"]:
        said.append(f"link {row['link']}")
    if row["guest"]:
        said.append("guest")
    server = (row["options"] or {}).get("server")
    if server:
        said.append(f"server on {server}")
    return ", ".join(said)


def print_run_list(rows: List[dict], root: Path, console: Optional[Console] = None) -> None:
    """The history's rows (core/history.py's query), one a line."""
    console = console or Console(highlight=False, width=None if Console().is_terminal else PIPED_WIDTH)
    if not rows:
        console.print(f"no runs under {root} match; `qprof ls` with fewer filters, or make one with `qprof run`.")
        return
    t = Table(title=f"runs under {root}, newest first (the id starts with its date and time)", title_justify="left")
    t.box = box.SIMPLE_HEAD
    t.add_column("ID", no_wrap=True, min_width=22)
    t.add_column("STACK", no_wrap=True)
    t.add_column("STATUS", no_wrap=True)
    for col in ("Gbit/s", "CLIENT ns/B", "SERVER ns/B", "SYSTEM ns/B"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("NOTE")
    t.add_column("MACHINE")
    for row in rows:
        stack = row["stack"] or ABSENT
        if row["pattern"] and row["pattern"] != options.BY_NAME["pattern"].default:  # named when not the default
            stack += f" {row['pattern']}"
        if row["kind"] == "comparison":
            stack = f"compare {stack}"
        t.add_row(
            row["id"],
            escape(stack),
            _list_state(row),
            num(row["throughput_gbps"]),
            num(row["client_ns_per_byte"]),
            num(row["server_ns_per_byte"]),
            num(row["system_ns_per_byte"]),
            escape(_list_note(row)),
            escape(" ".join(x for x in (row["hostname"], row["kernel_release"]) if x) or ABSENT),
        )
    console.print(t)


# `qprof show`: a record's tables again, or what an incomplete or corrupt one holds.


def record_printer(kind: str, rec: dict, every: bool = True) -> Callable:
    """The printer that draws a complete record of this kind: every table,
    or (every False) its summary: a run's (present/summary.py), a
    comparison's ratios; a mix has its tables only."""
    from qprof.present import summary

    if kind == "comparison":
        return print_comparison if every else print_comparison_summary
    if rec.get("stack") == "mix" or "mix" in rec:
        return print_mix if every else print_mix_summary
    return print_run if every else summary.print_summary


# What a printer raises on a record whose fields are not of their types
# (a damaged one): it is then shown field by field instead. rich's own: a
# value that is no text, or text that is broken markup.
DAMAGED = (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError, ConsoleError)


def rendered(printer: Callable, rec: dict):
    """(text, None) as printer draws rec for stdout, or (None, why not):
    drawn aside first, so a record that breaks it leaves no half table."""
    out = Console()
    buf = io.StringIO()
    console = Console(
        file=buf,
        force_terminal=out.is_terminal,
        color_system=out.color_system,
        width=out.width,
        highlight=False,
    )
    try:
        printer(rec, console)
    except DAMAGED as e:
        return None, f"{type(e).__name__}: {e}"
    return buf.getvalue(), None


def partial_sentence(row: dict) -> str:
    """The one sentence that says print_partial's record is not whole."""
    what = f"{row['kind']} {row['id']}"
    if row["problem"]:
        return f"{what}'s record is corrupt: {row['problem']}; above is what could be read of it."
    said = f"{what} is {row['status']}"
    if row["error"]:
        said += f" ({row['error'].rstrip('.')})"
    return f"{said}; above is what its record holds."


def print_partial(row: dict, rec: Optional[dict], where: Path, console: Optional[Console] = None) -> None:
    """What an incomplete or corrupt record holds, marked as such: its
    state, options, environment and whichever figures it has, the
    comparison's runs, and the files in its directory. One line a field,
    never wrapped, so each can be grepped."""
    console = console or Console(highlight=False)
    state = "CORRUPT" if row["problem"] else row["status"].upper()
    lines = []
    for key in ("problem", "error", "time", "stack", "pattern"):
        if row[key] is not None:
            lines.append((key, str(row[key])))
    opts = {k: v for k, v in (row["options"] or {}).items() if v not in (None, False, [], ())}
    if opts:
        lines.append(("options", " ".join(f"{k}={field(v)}" for k, v in opts.items())))
    env = [row[k] for k in ("hostname", "cpu_model", "kernel_release") if row[k]]
    if env:
        lines.append(("machine", ", ".join(map(str, env))))
    for key in ("qprof_version", "qprof_commit", "msquic_version"):
        if row[key]:
            lines.append((key, str(row[key])))
    for key in history.NAMES[history.NAMES.index("throughput_gbps") : history.NAMES.index("record_size")]:
        if row[key] is not None:
            lines.append((key, field(row[key])))
    for c in row["configs"] or ():
        medians = ", ".join(f"{k} {field(v)}" for k, v in c["medians"].items() if v is not None)
        lines.append(("configuration", f"{c.get('label')}" + (f": {medians}" if medians else "")))
    if isinstance(rec, dict) and isinstance(rec.get("runs"), list):
        done = [r.get("id") for r in rec["runs"] if isinstance(r, dict)]
        lines.append(("runs done", ", ".join(map(str, done)) or "none"))
    try:
        files = sorted(p.name + ("/" if p.is_dir() else "") for p in where.iterdir())
    except OSError:
        files = []
    lines.append(("directory", str(where)))
    lines.append(("files", ", ".join(files) or "none"))
    console.print(f"[bold]{row['kind']} {row['id']}[/]: [red]{state}[/]", soft_wrap=True)
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        console.print(f"  {key:<{width}}  ", style="dim", end="", soft_wrap=True)
        console.print(value, markup=False, soft_wrap=True)


# `qprof flame`: one line per side drawn, the categories, one line per side diffed.


def flame_side_line(
    side: str, fig: normalize.SideFigures, measured_ns: Optional[float], gap: Optional[float], svg: Optional[Path]
) -> str:
    """One greppable line per side, in the run's unit (ns/B, us/request)."""
    u = fig.unit
    q = ABSENT if fig.stack_quality is None else f"{fig.stack_quality * 100:.1f}%"
    measured = None if measured_ns is None else u.shown(measured_ns)
    return (
        f"{side}: graph {fig.shown:.3f} {u.figure}, measured {num(measured)} {u.figure}, "
        f"gap {num(gap, '{:+.1f}%')}, stack quality {q}, {fig.samples:,} samples -> "
        + (str(svg) if svg else "nothing to draw")
    )


def flame_category_table(figs: dict, unit: normalize.Unit = normalize.BYTE) -> Table:
    t = Table(title=f"{unit.figure} (share) by category", title_justify="left")
    t.add_column("CATEGORY", no_wrap=True)
    for side in figs:
        t.add_column(side.upper(), justify="right", no_wrap=True)
    for cat in categories.CATEGORIES:
        row = [cat]
        for fig in figs.values():
            share = fig.categories_samples[cat] / fig.samples * 100 if fig.samples else None
            row.append(f"{unit.shown(fig.categories_ns_per_unit[cat]):.3f} ({num(share, '{:5.1f}%')})")
        t.add_row(*row)
    t.add_row(
        "[bold]total[/]",
        *(f"[bold]{fig.shown:.3f}[/] (100.0%)" if fig.samples else f"{0:.3f} ({ABSENT})" for fig in figs.values()),
    )
    return t


def print_flame_categories(
    figs: dict, unit: normalize.Unit, incomplete: Optional[str], console: Optional[Console] = None
) -> None:
    """The category table of the sides drawn, and why the capture
    undercounts when it does."""
    console = console or Console(highlight=False)
    console.print(flame_category_table(figs, unit))
    if incomplete:
        console.print(Text(f"the capture undercounts: {incomplete}.", style="yellow"))


def _shown(u, v: Optional[float]) -> Optional[float]:
    return None if v is None else u.shown(v)


def flame_diff_line(d: diff.SideDiff, b_id: str) -> str:
    """One greppable line per side diffed: A -> B in the runs' unit, or
    that B has nothing on this side to draw."""
    if d.svg is None:
        return f"{d.side}: run {b_id} has no samples on this side, nothing drawn"
    u = d.unit
    return (
        f"{d.side}: A {num(_shown(u, d.a_ns_per_unit))} {u.figure} -> B {num(_shown(u, d.b_ns_per_unit))} {u.figure} "
        f"({num(d.change_percent, '{:+.1f}%')}) -> {d.svg}"
    )
