# SPDX-License-Identifier: GPL-2.0-only
"""describe/patterns/rr.py on made-up requests: the window, open-loop delays from
the due time, the HDR percentiles' bounded error, the seed's jitter; and
the rr and --app options `qprof run` refuses before anything runs."""

import base64

import pytest
from hdrh.histogram import HdrHistogram

from qprof import errors
from qprof.describe.patterns import rr

from refusals import refused

pytestmark = pytest.mark.unit

BAD_VALUE, STACK_CANNOT = errors.BadValue.exit_code, errors.StackCannot.exit_code

PERIOD = 0.005


def events(delays_ms, lag_ms=0.0, t0=10**9):
    out = []
    for k, d in enumerate(delays_ms):
        due = t0 + int(k * PERIOD * 1e9)
        sent = due + int(lag_ms * 1e6)
        out.append({"event": "rr", "seq": k, "due_ns": due, "sent_ns": sent, "answered_ns": due + int(d * 1e6)})
    return out


REC = {
    "cpu": {"client": {"oncpu_schedstat_s": 0.1}, "server": {"oncpu_schedstat_s": 0.05}, "system": {"total_s": 0.2}},
    "syscalls": None,
    "workload": {"client": {"window": {"app_bytes": 25_600}}, "server": {"window": {"app_bytes": 25_600}}},
}
DONE = {"requests_sent": 120, "responses": 118, "late": 3, "outstanding": 2, "connections_opened": 3}


def test_window_holds_the_requests_due_inside_it():
    ev = events([1.0] * 100)
    start, end = ev[10]["due_ns"], ev[60]["due_ns"]
    got = rr.describe(ev, start, end, PERIOD, 256, DONE, REC, None)
    assert got["responses"] == 50 and got["requests_due"] == 50
    assert got["delay_ns"]["p50"] == pytest.approx(1e6, rel=1e-3)


