# SPDX-License-Identifier: GPL-2.0-only
"""Each stream's share of a bulk transfer, and Jain's index over them."""

import pytest

from qprof.collectors import derive, record
from qprof.collectors.window import Edge, Window

from conftest import needs_build, run_json


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


def test_streams_over_the_window():
    # A third stream opened inside the window: it started from nothing.
    w = Window(edge(0, [100, 200]), edge(2 * 10**9, [600, 700, 250]))
    s = record.streams_record(w, 3)
    assert s["bytes"] == [500, 500, 250]
    assert s["gbps"] == [pytest.approx(500 * 8 / 2 / 1e9)] * 2 + [pytest.approx(250 * 8 / 2 / 1e9)]
    assert s["jain_index"] == pytest.approx(1250**2 / (3 * (500**2 * 2 + 250**2)))
    assert s["min_share"] == pytest.approx(250 / 1250)


def test_no_per_stream_counts_is_absent():
    assert record.streams_record(Window(edge(0, None), edge(10**9, None)), 1) is None


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
        runs_dir, "--stack", stack, "--streams", "3", "--duration", "1s", "--warmup", "0.3s", "--sample-hz", "0"
    )
    s = rec["streams"]
    assert len(s["bytes"]) == 3 and sum(s["bytes"]) > 0
    assert sum(s["bytes"]) == pytest.approx(rec["bytes"], rel=0.02)
    assert s["jain_index"] == pytest.approx(derive.jain_index(s["bytes"]))
    assert 1 / 3 - 1e-9 <= s["jain_index"] <= 1.0
    if stack == "tcp":
        assert all(b > 0 for b in s["bytes"])


def test_a_stream_the_receiver_never_saw_moved_nothing():
    # msquic opens a stream at its peer with the stream's first byte: with
    # FIFO scheduling the third stream may not have started by the window's end.
    w = Window(edge(0, [100]), edge(10**9, [900, 300]))
    s = record.streams_record(w, 3)
    assert s["bytes"] == [800, 300, 0]
    assert s["min_share"] == 0 and s["jain_index"] == pytest.approx(1100**2 / (3 * (800**2 + 300**2)))
