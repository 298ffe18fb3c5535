# SPDX-License-Identifier: GPL-2.0-only
"""Each stream's share of a bulk transfer, and Jain's index over them."""

import pytest

from qprof.collectors import record
from qprof.collectors.window import Edge, Window


def test_jain_index():
    assert record.jain_index([5, 5, 5]) == pytest.approx(1.0)
    assert record.jain_index([9, 0, 0]) == pytest.approx(1 / 3)
    assert record.jain_index([3, 1]) == pytest.approx(16 / 20)
    assert record.jain_index([]) is None and record.jain_index([0, 0]) is None


def edge(t_ns, stream_bytes):
    mark = {"t_ns": t_ns, "app_bytes": sum(stream_bytes or [0])}
    if stream_bytes is not None:
        mark["stream_bytes"] = stream_bytes
    return Edge(t_ns, None, None, None, mark, {}, {}, {}, {})


def test_streams_over_the_window():
    # A third stream opened inside the window: it started from nothing.
    w = Window(edge(0, [100, 200]), edge(2 * 10**9, [600, 700, 250]))
    s = record.streams_record(w)
    assert s["bytes"] == [500, 500, 250]
    assert s["gbps"] == [pytest.approx(500 * 8 / 2 / 1e9)] * 2 + [pytest.approx(250 * 8 / 2 / 1e9)]
    assert s["jain_index"] == pytest.approx(1250**2 / (3 * (500**2 * 2 + 250**2)))
    assert s["min_share"] == pytest.approx(250 / 1250)


def test_no_per_stream_counts_is_absent():
    assert record.streams_record(Window(edge(0, None), edge(10**9, None))) is None
