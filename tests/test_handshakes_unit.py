# SPDX-License-Identifier: GPL-2.0-only
"""describe/patterns/handshakes.py on made-up reports: the window holds the
handshakes whose answer came inside it, the rate is theirs over its length,
resumption is counted where a stack reports it and absent where none
does, and the costs are per handshake; and the options `qprof run
--pattern handshakes` refuses before anything runs."""

import pytest

from qprof import errors
from qprof.describe.patterns import handshakes

from refusals import refused

pytestmark = pytest.mark.unit

T0 = 10**9
REC = {
    "cpu": {"client": {"oncpu_schedstat_s": 0.3}, "server": {"oncpu_schedstat_s": 0.2}, "system": {"total_s": 0.6}},
    "syscalls": None,
}


def events(n, sessions=True, step_ns=1_000_000):
    out = []
    for i in range(n):
        e = {"event": "handshake", "i": i, "bytes": 8, "t_connect_ns": T0 + i * step_ns}
        e.update(handshake_ns=200_000 + i, complete_ns=300_000 + i)
        if sessions:
            e.update(resumed=i % 2 == 1, early_data=False)
        out.append(e)
    return out


def marks(client, server):
    return {
        "start": {"client": {"handshakes": 0}, "server": {"handshakes": 0}},
        "end": {"client": {"handshakes": client}, "server": {"handshakes": server}},
    }


def test_the_window_holds_the_answers_that_came_inside_it():
    ev = events(100)
    start = T0 + 10 * 1_000_000 + 300_000 + 11  # just past handshake 10's answer
    end = T0 + 60 * 1_000_000 + 300_000 + 60  # handshake 60's answer: outside, [start, end)
    done = {"handshakes": 100, "connections_opened": 100, "resumed": 50, "early_data": 0}
    got = handshakes.describe(ev, start, end, 2, True, None, done, marks(50, 49), REC, None)
    assert got["handshakes"] == 49  # 11 .. 59
    assert got["per_s"] == pytest.approx(49 / ((end - start) / 1e9))
    assert got["resumed"] == sum(1 for i in range(11, 60) if i % 2) and got["early_data"] == 0
    assert got["counted"] == {"client": 50, "server": 49}
    t = got["handshake_ns"]
    assert t["min"] == 200_011 and t["max"] == 200_059 and t["p99.99"] <= t["max"]
    assert t["p50"] == pytest.approx(200_035, rel=1e-3)
    assert got["tcp_handshake_ns"] is None  # no stack step reported
    cpu = got["per_handshake"]["cpu_s"]
    assert cpu == {
        "client": pytest.approx(0.3 / 49),
        "server": pytest.approx(0.2 / 49),
        "machine": pytest.approx(0.6 / 49),
    }
    assert got["whole_run"]["resumed"] == 50


def test_a_stack_without_sessions_counts_no_resumption():
    done = {"handshakes": 5, "connections_opened": 5, "resumed": 0, "early_data": 0}
    got = handshakes.describe(events(5, sessions=False), 0, 2 * T0, 1, False, None, done, marks(5, 5), REC, None)
    assert got["resumed"] is None and got["early_data"] is None
    assert got["whole_run"]["resumed"] is None and got["whole_run"]["handshakes"] == 5


def test_no_handshake_in_the_window_is_absent_not_zero():
    got = handshakes.describe(events(5), 0, T0, 1, False, None, {}, marks(0, 0), REC, None)
    assert got["handshakes"] == 0 and got["per_s"] == 0
    assert got["handshake_ns"] is None and got["histogram"] is None
    assert got["per_handshake"] is None and got["flame_ns_per_handshake"] is None


def test_an_open_loop_says_what_it_offered_and_who_waited():
    ev = events(10)
    for e in ev:
        e["wait_ns"] = 5_000 if e["i"] != 7 else 3_000_000  # 7 waited past the next one's due time
    done = {"handshakes": 10, "connections_opened": 10, "connections_due": 10, "late": 1}
    got = handshakes.describe(ev, 0, 2 * T0, 1, False, 0.002, done, marks(10, 10), REC, None)
    assert got["period_s"] == 0.002 and got["offered_per_s"] == pytest.approx(500)
    assert got["late"] == 1 and got["whole_run"]["late"] == 1 and got["whole_run"]["connections_due"] == 10
    assert got["wait_ns"]["max"] == 3_000_000 and got["wait_ns"]["min"] == 5_000
    # As fast as it can: nothing offered, nothing late, not zero.
    closed = handshakes.describe(events(10), 0, 2 * T0, 1, False, None, done, marks(10, 10), REC, None)
    assert closed["offered_per_s"] is None and closed["late"] is None and closed["wait_ns"] is None


# `qprof run --pattern handshakes` refuses these before anything runs (tests/refusals.py).
@pytest.mark.parametrize(
    "args, words",
    [
        (["--stack", "udp"], ["udp has no connection"]),
        (["--streams", "2"], ["one stream per connection", "raise --conns"]),
        (["--bytes", "1M"], ["--bytes does not apply to --pattern handshakes"]),
        (["--stack", "tcp", "--resume"], ["tcp has none"]),
        (["--size", "1M"], ["--size applies to --pattern download only"]),
    ],
)
def test_what_handshakes_cannot_do(args, words):
    refused(["--pattern", "handshakes", *args], errors.StackCannot.exit_code, words)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--period", "50us"], ["below 100us"]),
        (["--period", "2s", "--duration", "1s"], ["no connection would be due inside it"]),
    ],
)
def test_bad_handshake_values(args, words):
    refused(["--pattern", "handshakes", *args], errors.BadValue.exit_code, words)
