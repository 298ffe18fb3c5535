# SPDX-License-Identifier: GPL-2.0-only
"""A run's stack samples and figures in formats other tools read: one
stage that reads a run directory (checked as `qprof flame` checks it) and
writes one file or stdout.

    pprof        gzipped profile.proto (pprof.py): go tool pprof, and the
                 viewers that take pprof; default RUNS_DIR/<id>/profile.pb.gz
    folded       the folded stacks, sample counts (as `qprof flame --folded`)
    perf-script  `perf script` of the run's kept perf.data, for the Firefox
                 Profiler and speedscope; a run without perf.data is refused
                 rather than faked from folded stacks, which have lost the
                 samples' times, threads and addresses
    openmetrics  the headline figures for Prometheus (openmetrics.py)
"""

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Dict, Iterator, Optional, Tuple

from qprof.errors import BadStacks, BadValue, NoPerfData, NotBuilt, RunsDirUnwritable, UnknownExportFormat

from . import categories, folded, normalize, openmetrics, pprof, sides

FORMATS = ("pprof", "folded", "perf-script", "openmetrics")
STDOUT = "-"
PERF_DATA = "perf.data"
# Firefox Profiler's import reads pid/tid pairs (`-F +pid`, as its docs
# say); --no-inline gives the frames the folded stacks have, and spares a
# debug-info lookup for every DWARF-unwound user frame (13x slower).
PERF_SCRIPT = ("perf", "script", "--no-inline", "-F", "+pid")


@dataclass
class ExportOptions:
    run_id: str = "latest"
    fmt: str = "pprof"  # one of FORMATS
    sides: Tuple[str, ...] = sides.SIDES  # a subset for pprof, folded, openmetrics; all for perf-script
    output: Optional[str] = None  # a path, STDOUT, or None: stdout, or default_path() for pprof
    runs_dir: Path = Path("runs")


@dataclass
class Exported:
    path: Optional[Path]  # None: written to stdout
    what: str  # e.g. "3 sides, 3,713 samples", for the line saying where it went


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UnknownExportFormat(f"unknown export format '{fmt}'; qprof exports {', '.join(FORMATS)}.")
    return fmt


def default_path(run: sides.Run, selected: Tuple[str, ...]) -> Path:
    """Where pprof goes without -o: in the run directory, one file per side selection."""
    suffix = "" if tuple(selected) == sides.SIDES else "-" + "-".join(selected)
    return run.path / f"profile{suffix}.pb.gz"


def export(opts: ExportOptions, stdout: Optional[BinaryIO] = None) -> Exported:
    """Read the run, write opts.fmt to opts.output. Every check (format,
    run, stacks, perf.data) is made before anything is written."""
    check_format(opts.fmt)
    if opts.fmt == "perf-script" and tuple(opts.sides) != sides.SIDES:
        raise BadValue(
            "perf-script exports the whole capture as perf recorded it, every task, so --side does not apply; "
            "leave it out (the Firefox Profiler and speedscope pick processes themselves)."
        )
    run = sides.load_run(opts.runs_dir, opts.run_id)
    dest = opts.output
    if dest is None:
        dest = str(default_path(run, opts.sides)) if opts.fmt == "pprof" else STDOUT
    if opts.fmt == "perf-script":
        data = perf_data(run)
        with _destination(dest, stdout) as out:
            perf_script(data, out)
        return Exported(_path(dest), f"perf script of {data}")
    loaded = {side: sides.load_side(run, side).stacks for side in opts.sides}  # all checked before output
    samples = sum(sum(s.values()) for s in loaded.values())
    what = f"{len(loaded)} side{'s' * (len(loaded) != 1)}, {samples:,} samples"
    if opts.fmt == "pprof":
        body = pprof_bytes(run, loaded)
    elif opts.fmt == "folded":
        body = folded_text(loaded).encode()
    else:
        body = openmetrics_text(run, loaded).encode()
    with _destination(dest, stdout) as out:
        out.write(body)
    return Exported(_path(dest), what)


def _path(dest: str) -> Optional[Path]:
    return None if dest == STDOUT else Path(dest)


# --- the formats: pure functions of a run's record and stacks -------------------


