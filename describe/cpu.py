# SPDX-License-Identifier: GPL-2.0-only
"""CPU time from the kernel's own accounting, read at the window's edges.

Two instruments:
- /proc/<pid>/stat utime and stime: the process (all its threads), in
  clock ticks; /proc/<pid>/task/*/schedstat gives the same process's
  on-CPU time in nanoseconds, a cross-check with a finer grain.
- /proc/stat: the whole machine by class. On a veth pair or loopback much
  of the receive path runs in softirq, outside either process's threads.

On a kernel without CONFIG_IRQ_TIME_ACCOUNTING (this one), softirq time
is sampled by the tick: a tick that lands in softirq counts as softirq in
/proc/stat *and* as system time of whatever task it interrupted. So a
process's system time includes softirq work done in its context, and
per-process softirq cannot be separated here: it is reported as absent.

Ticks have a grain: /proc counts in clock ticks (USER_HZ, 10 ms), and a
window's edges fall anywhere inside a tick, so a tick figure is off by up
to one tick per CPU at each edge. Over a window shorter than
MIN_WINDOW_TICKS that is more than 4% of every CPU, so the tick figures
are absent (None) and the record says why; schedstat's nanoseconds
(`oncpu_schedstat_s`, `ns_per_byte.oncpu`) stand at any length.
"""

from dataclasses import dataclass
from typing import Dict, Optional

# USER_HZ: the unit of /proc's CPU times, 100 on every Linux architecture qprof
# builds for (the machine's sysconf(_SC_CLK_TCK) is in each record's environment).
CLK_TCK = 100
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# Two ticks of error (one per edge) in 50 is 4% of a CPU.
MIN_WINDOW_TICKS = 50


@dataclass(frozen=True)
class SystemCpu:
    """/proc/stat's aggregate "cpu" line, in seconds."""

    user_s: float
    nice_s: float
    system_s: float
    idle_s: float
    iowait_s: float
    irq_s: float
    softirq_s: float
    steal_s: float

    def __sub__(self, other: "SystemCpu") -> "SystemCpu":
        return SystemCpu(*(getattr(self, f + "_s") - getattr(other, f + "_s") for f in STAT_FIELDS))

    def __add__(self, other: "SystemCpu") -> "SystemCpu":
        """Two machines' together (a run on two hosts)."""
        return SystemCpu(*(getattr(self, f + "_s") + getattr(other, f + "_s") for f in STAT_FIELDS))

    @property
    def busy_s(self) -> float:
        return self.user_s + self.nice_s + self.system_s + self.irq_s + self.softirq_s + self.steal_s

    @property
    def idle_total_s(self) -> float:
        return self.idle_s + self.iowait_s


@dataclass(frozen=True)
class ProcessCpu:
    """One process, all threads: its times, and how many threads it had
    (a level, not a count over time: a difference keeps the later one's;
    None in a measurement stored before it was read)."""

    user_s: float
    system_s: float
    oncpu_s: float  # schedstat, ns resolution
    threads: Optional[int] = None

    def __sub__(self, other: "ProcessCpu") -> "ProcessCpu":
        return ProcessCpu(
            self.user_s - other.user_s, self.system_s - other.system_s, self.oncpu_s - other.oncpu_s, self.threads
        )


def parse_proc_stat(text: str) -> SystemCpu:
    for line in text.splitlines():
        if line.startswith("cpu "):
            ticks = [int(x) for x in line.split()[1 : 1 + len(STAT_FIELDS)]]
            return SystemCpu(*(t / CLK_TCK for t in ticks))
    raise ValueError("no aggregate cpu line in /proc/stat")


def parse_pid_stat(text: str) -> tuple:
    """(utime_s, stime_s) from /proc/<pid>/stat; comm may hold spaces."""
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(rest[11]) / CLK_TCK, int(rest[12]) / CLK_TCK


