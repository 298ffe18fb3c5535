# SPDX-License-Identifier: GPL-2.0-only
"""bulk --conns: many connections, each with its --streams on quic (as
secnetperf -conns), a connection per stream on TCP stacks (iperf3 -P).
Each connection's goodput and Jain's index over them come from the
receiver's per-stream counts grouped by the connection each stream went
on; the record's arithmetic on chosen counts (unit), and real runs whose
connections add up to what the receiver verified (system)."""

import pytest

from qprof import errors
from qprof.describe import options, plan
from qprof.describe.patterns import bulk
from qprof.describe.window import Edge, Window

from conftest import needs_build, run_json
from test_streams import jain

QUICK = ("-d", "0.5s", "--warmup", "0.3s", "--sample-hz", "0")


def edge(t_ns, server=None, client=None):
    def mark(sb):
        m = {"t_ns": t_ns, "app_bytes": sum(sb or [0])}
        if sb is not None:
            m["stream_bytes"] = sb
        return m

    return Edge(t_ns, None, None, None, mark(server), mark(client), {}, {}, {})


@pytest.mark.unit
def test_streams_are_grouped_by_their_connection():
    # Six streams on three connections, in the server's accepted order.
    w = Window(edge(0, [0] * 6), edge(10**9, [100, 200, 300, 400, 500, 600]))
    done = {"server": {"stream_conn": [0, 1, 2, 2, 1, 0]}, "client": {}}
    c = bulk.connections_record(w, done, 6)
    assert c["bytes"] == [700, 700, 700]
    assert c["jain_index"] == pytest.approx(1.0) and c["min_share"] == pytest.approx(1 / 3)
    assert c["gbps"] == [pytest.approx(700 * 8 / 1e9)] * 3


@pytest.mark.unit
def test_both_ways_the_servers_connections_come_first():
    # Two streams each way, one connection each way and side: up streams 0-1, down 2-3.
    w = Window(edge(0, [0, 0, 0, 0], [0, 0, 0, 0]), edge(10**9, [10, 30, 0, 0], [0, 0, 5, 15]), receiver="both")
    done = {"server": {"stream_conn": [0, 0, 1, 1]}, "client": {"stream_conn": [0, 0, 1, 1]}}
    c = bulk.connections_record(w, done, 2)
    assert c["bytes"] == [40, 20]
    assert c["jain_index"] == pytest.approx(jain([40, 20]))


@pytest.mark.unit
def test_no_mapping_is_absent():
    w = Window(edge(0, [0]), edge(10**9, [10]))
    assert bulk.connections_record(w, {"server": {}, "client": {}}, 1) is None


@pytest.mark.unit
@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"pattern": "download", "conns": 2}, "--conns applies to --pattern bulk, handshakes and rr"),
        ({"stack": "udp", "conns": 2}, "udp sends one flow"),
        ({"conns": 8, "streams": 9}, "is 72 streams, more than the 64"),
        ({"conns": 20, "streams": 2, "direction": "both"}, "x 2 ways is 80 streams"),
        ({"mix": "quic:1,tcp:1", "link": "rate=100mbit", "conns": 2}, "drop --conns"),
    ],
)
def test_refused_in_one_sentence(kw, needle):
    with pytest.raises(errors.QprofError, match=needle):
        plan.resolve(options.RunOptions(**kw), cpus=8)


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("stack, conns, streams, want", [("quic", 3, 2, 3), ("tcp", 2, 2, 4)])
def test_each_connection_moves_and_they_add_up(runs_dir, stack, conns, streams, want):
    """quic: three connections of two streams; tcp: two by two, four
    connections. Every connection moved bytes (they are separate flows, not
    streams msquic serves first come, first served), their sum is the
    receiver's verified bytes (each stream read at a slightly different
    instant, hence the tolerance), and the index is theirs."""
    rec = run_json(runs_dir, "--stack", stack, "--conns", str(conns), "-n", str(streams), *QUICK)
    c = rec["connections"]
    assert len(c["bytes"]) == want and all(b > 0 for b in c["bytes"]), c["bytes"]
    assert sum(c["bytes"]) == pytest.approx(rec["bytes"], rel=0.02)
    assert c["jain_index"] == pytest.approx(jain(c["bytes"]))
    assert len(rec["streams"]["bytes"]) == conns * streams
    assert rec["config"]["conns"] == conns


@pytest.mark.system
@needs_build
def test_connections_both_ways(runs_dir):
    """Two quic connections each way: the up ones' bytes are the up direction's."""
    rec = run_json(runs_dir, "--stack", "quic", "--conns", "2", "--direction", "both", *QUICK)
    c, d = rec["connections"], rec["direction"]
    assert len(c["bytes"]) == 4 and all(b > 0 for b in c["bytes"]), c["bytes"]
    assert sum(c["bytes"][:2]) == pytest.approx(d["up"]["bytes"], rel=0.02)
    assert sum(c["bytes"][2:]) == pytest.approx(d["down"]["bytes"], rel=0.02)
