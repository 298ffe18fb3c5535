# SPDX-License-Identifier: GPL-2.0-only
"""A run on two hosts (issue 26), described: each host as it was, its CPU
over the window in its own clock, and what of a run's figures is each
machine's.

Each host's part of an edge is read there, in its CLOCK_MONOTONIC
(Edge.hosts). A window's length on a host is the difference of two of its
own readings, so the offset between the clocks does not enter it; the
offset (the other host's clock minus this one's, from the shortest of N
round trips over the control channel) says when, in this machine's time,
the other's readings were taken: within ± the offset's uncertainty (half
that round trip) of where it says. Both edges are read one after the other
over the channel, so each host's window starts and ends within one request
(its round trip, in `skew_s`) of the other's.

Machine-wide figures (the system's CPU, every other task, softirq) are
every kernel's summed; hosts that are one kernel (namespaces of one
machine, as the tests' hosts are: same boot_id) count it once.
"""

from typing import Dict, Optional

from qprof.describe import cpu, nic

# Each side's hardware counters (collectors/perf.py PerfStat).
STAT_EVENTS = ("cycles", "instructions")


def kernels(hosts: dict) -> list:
    """The roles whose hosts' machine-wide counters count: one where the hosts are one kernel."""
    roles = [r for r in ("client", "server") if r in hosts]
    return roles[:1] if hosts.get("same_kernel") else roles


def _tasks(d: dict) -> Dict[tuple, int]:
    return {tuple(int(x) for x in k.split("/")): ns for k, ns in d.items()}


def describe(m, nbytes: int) -> dict:
    """Each role's host: where, its environment, its clock against this
    machine's, and its CPU over the window in its own clock."""
    start, end = m.window.start.hosts, m.window.end.hosts
    out: dict = {"same_kernel": m.hosts["same_kernel"]}
    for role in ("client", "server"):
        h = m.hosts[role]
        seconds = (end[role]["t_ns"] - start[role]["t_ns"]) / 1e9
        d = cpu.SystemCpu(**end[role]["system"]) - cpu.SystemCpu(**start[role]["system"])
        out[role] = {
            "host": h["host"],
            "address": h["address"],
            "environment": h["environment"],
            "clock": h["clock"],
            "window_s": seconds,
            "cpu": cpu.system_figures(d, nbytes, seconds),
            "nic": nic.figures(start[role]["nic"], end[role]["nic"], nbytes)
            if start[role].get("nic") and end[role].get("nic")
            else None,
        }
        hw, why = hardware_figures(h.get("perf_stat"), h["environment"], nbytes)
        out[role]["hardware_counters"], out[role]["hardware_counters_absent_reason"] = hw, why
    local_s = m.window.cpu_seconds
    out["skew_s"] = max(abs(out[r]["window_s"] - local_s) for r in ("client", "server"))
    out["source"] = (
        "each host's part of an edge read on that host in its own CLOCK_MONOTONIC; clock: its offset to this "
        "machine's (best of N round trips, ± half the shortest); skew_s: how far a host's window length is "
        "from this machine's"
    )
    return out


def others(m, nbytes: int) -> dict:
    """Every task but the workloads, each kernel's from its own task table,
    summed over the kernels (once where the hosts are one)."""
    start, end = m.window.start.hosts, m.window.end.hosts
    total_s, tasks = 0.0, 0
    for role in kernels(m.hosts):
        mine = set(m.pids.values()) if m.hosts["same_kernel"] else {m.pids[role]}
        f = cpu.others_figures(_tasks(start[role]["tasks"]), _tasks(end[role]["tasks"]), mine, nbytes)
        total_s += f["oncpu_schedstat_s"]
        tasks += f["tasks"]
    return {
        "oncpu_schedstat_s": total_s,
        "tasks": tasks,
        "ns_per_byte": {"oncpu": cpu.per_byte(total_s, nbytes)},
        "source": "every task but the workload processes, on each host (once where they are one kernel): the "
        "increase of each one's /proc/<pid>/task/<tid>/schedstat over the window (idle excluded)",
    }


def sample_coverage(flame: dict, rec: dict, coverage_of) -> Optional[dict]:
    """The capture's coverage where the hosts are two kernels: each host's
    CPUs against its own window, as "ROLE/CPU"; None where they are one
    (the run's own coverage holds)."""
    hosts = rec["hosts"]
    if hosts["same_kernel"]:
        return None
    per_cpu, short = {}, []
    for role in ("client", "server"):
        got = coverage_of(
            flame["hosts"][role]["samples_per_cpu"],
            hosts[role]["window_s"],
            flame["sample_hz"],
            hosts[role]["environment"]["cpu_count"],
        )
        per_cpu.update({f"{role}/{c}": v for c, v in got["coverage_per_cpu"].items()})
        if not got["complete"]:
            short.append(f"on the {role}'s host, {got['incomplete_reason']}")
    return {
        "coverage_per_cpu": per_cpu,
        "complete": not short,
        "incomplete_reason": "; ".join(short) if short else None,
    }


def parse_perf_stat(text: str) -> dict:
    """`perf stat -x,` output: {"counts": {event: n or None}, "absent_reason"}:
    an event perf could not count ("<not supported>", "<not counted>") is
    None, in perf's words."""
    counts: Dict[str, Optional[int]] = {}
    why = []
    for line in text.splitlines():
        fields = line.split(",")
        if line.startswith("#") or len(fields) < 3 or fields[2] not in STAT_EVENTS:
            continue
        counts[fields[2]] = int(fields[0]) if fields[0].isdigit() else None
        if counts[fields[2]] is None:
            why.append(f"{fields[2]} {fields[0]}")
    for event in STAT_EVENTS:
        if event not in counts:
            counts[event] = None
            why.append(f"{event} not in perf stat's output")
    return {"counts": counts, "absent_reason": "; ".join(why) or None}


def hardware_figures(stat: Optional[dict], environment: dict, nbytes: int) -> tuple:
    """A side's cycles and instructions per byte and IPC from its perf stat
    output, or (None, why): no PMU on its host, or perf's own words."""
    if stat is None:
        return None, "not measured: this side's perf stat did not run"
    parsed = parse_perf_stat(stat.get("output") or "")
    c, i = parsed["counts"]["cycles"], parsed["counts"]["instructions"]
    if c is None or i is None:
        pmu = environment.get("pmu")
        where = "no hardware PMU on this host (no /sys/bus/event_source/devices/cpu)" if not pmu else f"PMU {pmu}"
        return None, f"perf stat could not count them ({parsed['absent_reason']}): {where}"
    return {
        "cycles": c,
        "instructions": i,
        "cycles_per_byte": c / nbytes if nbytes else None,
        "instructions_per_byte": i / nbytes if nbytes else None,
        "ipc": i / c if c else None,
        "source": "perf stat -e cycles,instructions -p PID over the window, per byte the window verified",
    }, None
