# SPDX-License-Identifier: GPL-2.0-only
"""The steady-state window: its two edges and what was measured between.

An edge reads, as close together as possible: /proc/stat, both processes'
CPU, then each workload's own counters (a "mark" on its control channel).
The window starts `warmup_s` after the handshake completed and ends
`duration_s` later (or when the server reports the last byte, for a
transfer of a fixed size). Everything qprof derives covers exactly it.
"""

import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Iterable, List, Optional

from . import cpu, link, netstat, transports
from .workload import WorkloadProcess

MARK_TIMEOUT_S = 5.0


@dataclass
class Edge:
    t_ns: int
    system: cpu.SystemCpu
    server: cpu.ProcessCpu
    client: cpu.ProcessCpu
    server_mark: dict
    client_mark: dict
    tls_stat: dict  # side -> /proc/<pid>/net/tls_stat, None without kernel TLS
    net: dict  # side -> the namespace's loss counters (netstat.WATCHED); "softnet": the machine's
    tasks: dict  # (pid, tid) -> on-CPU ns of every task (schedstat)
    qdiscs: Optional[dict] = None  # with --link: side -> qdisc kind -> counters (link.read_counters)


@dataclass
class Window:
    start: Edge
    end: Edge
    receiver: str = "server"  # whose verified bytes the window counts: the client's for downloads

    @property
    def sender(self) -> str:
        return "client" if self.receiver == "server" else "server"

    def mark_delta(self, side: str, key: str) -> int:
        return getattr(self.end, f"{side}_mark")[key] - getattr(self.start, f"{side}_mark")[key]

    @property
    def bytes(self) -> int:
        """Bytes the receiver verified inside the window."""
        return self.mark_delta(self.receiver, "app_bytes")

    @property
    def seconds(self) -> float:
        """The window by the receiver's own clock, which brackets `bytes`."""
        return self.mark_delta(self.receiver, "t_ns") / 1e9

    @property
    def cpu_seconds(self) -> float:
        """The window by qprof's clock, which brackets the CPU readings."""
        return (self.end.t_ns - self.start.t_ns) / 1e9


def take_edge(name: str, server: WorkloadProcess, client: WorkloadProcess, probes=None, emulated=None) -> Edge:
    """Every instrument's reading at one instant, as near as can be: all
    marks are asked for at once (each process answers as soon as it runs),
    the kernel's counters are read meanwhile, then the answers collected."""
    if probes is not None:
        probes.request_mark(name)
    server.request_mark(name)
    client.request_mark(name)
    t_ns = time.monotonic_ns()
    system = cpu.read_system()
    server_cpu = cpu.read_process(server.pid)
    client_cpu = cpu.read_process(client.pid)
    tasks = cpu.read_tasks()
    tls_stat = {"server": transports.read_tls_stat(server.pid), "client": transports.read_tls_stat(client.pid)}
    net = {
        "server": netstat.read_namespace(server.pid),
        "client": netstat.read_namespace(client.pid),
        "softnet": netstat.read_softnet(),
    }
    qdiscs = link.read_counters(emulated.endpoints) if emulated else None
    server_mark = server.wait_event("mark", MARK_TIMEOUT_S)
    client_mark = client.wait_event("mark", MARK_TIMEOUT_S)
    if probes is not None:
        probes.collect_mark(name)
    return Edge(t_ns, system, server_cpu, client_cpu, server_mark, client_mark, tls_stat, net, tasks, qdiscs)


def sample_intervals(
    start: Edge,
    end_ns: int,
    interval_s: float,
    receiver: WorkloadProcess,
    server: WorkloadProcess,
    client: WorkloadProcess,
    on_sample: Callable[[dict, dict], None],
) -> List[dict]:
    """Inside the window, every interval_s until end_ns: the receiver's
    verified bytes (a mark) and both processes' on-CPU time (schedstat),
    and /proc/stat. Each sample goes to on_sample(previous, this) as it is
    taken (the live lines); the list is the measurement's."""
    procs = (server, client)
    samples: List[dict] = []
    prev = edge_sample(start, receiver.role)
    k = 1
    while True:
        due = start.t_ns + int(k * interval_s * 1e9)
        if due > end_ns - int(interval_s * 1e9) // 4:  # a sliver before the end edge is not an interval
            sleep_watching(end_ns, procs)
            return samples
        sleep_watching(due, procs)
        receiver.request_mark(f"interval-{k}")
        t_ns = time.monotonic_ns()
        sample = {
            "t_ns": t_ns,
            "system": asdict(cpu.read_system()),
            "server_oncpu_s": cpu.read_process(server.pid).oncpu_s,
            "client_oncpu_s": cpu.read_process(client.pid).oncpu_s,
        }
        mark = receiver.wait_event("mark", MARK_TIMEOUT_S)
        sample.update(receiver_app_bytes=mark["app_bytes"], receiver_t_ns=mark["t_ns"])
        samples.append(sample)
        on_sample(prev, sample)
        prev, k = sample, k + 1


def edge_sample(e: Edge, receiver: str) -> dict:
    """An edge in the form of an interval sample."""
    mark = getattr(e, f"{receiver}_mark")
    return {
        "t_ns": e.t_ns,
        "system": asdict(e.system),
        "server_oncpu_s": e.server.oncpu_s,
        "client_oncpu_s": e.client.oncpu_s,
        "receiver_app_bytes": mark["app_bytes"],
        "receiver_t_ns": mark["t_ns"],
    }


def interval_figures(a: dict, b: dict) -> dict:
    """One interval between two samples: goodput by the receiver's clock,
    each side's CPUs (on-CPU seconds per second), CPU per byte, and the
    machine's busy share (from /proc/stat's ticks: absent over an interval
    too short for them, cpu.ticks_absent_reason)."""
    nbytes = b["receiver_app_bytes"] - a["receiver_app_bytes"]
    seconds = (b["receiver_t_ns"] - a["receiver_t_ns"]) / 1e9
    wall = (b["t_ns"] - a["t_ns"]) / 1e9
    sys_d = cpu.SystemCpu(**b["system"]) - cpu.SystemCpu(**a["system"])
    out = {"bytes": nbytes, "seconds": seconds, "gbps": nbytes * 8 / seconds / 1e9 if seconds > 0 else None}
    for side in ("client", "server"):
        on = b[f"{side}_oncpu_s"] - a[f"{side}_oncpu_s"]
        out[f"{side}_cpus"] = on / wall if wall > 0 else None
        out[f"{side}_ns_per_byte"] = on * 1e9 / nbytes if nbytes else None
    out["system_utilisation"] = cpu.utilisation(sys_d, wall)
    return out


def sleep_watching(until_ns: int, procs: Iterable[WorkloadProcess]) -> None:
    """Sleep until a monotonic time, failing fast if a workload ends early."""
    procs = list(procs)
    while True:
        for p in procs:
            if p.done is not None or p.exited() is not None:
                p.raise_exit()
        left_ns = until_ns - time.monotonic_ns()
        if left_ns <= 0:
            return
        time.sleep(min(0.05, left_ns / 1e9))


# Connection statistics that are levels, not running totals: a window
# gets their value at its end, not a difference.
GAUGES = frozenset({"rtt_us", "min_rtt_us", "send_path_mtu", "send_congestion_window"})


def counter_delta(a: Optional[dict], b: Optional[dict]) -> Optional[Dict[str, int]]:
    """b - a for every counter both have (gauges: b); None when either is missing."""
    if a is None or b is None:
        return None
    return {k: (b[k] if k in GAUGES else b[k] - a[k]) for k in b if k in a}
