# SPDX-License-Identifier: GPL-2.0-only
"""A run's headline figures as OpenMetrics text, for Prometheus to
scrape where it is served: one family per figure, its unit in its
name and `# UNIT`, every sample labelled with the run and its transport
stack, per-side figures also with the side, and `# EOF` at the end.

The headline figures are the table's (core/figures.py): each row with
an OpenMetrics family is a sample of qprof_<family>_<base unit>, per side
where the row has one. Families (a --pattern rr run has _per_request
where _per_byte stands):

    qprof_throughput_bits_per_second   receiver goodput (run.json throughput_gbps)
    qprof_window_bytes                 bytes verified in the window (bytes)
    qprof_window_seconds               the window (window_s)
    qprof_cpu_nanoseconds_per_byte     the collectors' CPU per byte, per side
                                       (cpu.<side>.ns_per_byte.total, cpu.others;
                                       a side the record has no figure for is left out),
                                       and the whole machine's (side "system") when
                                       every side is exported, per byte only
    qprof_flame_nanoseconds_per_byte   the flame graph's CPU per byte, per side and
                                       category (categories.rules); a side's
                                       categories sum to its graph total
    qprof_flame_samples_total          stack samples per side (a counter)

Figures the record does not have are left out, never written as zeros.
"""

import math
from typing import Iterable, List, Mapping, Optional, Tuple

from qprof.figures import BASE_UNITS, HEADLINE

from . import normalize, sides

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
    whole = []  # the run's own figures: one family each
    for f in HEADLINE:
        if f.side is None:
            base, factor = BASE_UNITS[f.unit]
            fam = Family(f"qprof_{f.family}_{base}", "gauge", base, f.about or f.label)
            v = f.value(record)
            fam.add(run, None if v is None else v * factor)
            whole.append(fam)
    nbytes = Family("qprof_window_bytes", "gauge", "bytes", "Bytes the receiver verified inside the window.")
    nbytes.add(run, record.get("bytes"))
    window = Family("qprof_window_seconds", "gauge", "seconds", "The window, by the receiver's clock.")
    window.add(run, record.get("window_s"))
    per_side = [f for f in HEADLINE if f.side is not None]
    (family,) = {f.family for f in per_side}  # every side's CPU in one family, told apart by its label
    cpu = Family(
        f"qprof_{family}_{per}",
        "gauge",
        per,
        f"CPU time per {unit.name} as the collectors measured it (schedstat, /proc), per side; "
        "system: the whole machine's.",
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
    if unit == normalize.BYTE and set(sides.SIDES) <= set(figures):
        # The whole machine's (the table's system row) is every side's at once.
        for f in per_side:
            if f.side not in figures:
                cpu.add({**run, "side": f.side}, f.value(record))
    return [*whole, nbytes, window, cpu, flame, samples]


def text(fams: Iterable[Family]) -> str:
    return "".join(line for f in fams for line in f.lines()) + "# EOF\n"
