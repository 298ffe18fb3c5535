# SPDX-License-Identifier: GPL-2.0-only
"""--pattern download: a new connection per download, every byte checked,
and each download's times, bytes and CPU in the record."""

import pytest

from conftest import needs_build, run_json
from refusals import refused

BAD_VALUE, STACK_CANNOT = 4, 38


@pytest.mark.unit
@pytest.mark.parametrize(
    "args, words",
    [
        (["--pattern", "download", "--duration", "5s"], ["--duration does not apply", "--count downloads"]),
        (["--pattern", "download", "--bytes", "1M"], ["--bytes does not apply"]),
        (["--pattern", "download", "--warmup", "1s"], ["--warmup does not apply"]),
        (["--pattern", "download", "--streams", "2"], ["one stream per connection"]),
        (["--resume"], ["--resume applies to --pattern download and handshakes"]),
        (["--size", "1M"], ["--size applies to --pattern download only"]),
        (["--count", "3"], ["--count applies to --pattern download only"]),
        (["--pattern", "download", "--stack", "udp"], ["udp has no connection"]),
        (["--pattern", "download", "--stack", "tcp", "--resume"], ["tcp has none"]),
    ],
)
def test_bad_download_options(args, words):
    # What the pattern cannot do, though well formed (docs/exit-codes.md).
    refused(args, STACK_CANNOT, words)


@pytest.mark.unit
def test_count_zero_is_a_value_out_of_range():
    refused(["--pattern", "download", "--count", "0"], BAD_VALUE, ["--count 0 is not from 1 to 100000"])


def download_run(runs_dir, stack, *args, size="200K", count=3, timeout=180):
    rec = run_json(
        runs_dir,
        *("--stack", stack, "--pattern", "download", "--size", size, "--count", str(count), "--sample-hz", "0"),
        *args,
        timeout=timeout,
    )
    assert rec["status"] == "complete" and rec["verified"] is True
    return rec


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("stack", ["quic", "tcp", "tcp-tls"])
def test_downloads_are_each_verified_and_timed(runs_dir, stack):
    size, count = 200 * 1024, 3
    rec = download_run(runs_dir, stack)
    d = rec["downloads"]
    assert (d["size"], d["count"], d["served"]) == (size, count, count)
    assert d["server_retransmits"] == 0
    # Every byte went server to client and was checked there.
    assert rec["bytes"] == rec["bytes_total"] == size * count
    assert [e["i"] for e in d["each"]] == list(range(count))
    for e in d["each"]:
        assert e["bytes"] == size
        assert 0 < e["handshake_s"] <= e["first_byte_s"] <= e["complete_s"], e
        if stack == "tcp-tls":  # TCP's handshake, then TLS's on top
            assert 0 < e["tcp_handshake_s"] < e["handshake_s"], e
        else:  # QUIC's handshake is its own; plain TCP's is the TCP one
            assert e["tcp_handshake_s"] is None
        # The data came in at least one packet per MTU; the server sent them
        # (its own count, at least as many: handshakes and control too).
        assert e["client"]["packets_received"] >= size / 1500, e
        assert e["server"]["packets_sent"] >= e["client"]["packets_received"] * 0.95, e
        assert e["resumed"] in (None, False)  # no --resume: nothing resumed
        assert e["server"]["retransmits"] == 0  # a loss-free veth
    # Percentiles are ordered and bracket the downloads.
    for name, p in d["percentiles"].items():
        if p is None:
            assert name == "tcp_handshake_s" and stack != "tcp-tls"
            continue
        vals = [p[f"p{q}"] for q in (5, 25, 50, 75, 95)]
        assert vals == sorted(vals)
        each = [e[name] for e in d["each"]]
        assert min(each) <= vals[0] and vals[-1] <= max(each)
    # The packets probe: each download's data crossed the wire server to
    # client (headers on top), requests and ACKs the other way.
    wire = d["wire_per_download"]
    assert size < wire["server_to_client"]["bytes"] < size * 1.15
    assert wire["client_to_server"]["bytes"] < wire["server_to_client"]["bytes"] / 10
    cpu = d["cpu_per_download_s"]
    assert cpu["client"] > 0 and cpu["server"] > 0 and cpu["all"] >= cpu["client"] + cpu["server"]
    # The server sent: GSO, if seen, is the server's.
    ev = rec["offload"]["observed"]["evidence"]
    assert not any(k.startswith("client_tx") for k in ev), ev


@pytest.mark.system
@needs_build
def test_a_download_at_a_rate_takes_at_least_size_over_rate(runs_dir):
    """tbf at 20 Mbit/s (this host has it): each download of S bytes takes
    at least S / B, and the link was the limit."""
    size, rate = 256 * 1024, 20_000_000
    rec = download_run(runs_dir, "tcp-tls", "--link", "rate=20mbit", size="256K", count=3)
    for e in rec["downloads"]["each"]:
        assert e["complete_s"] >= size * 8 / rate, e
    down = rec["link"]["directions"]["server_to_client"]
    assert down["window"]["tbf"]["bytes"] >= 3 * size


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("stack", ["quic", "quinn", "ngtcp2", "quiche", "quic-go", "tquic", "tcp-tls"])
def test_resume_is_reported_as_it_happened(runs_dir, stack):
    """The first connection is full; the later ones resume, and say so on
    both sides (QUIC: msquic's SessionResumed and 0-RTT on each side;
    quinn: 0-RTT taken, quinn-proto's accepted_0rtt, on each side;
    quic-go: crypto/tls's DidResume and quic-go's Used0RTT on each side;
    ngtcp2: GnuTLS's gnutls_session_is_resumed, no 0-RTT; quiche:
    quiche_conn_is_resumed, BoringSSL's ticket, no 0-RTT; tquic:
    quic_conn_is_resumed, BoringSSL's ticket, no 0-RTT; TLS:
    SSL_session_reused). The record counts what the stacks reported."""
    rec = download_run(runs_dir, stack, "--resume", count=4)
    d = rec["downloads"]
    assert d["resume"] is True
    each = d["each"]
    assert each[0]["resumed"] is False and all(e["resumed"] is True for e in each[1:]), each
    assert [e["server"]["resumed"] for e in each] == [e["resumed"] for e in each]
    assert d["resumed"] == 3
    if stack in ("quic", "quinn", "quic-go"):
        # 0-RTT: the request went early; the server saw it so too.
        assert each[0]["early_data"] is False
        assert [e["server"]["early_data"] for e in each] == [e["early_data"] for e in each]
        assert d["early_data"] == sum(e["early_data"] for e in each)
    else:
        assert d["early_data"] == 0  # qprof offers no early data over TCP, nor on ngtcp2, quiche or tquic
