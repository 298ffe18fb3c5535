# SPDX-License-Identifier: GPL-2.0-only
"""--mix: flows of several stacks through one bottleneck, each flow's
goodput, retransmissions and CPU, Jain's index, and the bottleneck's own
counters against what the flows verified."""

import json
from dataclasses import replace

import pytest

from qprof import errors
from qprof.collectors import mix, options

from conftest import needs_build, run_json
from test_bad_input import refused_run

BAD_MIX, UNKNOWN_STACK = errors.BadMix.exit_code, errors.UnknownStack.exit_code
# The most a flow's verified bytes can be of what it put on the wire: a
# full TCP segment carries 1448 bytes (MSS 1460 less timestamps) in a
# 1514-byte frame, which is what tbf counts; QUIC carries less. Over a
# window of a few seconds the receivers' socket buffers shift it: bytes
# that crossed before the window and were read inside it count, those
# still unread at its end do not (a fresh-clone run saw 1.066 for TLS and
# QUIC receivers over 2 s). So each bound has that slack.
TCP_PAYLOAD_OVER_FRAME = 1448 / 1514
UDP_PAYLOAD_OVER_FRAME = 1472 / 1514
BUFFERED = 0.1


@pytest.mark.unit
def test_parse_counts_patterns_and_ports():
    flows = mix.parse("quic, tcp-tls:2,tcp:1:rr", "bulk", 5000, cpus=2)
    assert [(f.index, f.stack, f.pattern, f.port) for f in flows] == [
        (1, "quic", "bulk", 5000),
        (2, "tcp-tls", "bulk", 5001),
        (3, "tcp-tls", "bulk", 5002),
        (4, "tcp", "rr", 5003),
    ]
    assert [f.pattern for f in mix.parse("quic:2", "rr", 1, cpus=1)] == ["rr", "rr"]


@pytest.mark.unit
@pytest.mark.parametrize(
    "text, cpus, port, error, words",
    [
        ("quic:0", 2, 4433, errors.BadMix, ["no flows"]),
        ("sctp:1", 2, 4433, errors.UnknownStack, ["sctp", "tcp-tls"]),
        ("quic=1", 2, 4433, errors.BadMix, ["not STACK:COUNT"]),
        ("quic:1:download", 2, 4433, errors.BadMix, ["bulk or rr"]),
        ("udp:1:rr", 2, 4433, errors.BadMix, ["udp has no connection"]),
        ("tcp:33", 2, 4433, errors.BadMix, ["33 flows", "(32"]),
        ("tcp:3", 2, 65534, errors.BadMix, ["past 65535"]),
    ],
)
def test_parse_refuses(text, cpus, port, error, words):
    with pytest.raises(error) as e:
        mix.parse(text, "bulk", port, cpus)
    for w in words:
        assert w in str(e.value)


@pytest.mark.unit
def test_flow_options_keep_what_applies_to_each_flow():
    opts = replace(options.RunOptions(), mix="quic:1,tcp-tls:1,tcp:1:rr", tls_version="1.2", period_s=0.02)
    flows = mix.check(opts, cpus=2)
    assert opts.probes == () and opts.sample_hz == 0
    quic, tls, rr = (mix.flow_options(opts, f) for f in flows)
    assert (quic.stack, quic.tls_version, quic.period_s, quic.mix, quic.port) == ("quic", None, None, None, 4433)
    assert (tls.stack, tls.tls_version, tls.pattern, tls.port) == ("tcp-tls", "1.2", "bulk", 4434)
    assert (rr.stack, rr.pattern, rr.period_s, rr.tls_version) == ("tcp", "rr", 0.02, None)


def _flow(index, stack, nbytes, retrans, oncpu, pattern="bulk"):
    """A flow that moved nbytes over one second by its server's clock."""
    marks = {
        "start": {"server": {"app_bytes": 1000, "t_ns": 0}, "client": {"t_ns": 0, "tcp_info": {"total_retrans": 5}}},
        "end": {
            "server": {"app_bytes": 1000 + nbytes, "t_ns": 1_000_000_000},
            "client": {"t_ns": 1_000_000_000, "tcp_info": {"total_retrans": 5 + retrans}},
        },
    }
    if stack == "quic":
        for edge, lost in (("start", 0), ("end", retrans)):
            marks[edge]["client"] = {"t_ns": 0, "conn_stats": {"send_suspected_lost_packets": lost}}
    zero = {"user_s": 0, "system_s": 0, "oncpu_s": 0}
    return mix.FlowMeasurement(
        flow={"index": index, "stack": stack, "pattern": pattern, "port": 4432 + index},
        options={},
        pids={"client": 1, "server": 2},
        connected={},
        marks=marks,
        cpu={"start": {"client": zero, "server": zero}, "end": {"client": {**zero, "oncpu_s": oncpu}, "server": zero}},
        done={"client": {}, "server": {}},
    )


