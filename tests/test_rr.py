# SPDX-License-Identifier: GPL-2.0-only
"""--pattern rr: requests on a fixed schedule, each answered and matched,
the delays from each request's due time, and what each request cost."""

import pytest
from hdrh.histogram import HdrHistogram

from conftest import needs_build, run_json
from test_bad_input import refused_run

pytestmark = pytest.mark.system

BAD_VALUE = 4


@needs_build
@pytest.mark.parametrize(
    "args, words",
    [
        (["--pattern", "rr", "--stack", "udp"], ["udp has none"]),
        (["--period", "5ms"], ["--period applies to --pattern rr only"]),
        (["--payload", "256"], ["--payload applies to --pattern rr only"]),
        (["--pattern", "rr", "--stack", "tcp", "--rr-streams", "one"], ["--rr-streams chooses QUIC"]),
        (["--pattern", "rr", "--stack", "quic", "--tcp-conns", "on-demand"], ["--tcp-conns chooses TCP"]),
        (["--pattern", "rr", "--period", "50us"], ["below 100us"]),
        (["--pattern", "rr", "--period", "20s", "--duration", "5s"], ["not shorter than the 5 s window"]),
        (["--pattern", "rr", "--period", "10s"], ["not shorter than the 10 s window"]),
        (["--pattern", "rr", "--payload", "8"], ["--payload 8 is not from 16"]),
        (["--pattern", "rr", "--bytes", "1M"], ["--bytes does not apply to --pattern rr"]),
        (["--pattern", "rr", "--streams", "2"], ["--streams does not apply to --pattern rr"]),
    ],
)
def test_bad_rr_options(runs_dir, args, words):
    refused_run(runs_dir, args, BAD_VALUE, words)


@needs_build
@pytest.mark.parametrize(
    "stack, extra",
    [("quic", []), ("quic", ["--rr-streams", "one"]), ("tcp", []), ("tcp-tls", ["--tcp-conns", "on-demand"])],
)
def test_requests_answered_on_schedule(runs_dir, stack, extra):
    period, payload, duration = 0.005, 256, 1.0
    rec = run_json(
        runs_dir,
        *("--stack", stack, "--pattern", "rr", "--period", "5ms", "--payload", str(payload)),
        *("--duration", "1s", "--warmup", "0.3s", "--sample-hz", "999" if stack == "tcp" else "0", *extra),
    )
    assert rec["status"] == "complete" and rec["verified"] is True
    r = rec["rr"]
    assert (r["period_s"], r["payload"]) == (period, payload)
    # Open loop: one request per period inside the window, every one answered.
    assert abs(r["requests_due"] - duration / period) <= 2
    assert r["requests_due"] - 2 <= r["responses"] <= r["requests_due"] + 1
    d = r["delay_ns"]
    assert 0 < d["min"] <= d["p5"] <= d["p50"] <= d["p95"] <= d["p99"] <= d["max"] * 1.001
    assert d["min"] <= d["mean"] <= d["max"]
    assert HdrHistogram.decode(r["histogram"].encode()).get_total_count() == r["responses"]
    assert r["jitter_percent"] >= 0
    whole = r["whole_run"]
    assert whole["requests_sent"] == whole["responses"] + whole["outstanding"]
    # Each request crossed the wire with its payload one way and its response the other.
    per = r["per_request"]
    assert per["cpu_s"]["client"] > 0 and per["cpu_s"]["server"] > 0
    assert per["wire"]["client_to_server"]["bytes"] >= payload
    assert per["wire"]["server_to_client"]["bytes"] >= payload
    assert per["syscalls"]["client"] >= 2  # at least a send and a receive
    if stack.startswith("tcp"):
        assert r["connections_opened"] >= 1
    # The stack samples per request: each side's graph over the requests answered.
    if stack == "tcp":
        f = r["flame_ns_per_request"]
        assert set(f) == {"client", "server", "others"} and f["client"]["total"] > 0
        assert sum(f["client"]["categories"].values()) == pytest.approx(f["client"]["total"])
    else:
        assert r["flame_ns_per_request"] is None
