# SPDX-License-Identifier: GPL-2.0-only
"""A window's edges, taken: every instrument read at one instant, as near
as can be, for every client and server of a run (one flow or a mix's N);
the samples inside a window (--interval); sleeping while watching the
workloads. What an edge holds, and every figure made from two of them,
is describe/window.py's."""

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from qprof import errors
from qprof.collectors import emulation, procfs
from qprof.collectors.probes import AFTER, BEFORE
from qprof.collectors.workload import WorkloadProcess
from qprof.describe import cpu
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
    name: str,
    pairs: Sequence[Tuple[WorkloadProcess, WorkloadProcess]],
    probes=None,
    emulated=None,
    kernel: bool = True,
    sides: Optional[dict] = None,
    same_kernel: bool = False,
) -> Reading:
    """Every instrument's reading at one instant, as near as can be: all
    marks are asked for at once (each process answers as soon as it runs),
    the kernel's counters are read meanwhile, then the answers collected;
    the probes also read once before the marks are asked for and once
    after all have come back (their bracket, collectors/probes.py).
    pairs: each flow's (server, client); kernel: read every task's
    schedstat and each side's TLS and loss counters (a run of one flow);
    sides: a run on hosts, each role's part read by its side on its host
    (host_reading).

    A run on hosts' NICs (ethtool and tc, processes of their own, there or
    here) are read outside the window: before the start edge's instant,
    after any other edge's, so that their CPU is not the window's. The
    --link's qdisc counters stay inside the edge, after the marks are asked
    for: what a server verified by its mark has crossed the qdisc by then
    (tests/test_mix.py holds the bytes to that)."""
    before = _nics(sides, kernel) if name == START else None
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
    if sides is not None:
        try:
            reading = host_reading(sides, {"server": pairs[0][0].pid, "client": pairs[0][1].pid}, kernel, same_kernel)
        except errors.QprofError:
            _raise_ended(pairs)  # a side's host could not read a process that has gone: its end says why
            raise
    else:
        t_ns = time.monotonic_ns()
        system = procfs.read_system()
        flows = [{"server": procfs.read_process(s.pid), "client": procfs.read_process(c.pid)} for s, c in pairs]
        tasks = tls_stat = net = None
        if kernel:
            server, client = pairs[0]
            tasks, tls_stat, net = procfs.read_kernel({"server": server.pid, "client": client.pid})
        reading = Reading(t_ns, system, flows, None, tasks, tls_stat, net)
    reading.qdiscs = emulation.read_counters(emulated.endpoints) if emulated else None
    _collect_marks(name, reading.flows, pairs, probes)
    if probes is not None:
        probes.request_mark(name + AFTER)
        probes.collect_mark(name + AFTER)
    for role, nic in (before if name == START else _nics(sides, kernel)).items():
        reading.hosts[role]["nic"] = nic
    return reading


START = "start"  # the edge whose outside is before it (windows.py names its edges so)


def _nics(sides: Optional[dict], kernel: bool) -> dict:
    """A run on hosts (kernel): each side's NIC read on its host, all hosts at once."""
    if sides is None or not kernel:
        return {}
    with ThreadPoolExecutor(len(sides)) as pool:
        asked = {role: pool.submit(side.nic, side.endpoint.ifname) for role, side in sides.items()}
        return {role: f.result() for role, f in asked.items()}


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


def host_reading(sides: dict, pids: Dict[str, int], kernel: bool, same_kernel: bool) -> Reading:
    """An edge of a run on hosts: each role's part read on its host, in its
    own clock (its side's edge), t_ns ours. The machine's CPU and softnet
    are every kernel's summed (once where the hosts are one kernel); a
    side's CPU, TLS and namespace counters are its own host's; the task
    table holds each side's own threads, and each host keeps its whole
    one, with its clock and /proc/stat, under hosts (their others are
    theirs: pids of two kernels are not one key space)."""
    t_ns = time.monotonic_ns()

    def ask(role: str, pid: int):
        # Its answer and when it came, in our clock: the host read its part
        # between t_ns and then (its clock's offset places it there).
        return sides[role].edge({role: pid}, kernel), time.monotonic_ns()

    # Every host at once: one read after another would put each later
    # host's reading a whole round trip (a slow host's read) after the marks.
    with ThreadPoolExecutor(len(pids)) as pool:
        asked = {role: pool.submit(ask, role, pid) for role, pid in pids.items()}
        answers = {role: f.result() for role, f in asked.items()}
    parts = {role: part for role, (part, _) in answers.items()}
    kernels = [next(iter(parts))] if same_kernel else list(parts)
    system = sum(
        (cpu.SystemCpu(**parts[r]["system"]) for r in kernels[1:]), cpu.SystemCpu(**parts[kernels[0]]["system"])
    )
    flows = [{role: cpu.ProcessCpu(**parts[role]["processes"][role]) for role in pids}]
    hosts = {
        role: {"host": sides[role].name, "t_ns": p["t_ns"], "answered_ns": answers[role][1], "system": p["system"]}
        for role, p in parts.items()
    }
    if not kernel:
        return Reading(t_ns, system, flows, None, hosts=hosts)
    tasks, tls_stat, net = {}, {}, {}
    for role, p in parts.items():
        host_tasks = {tuple(int(x) for x in k.split("/")): ns for k, ns in p["tasks"].items()}
        tasks.update({k: ns for k, ns in host_tasks.items() if k[0] == pids[role]})
        hosts[role]["tasks"] = p["tasks"]
        tls_stat[role] = p["tls_stat"][role]
        net[role] = p["net"][role]
    softnets = [parts[r]["net"]["softnet"] for r in kernels]
    net["softnet"] = None if None in softnets else {k: sum(s[k] for s in softnets) for k in softnets[0]}
    return Reading(t_ns, system, flows, None, tasks, tls_stat, net, hosts)


def sample_intervals(
    start: Edge,
    end_ns: int,
    interval_s: float,
    receiver: str,
    server: WorkloadProcess,
    client: WorkloadProcess,
    on_sample: Callable[[dict, dict], None],
    cpu_now: Optional[Callable[[], dict]] = None,
) -> List[dict]:
    """Inside the window, every interval_s until end_ns: the receiver's
    (a role, or "both") verified bytes (a mark each) and both processes'
    on-CPU time (schedstat),
    and /proc/stat. Each sample goes to on_sample(previous, this) as it is
    taken (the live lines); the list is the measurement's. cpu_now: the
    machine's and both sides' CPU now, as {"system", "server_oncpu_s",
    "client_oncpu_s"} (Endpoints.cpu_now; by default read here)."""
    procs = (server, client)
    marked = [p for p in procs if receiver in ("both", p.role)]
    samples: List[dict] = []
    prev = edge_sample(start, receiver)
    k = 1
    while True:
        due = start.t_ns + int(k * interval_s * 1e9)
        if due > end_ns - int(interval_s * 1e9) // 4:  # a sliver before the end edge is not an interval
            sleep_watching(end_ns, procs)
            return samples
        sleep_watching(due, procs)
        for p in marked:
            p.request_mark(f"interval-{k}")
        t_ns = time.monotonic_ns()
        if cpu_now is not None:
            sample = {"t_ns": t_ns, **cpu_now()}
        else:
            sample = {
                "t_ns": t_ns,
                "system": asdict(procfs.read_system()),
                "server_oncpu_s": procfs.read_process(server.pid).oncpu_s,
                "client_oncpu_s": procfs.read_process(client.pid).oncpu_s,
            }
        sample.update(receiver_sample({p.role: p.wait_event("mark", MARK_TIMEOUT_S) for p in marked}, receiver))
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