def pprof_bytes(run: sides.Run, loaded: Dict[str, Dict[str, int]]) -> bytes:
    rec, unit = run.record, run.unit
    divisors = {side: run.divisor(side) for side in loaded}
    per = ", ".join(f"{side} {n:,}" for side, n in divisors.items())
    comments = [
        f"qprof run {run.id}: stack {rec.get('stack')}, perf {run.flame.get('event')} every {run.period_ns:,} ns",
        f"cpu = samples x period; cpu_per_{unit.name} in {unit.count} "
        f"({unit.counts_per_ns:,} {unit.count} = 1 ns per {unit.name}): cpu over the side's "
        f"{unit.divisor_key} ({per})",
    ]
    incomplete = sides.incomplete_reason(run)
    if incomplete:
        comments.append(f"the capture undercounts: {incomplete}")
    prof = pprof.profile(
        loaded,
        run.period_ns,
        divisors,
        unit,
        {"stack": str(rec.get("stack", "")), "run": run.id},
        comments,
        source=f"qprof run {run.id}",
        time_nanos=pprof.time_nanos_of(rec.get("measured_at")),
        duration_nanos=int(round(float(rec.get("cpu_window_s") or rec.get("window_s") or 0) * 1e9)),
    )
    return pprof.gzipped(prof)


def folded_text(loaded: Dict[str, Dict[str, int]]) -> str:
    """Sample counts; with more than one side each stack gets its side as
    an extra root frame, as `qprof flame --folded` prints them."""
    out = []
    for side, stacks in loaded.items():
        if len(loaded) > 1:
            stacks = {f"{side};{s}": n for s, n in stacks.items()}
        out.extend(folded.lines(stacks))
    return "".join(out)


def openmetrics_text(run: sides.Run, loaded: Dict[str, Dict[str, int]]) -> str:
    classifier = categories.for_run(run.path)
    figs = {
        side: normalize.figures(stacks, run.period_ns, run.divisor(side), classifier, run.unit)
        for side, stacks in loaded.items()
    }
    measured = {side: run.measured_ns_per_unit(side) for side in loaded}
    return openmetrics.text(openmetrics.families(run.record, figs, measured, run.unit))


# --- perf script ----------------------------------------------------------------


def perf_data(run: sides.Run) -> Path:
    data = run.path / PERF_DATA
    if not data.is_file():
        raise NoPerfData(
            f"run {run.id} kept no perf.data (qprof deletes it after folding), so there is no perf script "
            "to export; make the run with `qprof run --keep-perf-data`, or open `--format folded` in speedscope."
        )
    return data


def perf_script(data: Path, out: BinaryIO) -> None:
    """`perf script` of data, streamed to out; perf's own failure is refused with its last line."""
    if shutil.which(PERF_SCRIPT[0]) is None:
        raise NotBuilt("perf is not installed, which perf-script export runs; `make deps` installs linux-perf.")
    with subprocess.Popen(
        [*PERF_SCRIPT, "-i", str(data)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    ) as p:
        shutil.copyfileobj(p.stdout, out, 1 << 20)
        err = p.stderr.read().decode(errors="replace")
    if p.returncode != 0:
        last = (err.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        raise BadStacks(
            f"`perf script` could not read {data} ({last.strip()}); it is damaged or from another perf, "
            "so make a new run with `qprof run --keep-perf-data`."
        )


# --- where it goes ---------------------------------------------------------------


@contextmanager
def _destination(dest: str, stdout: Optional[BinaryIO]) -> Iterator[BinaryIO]:
    """stdout, or a file written whole or not at all (a temporary beside
    it, renamed over it once everything is written)."""
    if dest == STDOUT:
        out = stdout or sys.stdout.buffer
        yield out
        out.flush()
        return
    path = Path(dest)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        f = open(tmp, "wb")
    except OSError as e:
        raise RunsDirUnwritable(f"cannot write {path} ({e.strerror or e}); give -o a writable path.")
    try:
        with f:
            yield f
        os.replace(tmp, path)
    except OSError as e:
        raise RunsDirUnwritable(f"cannot write {path} ({e.strerror or e}); give -o a writable path.")
    finally:
        tmp.unlink(missing_ok=True)
