# SPDX-License-Identifier: GPL-2.0-only
"""Each stream's share of a bulk transfer, and Jain's index over them:
the record's arithmetic on counts the test chooses (unit), and a real
run's receiver counts (system)."""

import json
from statistics import mean, pvariance

import pytest

from qprof.describe import derive
from qprof.describe.patterns import bulk
from qprof.describe.window import Edge, Window

from conftest import needs_build, run_json


def jain(xs):
    """Jain's index by another road than derive's (sum x)^2 / (n sum x^2):
    1 / (1 + CV^2), CV the population coefficient of variation; the two
    are the same quantity, so a slip in either shows."""
    m = mean(xs)
    return m * m / (m * m + pvariance(xs, m))


@pytest.mark.unit
def test_jain_index():
    assert derive.jain_index([5, 5, 5]) == pytest.approx(1.0)
    assert derive.jain_index([9, 0, 0]) == pytest.approx(1 / 3)
    assert derive.jain_index([3, 1]) == pytest.approx(16 / 20)
    assert derive.jain_index([]) is None and derive.jain_index([0, 0]) is None


def edge(t_ns, stream_bytes):
    mark = {"t_ns": t_ns, "app_bytes": sum(stream_bytes or [0])}
    if stream_bytes is not None:
        mark["stream_bytes"] = stream_bytes
    return Edge(t_ns, None, None, None, mark, {}, {}, {}, {})


def over_one_second(stream_bytes):
    """The record's streams over a 1 s window in which each stream moved
    stream_bytes[i]."""
    start = [1000 * (i + 1) for i in range(len(stream_bytes))]  # counts need not start at 0
    end = [a + b for a, b in zip(start, stream_bytes)]
    return bulk.streams_record(Window(edge(0, start), edge(10**9, end)), len(stream_bytes))


@pytest.mark.unit
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_jain_is_one_for_equal_shares_and_one_over_n_for_one_stream_taking_all(n):
    equal = over_one_second([3000] * n)
    assert equal["bytes"] == [3000] * n
    assert equal["jain_index"] == pytest.approx(1.0) and equal["min_share"] == pytest.approx(1 / n)
    hog = over_one_second([3000 * n] + [0] * (n - 1))
    assert hog["bytes"] == [3000 * n] + [0] * (n - 1)
    assert hog["jain_index"] == pytest.approx(1 / n)
    assert hog["min_share"] == (1.0 if n == 1 else 0)


@pytest.mark.unit
def test_jain_rises_as_bytes_move_from_the_largest_stream_to_the_smallest():
    """Each step hands 100 bytes from the stream with the most to the one
    with the least, total unchanged: the shares grow more even, so the
    index rises strictly from 1/n (one takes all) to 1 (all equal)."""
    shares = [1200, 0, 0, 0]
    seen = []
    while True:
        s = over_one_second(shares)
        assert s["bytes"] == shares and sum(s["bytes"]) == 1200
        assert s["jain_index"] == pytest.approx(jain(shares))
        assert s["min_share"] == pytest.approx(min(shares) / 1200)
        seen.append(s["jain_index"])
        if max(shares) == min(shares):
            break
        shares[shares.index(max(shares))] -= 100
        shares[shares.index(min(shares))] += 100
    assert seen[0] == pytest.approx(1 / 4) and seen[-1] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(seen, seen[1:])), seen
    assert len(seen) == 10  # 900 bytes, 100 a step, to 300 each


@pytest.mark.unit
def test_streams_over_the_window():
    # A third stream opened inside the window: it started from nothing.
    w = Window(edge(0, [100, 200]), edge(2 * 10**9, [600, 700, 250]))
    s = bulk.streams_record(w, 3)
    assert s["bytes"] == [500, 500, 250]
    assert s["gbps"] == [pytest.approx(500 * 8 / 2 / 1e9)] * 2 + [pytest.approx(250 * 8 / 2 / 1e9)]
    assert s["jain_index"] == pytest.approx(1250**2 / (3 * (500**2 * 2 + 250**2)))
    assert s["min_share"] == pytest.approx(250 / 1250)


@pytest.mark.unit
def test_no_per_stream_counts_is_absent():
    assert bulk.streams_record(Window(edge(0, None), edge(10**9, None)), 1) is None


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("stack", ["quic", "tcp"])
def test_a_run_counts_each_stream(runs_dir, stack):
    """Three streams (QUIC) or connections (TCP): the receiver's counts
    over the window sum to the bytes it verified (each is read at a
    slightly different instant, hence the tolerance). TCP's three
    connections share the link, every one moves; msquic's default stream
    scheduling is FIFO (QUIC_STREAM_SCHEDULING_SCHEME_FIFO, msquic.h), so
    a window may see one stream take everything: Jain's index 1/3."""
    rec = run_json(
        runs_dir, "--stack", stack, "--streams", "3", "--duration", "0.5s", "--warmup", "0.3s", "--sample-hz", "0"
    )
    s = rec["streams"]
    b = s["bytes"]
    # Each stream's bytes are the receiver's own per-stream counts between
    # its marks at the edges (kept in measurement.json); over the whole run
    # every stream carried bytes, and they add up to what it verified.
    marks = json.loads((runs_dir / rec["id"] / "measurement.json").read_text())["window"]
    start, end = (marks[e]["server_mark"]["stream_bytes"] for e in ("start", "end"))
    assert b == [e - s for s, e in zip(start, end)] and len(b) == 3 and sum(b) > 0, (b, start, end)
    whole = rec["workload"]["server"]["report"]
    assert all(x > 0 for x in whole["stream_bytes"]) and sum(whole["stream_bytes"]) == whole["app_bytes"], whole
    assert sum(b) == pytest.approx(rec["bytes"], rel=0.02)
    # The index and the smallest share are the record's per-stream bytes',
    # recomputed here apart from the code that wrote them.
    assert s["jain_index"] == pytest.approx(jain(b))
    assert s["min_share"] == pytest.approx(min(b) / sum(b))
    assert 1 / 3 - 1e-9 <= s["jain_index"] <= 1.0 + 1e-9
    if stack == "tcp":
        # Every connection moved: above the 1/3 of one taking all.
        assert all(x > 0 for x in b) and s["jain_index"] > 1 / 3


@pytest.mark.unit
def test_a_stream_the_receiver_never_saw_moved_nothing():
    # msquic opens a stream at its peer with the stream's first byte: with
    # FIFO scheduling the third stream may not have started by the window's end.
    w = Window(edge(0, [100]), edge(10**9, [900, 300]))
    s = bulk.streams_record(w, 3)
    assert s["bytes"] == [800, 300, 0]
    assert s["min_share"] == 0 and s["jain_index"] == pytest.approx(1100**2 / (3 * (800**2 + 300**2)))
