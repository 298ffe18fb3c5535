# SPDX-License-Identifier: GPL-2.0-only
"""record.describe is a pure function of a run's measurement (and the
folded stacks beside it): stored measurements this project recorded
itself (tests/data/record/<case>/measurement.json, from real runs) go in,
and the record must equal the blessed one beside them.

    QPROF_BLESS=1 .venv/bin/python -m pytest tests/test_record_golden.py   # rewrite expected.json

Bless only after reading the diff: a changed figure is a changed
product."""

import json
import multiprocessing
import os
from pathlib import Path

import jsonschema
import pytest

from qprof.describe import measurement, record

from conftest import SCHEMAS

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "record"
CASES = sorted(p.name for p in DATA.iterdir() if (p / "measurement.json").exists())
BLESS = os.environ.get("QPROF_BLESS") == "1"


def _describe(case: str) -> dict:
    m = measurement.load((DATA / case / "measurement.json").read_text())
    # Through JSON, as run.json holds it.
    return json.loads(json.dumps(record.describe(m, DATA / case)))


@pytest.mark.parametrize("case", CASES)
def test_record_from_stored_measurement(case):
    got = _describe(case)
    path = DATA / case / "expected.json"
    if BLESS:
        path.write_text(json.dumps(got, indent=1) + "\n")
    assert path.exists(), f"{path} is missing; bless it with QPROF_BLESS=1"
    assert got == json.loads(path.read_text())
    complete = {"schema_version": 2, "id": "20261123-000000-000000", "status": "complete", **got}
    jsonschema.validate(complete, json.loads(SCHEMAS["run.json"].read_text()))


@pytest.mark.parametrize("case", CASES)
def test_describe_is_pure(case):
    """The same measurement twice gives the same record, and describing
    does not change the measurement."""
    text = (DATA / case / "measurement.json").read_text()
    m = measurement.load(text)
    a = json.dumps(record.describe(m, DATA / case))
    assert json.loads(m.to_json()) == json.loads(text)
    assert json.dumps(record.describe(m, DATA / case)) == a


@pytest.mark.parametrize("case", CASES)
def test_measurement_round_trips(case):
    text = (DATA / case / "measurement.json").read_text()
    assert json.loads(measurement.load(text).to_json()) == json.loads(text)


def test_cases_cover_the_stack_kinds():
    # The stack kinds, a link (netem under tbf, in the guest), a download with 0-RTT
    # resumption, and a mix (two flows through a rate-limited link).
    assert {"quic", "tcp-tls", "udp", "tcp-link", "quic-download", "mix-link"} <= set(CASES)


def _describe_as_nobody(case: str, conn) -> None:
    """In a forked child: drop to nobody (no groups, no capabilities), then describe."""
    try:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        conn.send(
            json.dumps(record.describe(measurement.load((DATA / case / "measurement.json").read_text()), DATA / case))
        )
    except BaseException as e:  # the parent asserts on it
        conn.send(f"ERROR {type(e).__name__}: {e}")


@pytest.mark.skipif(os.geteuid() != 0, reason="already unprivileged: every test here runs without root")
@pytest.mark.parametrize("case", CASES)
def test_describe_needs_no_root(case):
    """A stored measurement is described by a user who can touch nothing
    of the machine (nobody): the record is the blessed one."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_describe_as_nobody, args=(case, child))
    proc.start()
    got = parent.recv()
    proc.join()
    assert not got.startswith("ERROR"), got
    assert json.loads(got) == json.loads((DATA / case / "expected.json").read_text())
