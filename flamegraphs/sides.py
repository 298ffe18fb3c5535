# SPDX-License-Identifier: GPL-2.0-only
"""A run's stack samples per side, as `qprof run` left them in its
directory (run.json `flame`, stacks/{client,server,others}.folded), checked
against the record before any figure is drawn from them, the unit they
are drawn in (per byte, or per request for `--pattern rr`), and the CPU
the collectors measured for the same side, to hold the graph against."""

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from qprof import figures, files
from qprof.errors import BadStacks, NoStacks
from qprof.perbyte import side_bytes

from . import folded, normalize

SIDES = ("client", "server", "others")
EVENT = "cpu-clock"
# Records of schema version 1 called the `others` side `system`
# (stacks/system.folded, flame.samples.system, flame.sides.system); they
# are read under today's name.
V1_OTHERS = "system"


@dataclass
class Run:
    id: str
    path: Path
    record: dict

    @property
    def flame(self) -> dict:
        return self.record["flame"]

    @property
    def period_ns(self) -> int:
        return int(self.flame["sample_period_ns"])

    @property
    def bytes(self) -> int:
        return int(self.record["bytes"])

    def bytes_for(self, side: str) -> int:
        return side_bytes(self.record, side)

    @property
    def unit(self) -> normalize.Unit:
        return unit_of(self.record)

    def divisor(self, side: str) -> int:
        """What the side's CPU is divided by: its bytes, or the requests
        answered in the window."""
        return units_done(self.record) if self.unit != normalize.BYTE else self.bytes_for(side)

    def measured_ns_per_unit(self, side: str) -> Optional[float]:
        if self.unit != normalize.BYTE:
            return measured_ns_per_unit_of_work(self.record, side)
        return measured_ns_per_byte(self.record, side)

    def stacks_file(self, side: str) -> Path:
        if side == "others" and self.record.get("schema_version", 1) < 2:  # files.load: a whole number
            side = V1_OTHERS
        return self.path / self.flame.get("stacks_dir", "stacks") / f"{side}.folded"


def _others_from_v1(flame: dict) -> dict:
    """A version-1 flame record with its `system` side keys renamed to
    `others` (a copy; the run directory is not changed)."""
    flame = dict(flame)
    for key in ("samples", "sides"):
        if isinstance(flame.get(key), dict) and V1_OTHERS in flame[key]:
            flame[key] = {("others" if k == V1_OTHERS else k): v for k, v in flame[key].items()}
    return flame


def load_run(runs_dir: Path, run_id: str = "latest") -> Run:
    """The run, refused with one sentence if it has nothing to draw (a
    record that cannot be read is corrupt, as files.load says)."""
    record = files.load(Path(runs_dir), run_id)
    path = (Path(runs_dir) / run_id).resolve()
    rid = record.get("id") or path.name
    status = record.get("status")
    if status != "complete":
        why = f": {record['error']}" if record.get("error") else ""
        raise NoStacks(
            f"run {rid} is {status}{why.rstrip('.')}; only a complete run has stacks to draw, "
            "so make a new one with `qprof run`."
        )
    flame = record.get("flame")
    if not flame and record.get("stack") == "mix":
        raise NoStacks(
            f"run {rid} is a --mix, and a mix never samples stacks (its flows share the machine, so one "
            "perf would mix them); draw a single run of the flow's stack, made with `qprof run --stack STACK`."
        )
    if not flame:
        raise NoStacks(
            f"run {rid} has no stack samples (made with --sample-hz 0, or before qprof sampled "
            "stacks); make a new run with `qprof run`, which samples stacks by default (--sample-hz 99)."
        )
    if flame.get("event") != EVENT or not flame.get("sample_period_ns"):
        raise BadStacks(
            f"run {rid} sampled '{flame.get('event')}' without a fixed period, which cannot be "
            f"expressed as CPU time per byte; qprof draws {EVENT} samples only."
        )
    why = _flame_problem(flame)
    if why:
        raise files.corrupt(rid, f"its flame.{why}")
    unit = unit_of(record)
    if unit != normalize.BYTE:
        if not units_done(record):
            pattern = record["config"]["pattern"]
            raise BadStacks(
                f"run {rid} {_per_unit(record).done} no {unit.divisor_key} in its window, so there is no "
                f"per-{unit.name} figure to draw; make a new run with `qprof run --pattern {pattern}`."
            )
    elif not record.get("bytes") or record["bytes"] <= 0:
        raise BadStacks(
            f"run {rid} moved no bytes in its window, so there is no per-byte figure to draw; "
            "make a new run with `qprof run`."
        )
    if record.get("schema_version", 1) < 2:
        record = {**record, "flame": _others_from_v1(flame)}
    run = Run(rid, path, record)
    if not run.stacks_file("client").parent.is_dir():
        raise NoStacks(
            f"run {rid} recorded stack samples but {run.stacks_file('client').parent} is missing; "
            "make a new run with `qprof run`."
        )
    return run


