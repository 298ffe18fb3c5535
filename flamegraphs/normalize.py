# SPDX-License-Identifier: GPL-2.0-only
"""A side's samples as CPU nanoseconds per unit of work, by category, and
how much of it sits on complete stacks.

With a fixed cpu-clock period every sample is period_ns of CPU time, so
a side costs samples x period_ns / divisor nanoseconds per unit. The unit
is the run's: a byte moved (bulk and downloads: the divisor is the side's
bytes, the unit of the collectors' figures), or a request answered
(`--pattern rr`: the divisor is the requests answered in the window).
One code path serves both; a Unit says what is divided and how figures
and drawn counts are written.

For drawing and diffing, counts become whole numbers, as inferno wants:
femtoseconds per byte (1 ns/B = 10^6 fs/B), fine enough that a single
1 ms sample over 2 GB (~500 fs/B) keeps three digits, or picoseconds per
request (a 1 ms sample over a million requests is 1,000 ps/request).
Each run of one unit gets the same scale, so two runs diff per unit
whatever their length.
"""

import re
from dataclasses import dataclass
from typing import Dict, Mapping, Optional

from . import categories, folded

FS_PER_NS = 1_000_000
PS_PER_NS = 1_000


@dataclass(frozen=True)
class Unit:
    """What a side's CPU is divided by, and how its figures are written.
    Figures are computed in ns per unit; `figure` is the unit they are
    printed in (ns_per_figure ns each), `count` the whole-number unit of
    drawn folded stacks (counts_per_ns a ns), labelled `label` at 1000
    counts each (draw.py)."""

    name: str  # per what: "byte" -> ns_per_byte, categories_ns_per_byte
    divisor_key: str  # what the divisor is, in figures' dicts: "bytes"
    figure: str  # "ns/B"
    ns_per_figure: int
    count: str  # "fs/B"
    counts_per_ns: int
    label: str  # "ps/B"

    def shown(self, ns: float) -> float:
        """ns per unit in the printed unit."""
        return ns / self.ns_per_figure


BYTE = Unit("byte", "bytes", "ns/B", 1, "fs/B", FS_PER_NS, "ps/B")


def per_event(one: str, many: str) -> Unit:
    """A pattern's unit of work (figures.UNITS_OF_WORK): its CPU
    is microseconds (tens for a request on loopback, hundreds for a
    handshake's key exchange), so us printed, ns labels, ps counts."""
    return Unit(one, many, f"us/{one}", 1_000, f"ps/{one}", PS_PER_NS, f"ns/{one}")


# The outermost real frame of a complete stack: where a thread starts in
# user space, or where a kernel thread or idle starts. Names as seen in
# this project's captures (Linux 6.18, glibc 2.36): start_thread (clone3
# under it is dropped by the fold), __libc_start_call_main,
# ret_from_fork_asm_[k]; the rest cover other kernels and libcs.
# A syscall, interrupt or exception entry is not one: something in user
# space made the call or was interrupted, so a stack that starts there lost
# its user part. With DWARF unwinding that is what a user stack perf could
# not copy looks like (a process in execve or exit, its memory going away).
_USER_ENTRY = re.compile(
    r"^(start_thread|clone3?|__clone3?|__clone_internal|_start|_dl_start\w*|__libc_start_main\w*"
    r"|__libc_start_call_main|thread_start"
    # Go's: every goroutine's stack ends in goexit, a runtime thread's own (g0) in mstart.
    r"|runtime\.(goexit|mstart|rt0_go)(\.abi\d)?)$"
)
_KERNEL_ENTRY = re.compile(
    r"^(ret_from_fork\w*|secondary_startup_64\w*|common_startup_64|x86_64_start_\w+"
    r"|start_kernel|cpu_startup_entry)(\.[\w.]+)?_\[k\]$"
)


def stack_complete(stack: str) -> bool:
    """True when the unwinder reached a thread's start: the frame after the
    process-name root is one (so it is not [unknown], nor a function whose
    callers were lost, like unwound-from assembly, nor a syscall or
    interrupt entry whose user-space caller was lost)."""
    parts = folded.frames(stack)
    if len(parts) < 2:
        return False
    outer = parts[1]
    return bool(_USER_ENTRY.match(outer) or _KERNEL_ENTRY.match(outer))