def _system(busy_s, idle_s):
    return {
        "user_s": busy_s,
        "nice_s": 0,
        "system_s": 0,
        "idle_s": idle_s,
        "iowait_s": 0,
        "irq_s": 0,
        "softirq_s": 0,
        "steal_s": 0,
    }


@pytest.mark.unit
def test_describe_shares_jain_and_the_bottleneck():
    # One flow at a quarter of the other: Jain's index is (4 + 1)^2 / (2 (16 + 1)) = 25/34.
    m = mix.MixMeasurement(
        options={"mix": "tcp:1,quic:1", "link": None},
        environment={},
        measured_at="",
        edges={
            "start": {"t_ns": 0, "system": _system(0, 0), "qdiscs": None},
            "end": {"t_ns": 1_000_000_000, "system": _system(1.5, 0.5), "qdiscs": None},
        },
        flows=[_flow(1, "tcp", 4_000_000, 7, 0.2), _flow(2, "quic", 1_000_000, 3, 0.4)],
    )
    m = mix.MixMeasurement.from_json(m.to_json())  # what the run directory keeps gives the same record
    rec = mix.describe(m)
    tcp, quic = rec["mix"]["flows"]
    assert rec["mix"]["jain_index"] == pytest.approx(25 / 34)
    assert (tcp["share"], quic["share"]) == (pytest.approx(0.8), pytest.approx(0.2))
    assert (tcp["goodput_mbps"], quic["goodput_mbps"]) == (pytest.approx(32.0), pytest.approx(8.0))
    assert (tcp["retransmits"], quic["retransmits"]) == (7, 3)
    assert "tcpi_total_retrans" in tcp["retransmits_source"] and "SuspectedLost" in quic["retransmits_source"]
    assert tcp["ns_per_byte"]["client"] == pytest.approx(0.2e9 / 4e6) and tcp["ns_per_byte"]["server"] == 0
    assert rec["bytes"] == 5_000_000 and rec["throughput_gbps"] == pytest.approx(0.04)
    assert rec["mix"]["system_cpu"]["utilisation"] == pytest.approx(0.75)
    assert rec["mix"]["by_stack"]["tcp"]["flows"] == 1 and rec["mix"]["by_stack"]["tcp"]["goodput_mbps_stdev"] is None
    assert rec["mix"]["bottleneck"] is None and rec["link"] is None


@pytest.mark.system
@needs_build
@pytest.mark.parametrize(
    "args, code, words",
    [
        (["--mix", "quic:0"], BAD_MIX, ["no flows"]),
        (["--mix", "sctp:1"], UNKNOWN_STACK, ["unknown stack 'sctp'"]),
        (["--mix", "quic:1,tcp:1", "--pattern", "download"], BAD_MIX, ["drop --pattern download"]),
        (["--mix", "quic:1", "--stack", "tcp"], BAD_MIX, ["drop --stack"]),
        (["--mix", "quic:1", "--bytes", "1M"], BAD_MIX, ["drop --bytes"]),
        (["--mix", "quic:1", "--streams", "2"], BAD_MIX, ["drop --streams"]),
        (["--mix", "tcp:1000"], BAD_MIX, ["1000 flows"]),
        (["--mix", "quic:1,tcp:1", "--tls", "1.2"], BAD_MIX, ["--tls applies to tcp-tls, tcp-ktls flows"]),
        (
            ["--mix", "quic:1:rr,tcp:1", "--tcp-conns", "one"],
            BAD_MIX,
            ["--tcp-conns applies to rr tcp, tcp-tls, tcp-ktls flows"],
        ),
        (["--mix", "quic:1,tcp:1", "--period", "5ms"], BAD_MIX, ["add :rr"]),
        (["--mix", "quic:1", "--link", "rate=fast"], errors.BadLink.exit_code, ["rate"]),
        (["--mix", "quic:1,tcp:1", "--tcp-cc", "vegas"], errors.KernelFeatureMissing.exit_code, ["'vegas'"]),
        (["--mix", "quic:1", "--tcp-cc", "cubic"], BAD_MIX, ["--tcp-cc applies to tcp"]),
    ],
)
def test_bad_mix(runs_dir, args, code, words):
    refused_run(runs_dir, args, code, words)