@pytest.mark.parametrize("phase", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_requests_due_are_the_schedules_due_times_in_the_window(phase):
    """99.5 periods hold 99 or 100 due times by where the schedule falls
    against the window's start: requests_due counts them, so no window
    answers more requests than fell due in it (`qprof show` printed "100 of
    99 requests due in the window answered")."""
    period_ns = round(PERIOD * 1e9)
    ev = events([1.0] * 300)
    start = ev[10]["due_ns"] - round(phase * period_ns)
    end = start + 99 * period_ns + period_ns // 2
    got = rr.describe(ev, start, end, PERIOD, 256, DONE, REC, None)
    due = sum(start <= e["due_ns"] < end for e in ev)
    assert got["requests_due"] == due == got["responses"] and due in (99, 100)


def test_requests_due_only_while_the_schedule_ran():
    """A window reaching before t0 or past the client's last due request
    (its done's requests_due) counts only the requests that fell due."""
    ev = events([1.0] * 40)
    period_ns = round(PERIOD * 1e9)
    start, end = ev[0]["due_ns"] - 10 * period_ns, ev[-1]["due_ns"] + 10 * period_ns
    got = rr.describe(ev, start, end, PERIOD, 256, dict(DONE, requests_due=40), REC, None)
    assert got["requests_due"] == got["responses"] == 40


def test_delay_runs_from_the_due_time():
    """A client that sent every request 3 ms late: the delay includes those
    3 ms (no coordinated omission), and the lag is reported."""
    ev = events([4.0] * 50, lag_ms=3.0)
    got = rr.describe(ev, ev[0]["due_ns"], ev[-1]["due_ns"] + 1, PERIOD, 256, DONE, REC, None)
    assert got["delay_ns"]["min"] == 4_000_000
    assert got["send_lag_ns_max"] == 3_000_000


def test_percentiles_within_the_histograms_error_and_it_round_trips():
    delays = [0.1 + 0.01 * k for k in range(1000)]  # 0.1 .. 10.09 ms
    ev = events(delays)
    got = rr.describe(ev, ev[0]["due_ns"], ev[-1]["due_ns"] + 1, PERIOD, 256, DONE, REC, None)
    exact = sorted(int(d * 1e6) for d in delays)
    for p in (5, 50, 95, 99):
        want = exact[int(len(exact) * p / 100) - 1]
        assert got["delay_ns"][f"p{p}"] == pytest.approx(want, rel=2e-3, abs=20_000)
    assert got["delay_ns"]["max"] == exact[-1]
    # Late: answered after the next request was due (5 ms).
    assert got["late"] == sum(1 for d in delays if d > 5.0)
    back = HdrHistogram.decode(got["histogram"].encode())
    assert back.get_total_count() == 1000
    base64.b64decode(got["histogram"])  # it is the library's base64 text


@pytest.mark.parametrize("base_us", [20, 65, 407, 467, 5_000])
def test_percentiles_within_a_thousandth_at_every_scale_and_never_past_the_max(base_us):
    """Sub-millisecond delays too (secnetperf's latency p50 is 65 us): each
    percentile within 0.1% of the exact one with no absolute slack, and
    none above the largest delay (a bucket's top can be; CI once saw
    p99.99 above max)."""
    delays = [base_us * 1e-3 * (1 + 0.0137 * k) for k in range(997)]
    ev = events(delays)
    got = rr.describe(ev, ev[0]["due_ns"], ev[-1]["due_ns"] + 1, PERIOD, 256, DONE, REC, None)
    exact = sorted(int(d * 1e6) for d in delays)
    d = got["delay_ns"]
    for p in rr.PERCENTILES:
        want = exact[max(1, int(p * len(exact) / 100 + 0.5)) - 1]  # HdrHistogram's rank: rounded
        assert d[f"p{p:g}"] == pytest.approx(want, rel=1e-3)
        assert d["min"] <= d[f"p{p:g}"] <= d["max"] == exact[-1]


def test_jitter_is_the_seeds():
    # Delays alternate 1 and 3 ms: every step is 2 ms, the mean is 2 ms: 100%.
    ev = events([1.0, 3.0] * 20)
    got = rr.describe(ev, ev[0]["due_ns"], ev[-1]["due_ns"] + 1, PERIOD, 256, DONE, REC, None)
    assert got["jitter_percent"] == pytest.approx(100.0)
    ev = events([2.0] * 20)
    assert rr.describe(ev, ev[0]["due_ns"], ev[-1]["due_ns"] + 1, PERIOD, 256, DONE, REC, None)[
        "jitter_percent"
    ] == pytest.approx(0.0)


def test_costs_per_request_and_connections_per_thousand():
    ev = events([1.0] * 100)
    wire = {"client_to_server": {"wire_bytes": 40_000, "wire_packets": 200}}
    got = rr.describe(ev, ev[0]["due_ns"], ev[-1]["due_ns"] + 1, PERIOD, 256, DONE, REC, wire)
    cpu = {"client": pytest.approx(1e-3), "server": pytest.approx(5e-4), "machine": pytest.approx(2e-3)}
    assert got["per_request"]["cpu_s"] == cpu
    assert got["per_request"]["wire"]["client_to_server"] == {"bytes": 400.0, "packets": 2.0}
    assert got["connections_per_1000_requests"] == pytest.approx(25.0)
    assert got["whole_run"]["outstanding"] == 2


def test_no_answer_in_the_window_is_absent_not_zero():
    ev = events([1.0] * 10)
    got = rr.describe(ev, 0, 1, PERIOD, 256, DONE, REC, None)
    assert got["responses"] == 0 and got["delay_ns"]["p50"] is None and got["jitter_percent"] is None
    assert got["per_request"] is None and got["histogram"] is None


def encoded(delays_ms):
    """As a record holds rr.histogram."""
    return rr.histogram([int(d * 1e6) for d in delays_ms]).encode().decode()


def test_delay_cdf_steps_at_each_delay_by_its_share():
    """One point per distinct delay, at the top of its bucket (within the
    histogram's 0.1%, never below the delay), rising by the share of the
    delays that fell there, to 1."""
    delays = [1.0, 2.0, 2.0, 5.0, 40.0]
    got = rr.delay_cdf_ms(encoded(delays))
    assert [f for _, f in got] == pytest.approx([0.2, 0.6, 0.8, 1.0])
    for (ms, _), want in zip(got, sorted(set(delays))):
        assert want <= ms <= want * 1.001


def test_delay_cdf_pools_histograms_as_one():
    """A comparison's runs pooled: the CDF of all their delays together,
    which neither run's alone is."""
    a, b = [1.0, 1.5, 9.0], [2.0, 2.0, 3.0, 30.0]
    pooled = rr.delay_cdf_ms(encoded(a), encoded(b))
    assert pooled == rr.delay_cdf_ms(encoded(a + b))
    assert pooled != rr.delay_cdf_ms(encoded(a)) and pooled != rr.delay_cdf_ms(encoded(b))
    assert pooled[-1][1] == 1.0 and len(pooled) == len(set(a + b))


def test_delay_cdf_of_no_delays_is_empty():
    assert rr.delay_cdf_ms() == []
    assert rr.delay_cdf_ms(rr.histogram([]).encode().decode()) == []


def test_a_closed_loop_has_no_schedule_and_counts_its_connections():
    """No period: a closed loop. Each request is due when it went, so none
    is late, none is due by a schedule and no send lags; the rate is the
    window's answers over its length; the answers on each connection (the
    events' conn) give Jain's index."""
    ev = events([0.2] * 90)
    for e in ev:
        e["sent_ns"] = e["due_ns"]
        e["conn"] = e["seq"] % 3 if e["seq"] < 60 else 0
    start, end = ev[0]["due_ns"], ev[-1]["due_ns"] + 1
    got = rr.describe(ev, start, end, None, 256, DONE, REC, None, in_flight=6)
    assert (got["mode"], got["period_s"], got["in_flight"]) == ("closed", None, 6)
    assert got["requests_due"] is None and got["late"] is None and got["send_lag_ns_max"] is None
    assert got["whole_run"]["late"] is None and got["whole_run"]["responses"] == DONE["responses"]
    assert got["requests_per_s"] == pytest.approx(90 / ((end - start) / 1e9))
    c = got["connections"]
    assert c["responses"] == [50, 20, 20] and c["min_share"] == pytest.approx(20 / 90)
    assert c["jain_index"] == pytest.approx(90**2 / (3 * (50**2 + 2 * 20**2)))
    # Open: the schedule's figures, and no connection block for one connection.
    got = rr.describe(ev, start, end, PERIOD, 256, {**DONE, "connections_opened": 1}, REC, None)
    assert got["mode"] == "open" and got["in_flight"] is None and got["late"] == 0 and got["connections"] is None


def _app(tx_framing, tx_messages):
    return {"protocol": "h1", "tx_framing_bytes": tx_framing, "tx_messages": tx_messages}


def test_data_volume_splits_the_wire_by_layer():
    """Per answered request, each way: the payload as its receiver checked
    it, the framing as the sender's --app layer counted it, and the rest of
    what the sender's device sent is the transport's."""
    rec = {
        "workload": {
            "client": {"window": {"app_bytes": 100 * 128, "app": _app(100 * 104, 100)}},
            "server": {"window": {"app_bytes": 100 * 128, "app": _app(100 * 80, 100)}},
        }
    }
    wire = {
        "client_to_server": {"wire_bytes": 100 * 350, "wire_packets": 150},
        "server_to_client": {"wire_bytes": 100 * 300, "wire_packets": 120},
    }
    got = rr.data_volume(rec, 100, wire)
    assert got["app"] == "h1"
    up, down = got["client_to_server"], got["server_to_client"]
    assert (up["payload_bytes"], up["framing_bytes"], up["transport_bytes"]) == (128, 104, 350 - 128 - 104)
    assert (down["payload_bytes"], down["framing_bytes"], down["transport_bytes"]) == (128, 80, 300 - 128 - 80)
    for way in (up, down):
        assert way["payload_bytes"] + way["framing_bytes"] + way["transport_bytes"] == way["wire_bytes"]
        assert way["message_bytes"] == way["payload_bytes"] + way["framing_bytes"]
    assert up["wire_packets"] == 1.5 and up["messages"] == 1.0
    assert up["ack_only_packets"] is None  # neither transport counted


def test_data_volume_without_an_app_or_a_wire():
    """Bare messages have no framing; without the packets probe the wire and
    the transport's share are not measured (None), the payload still is."""
    got = rr.data_volume(REC, 200, None)
    assert got["app"] is None
    for way in ("client_to_server", "server_to_client"):
        assert got[way]["payload_bytes"] == 128 and got[way]["framing_bytes"] == 0
        assert got[way]["wire_bytes"] is None and got[way]["transport_bytes"] is None
    assert rr.data_volume(REC, 0, None) is None


def test_ack_only_packets_by_the_transports_own_count():
    """TCP: TCP_INFO's segments out less its data segments, summed over the
    connections; msquic: its datagrams less its ack-eliciting packets, and
    only with one connection (its statistics are one connection's)."""
    tcp = {"app_bytes": 1280, "tcp_info": {"segs_out": 30, "data_segs_out": 10}}
    quic = {"app_bytes": 1280, "perf_counters": {"udp_send": 25}, "conn_stats": {"send_retransmittable_packets": 10}}
    for window, conns, want in ((tcp, 3, 2.0), (quic, 1, 1.5), (quic, 2, None)):
        rec = {"workload": {"client": {"window": window}, "server": {"window": window}}}
        got = rr.data_volume(rec, 10, None, conns)
        assert got["client_to_server"]["ack_only_packets"] == want


# `qprof run` refuses these before anything runs (tests/refusals.py): rr's
# options, and --app's HTTP over its transport.
@pytest.mark.parametrize(
    "args, words, code",
    [
        (["--pattern", "rr", "--stack", "udp"], ["udp has no connection"], STACK_CANNOT),
        (["--period", "5ms"], ["--period applies to --pattern handshakes and rr"], STACK_CANNOT),
        (["--payload", "256"], ["--payload applies to --pattern rr only"], STACK_CANNOT),
        (["--pattern", "rr", "--stack", "tcp", "--rr-streams", "one"], ["--rr-streams chooses QUIC"], STACK_CANNOT),
        (["--pattern", "rr", "--stack", "quic", "--tcp-conns", "on-demand"], ["--tcp-conns chooses TCP"], STACK_CANNOT),
        (["--pattern", "rr", "--period", "50us"], ["below 100us"], BAD_VALUE),
        (["--pattern", "rr", "--period", "20s", "--duration", "5s"], ["not shorter than the 5 s window"], BAD_VALUE),
        (["--pattern", "rr", "--period", "10s"], ["not shorter than the 10 s window"], BAD_VALUE),
        (["--pattern", "rr", "--payload", "8"], ["--payload 8 is not from 16"], BAD_VALUE),
        (["--pattern", "rr", "--bytes", "1M"], ["--bytes does not apply to --pattern rr"], STACK_CANNOT),
        (
            ["--pattern", "rr", "--streams", "2"],
            ["--streams sets the requests in flight", "--rr-mode closed"],
            STACK_CANNOT,
        ),
        (["--rr-mode", "closed"], ["--rr-mode applies to --pattern rr only"], STACK_CANNOT),
        (
            ["--pattern", "rr", "--rr-mode", "closed", "--period", "1ms"],
            ["--period sets an open loop's schedule"],
            STACK_CANNOT,
        ),
        (["--pattern", "rr", "--rr-mode", "shut"], ["--rr-mode takes open or closed, not 'shut'"], BAD_VALUE),
        (
            ["--pattern", "rr", "--stack", "tcp", "--rr-mode", "closed", "--tcp-conns", "on-demand"],
            ["--tcp-conns on-demand opens connections as an open loop's"],
            STACK_CANNOT,
        ),
        (
            ["--pattern", "rr", "--stack", "tcp", "--tcp-conns", "on-demand", "--conns", "2"],
            ["drop --conns"],
            BAD_VALUE,
        ),
        (
            ["--pattern", "rr", "--stack", "tcp", "--rr-mode", "closed", "--conns", "16", "--streams", "9"],
            ["is 144 TCP connections", "more than the 128"],
            BAD_VALUE,
        ),
    ],
)
def test_bad_rr_options(args, words, code):
    refused(args, code, words)


@pytest.mark.parametrize(
    "args, words, code",
    [
        (["--stack", "tcp-tls", "--app", "h1"], ["--app applies to --pattern rr"], STACK_CANNOT),
        (["--stack", "quic", "--pattern", "rr", "--app", "h1"], ["--app h1", "--app h3"], STACK_CANNOT),
        (["--stack", "quic", "--pattern", "rr", "--app", "h2"], ["--app h2", "--app h3"], STACK_CANNOT),
        (["--stack", "tcp", "--pattern", "rr", "--app", "h3"], ["--app h3", "--app h1"], STACK_CANNOT),
        (
            ["--stack", "tcp-tls", "--pattern", "rr", "--app", "h2", "--tcp-conns", "on-demand"],
            ["--tcp-conns"],
            BAD_VALUE,
        ),
        (["--stack", "quinn", "--pattern", "rr", "--app", "h2"], ["--app h2", "--app h3"], STACK_CANNOT),
        (["--stack", "quic", "--pattern", "rr", "--app", "h3", "--rr-streams", "one"], ["--rr-streams one"], BAD_VALUE),
        (["--stack", "tcp", "--pattern", "rr", "--app", "h9"], ["--app", "h9"], BAD_VALUE),
    ],
)
def test_app_refused_where_it_cannot_run(args, words, code):
    refused(args, code, words)
