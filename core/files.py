# SPDX-License-Identifier: GPL-2.0-only
"""A run directory's files by name, written whole or not at all, and a
run's record read back.

rundir writes the records, history indexes them and remains marks a dead
run's record abandoned: each takes the names and the writes from here, so
imports in the core point one way (rundir -> history, remains -> files).
Every write is atomic (temporary file + rename), so a reader never sees
half a record.
"""

import json
import os
from pathlib import Path

from .errors import RunNotFound, RunsDirUnwritable

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


def load(root: Path, run_id: str = "latest") -> dict:
    """RUNS_DIR/<run_id>/run.json; a run that is not there is RunNotFound."""
    path = root / run_id / RECORD
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise RunNotFound(
            f"no run '{run_id}' under {root}; list them with `qprof ls --runs-dir {root}` or make one with `qprof run`."
        )
