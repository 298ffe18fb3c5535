# SPDX-License-Identifier: GPL-2.0-only
"""A side's samples as CPU nanoseconds per byte moved, by category, and how
much of it sits on complete stacks.

With a fixed cpu-clock period every sample is period_ns of CPU time, so
ns_per_byte = samples x period_ns / bytes, the unit of the collectors'
figures. For drawing and diffing, counts become whole femtoseconds per
byte (1 ns/B = 10^6 fs/B): integers, as inferno wants, fine enough that a
single 1 ms sample over 2 GB (~500 fs/B) keeps three digits, and the same
unit for every run, so two runs diff per byte whatever their length.
"""

import re
from dataclasses import dataclass
from typing import Dict, Mapping, Optional

from . import categories, folded

FS_PER_NS = 1_000_000

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
    r"|__libc_start_call_main|thread_start)$"
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
    bytes: int
    ns_per_byte: float
    categories_samples: Dict[str, int]  # CATEGORIES order
    categories_ns_per_byte: Dict[str, float]  # sums to ns_per_byte
    complete_samples: int
    stack_quality: Optional[float]  # complete share, 0..1; None without samples

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def ns_per_byte(samples: int, period_ns: int, nbytes: int) -> float:
    return samples * period_ns / nbytes


def figures(
    stacks: Mapping[str, int], period_ns: int, nbytes: int, classifier: Optional[categories.Classifier] = None
) -> SideFigures:
    if nbytes <= 0:
        raise ValueError("bytes must be positive to express CPU per byte")
    by_cat = categories.categorize(stacks, classifier)
    samples = sum(stacks.values())
    complete = sum(n for s, n in stacks.items() if stack_complete(s))
    return SideFigures(
        samples=samples,
        sample_period_ns=period_ns,
        bytes=nbytes,
        ns_per_byte=ns_per_byte(samples, period_ns, nbytes),
        categories_samples=by_cat,
        categories_ns_per_byte={c: ns_per_byte(n, period_ns, nbytes) for c, n in by_cat.items()},
        complete_samples=complete,
        stack_quality=complete / samples if samples else None,
    )


# A gap is a percentage only of a base worth this many sample periods: of
# a few samples' worth of CPU, one sample more or less is tens of percent.
GAP_MIN_BASE_SAMPLES = 50


def gap_percent(
    graph_ns_per_byte: float, measured_ns_per_byte: Optional[float], base_samples: Optional[float] = None
) -> Optional[float]:
    """How far the graph is from the collectors' measured CPU, in % of the
    measured; None when that is missing, not positive, or (given
    base_samples, the measured CPU in sample periods) too small a base."""
    if measured_ns_per_byte is None or measured_ns_per_byte <= 0:
        return None
    if base_samples is not None and base_samples < GAP_MIN_BASE_SAMPLES:
        return None
    return (graph_ns_per_byte - measured_ns_per_byte) / measured_ns_per_byte * 100.0


def base_samples(measured_ns_per_byte: Optional[float], nbytes: int, period_ns: int) -> Optional[float]:
    """The measured CPU of a side in sample periods."""
    if measured_ns_per_byte is None or period_ns <= 0:
        return None
    return measured_ns_per_byte * nbytes / period_ns


def per_byte(stacks: Mapping[str, int], period_ns: int, nbytes: int) -> Dict[str, int]:
    """Counts as whole femtoseconds per byte. A stack that rounds to 0 fs/B
    (under 0.5 fs/B: a sample of 1 ms over more than 2 TB) is left out,
    since inferno has nothing to draw for it."""
    out = {}
    for stack, count in stacks.items():
        fs = round(count * period_ns * FS_PER_NS / nbytes)
        if fs > 0:
            out[stack] = fs
    return out


def write_per_byte(stacks: Mapping[str, int], period_ns: int, nbytes: int, dest) -> Dict[str, int]:
    """per_byte() as a folded file (path, open file, or stdout)."""
    scaled = per_byte(stacks, period_ns, nbytes)
    folded.write(scaled, dest)
    return scaled
