# SPDX-License-Identifier: GPL-2.0-only
"""qprof-wl's packed per-request records (wl.h, wl_emit_packed) as qprof
reads them: each little-endian u64 record one event, named by the line's
fields, in order; any other line its one event."""

import base64
import json
import struct

import pytest

from qprof.collectors.controlled import ABSENT, packed, unpacked

pytestmark = pytest.mark.unit


def batch(event, fields, records):
    blob = b"".join(struct.pack(f"<{len(fields)}Q", *r) for r in records)
    line = {"event": f"{event}_batch", "fields": ",".join(fields), "b64": base64.b64encode(blob).decode()}
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def test_a_batch_is_its_records_in_order():
    fields = ("seq", "due_ns", "sent_ns", "answered_ns", "conn")
    recs = [(k, 10**9 + k, 10**9 + k + 5, 10**9 + k + 2**40, k % 3) for k in range(7)]  # 7 x 40 B: base64 padded
    line = batch("rr", fields, recs)
    assert packed(line)  # kept raw by the reader, parsed after the run
    got = unpacked(line)
    assert got == [{"event": "rr", **dict(zip(fields, r))} for r in recs]


def test_a_field_not_measured_is_left_out():
    """A handshake over plain TCP has no TLS step and no session: those
    fields come as WL_ABSENT and the event has no such key, not a zero."""
    fields = ("i", "bytes", "tcp_handshake_ns", "resumed")
    line = batch("handshake", fields, [(3, 8, ABSENT, ABSENT), (4, 8, 250_000, 1)])
    assert packed(line)
    assert unpacked(line) == [
        {"event": "handshake", "i": 3, "bytes": 8},
        {"event": "handshake", "i": 4, "bytes": 8, "tcp_handshake_ns": 250_000, "resumed": 1},
    ]


def test_any_other_line_is_its_one_event():
    line = b'{"event":"download","i":3,"bytes":8}\n'
    assert not packed(line) and unpacked(line) == [{"event": "download", "i": 3, "bytes": 8}]
    assert unpacked(b'{"event":"mark","t_ns":1}') == [{"event": "mark", "t_ns": 1}]


def test_the_reports_kept_are_the_patterns_events():
    """The events the reader keeps as reports are "connected" and what the
    patterns' rows name as their client's and server's report of one
    piece of work; a line of any other event is not one, nor a mark
    whose text holds "_batch" past its name."""
    from qprof.collectors.controlled import REPORT_EVENTS

    assert set(REPORT_EVENTS) == {"connected", "download", "served", "rr", "handshake"}
    assert not packed(b'{"event":"mark","name":"x_batch",}\n')
