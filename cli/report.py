"""A run record as a short human table (rich), on stdout."""
from typing import Optional

from rich.console import Console
from rich.table import Table

ABSENT = "—"


def _num(v: Optional[float], fmt: str = "{:.3f}") -> str:
    return ABSENT if v is None else fmt.format(v)


def _int(v: Optional[int]) -> str:
    return ABSENT if v is None else f"{v:,}"


def print_run(rec: dict, console: Optional[Console] = None) -> None:
    console = console or Console()
    env, cfg = rec["environment"], rec["config"]
    topo = env["topology"]
    gso = env.get("msquic_send_segmentation", {}).get("client")
    gro = env.get("msquic_recv_coalescing", {}).get("server")
    console.print(
        f"[bold]{rec['stack']}[/] over {topo['kind']}"
        + (f" (MTU {topo['mtu']})" if topo.get("mtu") else "")
        + f", {cfg['streams']} stream(s); msquic {env.get('msquic_version') or ABSENT}"
        + f", GSO {'on' if gso else 'off' if gso is False else ABSENT}"
        + f", GRO {'on' if gro else 'off' if gro is False else ABSENT}"
    )
    console.print(
        f"window {rec['window_s']:.2f} s: {rec['bytes']:,} bytes verified={rec['verified']}, "
        f"[bold]{rec['throughput_gbps']:.2f} Gbit/s[/]"
    )

    t = Table(title="CPU over the window", title_justify="left")
    for col in ("SIDE", "CPU (s)", "USER ns/B", "SYS ns/B", "SOFTIRQ ns/B", "TOTAL ns/B"):
        t.add_column(col, justify="left" if col == "SIDE" else "right")
    for side in ("client", "server", "system"):
        c = rec["cpu"][side]
        n = c["ns_per_byte"]
        t.add_row(side, _num(c["total_s"]), _num(n["user"]), _num(n["system"]), _num(n["softirq"]),
                  _num(n["total"], "[bold]{:.3f}[/]"))
    console.print(t)
    util = rec["cpu"]["system"].get("utilisation")
    if util is not None:
        console.print(f"system busy {util * 100:.0f}% of {env['cpu_count']} CPUs; "
                      f"{ABSENT} = not measured (per-process softirq: see README)")

    w = Table(title="msquic's own counters over the window (UDP)", title_justify="left")
    for col in ("SIDE", "SEND CALLS", "DGRAMS OUT", "RECV CALLS", "DGRAMS IN", "LOST", "CONG"):
        w.add_column(col, justify="left" if col == "SIDE" else "right")
    for side in ("client", "server"):
        win = rec["workload"][side]["window"]
        pc = win.get("perf_counters") or {}
        cs = win.get("conn_stats") or {}
        w.add_row(side, _int(pc.get("udp_send_calls")), _int(pc.get("udp_send")),
                  _int(pc.get("udp_recv_events")), _int(pc.get("udp_recv")),
                  _int(cs.get("send_suspected_lost_packets")), _int(cs.get("send_congestion_count")))
    console.print(w)
    _print_probes(rec, console)
    console.print(f"run {rec['id']}")


def _ratio(check: dict) -> str:
    r = check.get("ratio")
    return ABSENT if r is None else f"{r:.3f}"


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
        ("send calls", "send_calls", _int),
        ("recv calls", "recv_calls", _int),
        ("  with data", "recv_calls_with_data", _int),
        ("  EAGAIN", "recv_eagain", _int),
        ("syscalls per MB", "syscalls_per_mb", lambda v: _num(v, "{:.1f}")),
        ("bytes per send call", "bytes_per_send_call", lambda v: _num(v, "{:,.0f}")),
        ("bytes per recv call", "bytes_per_recv_call", lambda v: _num(v, "{:,.0f}")),
        ("datagrams per send call", "datagrams_per_send_call", lambda v: _num(v, "{:.1f}")),
        ("datagrams per recv call", "datagrams_per_recv_call", lambda v: _num(v, "{:.1f}")),
        ("in-syscall ns/B", "in_syscall_ns_per_byte", _num),
        ("CPU share in send calls", "send_share_of_cpu", lambda v: _num(v and v * 100, "{:.1f}%")),
        ("CPU share in recv calls", "recv_share_of_cpu", lambda v: _num(v and v * 100, "{:.1f}%")),
    )
    for label, key, fmt in rows:
        t.add_row(label, *(fmt(sides[side][key]) if sides.get(side) else ABSENT for side in ("client", "server")))
    console.print(t)
    checks = (rec.get("crosscheck") or {}).get("msquic") or {}
    if checks:
        parts = []
        for side in ("client", "server"):
            c = checks.get(side) or {}
            parts.append(f"{side} send calls {_ratio(c.get('udp_send_calls', {}))}, "
                         f"recv events {_ratio(c.get('udp_recv_events', {}))}, "
                         f"datagrams out {_ratio(c.get('udp_send_datagrams', {}))}")
        console.print("eBPF / msquic's own count: " + "; ".join(parts))
