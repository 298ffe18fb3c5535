# SPDX-License-Identifier: GPL-2.0-only
"""A window's edges, taken: every instrument read at one instant, as near
as can be, for every client and server of a run (one flow or a mix's N);
the samples inside a window (--interval); sleeping while watching the
workloads. What an edge holds, and every figure made from two of them,
is describe/window.py's."""

import time
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from qprof import errors
from qprof.collectors import emulation
from qprof.collectors.probes import AFTER, BEFORE
from qprof.collectors.workload import WorkloadProcess
from qprof.describe import cpu, state
from qprof.describe.window import Edge, edge_sample, receiver_sample

MARK_TIMEOUT_S = 5.0


@dataclass
class Reading:
    """One edge of a window as read: the instant, the machine's CPU, each
    flow's processes and marks, and (for a run of one flow) the kernel's
    per-task, TLS and loss counters."""

    t_ns: int
    system: cpu.SystemCpu
    flows: List[dict]  # per flow: server and client ProcessCpu, server_mark and client_mark
    qdiscs: Optional[dict]
    tasks: Optional[dict] = None
    tls_stat: Optional[dict] = None
    net: Optional[dict] = None
    hosts: Optional[dict] = None  # a run on hosts: role -> its host's part (Edge.hosts)

    def edge(self) -> Edge:
        """A run's edge (its one flow)."""
        f = self.flows[0]
        return Edge(
            self.t_ns,
            self.system,
            f["server"],
            f["client"],
            f["server_mark"],
            f["client_mark"],
            self.tls_stat,
            self.net,
            self.tasks,
            self.qdiscs,
            self.hosts,
        )


def take(
    name: str, pairs: Sequence[Tuple[WorkloadProcess, WorkloadProcess]], probes, emulated, kernel: bool, sides
) -> Reading:
    """Every instrument's reading at one instant, as near as can be: all
    marks are asked for at once (each process answers as soon as it runs),
    the sides' counters are read meanwhile (sides.read, wherever each side
    runs: collectors/sides.py), then the answers collected; the probes
    also read once before the marks are asked for and once after all have
    come back (their bracket, collectors/probes.py). pairs: each flow's
    (server, client); kernel: read every task's schedstat and each side's
    TLS and loss counters (a run of one flow).

    A NIC's counters (a run on hosts': ethtool and tc, processes of their
    own, there or here) are read outside the window: before the start
    edge's instant, after any other edge's, so that their CPU is not the
    window's. The --link's qdisc counters stay inside the edge, after the
    marks are asked for: what a server verified by its mark has crossed
    the qdisc by then (tests/test_mix.py holds the bytes to that)."""
    before = sides.nics(kernel) if name == START else None
    if probes is not None:
        # The probes read once before anything else is asked and once after
        # every mark has come back (BEFORE, AFTER): what a workload counted
        # at its mark lies between the two (collectors/probes.py, bracket).
        probes.request_mark(name + BEFORE)
        probes.collect_mark(name + BEFORE)
        probes.request_mark(name)
    for server, client in pairs:
        server.request_mark(name)
        client.request_mark(name)
    try:
        reading = sides.read([{"server": s.pid, "client": c.pid} for s, c in pairs], kernel)
    except errors.QprofError:
        _raise_ended(pairs)  # a side that could not read a process that has gone: its end says why
        raise
    reading.qdiscs = emulation.read_counters(emulated.endpoints) if emulated else None
    _collect_marks(name, reading.flows, pairs, probes)
    if probes is not None:
        probes.request_mark(name + AFTER)
        probes.collect_mark(name + AFTER)
    for role, nic in (before if name == START else sides.nics(kernel)).items():
        reading.hosts[role]["nic"] = nic
    return reading


START = "start"  # the edge whose outside is before it (windows.py names its edges so)


def _raise_ended(pairs, within_s: float = 2.0) -> None:
    """A workload that has ended (or does within within_s) raised as its own end."""
    deadline = time.monotonic() + within_s
    while True:
        for server, client in pairs:
            for p in (server, client):
                if p.exited() is not None:
                    p.raise_exit()
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _collect_marks(name: str, flows: List[dict], pairs, probes) -> None:
    for f, (server, client) in zip(flows, pairs):
        f["server_mark"] = server.wait_event("mark", MARK_TIMEOUT_S)
        f["client_mark"] = client.wait_event("mark", MARK_TIMEOUT_S)
    if probes is not None:
        probes.collect_mark(name)


def sample_intervals(
    start: Edge,
    end_ns: int,
    interval_s: float,
    receiver: str,
    server: WorkloadProcess,
    client: WorkloadProcess,
    on_sample: Callable[[dict, dict], None],
    cpu_now: Callable[[], dict],
) -> List[dict]:
    """Inside the window, every interval_s until end_ns: the receiver's
    (a role, or "both") verified bytes and both sides' transport state
    (a mark each, asked of both at once, as take() does), both processes'
    on-CPU time (schedstat),
    and /proc/stat. Each sample goes to on_sample(previous, this) as it is
    taken (the live lines); the list is the measurement's. cpu_now: the
    machine's and both sides' CPU now, as {"system", "server_oncpu_s",
    "client_oncpu_s"} (Endpoints.cpu_now)."""
    procs = (server, client)
    samples: List[dict] = []
    prev = edge_sample(start, receiver)
    k = 1
    while True:
        due = start.t_ns + int(k * interval_s * 1e9)
        if due > end_ns - int(interval_s * 1e9) // 4:  # a sliver before the end edge is not an interval
            sleep_watching(end_ns, procs)
            return samples
        sleep_watching(due, procs)
        for p in procs:
            p.request_mark(f"interval-{k}")
        sample = {"t_ns": time.monotonic_ns(), **cpu_now()}
        marks = {p.role: p.wait_event("mark", MARK_TIMEOUT_S) for p in procs}
        sample.update(receiver_sample(marks, receiver))
        sample["state_groups"] = {role: state.of_mark(mark) for role, mark in marks.items()}
        samples.append(sample)
        on_sample(prev, sample)
        prev, k = sample, k + 1


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
