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
    console.print(f"run {rec['id']}")