@pytest.mark.system
@needs_build
def test_two_identical_flows_share_the_bottleneck(runs_dir):
    # Two UDP senders offer the same load to one drop-tail queue, so each
    # gets half; TCP's shares over a short window depend on who lost first.
    rec = run_json(runs_dir, "--mix", "udp:2", "--link", "rate=20mbit", "--duration", "2s")
    assert rec["status"] == "complete" and rec["stack"] == "mix"
    m = rec["mix"]
    flows = m["flows"]
    assert [f["stack"] for f in flows] == ["udp", "udp"] and len({f["port"] for f in flows}) == 2
    assert m["jain_index"] > 0.95, [f["goodput_mbps"] for f in flows]
    assert sum(f["share"] for f in flows) == pytest.approx(1.0)
    # What the flows verified crossed the bottleneck, each datagram in a
    # 1514-byte frame; nothing is sent twice.
    b = m["bottleneck"]
    assert b["qdisc"] == "tbf" and b["flows_bytes"] == rec["bytes"] == sum(f["bytes"] for f in flows)
    assert 0.9 < b["flows_bytes_over_wire_bytes"] <= UDP_PAYLOAD_OVER_FRAME + BUFFERED
    assert b["drops"] > 0 and b["utilisation"] >= 0.9
    assert rec["link"]["saturation"]["limited_by"] == "link"
    assert all(f["retransmits"] is None and f["retransmits_source"] is None for f in flows)


@pytest.mark.system
@needs_build
def test_tcp_flows_bytes_add_up_to_the_bottleneck(runs_dir):
    rec = run_json(runs_dir, "--mix", "tcp:2", "--link", "rate=20mbit", "--tcp-cc", "reno", "--duration", "2s")
    m = rec["mix"]
    flows = m["flows"]
    assert all(f["bytes"] > 0 and f["tcp_congestion_control"] == "reno" for f in flows)
    b = m["bottleneck"]
    assert b["flows_bytes"] == rec["bytes"] == sum(f["bytes"] for f in flows)
    assert 0.8 < b["flows_bytes_over_wire_bytes"] <= TCP_PAYLOAD_OVER_FRAME + BUFFERED
    # What the bottleneck dropped inside the window, someone sent again.
    if b["drops"]:
        assert sum(f["retransmits"] for f in flows) > 0
    for f in flows:
        assert f["oncpu_s"]["client"] > 0 and f["oncpu_s"]["server"] > 0
        assert f["ns_per_byte"]["server"] == pytest.approx(f["oncpu_s"]["server"] * 1e9 / f["bytes"])
    assert 1 / 2 <= m["jain_index"] <= 1


@pytest.mark.system
@needs_build
def test_a_request_flow_beside_bulk_flows_of_two_stacks(runs_dir):
    rec = run_json(
        runs_dir,
        *("--mix", "quic:1,tcp-tls:1,quic:1:rr", "--period", "20ms", "--payload", "512"),
        *("--link", "rate=20mbit,queue=100", "--duration", "2s"),
    )
    m = rec["mix"]
    quic, tls, rr = m["flows"]
    assert (quic["stack"], tls["stack"], rr["stack"], rr["pattern"]) == ("quic", "tcp-tls", "quic", "rr")
    assert quic["bytes"] > 0 and tls["bytes"] > 0 and rr["bytes"] > 0
    assert rr["share"] is None and set(m["by_stack"]) == {"quic", "tcp-tls"}
    assert "SuspectedLost" in quic["retransmits_source"] and "tcpi" in tls["retransmits_source"]
    r = rr["rr"]
    assert (r["period_s"], r["payload"]) == (0.02, 512)
    assert abs(r["requests_due"] - 2 / 0.02) <= 2
    assert r["requests_due"] - 2 <= r["responses"] <= r["requests_due"] + 1
    assert 0 < r["delay_ns"]["p50"] <= r["delay_ns"]["max"] * 1.001
    whole = r["whole_run"]
    assert whole["requests_sent"] == whole["responses"] + whole["outstanding"]
    b = m["bottleneck"]
    assert b["flows_bytes"] == rec["bytes"] == quic["bytes"] + tls["bytes"] + rr["bytes"]
    assert 0.75 < b["flows_bytes_over_wire_bytes"] < 1 + BUFFERED
    kept = json.loads((runs_dir / rec["id"] / "measurement.json").read_text())
    assert [f["flow"]["stack"] for f in kept["flows"]] == ["quic", "tcp-tls", "quic"]
