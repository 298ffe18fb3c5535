# SPDX-License-Identifier: GPL-2.0-only
"""A run's headline figures as OpenMetrics text, for Prometheus to
scrape where it is served: one family per figure, its unit in its
name and `# UNIT`, every sample labelled with the run and its transport
stack, per-side figures also with the side, and `# EOF` at the end.

Families (a --pattern rr run has _per_request where _per_byte stands):

    qprof_throughput_bits_per_second   receiver goodput (run.json throughput_gbps)
    qprof_window_bytes                 bytes verified in the window (bytes)
    qprof_window_seconds               the window (window_s)
    qprof_cpu_nanoseconds_per_byte     the collectors' CPU per byte, per side
                                       (cpu.<side>.ns_per_byte.total, cpu.others;
                                       a side the record has no figure for is left out)
    qprof_flame_nanoseconds_per_byte   the flame graph's CPU per byte, per side and
                                       category (categories.rules); a side's
                                       categories sum to its graph total
    qprof_flame_samples_total          stack samples per side (a counter)

Figures the record does not have are left out, never written as zeros.
"""

import math
from typing import Iterable, List, Mapping, Optional, Tuple

from . import normalize

Sample = Tuple[Mapping[str, str], float]


class Family:
    def __init__(self, name: str, typ: str, unit: str, help_: str):
        self.name, self.typ, self.unit, self.help = name, typ, unit, help_
        self.samples: List[Sample] = []

    def add(self, labels: Mapping[str, str], value: Optional[float]) -> None:
        if value is not None and math.isfinite(value):
            self.samples.append((labels, value))

    def lines(self) -> Iterable[str]:
        if not self.samples:
            return
        yield f"# TYPE {self.name} {self.typ}\n"
        if self.unit:
            yield f"# UNIT {self.name} {self.unit}\n"
        yield f"# HELP {self.name} {_escape(self.help)}\n"
        suffix = "_total" if self.typ == "counter" else ""
        for labels, value in self.samples:
            inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            yield f"{self.name}{suffix}{{{inner}}} {_number(value)}\n"


def _escape(s: str) -> str:
    return str(s).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(v: float) -> str:
    return str(v) if isinstance(v, int) else repr(float(v))


def families(
    record: Mapping,
    figures: Mapping[str, normalize.SideFigures],
    measured: Mapping[str, Optional[float]],
    unit: normalize.Unit,
) -> List[Family]:
    """figures: each side's flame figures (normalize.figures); measured:
    each side's CPU per unit as the collectors measured it (None: absent)."""
    run = {"run": str(record.get("id", "")), "stack": str(record.get("stack", ""))}
    per = f"nanoseconds_per_{unit.name}"
    throughput = Family(
        "qprof_throughput_bits_per_second", "gauge", "bits_per_second", "Receiver goodput over the window."
    )
    gbps = record.get("throughput_gbps")
    throughput.add(run, None if gbps is None else gbps * 1e9)
    nbytes = Family("qprof_window_bytes", "gauge", "bytes", "Bytes the receiver verified inside the window.")
    nbytes.add(run, record.get("bytes"))
    window = Family("qprof_window_seconds", "gauge", "seconds", "The window, by the receiver's clock.")
    window.add(run, record.get("window_s"))
    cpu = Family(
        f"qprof_cpu_{per}",
        "gauge",
        per,
        f"CPU time per {unit.name} as the collectors measured it (schedstat, /proc), per side.",
    )
    flame = Family(
        f"qprof_flame_{per}",
        "gauge",
        per,
        f"CPU time per {unit.name} in the stack samples (samples x period / {unit.divisor_key}), "
        "per side and category; a side's categories sum to its total.",
    )
    samples = Family("qprof_flame_samples", "counter", "", "Stack samples (perf cpu-clock) over the window, per side.")
    for side, fig in figures.items():
        labels = {**run, "side": side}
        cpu.add(labels, measured.get(side))
        for cat, ns in fig.categories_ns_per_unit.items():
            flame.add({**labels, "category": cat}, ns)
        samples.add(labels, fig.samples)
    return [throughput, nbytes, window, cpu, flame, samples]


def text(fams: Iterable[Family]) -> str:
    return "".join(line for f in fams for line in f.lines()) + "# EOF\n"
