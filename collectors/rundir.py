"""The run directory, runs/<id>/, and its record run.json.

A RunDir is a context manager: run.json says "running" from the start,
"complete" only once the whole record is written, and "incomplete" (with
the error) on any other exit, Ctrl-C included. Every write is atomic
(temporary file + rename), so a reader never sees half a record.
"""
import json
import os
import secrets
import time
from pathlib import Path
from typing import Optional

from .errors import Interrupted, QprofError, RunNotFound

RECORD = "run.json"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RunDir:
    def __init__(self, root: Path, run_id: Optional[str] = None, record_name: str = RECORD):
        self.id = run_id or new_run_id()
        self.root = root
        self.path = root / self.id
        self.record_name = record_name
        self.record: dict = {"id": self.id, "status": "running"}

    def save(self) -> None:
        write_json_atomic(self.path / self.record_name, self.record)

    def __enter__(self) -> "RunDir":
        self.path.mkdir(parents=True, exist_ok=False)
        self.save()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.record.get("status") == "complete":
            return
        self.record["status"] = "incomplete"
        if isinstance(exc, QprofError):
            self.record["error"] = exc.sentence
        elif isinstance(exc, KeyboardInterrupt):
            self.record["error"] = Interrupted.default_sentence
        elif exc is not None:
            self.record["error"] = f"{exc_type.__name__}: {exc}"
        self.save()

    def complete(self, record: dict) -> None:
        self.record = {"id": self.id, "status": "complete", **record}
        self.save()
        latest = self.root / "latest"
        tmp = self.root / f".latest.tmp{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(self.id)
        os.replace(tmp, latest)


def load(root: Path, run_id: str = "latest") -> dict:
    path = root / run_id / RECORD
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise RunNotFound(f"no run '{run_id}' under {root}; list them with `ls {root}` or make one with `qprof run`.")
