# SPDX-License-Identifier: GPL-2.0-only
"""Golden files: real captures this project made (tests/data/flame/<case>/),
and what flamegraphs/ makes of them, blessed beside them.

    QPROF_BLESS=1 .venv/bin/python -m pytest tests/test_flame_golden.py   # rewrite expected/
"""

import json
import os
from pathlib import Path

import pytest

from qprof.flamegraphs import categories, normalize, sides

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parent / "data" / "flame"
CASES = ("quic", "tcp-tls")
BLESS = os.environ.get("QPROF_BLESS") == "1"


def check_golden(path: Path, actual: str) -> None:
    if BLESS:
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual)
        return
    assert path.exists(), f"{path} is missing; bless it with QPROF_BLESS=1"
    assert actual == path.read_text(), f"{path} differs; if the change is intended, re-bless with QPROF_BLESS=1"


def load(case: str, side: str):
    run = sides.load_run(DATA, case)
    data = sides.load_side(run, side, warn=pytest.fail)  # golden captures have no bad lines
    return run, data.stacks


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("side", sides.SIDES)
def test_categories(case, side):
    run, stacks = load(case, side)
    got = categories.categorize(stacks)
    assert list(got) == list(categories.CATEGORIES)
    assert sum(got.values()) == run.flame["samples"][side]
    check_golden(DATA / case / "expected" / f"{side}.categories.json", json.dumps(got, indent=2) + "\n")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("side", sides.SIDES)
def test_figures(case, side):
    run, stacks = load(case, side)
    fig = normalize.figures(stacks, run.period_ns, run.bytes)
    assert fig.samples == run.flame["samples"][side]
    assert sum(fig.categories_ns_per_byte.values()) == pytest.approx(fig.ns_per_byte, rel=1e-12)
    check_golden(DATA / case / "expected" / f"{side}.figures.json", json.dumps(fig.as_dict(), indent=2) + "\n")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("side", sides.SIDES)
def test_per_byte(case, side, tmp_path):
    run, stacks = load(case, side)
    out = tmp_path / "per-byte.folded"
    scaled = normalize.write_per_byte(stacks, run.period_ns, run.bytes, out)
    # fs/B: the whole side sums to its ns/B x 10^6, give or take half a unit a stack.
    total_fs = normalize.ns_per_byte(sum(stacks.values()), run.period_ns, run.bytes) * 1e6
    assert abs(sum(scaled.values()) - total_fs) <= 0.5 * len(stacks) + 1
    check_golden(DATA / case / "expected" / f"{side}.per-byte.folded", out.read_text())


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("side", ("client", "server"))
def test_graph_agrees_with_the_collectors(case, side):
    """These captures covered every CPU: the graph's total is within 5% of
    what the collectors measured for the process."""
    run, stacks = load(case, side)
    assert run.flame["complete"]
    fig = normalize.figures(stacks, run.period_ns, run.bytes)
    gap = normalize.gap_percent(fig.ns_per_byte, sides.measured_ns_per_byte(run.record, side))
    assert abs(gap) < 5, gap


def test_directions():
    """What each stack must show, whatever the exact figures."""
    quic = {s: categories.categorize(load("quic", s)[1]) for s in ("client", "server")}
    tls = {s: categories.categorize(load("tcp-tls", s)[1]) for s in ("client", "server")}
    for side in ("client", "server"):
        for cat in ("crypto", "protocol", "copies", "kernel net stack"):
            assert quic[side][cat] > 0, (side, cat)
        assert tls[side]["crypto"] > 0 and tls[side]["copies"] > 0
    # The sender's syscall layer sends, the receiver's receives.
    assert tls["client"]["send syscalls"] > tls["client"]["receive syscalls"]
    assert tls["server"]["receive syscalls"] > tls["server"]["send syscalls"]
    assert quic["server"]["receive syscalls"] > quic["client"]["receive syscalls"]
    # msquic is most of QUIC's protocol work; libssl is a thin record layer by comparison.
    assert quic["client"]["protocol"] / sum(quic["client"].values()) > tls["client"]["protocol"] / sum(
        tls["client"].values()
    )


def test_stack_quality_sees_the_unwinder():
    """msquic (built with frame pointers) unwinds; Debian's OpenSSL does not."""
    q = {case: normalize.figures(load(case, "client")[1], 1, 1).stack_quality for case in CASES}
    assert q["quic"] > 0.5
    assert q["tcp-tls"] < 0.1