def _flame_problem(flame: dict) -> Optional[str]:
    """What in a record's flame block no capture writes, or None."""
    period = flame["sample_period_ns"]
    if not isinstance(period, int) or isinstance(period, bool) or period <= 0:
        return f"sample_period_ns is {period!r}, not a whole number of ns"
    samples = flame.get("samples", {})
    if not isinstance(samples, dict) or not all(isinstance(n, int) for n in samples.values()):
        return f"samples is {samples!r}, not a count per side"
    if not isinstance(flame.get("stacks_dir", "stacks"), str):
        return f"stacks_dir is {flame['stacks_dir']!r}, not a directory's name"
    return None


def load_side(run: Run, side: str, warn: Callable[[str], None] = folded.warn_stderr) -> folded.Folded:
    """The side's stacks; a file that disagrees with the record's sample
    count is truncated or altered and refused, unless the reader already
    warned that it skipped malformed lines (those samples are missing)."""
    path = run.stacks_file(side)
    recorded = run.flame.get("samples", {}).get(side)
    if not path.exists():
        raise BadStacks(
            f"{path} is missing although run {run.id} recorded {recorded} samples for the {side}; "
            "the run directory is damaged, so make a new run with `qprof run`."
        )
    warnings = []  # held back: a file refused below gets its error alone, not a warning too
    data = folded.read(path, warnings.append)
    if recorded is not None and data.samples != recorded:
        if data.partial_last_line:
            raise BadStacks(
                f"{path} is truncated: it ends mid-line and holds {data.samples:,} of the "
                f"{recorded:,} samples run.json recorded; make a new run with `qprof run`."
            )
        if not data.skipped_lines:
            raise BadStacks(
                f"{path} holds {data.samples:,} samples but run.json recorded {recorded:,}, "
                "so it was truncated or altered; make a new run with `qprof run`."
            )
    for message in warnings:
        warn(message)
    return data


def measured_ns_per_byte(record: dict, side: str) -> Optional[float]:
    """The collectors' CPU per byte for the side. The `others` side is
    everything but the two workload processes (idle excluded): the record's
    cpu.others, one nanosecond source summed task by task. Records made
    before it have no such figure: absent, not the difference of the
    machine's ticks and the processes' (which could come out negative)."""
    if side != "others":
        return _float(figures.get(record, "cpu", side, "ns_per_byte", "total"))
    oncpu = _float(figures.get(record, "cpu", "others", "oncpu_schedstat_s"))
    nbytes = figures.number(record.get("bytes"))
    return oncpu * 1e9 / nbytes if oncpu is not None and nbytes else None


def _float(v) -> Optional[float]:
    """A figure the record holds as a number, else absent."""
    return None if figures.number(v) is None else float(v)


def _per_unit(record: dict) -> Optional[figures.UnitOfWork]:
    return figures.unit_of_work(figures.get(record, "config", "pattern"))


def unit_of(record: dict) -> normalize.Unit:
    """Request/response runs are drawn per request, handshake runs per
    handshake, all others per byte."""
    p = _per_unit(record)
    return normalize.per_event(p.one, p.many) if p else normalize.BYTE


def units_done(record: dict) -> int:
    """The window's units of work (rr.responses, handshakes.handshakes), 0 if none."""
    p = _per_unit(record)
    n = figures.number(figures.get(record, *p.count)) if p else None
    return int(n) if n and n > 0 else 0


def measured_ns_per_unit_of_work(record: dict, side: str) -> Optional[float]:
    """The measured CPU per unit: the record's per-unit cpu_s
    (rr.per_request, handshakes.per_handshake: each process's schedstat
    on-CPU time over the window's units). The `others` side has no
    per-unit figure of its own: its per-byte one (cpu.others) times the
    bytes per unit, or absent with it."""
    n = units_done(record)
    if not n:
        return None
    if side != "others":
        cpu_s = _float(figures.get(record, *_per_unit(record).cpu_s, side))
        return None if cpu_s is None else cpu_s * 1e9
    per_byte = measured_ns_per_byte(record, side)
    return None if per_byte is None else per_byte * side_bytes(record, side) / n


def incomplete_reason(run: Run) -> Optional[str]:
    """Why the capture undercounts (a CPU that missed samples), if it does."""
    if run.flame.get("complete") is False:
        reason = run.flame.get("incomplete_reason")
        return reason if isinstance(reason, str) and reason else "some CPU recorded fewer samples than expected"
    return None
