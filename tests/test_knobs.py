# SPDX-License-Identifier: GPL-2.0-only
"""The knobs that isolate a cost (secnetperf's -encrypt, -pacing, -cc,
-ecn; the veth MTU): each set on both sides, and proved from what ran
rather than from what was asked. msquic's settings are read back from
each side's connection after the run; encryption's share from the flame
graph's crypto category; the MTU from the packets probe's wire sizes."""

import pytest

from qprof import errors
from qprof.describe import derive, options, plan, record

from conftest import needs_build, run_json
from refusals import refused
from test_exit_codes import failed_run
from test_run_flame import DRAWN, QUICK_ALONE

QUICK = ("--duration", "0.5s", "--warmup", "0.3s")
ETH_HEADER = 14


@pytest.mark.unit
@pytest.mark.parametrize(
    "kw, needle, error",
    [
        (
            {"stack": "tcp", "pacing": "off"},
            "--pacing is msquic's, for --stack quic; TCP's pacing is the kernel's",
            errors.StackCannot,
        ),
        ({"stack": "tcp-tls", "encrypt": "off"}, "compare tcp-tls against tcp", errors.StackCannot),
        ({"stack": "tcp", "quic_cc": "bbr"}, "TCP's congestion control is --tcp-cc", errors.StackCannot),
        ({"stack": "quic", "tcp_cc": "bbr"}, "use --quic-cc", errors.StackCannot),
        ({"stack": "quic", "server": "h", "mtu": 9000}, "a host's NIC keeps its own", errors.BadValue),
        ({"stack": "udp", "ecn": "on"}, "udp's datagrams get no ECN feedback", errors.StackCannot),
        (
            {"stack": "tcp", "ecn": "on", "topology": "loopback"},
            "runs in the host's, which qprof does not change",
            errors.BadValue,
        ),
        ({"stack": "tcp", "server": "h", "ecn": "on"}, "which a host's own does not have", errors.BadValue),
    ],
)
def test_knobs_of_another_stack_are_refused(kw, needle, error):
    # The stack cannot (38); a place or topology that cannot (4).
    with pytest.raises(error, match=needle):
        plan.resolve(options.RunOptions(**kw))


def crypto_ns_per_byte(rec, side):
    return rec["flame"]["sides"][side]["categories_ns_per_byte"].get("crypto", 0.0)


@pytest.mark.system
@needs_build
def test_encrypt_off_takes_crypto_away(runs_dir, shared):
    """The same quic upload with and without 1-RTT encryption: both sides'
    connections say what ran, and the crypto category of each side falls
    below 10% of the encrypted run's (the handshake's keys remain)."""
    _, on = shared("run", *DRAWN)
    off = run_json(runs_dir, *DRAWN, "--encrypt", "off")
    for side in ("client", "server"):
        assert on["transport"]["quic_settings"][side]["encryption"] is True
        assert off["transport"]["quic_settings"][side]["encryption"] is False
        assert crypto_ns_per_byte(on, side) > 0
        assert crypto_ns_per_byte(off, side) < 0.10 * crypto_ns_per_byte(on, side), side
    assert off["config"]["encrypt"] == "off" and off["verified"] is True