@dataclass
class SideFigures:
    samples: int
    sample_period_ns: int
    divisor: int  # bytes or requests: unit.divisor_key
    ns_per_unit: float
    categories_samples: Dict[str, int]  # CATEGORIES order
    categories_ns_per_unit: Dict[str, float]  # sums to ns_per_unit
    complete_samples: int
    stack_quality: Optional[float]  # complete share, 0..1; None without samples
    unit: Unit = BYTE

    @property
    def shown(self) -> float:
        """The side's total in the unit's printed figure (ns/B, us/request)."""
        return self.unit.shown(self.ns_per_unit)

    @property
    def ns_per_byte(self) -> float:
        return self._per(BYTE, self.ns_per_unit)

    @property
    def categories_ns_per_byte(self) -> Dict[str, float]:
        return self._per(BYTE, self.categories_ns_per_unit)

    def _per(self, unit: Unit, value):
        # A per-request figure read as per byte would be off by the bytes per request.
        if self.unit != unit:
            raise ValueError(f"these figures are per {self.unit.name}, not per {unit.name}")
        return value

    def as_dict(self) -> dict:
        """Keys name the unit: bytes, ns_per_byte, categories_ns_per_byte
        (or requests, ns_per_request, ...)."""
        u = self.unit.name
        return {
            "samples": self.samples,
            "sample_period_ns": self.sample_period_ns,
            self.unit.divisor_key: self.divisor,
            f"ns_per_{u}": self.ns_per_unit,
            "categories_samples": self.categories_samples,
            f"categories_ns_per_{u}": self.categories_ns_per_unit,
            "complete_samples": self.complete_samples,
            "stack_quality": self.stack_quality,
        }


def ns_per_unit(samples: int, period_ns: int, divisor: int) -> float:
    return samples * period_ns / divisor


ns_per_byte = ns_per_unit  # the divisor being a side's bytes


def figures(
    stacks: Mapping[str, int],
    period_ns: int,
    divisor: int,
    classifier: Optional[categories.Classifier] = None,
    unit: Unit = BYTE,
) -> SideFigures:
    """A side's figures per unit; divisor is its bytes (BYTE, the default)
    or the units of work done (a unit of work of figures.UNITS_OF_WORK)."""
    if divisor <= 0:
        raise ValueError(f"{unit.divisor_key} must be positive to express CPU per {unit.name}")
    by_cat = categories.categorize(stacks, classifier)
    samples = sum(stacks.values())
    complete = sum(n for s, n in stacks.items() if stack_complete(s))
    return SideFigures(
        samples=samples,
        sample_period_ns=period_ns,
        divisor=divisor,
        ns_per_unit=ns_per_unit(samples, period_ns, divisor),
        categories_samples=by_cat,
        categories_ns_per_unit={c: ns_per_unit(n, period_ns, divisor) for c, n in by_cat.items()},
        complete_samples=complete,
        stack_quality=complete / samples if samples else None,
        unit=unit,
    )


# A gap is a percentage only of a base worth this many sample periods: of
# a few samples' worth of CPU, one sample more or less is tens of percent.
GAP_MIN_BASE_SAMPLES = 50


def gap_percent(
    graph_ns_per_unit: float, measured_ns_per_unit: Optional[float], base_samples: Optional[float] = None
) -> Optional[float]:
    """How far the graph is from the measured CPU (both per the same
    unit), in % of the measured; None when that is missing, not positive,
    or (given base_samples, the measured CPU in sample periods) too small
    a base."""
    if measured_ns_per_unit is None or measured_ns_per_unit <= 0:
        return None
    if base_samples is not None and base_samples < GAP_MIN_BASE_SAMPLES:
        return None
    return (graph_ns_per_unit - measured_ns_per_unit) / measured_ns_per_unit * 100.0


def base_samples(measured_ns_per_unit: Optional[float], divisor: int, period_ns: int) -> Optional[float]:
    """The measured CPU of a side in sample periods."""
    if measured_ns_per_unit is None or period_ns <= 0:
        return None
    return measured_ns_per_unit * divisor / period_ns


def scaled(stacks: Mapping[str, int], period_ns: int, divisor: int, unit: Unit = BYTE) -> Dict[str, int]:
    """Counts as whole unit.count (fs/B, ps/request). A stack that rounds
    to 0 (under 0.5 fs/B: a sample of 1 ms over more than 2 TB) is left
    out, since inferno has nothing to draw for it."""
    out = {}
    for stack, count in stacks.items():
        n = round(count * period_ns * unit.counts_per_ns / divisor)
        if n > 0:
            out[stack] = n
    return out


def per_byte(stacks: Mapping[str, int], period_ns: int, nbytes: int) -> Dict[str, int]:
    """Counts as whole femtoseconds per byte: scaled() per byte."""
    return scaled(stacks, period_ns, nbytes, BYTE)


def write_per_byte(stacks: Mapping[str, int], period_ns: int, nbytes: int, dest) -> Dict[str, int]:
    """per_byte() as a folded file (path, open file, or stdout)."""
    out = per_byte(stacks, period_ns, nbytes)
    folded.write(out, dest)
    return out
