# SPDX-License-Identifier: GPL-2.0-only
"""--pattern handshakes (secnetperf's hps, netperf's TCP_CRR): new
connections, --conns at once, each a handshake and a checked 8-byte answer; the
rate, the times, resumption as it happened, and the CPU per handshake."""

import json

import pytest

from conftest import HANDSHAKE_LEAVES, category_bracket, most_at_once, needs_build, qprof, run_json

pytestmark = pytest.mark.system


def handshakes_run(runs_dir, stack, *extra, conns=3):
    return run_json(
        runs_dir,
        *("--stack", stack, "--pattern", "handshakes", "--conns", str(conns)),
        *("--duration", "0.5s", "--warmup", "0.3s", "--sample-hz", "0", *extra),
    )


@needs_build
@pytest.mark.parametrize(
    "stack, resume",
    [
        ("quic", False),
        ("quic", True),
        ("ngtcp2", True),
        ("quiche", True),
        ("quinn", True),
        ("tcp", False),
        ("tcp-tls", False),
        ("tcp-tls", True),
    ],
)
def test_handshakes(runs_dir, stack, resume):
    """Invariants that hold at any speed: every connection the client
    opened completed its handshake and its answer (the run ends only once the
    open ones have), never more than --conns at once, the window's count
    and each role's own count at most --conns apart at each edge, each
    time in its order, resumption as the stacks reported it, and CPU per
    handshake on both sides. Every connection ends by the client's close
    after its answer, so the server's count of clean ends is the client's."""
    conns = 3
    rec = handshakes_run(runs_dir, stack, *(["--resume"] if resume else []), conns=conns)
    assert rec["status"] == "complete" and rec["verified"] is True
    h = rec["handshakes"]
    n = h["handshakes"]
    assert (h["conns"], h["resume"]) == (conns, resume) and n > 0
    whole = h["whole_run"]
    assert whole["handshakes"] == whole["connections_opened"] >= n
    # The window's handshakes against the client's own counter at the same
    # edges (it counts a connection as it closes, the window as its answer
    # came: at most --conns apart at each). The server's marks are read a
    # moment apart from the client's, so only its whole run is held to the
    # client's: every answer it gave, the client checked.
    assert abs(h["counted"]["client"] - n) <= 2 * conns, (h["counted"], n)
    kept = json.loads((runs_dir / rec["id"] / "measurement.json").read_text())
    assert kept["done"]["server"]["handshakes"] == whole["handshakes"]
    events = [e for e in kept["reports"]["client"] if e["event"] == "handshake"]
    assert len(events) == whole["handshakes"] and len({e["i"] for e in events}) == len(events)
    # Never more than --conns connections open at once: from connect to answer checked.
    most = most_at_once([(e["t_connect_ns"], e["t_connect_ns"] + e["complete_ns"]) for e in events])
    assert 1 <= most <= conns
    for e in events:
        assert 0 < e["handshake_ns"] <= e["complete_ns"], e
        if "tcp_handshake_ns" in e:
            assert e["tcp_handshake_ns"] <= e["handshake_ns"], e
        assert e["bytes"] == 8
    start, end = (kept["window"][x]["client_mark"]["t_ns"] for x in ("start", "end"))
    assert h["per_s"] == pytest.approx(n / ((end - start) / 1e9))
    t = h["handshake_ns"]
    assert 0 < t["min"] <= t["p50"] <= t["p99"] <= t["p99.99"] <= t["max"]
    assert h["complete_ns"]["p50"] >= t["p50"] * 0.999
    assert (h["tcp_handshake_ns"] is not None) == (stack == "tcp-tls")
    # Resumption as it happened: a stack without sessions has none to count.
    if stack == "tcp":
        assert h["resumed"] is None and whole["resumed"] is None
    elif not resume:
        assert h["resumed"] == 0 and h["early_data"] == 0
    else:
        if stack == "quinn":
            # rustls spends a ticket a connection, and a resumed connection's
            # new tickets come after its answer (the server sends them once the
            # client's Finished arrives; the answer went as 0.5-RTT data before),
            # so the client is gone before they arrive: the two tickets of a
            # full handshake buy two resumed ones. Every one resumed took 0-RTT.
            assert 0 < h["resumed"] < n and 0 < whole["resumed"] < whole["handshakes"], (h, whole)
            assert h["early_data"] == h["resumed"]
        else:
            # Each connection offers the last session the client kept; at most
            # the first --conns had none.
            assert whole["resumed"] >= whole["handshakes"] - conns and h["resumed"] >= n - conns
        if stack == "quic":
            assert h["early_data"] >= n - conns  # the request went as 0-RTT and was taken
        elif stack != "quinn":
            assert h["early_data"] == 0  # qprof offers no early data over TCP, nor on ngtcp2 or quiche
    cpu = h["per_handshake"]["cpu_s"]
    assert cpu["client"] > 0 and cpu["server"] > 0 and cpu["machine"] >= max(cpu["client"], cpu["server"])
    # As fast as it can: nothing offered, nothing waited, nothing late.
    assert h["period_s"] is None and h["offered_per_s"] is None and h["late"] is None and h["wait_ns"] is None
    assert all("wait_ns" not in e for e in events)


