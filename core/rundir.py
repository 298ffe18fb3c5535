# SPDX-License-Identifier: GPL-2.0-only
"""The run directory, runs/<id>/, and its record run.json.

A RunDir is a context manager: run.json says "running" from the start,
"complete" only once the whole record is written, and "incomplete" (with
the error) on any other exit, Ctrl-C included; "abandoned" when its qprof
was killed outright and a later qprof found its remains (remains.py).
Every write is atomic (files.py), so a reader never sees half a record.
"""

import os
import secrets
import sys
import time
from pathlib import Path
from typing import Optional

from . import history, interrupts, remains
from .errors import Interrupted, QprofError, RunsDirUnwritable
from .files import COMPARISON_RECORD, RECORD, SCHEMA_VERSIONS, unwritable, write_json_atomic


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class RunDir:
    def __init__(self, root: Path, run_id: Optional[str] = None, record_name: str = RECORD):
        self.id = run_id or new_run_id()
        self.root = root
        self.path = root / self.id
        self.record_name = record_name
        self.schema_version = SCHEMA_VERSIONS[record_name]
        self.record: dict = {"schema_version": self.schema_version, "id": self.id, "status": "running"}

    @property
    def runs_root(self) -> Path:
        """The runs directory whose history (index.sqlite) lists this record."""
        return self.root.parent if self.record_name == COMPARISON_RECORD else self.root

    def save(self) -> None:
        write_json_atomic(self.path / self.record_name, self.record)

    def __enter__(self) -> "RunDir":
        try:
            self.path.mkdir(parents=True, exist_ok=False)
        except OSError as e:
            raise unwritable(self.root, e)
        try:  # the claim inside: a signal just after it still finds _drop
            remains.ledger().claim("runs", str(self.path / self.record_name))
            self.save()
        except BaseException:
            self._drop()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        with interrupts.deferred():
            saved = True
            if self.record.get("status") != "complete":
                self.record["status"] = "incomplete"
                if isinstance(exc, QprofError):
                    self.record["error"] = exc.sentence
                elif isinstance(exc, KeyboardInterrupt):
                    self.record["error"] = Interrupted.default_sentence
                elif exc is not None:
                    self.record["error"] = f"{exc_type.__name__}: {exc}"
                try:
                    self.save()
                except RunsDirUnwritable:
                    # Still "running" on disk: left claimed, so a later
                    # qprof marks it abandoned. The first error is the news.
                    saved = False
                    if exc is None:
                        raise
            if saved:
                remains.ledger().release("runs", str(self.path / self.record_name))
                if self.record.get("status") != "complete":
                    self._index()

    def _drop(self) -> None:
        """A directory whose first record could not be written is not a run."""
        remains.ledger().release("runs", str(self.path / self.record_name))
        for p in self.path.iterdir():
            p.unlink(missing_ok=True)
        self.path.rmdir()

    def complete(self, record: dict) -> None:
        head = {"schema_version": self.schema_version, "id": self.id, "status": "complete"}
        before, self.record = self.record, {**head, **{k: v for k, v in record.items() if k not in head}}
        try:
            self.save()
        except BaseException:
            self.record = before
            raise
        latest = self.root / "latest"
        tmp = self.root / f".latest.tmp{os.getpid()}"
        try:
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(self.id)
            os.replace(tmp, latest)
        except OSError as e:
            raise unwritable(self.root, e)
        self._index()

    def _index(self) -> None:
        """Into the run history as the run ends; the history is a cache, so
        a failure here is a warning and the run stays as it is."""
        try:
            history.add(self.runs_root, self.path / self.record_name)
        except Exception as e:
            print(
                f"qprof: warning: {self.id} is not in the run history {self.runs_root / 'index.sqlite'} ({e}); "
                "`qprof ls` adds it.",
                file=sys.stderr,
                flush=True,
            )