def others_figures(start: Dict[tuple, int], end: Dict[tuple, int], exclude_pids, nbytes: int) -> dict:
    """Everything but the two workload processes, from one nanosecond
    source (each task's schedstat), so it cannot come out below zero: a
    sum of per-task increases. A task seen only at the end counts from
    zero; one that exited inside the window is missed (an undercount)."""
    total_ns = 0
    for key, ns in end.items():
        if key[0] in exclude_pids:
            continue
        before = start.get(key, 0)
        total_ns += ns - before if ns >= before else ns  # a reused tid is a new task
    return {
        "oncpu_schedstat_s": total_ns / 1e9,
        "tasks": sum(1 for k in end if k[0] not in exclude_pids),
        "ns_per_byte": {"oncpu": per_byte(total_ns / 1e9, nbytes)},
        "source": "every task but the two workload processes: the increase of each one's "
        "/proc/<pid>/task/<tid>/schedstat over the window (idle excluded)",
    }


def ticks_absent_reason(window_s: float) -> Optional[str]:
    """Why the tick figures of a window this long are absent, or None when
    the window holds enough ticks for them to mean something."""
    ticks = window_s * CLK_TCK
    if ticks >= MIN_WINDOW_TICKS:
        return None
    return (
        f"the window ({window_s * 1e3:.1f} ms) holds {ticks:.1f} of /proc's {1e3 / CLK_TCK:g} ms clock ticks, "
        f"fewer than {MIN_WINDOW_TICKS}: a tick count can be off by one per CPU at each edge, so the tick "
        "figures are absent; oncpu_schedstat_s (nanoseconds) is exact"
    )


def utilisation(d: SystemCpu, window_s: float) -> Optional[float]:
    """The machine's busy share over a window: busy over all of /proc/stat's
    time (busy + idle), one instrument's own ratio, as top and mpstat take
    it (against wall time x CPUs, its 10 ms ticks came out at 1.42 over a
    10 ms window); None over a window too short for ticks."""
    total = d.busy_s + d.idle_total_s
    return d.busy_s / total if ticks_absent_reason(window_s) is None and total > 0 else None


def per_byte(seconds: Optional[float], nbytes: int) -> Optional[float]:
    """CPU nanoseconds per byte; None stays None (not measured)."""
    if seconds is None or nbytes <= 0:
        return None
    return seconds * 1e9 / nbytes


def process_figures(d: ProcessCpu, nbytes: int, window_s: float) -> Dict[str, Optional[float]]:
    absent = ticks_absent_reason(window_s)
    user_s, system_s = (None, None) if absent else (d.user_s, d.system_s)
    total_s = None if absent else d.user_s + d.system_s
    return {
        "user_s": user_s,
        "system_s": system_s,
        "softirq_s": None,
        "total_s": total_s,
        "oncpu_schedstat_s": d.oncpu_s,
        "threads": d.threads,
        "ticks_absent_reason": absent,
        "ns_per_byte": {
            "user": per_byte(user_s, nbytes),
            "system": per_byte(system_s, nbytes),
            "softirq": None,
            "total": per_byte(total_s, nbytes),
            "oncpu": per_byte(d.oncpu_s, nbytes),
        },
    }


def system_figures(d: SystemCpu, nbytes: int, window_s: float) -> Dict[str, Optional[float]]:
    """The machine by class, all from /proc/stat's ticks: every one absent
    (None) over a window too short for ticks (ticks_absent_reason)."""
    absent = ticks_absent_reason(window_s)
    seconds = {
        "user_s": d.user_s + d.nice_s,
        "system_s": d.system_s,
        "softirq_s": d.softirq_s,
        "irq_s": d.irq_s,
        "steal_s": d.steal_s,
        "idle_s": d.idle_total_s,
        "total_s": d.busy_s,
    }
    if absent:
        seconds = dict.fromkeys(seconds)
    return {
        **seconds,
        "utilisation": utilisation(d, window_s),
        "ticks_absent_reason": absent,
        "ns_per_byte": {
            "user": per_byte(seconds["user_s"], nbytes),
            "system": per_byte(seconds["system_s"], nbytes),
            "softirq": per_byte(seconds["softirq_s"], nbytes),
            "irq": per_byte(seconds["irq_s"], nbytes),
            "total": per_byte(seconds["total_s"], nbytes),
        },
    }