@needs_build
@pytest.mark.parametrize("stack", ["quic", "tcp"])
def test_handshakes_at_an_offered_rate(runs_dir, stack):
    """--period: connection k falls due at t0 + k x period and opens then,
    or once one of --conns closes. At any speed: no connection opens
    before it is due, each due one is opened in order, the window holds at
    most what fell due in it (plus those open at its start), every one the
    client opened completed, a late one is one that waited past the next
    one's due time, and the whole run opened no more than fell due.

    And the pacer keeps its schedule: where the run's own handshake times
    say the client had twice the capacity the period asks (--conns slots,
    each busy a connection's connect-to-answer time), what fell due was
    opened, but for the --conns open at an instant, one falling due as it
    is read, and those the client counted late (a stalled loop opens its
    backlog late, and says so). A pacer that opened one connection a
    second would leave the rest of the schedule unopened and uncounted.
    Where the machine could not keep up, the client must say it fell
    behind (late > 0)."""
    period_s, conns = 0.01, 2
    period_ns = round(period_s * 1e9)
    rec = handshakes_run(runs_dir, stack, "--period", "10ms", conns=conns)
    h = rec["handshakes"]
    n = h["handshakes"]
    assert h["period_s"] == period_s and h["offered_per_s"] == pytest.approx(1 / period_s) and n > 0
    kept = json.loads((runs_dir / rec["id"] / "measurement.json").read_text())
    marks = {x: kept["window"][x]["client_mark"] for x in ("start", "end")}
    start, end = marks["start"]["t_ns"], marks["end"]["t_ns"]
    assert n <= (end - start) / 1e9 / period_s + conns + 1
    whole = h["whole_run"]
    assert whole["handshakes"] == whole["connections_opened"] <= whole["connections_due"]
    events = sorted((e for e in kept["reports"]["client"] if e["event"] == "handshake"), key=lambda e: e["i"])
    assert [e["i"] for e in events] == list(range(whole["connections_opened"]))  # each due one, in order
    assert all(e["wait_ns"] >= 0 for e in events)
    # Due times are t0 + i x period: each connect call is its due time plus its wait.
    t0s = {e["t_connect_ns"] - e["wait_ns"] - e["i"] * period_ns for e in events}
    assert max(t0s) - min(t0s) <= 1, t0s
    t0 = min(t0s)
    assert whole["late"] == sum(1 for e in events if e["wait_ns"] > period_ns)
    # The record's window figures are its handshakes' own.
    window = [e for e in events if start <= e["t_connect_ns"] + e["complete_ns"] < end]
    assert len(window) == n and h["late"] == sum(1 for e in window if e["wait_ns"] > period_ns)
    assert h["wait_ns"]["min"] == min(e["wait_ns"] for e in window)
    assert h["wait_ns"]["max"] == max(e["wait_ns"] for e in window)
    # What fell due by each mark, by the schedule, against what the client had opened by then.
    due = {x: (m["t_ns"] - t0) // period_ns + 1 for x, m in marks.items()}
    behind = {x: due[x] - m["connections_opened"] for x, m in marks.items()}
    capacity_per_s = conns * 1e9 / (sum(e["complete_ns"] for e in events) / len(events))
    if capacity_per_s >= 2 / period_s:
        for x in marks:
            assert behind[x] <= conns + 1 + whole["late"], (x, behind, whole, capacity_per_s)
        assert n >= due["end"] - due["start"] - (conns + 1) - whole["late"], (n, due, whole)
    else:
        assert whole["late"] > 0, (whole, capacity_per_s)


@needs_build
def test_the_handshake_has_a_category_of_its_own(runs_dir):
    """The stack samples per handshake: msquic's key exchange, signatures
    and certificate work (quictls, named) land in "handshake" on both
    sides, at least as much of it as the side's own stacks hold with such
    work at their leaf (conftest.category_bracket, apart from the rules)."""
    rec = run_json(
        runs_dir,
        *("--stack", "quic", "--pattern", "handshakes", "--conns", "3", "--duration", "2s", "--warmup", "0.3s"),
        *("--sample-hz", "499"),
        allow=(r"incomplete|samples|weighted",),
    )
    f = rec["handshakes"]["flame_ns_per_handshake"]
    n = rec["handshakes"]["handshakes"]
    for side in ("client", "server"):
        least, _ = category_bracket(runs_dir / rec["id"], rec, side, HANDSHAKE_LEAVES)
        handshake_ns = f[side]["categories"]["handshake"] * n
        assert 0 < least <= handshake_ns * (1 + 1e-9), (side, least, handshake_ns)


@needs_build
def test_compare_carries_the_handshake_figures_and_diffs_per_handshake(runs_dir):
    """compare over the stacks, printed as a person reads it: each
    configuration's handshakes/s and CPU per handshake, and the flame
    diff drawn and printed per handshake."""
    r = qprof(
        *("compare", "--stacks", "quic,tcp", "--pattern", "handshakes", "--conns", "2"),
        *("-d", "0.5s", "--warmup", "0.3s", "--repeat", "1", "--detail"),
        runs_dir=runs_dir,
    )
    assert r.returncode == 0, r.stderr
    assert "us/handshake" in r.stdout and "flame diff client" in r.stdout, r.stdout
    (path,) = [p for p in (runs_dir / "comparisons").glob("*/comparison.json") if not p.parent.is_symlink()]
    comp = json.loads(path.read_text())
    for key in ("handshakes_per_s", "handshake_client_cpu_us", "handshake_server_cpu_us"):
        assert [row["n"] for row in comp["metrics"][key]] == [1, 1], key
    assert all("a_ns_per_handshake" in d for d in comp["flame_diff"]["sides"].values())