@pytest.mark.system
@needs_build
def test_msquic_knobs_are_what_ran(runs_dir, shared):
    rec = run_json(
        runs_dir, "--stack", "quic", "--pacing", "off", "--quic-cc", "bbr", "--ecn", "on", *QUICK, "--sample-hz", "0"
    )
    for side in ("client", "server"):
        ran = rec["transport"]["quic_settings"][side]
        assert ran["pacing"] is False and ran["congestion_control"] == "bbr" and ran["ecn"] is True
    assert rec["verified"] is True and rec["bytes"] > 0
    _, default = shared("run", *QUICK_ALONE)
    ran = default["transport"]["quic_settings"]["client"]
    assert ran["pacing"] is True and ran["congestion_control"] == "cubic" and ran["ecn"] is False


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("stack, ecn", [("tcp", "on"), ("tcp-tls", "on"), ("tcp", "off")])
def test_tcp_ecn_is_what_each_connection_negotiated(runs_dir, stack, ecn):
    """--ecn on a TCP stack sets net.ipv4.tcp_ecn in both namespaces; each
    connection's TCP_INFO, read at its close or the run's end, says whether
    it negotiated ECN, and all of both sides' must have (on) or none (off).
    Four closed-loop rr connections, so more than one is held to it."""
    rec = run_json(
        runs_dir, "--stack", stack, "--ecn", ecn, "--pattern", "rr", "--rr-mode", "closed", "--conns", "4", *QUICK
    )
    want = 1 if ecn == "on" else 0
    for side in ("client", "server"):
        assert rec["environment"]["topology"][side]["tcp_ecn"] == want
        got = rec["transport"]["tcp_ecn"][side]
        assert got == {"connections": 4, "ecn_connections": 4 * want}, got


@pytest.mark.unit
def test_a_tcp_ecn_that_did_not_take_is_not_recorded():
    record.prove_tcp_ecn("on", {s: {"connections": 3, "ecn_connections": 3} for s in ("client", "server")})
    record.prove_tcp_ecn("off", {s: {"connections": 3, "ecn_connections": 0} for s in ("client", "server")})
    for asked, server, words in [
        ("on", {"connections": 3, "ecn_connections": 2}, "2 of its 3 connections"),
        ("off", {"connections": 3, "ecn_connections": 1}, "1 of its 3 connections"),
        ("on", {"connections": 0, "ecn_connections": 0}, "0 of its 0 connections"),
        ("on", None, "says nothing negotiated"),
    ]:
        counts = {"client": {"connections": 3, "ecn_connections": 3 if asked == "on" else 0}, "server": server}
        with pytest.raises(errors.SettingUnproven, match=f"--ecn {asked} did not take effect on the server") as e:
            record.prove_tcp_ecn(asked, counts)
        assert words in str(e.value)


@pytest.mark.system
@needs_build
def test_encryption_left_on_by_one_side_is_not_recorded(runs_dir):
    """Only the client asks to turn encryption off (the hidden fault keeps
    the server's on): msquic negotiates it away, and the run says so."""
    code, line, rec = failed_run(
        runs_dir,
        "--stack",
        "quic",
        "--encrypt",
        "off",
        *QUICK,
        "--probes",
        "none",
        "--sample-hz",
        "0",
        "--inject-fault",
        "encrypt-one-side",
    )
    assert code == errors.SettingUnproven.exit_code
    assert "--encrypt off did not take effect on the client" in line and "encryption True" in line


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("stack", ["tcp", "quic"])
def test_jumbo_mtu(runs_dir, stack):
    """A 9000-byte veth MTU: TCP's wire packets grow past 1500 bytes;
    msquic 2.5.1 keeps its packets at 1500 (CXPLAT_MAX_MTU) and says so."""
    rec = run_json(runs_dir, "--stack", stack, "--mtu", "9000", *QUICK, "--sample-hz", "0")
    assert rec["environment"]["topology"]["mtu"] == 9000
    tx = derive.packets_devices(rec)["client"]["tx"]
    per_packet = tx["wire_bytes"] / tx["wire_packets"]  # a frame: the 14-byte Ethernet header too
    if stack == "tcp":
        assert per_packet > 1500 + ETH_HEADER, per_packet
    else:
        assert per_packet <= 1500 + ETH_HEADER, per_packet
        assert rec["transport"]["quic_settings"]["client"]["maximum_mtu"] == 1500
        assert rec["workload"]["client"]["window"]["conn_stats"]["send_path_mtu"] <= 1500


@pytest.mark.unit
def test_bad_knob_value():
    args = ["--stack", "quic", "--pacing", "maybe"]
    refused(args, errors.BadValue.exit_code, ["--pacing takes on or off, not 'maybe'"])
