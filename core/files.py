# SPDX-License-Identifier: GPL-2.0-only
"""A run directory's files by name, written whole or not at all, and a
run's record read back.

rundir writes the records, history indexes them and remains marks a dead
run's record abandoned: each takes the names and the writes from here, so
imports in the core point one way (rundir -> history, remains -> files).
Every write is atomic (temporary file + rename), so a reader never sees
half a record.

Every command that reads a record reads it through load() (or, to show
what a damaged one holds, read_record() and problem()): a record that is
not there is RunNotFound, one that cannot be read as a record is corrupt,
IncompleteRecord, whichever command reads it.
"""

import json
import os
from pathlib import Path
from typing import Optional, Tuple

from .errors import IncompleteRecord, RunNotFound, RunsDirUnwritable

RECORD = "run.json"
# A comparison's directory is RUNS_DIR/comparisons/<id>/, its record comparison.json.
COMPARISON_RECORD = "comparison.json"
COMPARISONS_SUBDIR = "comparisons"
# Each record's schema (describe/schema/<name>.schema.json) and its
# version: a change to a field's name or meaning bumps it, and docs/record.md
# says what changed ("Record versions").
SCHEMA_VERSIONS = {RECORD: 2, COMPARISON_RECORD: 2}


def write_text_atomic(path: Path, text: str) -> None:
    """path holds text whole or not at all; an unwritable place is
    RunsDirUnwritable with its sentence."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise unwritable(path.parent, e)


def write_json_atomic(path: Path, obj: dict) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def unwritable(path: Path, e: OSError) -> RunsDirUnwritable:
    return RunsDirUnwritable(
        f"cannot write under {path} ({e.strerror or e}); pass --runs-dir "
        "(or set QPROF_RUNS_DIR) to a writable directory."
    )


STATUSES = ("complete", "incomplete", "abandoned", "running")
# Fields a complete record has; their absence makes it corrupt.
NEEDED = {
    "run": ("stack", "config", "environment", "bytes", "window_s", "throughput_gbps", "measured_at"),
    "single": ("transport", "cpu", "workload"),  # besides, a run that is not a mix
    "mix": ("mix",),
    "comparison": ("configs", "runs", "environment", "metrics"),
}
# The JSON types of the top-level fields commands read (the schemas',
# describe/schema/), null aside: one of another type makes the record corrupt.
_NUMBER = (int, float)
TYPES = {
    "run": {
        "schema_version": int,
        "id": str,
        "stack": str,
        "config": dict,
        "environment": dict,
        "transport": dict,
        "bytes": int,
        "bytes_sent": int,
        "window_s": _NUMBER,
        "throughput_gbps": _NUMBER,
        "measured_at": str,
        "cpu": dict,
        "workload": dict,
        "mix": dict,
        "flame": dict,
        "rr": dict,
        "handshakes": dict,
        "error": str,
    },
    "comparison": {
        "schema_version": int,
        "id": str,
        "configs": list,
        "runs": list,
        "environment": dict,
        "metrics": dict,
        "vary": dict,
        "error": str,
    },
}
_JSON_TYPE = {dict: "an object", list: "a list", str: "a string", int: "a whole number", _NUMBER: "a number"}


def read_record(path: Path) -> Tuple[Optional[dict], Optional[str]]:
    """(record, None), or (None, why it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, f"its directory has no {path.name}"
    except (OSError, UnicodeDecodeError) as e:
        return None, f"{path.name} cannot be read ({getattr(e, 'strerror', None) or e})"
    try:
        rec = json.loads(text, parse_int=_whole)
    except json.JSONDecodeError as e:
        return None, f"{path.name} is not valid JSON ({e.msg}: line {e.lineno} column {e.colno})"
    except ValueError as e:  # _whole's
        return None, f"{path.name} holds {e}"
    except RecursionError:
        return None, f"{path.name} nests deeper than any record"
    if not isinstance(rec, dict):
        return None, f"{path.name} is not a JSON object"
    return rec, None


# Fields that are absent or of their type, never null.
NOT_NULL = ("schema_version", "configs", "runs")


def _whole(digits: str) -> int:
    """A record's whole numbers are 64-bit at most (counters, nanosecond
    times): a longer one is damage, and no figure (a float) holds it."""
    if len(digits.lstrip("-0")) > 20 or not -(2**63) <= int(digits) < 2**64:
        raise ValueError(f"a whole number past 64 bits ({digits[:24]}{'...' if len(digits) > 24 else ''})")
    return int(digits)


def _typed(key: str, v, t) -> bool:
    return (v is None and key not in NOT_NULL) or (isinstance(v, t) and not isinstance(v, bool))


def problem(kind: str, run_id: str, rec: dict, whole: bool = True) -> Optional[str]:
    """Why a record read as a JSON object is still corrupt, or None: no
    status, or a field of the wrong type; whole (what the history holds a
    record to): also another run's id, or a complete one that lacks a
    field every complete one has. Commands that read a record for one
    purpose (its stacks) need it readable, not whole."""
    status = rec.get("status")
    if not isinstance(status, str) or status not in STATUSES:
        return "its record has no status" if status is None else f"its status is {_shown(status)}, which no record has"
    for key, t in TYPES[kind].items():
        if key in rec and not _typed(key, rec[key], t):
            return f"its {key} is {_shown(rec[key])}, not {_JSON_TYPE[t]}"
    if not whole:
        return None
    if rec.get("id") not in (None, run_id):
        return f"its record names another id ({_shown(rec.get('id'))})"
    if status == "complete":
        stack = rec.get("stack") or (rec.get("config") or {}).get("stack")
        needed = NEEDED[kind] + (() if kind == "comparison" else NEEDED["mix" if stack == "mix" else "single"])
        lacks = [k for k in needed if k not in rec]
        if lacks:
            return f"it says complete but lacks {', '.join(lacks)}"
    return None


def _shown(v) -> str:
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def load(root: Path, run_id: str = "latest", kind: str = "run", whole: bool = False) -> dict:
    """RUNS_DIR/<run_id>/run.json (kind "comparison":
    RUNS_DIR/comparisons/<id>/comparison.json). One that is not there is
    RunNotFound; one that cannot be read as a record (problem(), whole:
    with every field a complete one has) is IncompleteRecord, as `qprof
    show` says it is corrupt."""
    root = Path(root)
    base = root / COMPARISONS_SUBDIR if kind == "comparison" else root
    path = base / run_id / (COMPARISON_RECORD if kind == "comparison" else RECORD)
    what = "comparison" if kind == "comparison" else "run"
    if not path.parent.is_dir():
        raise RunNotFound(
            f"no {what} '{run_id}' under {root}; list them with `qprof ls --runs-dir {root}` "
            "or make one with `qprof run`."
        )
    rid = path.parent.resolve().name  # `latest` is a link to the run
    rec, why = read_record(path)
    why = why or problem(kind, rid, rec, whole)
    if why:
        raise corrupt(rid, why, kind)
    return rec


def corrupt(run_id: str, why: str, kind: str = "run") -> IncompleteRecord:
    """The one sentence for a record that cannot be read, whichever command reads it."""
    what, make = ("comparison", "qprof compare") if kind == "comparison" else ("run", "qprof run")
    return IncompleteRecord(
        f"{what} {run_id}'s record is corrupt: {why}; `qprof show {run_id}` shows what it holds, "
        f"and `{make}` makes a new one."
    )
