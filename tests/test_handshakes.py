# SPDX-License-Identifier: GPL-2.0-only
"""--pattern handshakes (secnetperf's hps, netperf's TCP_CRR): new
connections, --conns at once, each a handshake and a checked echo; the
rate, the times, resumption as it happened, and the CPU per handshake."""

import json

import pytest

from conftest import needs_build, qprof, run_json
from test_bad_input import refused_run

pytestmark = pytest.mark.system

BAD_VALUE = 4


@needs_build
@pytest.mark.parametrize(
    "args, words",
    [
        (["--stack", "udp"], ["udp has none"]),
        (["--streams", "2"], ["one stream per connection", "raise --conns"]),
        (["--bytes", "1M"], ["--bytes does not apply to --pattern handshakes"]),
        (["--stack", "tcp", "--resume"], ["tcp has none"]),
        (["--period", "50us"], ["below 100us"]),
        (["--period", "2s", "--duration", "1s"], ["no connection would be due inside it"]),
        (["--size", "1M"], ["--size applies to --pattern download only"]),
    ],
)
def test_bad_handshake_options(runs_dir, args, words):
    refused_run(runs_dir, ["--pattern", "handshakes", *args], BAD_VALUE, words)


def handshakes_run(runs_dir, stack, *extra, conns=3):
    return run_json(
        runs_dir,
        *("--stack", stack, "--pattern", "handshakes", "--conns", str(conns)),
        *("--duration", "1s", "--warmup", "0.3s", "--sample-hz", "0", *extra),
    )


@needs_build
@pytest.mark.parametrize(
    "stack, resume",
    [("quic", False), ("quic", True), ("ngtcp2", True), ("tcp", False), ("tcp-tls", False), ("tcp-tls", True)],
)
def test_handshakes(runs_dir, stack, resume):
    """Invariants that hold at any speed: every connection the client
    opened completed its handshake and echo (the run ends only once the
    open ones have), never more than --conns at once, the window's count
    and each role's own count at most --conns apart at each edge, each
    time in its order, resumption as the stacks reported it, and CPU per
    handshake on both sides. Every connection ends by the client's close
    after its echo, so the server's count of clean ends is the client's."""
    conns = 3
    rec = handshakes_run(runs_dir, stack, *(["--resume"] if resume else []), conns=conns)
    assert rec["status"] == "complete" and rec["verified"] is True
    h = rec["handshakes"]
    n = h["handshakes"]
    assert (h["conns"], h["resume"]) == (conns, resume) and n > 0
    whole = h["whole_run"]
    assert whole["handshakes"] == whole["connections_opened"] >= n
    # The window's handshakes against the client's own counter at the same
    # edges (it counts a connection as it closes, the window as its echo
    # came: at most --conns apart at each). The server's marks are read a
    # moment apart from the client's, so only its whole run is held to the
    # client's: every echo it gave, the client checked.
    assert abs(h["counted"]["client"] - n) <= 2 * conns, (h["counted"], n)
    kept = json.loads((runs_dir / rec["id"] / "measurement.json").read_text())
    assert kept["done"]["server"]["handshakes"] == whole["handshakes"]
    events = [e for e in kept["reports"]["client"] if e["event"] == "handshake"]
    assert len(events) == whole["handshakes"] and len({e["i"] for e in events}) == len(events)
    # Never more than --conns connections open at once: from connect to echo checked.
    edges = sorted(
        [(e["t_connect_ns"], 1) for e in events] + [(e["t_connect_ns"] + e["complete_ns"], -1) for e in events]
    )
    level = most = 0
    for _, step in edges:
        level += step
        most = max(most, level)
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
        # Each connection offers the last session the client kept; at most
        # the first --conns had none.
        assert whole["resumed"] >= whole["handshakes"] - conns and h["resumed"] >= n - conns
        if stack == "quic":
            assert h["early_data"] >= n - conns  # the request went as 0-RTT and was taken
        else:
            assert h["early_data"] == 0  # qprof offers no early data over TCP, nor on ngtcp2
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
    before it is due, the window holds at most what fell due in it (plus
    those open at its start), every one the client opened completed, a
    late one is one that waited past the next one's due time, and the
    whole run opened no more than fell due."""
    period_s, conns = 0.01, 2
    rec = handshakes_run(runs_dir, stack, "--period", "10ms", conns=conns)
    h = rec["handshakes"]
    n = h["handshakes"]
    assert h["period_s"] == period_s and h["offered_per_s"] == pytest.approx(1 / period_s) and n > 0
    kept = json.loads((runs_dir / rec["id"] / "measurement.json").read_text())
    start, end = (kept["window"][x]["client_mark"]["t_ns"] for x in ("start", "end"))
    assert n <= (end - start) / 1e9 / period_s + conns + 1
    whole = h["whole_run"]
    assert whole["handshakes"] == whole["connections_opened"] <= whole["connections_due"]
    events = sorted((e for e in kept["reports"]["client"] if e["event"] == "handshake"), key=lambda e: e["i"])
    assert len(events) == whole["handshakes"]
    assert all(e["wait_ns"] >= 0 for e in events)
    # Due times are t0 + i x period: each connect call is its due time plus its wait.
    t0 = {e["t_connect_ns"] - e["wait_ns"] - e["i"] * round(period_s * 1e9) for e in events}
    assert max(t0) - min(t0) <= 1, t0
    assert whole["late"] == sum(1 for e in events if e["wait_ns"] > period_s * 1e9)
    assert h["late"] <= n and h["wait_ns"]["min"] >= 0 and h["wait_ns"]["max"] <= h["wait_ns"]["max"]


@needs_build
def test_the_handshake_has_a_category_of_its_own(runs_dir):
    """The stack samples per handshake: each side's categories sum to its
    total, and msquic's key exchange, signatures and certificate work
    (quictls, named) land in "handshake" on both sides."""
    rec = run_json(
        runs_dir,
        *("--stack", "quic", "--pattern", "handshakes", "--conns", "3", "--duration", "2s", "--warmup", "0.3s"),
        *("--sample-hz", "499"),
    )
    f = rec["handshakes"]["flame_ns_per_handshake"]
    for side in ("client", "server"):
        cats = f[side]["categories"]
        assert sum(cats.values()) == pytest.approx(f[side]["total"])
        assert cats["handshake"] > 0, (side, cats)


@needs_build
def test_compare_carries_the_handshake_figures_and_diffs_per_handshake(runs_dir):
    """compare over the stacks, printed as a person reads it: each
    configuration's handshakes/s and CPU per handshake, and the flame
    diff drawn and printed per handshake."""
    r = qprof(
        *("compare", "--stacks", "quic,tcp", "--pattern", "handshakes", "--conns", "2"),
        *("-d", "1s", "--warmup", "0.3s", "--repeat", "1"),
        runs_dir=runs_dir,
    )
    assert r.returncode == 0, r.stderr
    assert "us/handshake" in r.stdout and "flame diff client" in r.stdout, r.stdout
    (path,) = [p for p in (runs_dir / "comparisons").glob("*/comparison.json") if not p.parent.is_symlink()]
    comp = json.loads(path.read_text())
    for key in ("handshakes_per_s", "handshake_client_cpu_us", "handshake_server_cpu_us"):
        assert [row["n"] for row in comp["metrics"][key]] == [1, 1], key
    assert all("a_ns_per_handshake" in d for d in comp["flame_diff"]["sides"].values())
