# SPDX-License-Identifier: GPL-2.0-only
"""Reclaiming a dead run's record (core/remains.py) never stops a reclaim:
a record that cannot be written is said, and the ledger still goes."""

import json

import pytest

from qprof import errors, remains

pytestmark = pytest.mark.unit


def running_record(tmp_path):
    path = tmp_path / "20261124-000000-000000" / "run.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"id": path.parent.name, "status": "running"}))
    return path


def test_a_dead_runs_record_is_marked_abandoned(tmp_path):
    path = running_record(tmp_path)
    assert remains._mark_abandoned(path, {"pid": 4242}) is True
    rec = json.loads(path.read_text())
    assert rec["status"] == "abandoned" and "pid 4242" in rec["error"]
    assert remains._mark_abandoned(path, {"pid": 4242}) is None  # nothing left to mark


def test_an_unwritable_record_is_said_and_not_raised(tmp_path, monkeypatch):
    path = running_record(tmp_path)

    def refuse(p, obj):
        raise errors.RunsDirUnwritable(f"cannot write {p}")

    monkeypatch.setattr(remains, "write_json_atomic", refuse)
    assert remains._mark_abandoned(path, {"pid": 4242}) is False
    assert json.loads(path.read_text())["status"] == "running"


def test_a_record_that_is_gone_or_finished_is_left(tmp_path):
    assert remains._mark_abandoned(tmp_path / "nothing" / "run.json", {}) is None
    path = running_record(tmp_path)
    path.write_text(json.dumps({"status": "complete"}))
    assert remains._mark_abandoned(path, {}) is None
