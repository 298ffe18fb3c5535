# SPDX-License-Identifier: GPL-2.0-only
"""The steady-state window: its two edges and what was measured between.

An edge reads, as close together as possible: /proc/stat, both processes'
CPU, then each workload's own counters (a "mark" on its control channel).
The window starts `warmup_s` after the handshake completed and ends
`duration_s` later (or when the server reports the last byte, for a
transfer of a fixed size). Everything qprof derives covers exactly it.
"""

from dataclasses import asdict, dataclass
from typing import Dict, Optional

from qprof.describe import cpu, state


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
    # A run on hosts: role -> its host's part, in that host's clock: {"host",
    # "t_ns", "answered_ns" (when its answer arrived here, in this machine's
    # clock: the host read its part between the edge's t_ns and then),
    # "system" (its /proc/stat), "tasks" (its every task, "pid/tid"),
    # "nic" (procfs.read_nic of the side's NIC, read just outside the window:
    # before the start edge, after the end edge)}.
    # Then system is every kernel's summed, and tasks each side's own threads.
    hosts: Optional[dict] = None


@dataclass
class Window:
    start: Edge
    end: Edge
    # Whose verified bytes the window counts (describe/direction.py): the
    # server's, the client's (downloads, bulk down), or "both" (bulk both
    # ways: the two receivers' added, each direction its own).
    receiver: str = "server"
    # A program pair's bytes, counted by the syscalls probe (neither side
    # counts: describe/external.py); None where the receiver's marks do.
    counted: Optional[int] = None

    @property
    def sender(self) -> str:
        return "both" if self.receiver == "both" else "client" if self.receiver == "server" else "server"

    @property
    def receivers(self) -> tuple:
        return ("client", "server") if self.receiver == "both" else (self.receiver,)

    def mark_delta(self, side: str, key: str) -> int:
        """A workload counter over the window; side "both": the two sides' added."""
        if side == "both":
            return sum(self.mark_delta(s, key) for s in ("client", "server"))
        return getattr(self.end, f"{side}_mark")[key] - getattr(self.start, f"{side}_mark")[key]

    @property
    def bytes(self) -> int:
        """Bytes the receiver (both: the receivers) verified inside the
        window; a program pair's, what the probe counted."""
        if self.counted is not None:
            return self.counted
        return self.mark_delta(self.receiver, "app_bytes")

    @property
    def sent(self) -> Optional[int]:
        """Bytes the sender handed to its transport (both ways: each side's
        sent_bytes); None for a program of the user's (--server-cmd), whose
        marks count nothing."""
        if self.receiver == "both":
            return self.mark_delta("both", "sent_bytes")
        if getattr(self.end, f"{self.sender}_mark").get("external"):
            return None
        return self.mark_delta(self.sender, "app_bytes")

    @property
    def seconds(self) -> float:
        """The window by the receiver's own clock (both: the server's), which brackets `bytes`."""
        return self.mark_delta(self._clock, "t_ns") / 1e9

    @property
    def _clock(self) -> str:
        return "server" if self.receiver == "both" else self.receiver

    @property
    def cpu_seconds(self) -> float:
        """The window by qprof's clock, which brackets the CPU readings."""
        return (self.end.t_ns - self.start.t_ns) / 1e9


def receiver_sample(marks: dict, receiver: str) -> dict:
    """The receiver's verified bytes and clock from role -> its mark
    (both: the two sides' bytes added, the server's clock)."""
    roles = ("client", "server") if receiver == "both" else (receiver,)
    clock = "server" if receiver == "both" else receiver
    return {
        "receiver_app_bytes": sum(marks[r]["app_bytes"] for r in roles),
        "receiver_t_ns": marks[clock]["t_ns"],
    }


def edge_sample(e: Edge, receiver: str) -> dict:
    """An edge in the form of an interval sample."""
    return {
        "t_ns": e.t_ns,
        "system": asdict(e.system),
        "server_oncpu_s": e.server.oncpu_s,
        "client_oncpu_s": e.client.oncpu_s,
        **receiver_sample({"client": e.client_mark, "server": e.server_mark}, receiver),
        "state_groups": {"client": state.of_mark(e.client_mark), "server": state.of_mark(e.server_mark)},
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


# Connection statistics that are levels, not running totals: a window
# gets their value at its end, not a difference.
# msquic's conn_stats levels, and the other QUIC libraries' quic_stats ones.
GAUGES = frozenset(
    {
        "rtt_us",
        "min_rtt_us",
        "send_path_mtu",
        "send_congestion_window",
        "cwnd",
        "current_mtu",
        "bytes_in_flight",
        "pacing_rate",
    }
)


def counter_delta(a: Optional[dict], b: Optional[dict]) -> Optional[Dict[str, int]]:
    """b - a for every counter both have (gauges: b); None when either is missing."""
    if a is None or b is None:
        return None
    return {k: (b[k] if k in GAUGES else b[k] - a[k]) for k in b if k in a}
