# SPDX-License-Identifier: GPL-2.0-only
"""GSO and GRO on and off, as the probes see them: directions and
invariants on real transfers, never timings."""

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from qprof.describe import offload

from conftest import leftovers, needs_build, qprof, run_json
from test_bad_input import one_sentence, run_statuses

pytestmark = [pytest.mark.system, needs_build]
OFFLOAD_CONTRADICTION = 25
STACK_CANNOT = 38
SHORT = ("--duration", "0.5s", "--warmup", "0.5s", "--sample-hz", "0")


def tx(rec):
    return rec["offload"]["observed"]["evidence"]


def per_mb(count, rec):
    return count / (rec["bytes"] / 1e6)


# tcp with GSO on and off, twice each, interleaved: test_compare_writes_a_record_naming_all_its_runs
# asserts on the comparison, test_tcp_gso_off_sends_no_super_packets on its runs.
TCP_GSO = ("--stack", "tcp", "--vary", "gso=on,off", "--repeat", "2", "--duration", "1s", "--warmup", "0.5s")
TCP_GSO += ("--probes", "syscalls,packets")


def compared(comp) -> list:
    """Each configuration's records of a comparison, in its order."""
    cdir = Path(comp["path"])
    recs = [[] for _ in comp["configs"]]
    for x in comp["runs"]:
        recs[x["config"]].append(json.loads((cdir / x["path"] / "run.json").read_text()))
    return recs


def test_tcp_gso_off_sends_no_super_packets(shared):
    _, comp = shared("compare", *TCP_GSO)
    (on, _), (off, _) = compared(comp)
    for rec, want in ((on, "on"), (off, "off")):
        assert rec["offload"]["effective"]["gso"] == want
        assert rec["offload"]["observed"]["gso"] == want
        for side in ("client", "server"):  # ethtool reads back what was set, on both veths
            feats = rec["offload"]["device_features"][side]
            assert feats["tso"] == want and feats["gso"] == want
    assert tx(off)["client_tx_gso_skbs"] == 0
    assert tx(on)["client_tx_gso_share"] > 0.5
    # GRO was not set: the veths' receive side was not counted, so GRO was not seen (not "off").
    for rec in (on, off):
        assert rec["config"]["packets_rx"] is False and rec["offload"]["observed"]["gro"] is None
        assert "--packets-rx" in rec["offload"]["observed"]["gro_absent_reason"]
    # Without segmentation offload every MSS is its own skb through the stack.
    assert per_mb(tx(off)["client_tx_skbs"], off) > 5 * per_mb(tx(on)["client_tx_skbs"], on)
    # Same wire either way: packets per MB within a few percent.
    assert per_mb(tx(off)["client_tx_wire_packets"], off) == pytest.approx(
        per_mb(tx(on)["client_tx_wire_packets"], on), rel=0.05
    )


def test_tcp_gro_merges_what_gso_did_not(runs_dir):
    rec = run_json(runs_dir, "--stack", "tcp", "--gso", "off", "--gro", "on", *SHORT, "--probes", "syscalls,packets")
    ev = tx(rec)
    # A run that sets the veths' GRO counts their receive side by itself: that is where GRO shows.
    assert rec["config"]["packets_rx"] is True and rec["probes"]["packets"]["rx"] is True
    assert rec["offload"]["observed"]["gro_absent_reason"] is None
    assert rec["offload"]["observed"]["gro"] == "on" and ev["server_rx_gro_entries"] > 0
    assert rec["offload"]["device_features"]["server"]["gro"] == "on"
    # The receiver got fewer, larger skbs than the sender put on the wire.
    assert ev["server_rx_gso_skbs"] > 0
    dev = {d["dev"]: d for d in rec["probes"]["packets"]["window"]["devices"]}
    topo = rec["environment"]["topology"]
    server_rx = dev[f"{topo['server']['ifname']}@{topo['server']['netns']}"]["rx"]
    assert server_rx["skbs"] < ev["client_tx_skbs"] * 0.8


def test_compare_writes_a_record_naming_all_its_runs(shared):
    _, rec = shared("compare", *TCP_GSO)  # on stderr nothing at all
    assert rec["status"] == "complete" and rec["order"] == "interleaved"
    assert [c["label"] for c in rec["configs"]] == ["tcp gso=on", "tcp gso=off"]
    # Interleaved: A B A B.
    assert [x["config"] for x in rec["runs"]] == [0, 1, 0, 1]
    cdir = Path(rec["path"])
    saved = json.loads((cdir / "comparison.json").read_text())
    assert saved["id"] == rec["id"] and saved["status"] == "complete"
    for x in rec["runs"]:
        run = json.loads((cdir / x["path"] / "run.json").read_text())
        assert run["id"] == x["id"] and run["status"] == "complete"
        assert run["config"]["gso"] == rec["configs"][x["config"]]["overrides"]["gso"]
    m = rec["metrics"]
    assert [row["n"] for row in m["throughput_gbps"]] == [2, 2]
    assert m["throughput_gbps"][0]["ratio"] == 1.0
    # Direction: without GSO the client's skbs stop being super-packets.
    share = m["client_tx_gso_share"]
    assert share[0]["median"] > 0.5 and share[1]["median"] == 0
    # The differential graph of each side, the second configuration's
    # median run against the first's, at the figures their records hold;
    # a side is drawn exactly when the second run sampled it.
    fd = rec["flame_diff"]
    config_of = {x["id"]: x["config"] for x in rec["runs"]}
    assert (config_of[fd["a"]], config_of[fd["b"]]) == (0, 1)
    path_of = {x["id"]: x["path"] for x in rec["runs"]}
    a, b = (json.loads((cdir / path_of[i] / "run.json").read_text())["flame"] for i in (fd["a"], fd["b"]))
    assert set(fd["sides"]) == {"client", "server", "others"}
    for side, d in fd["sides"].items():
        assert d["a_ns_per_byte"] == pytest.approx(a["sides"][side]["ns_per_byte"]), side
        assert d["b_ns_per_byte"] == pytest.approx(b["sides"][side]["ns_per_byte"]), side
        assert (d["svg"] is not None) == (b["samples"][side] > 0), (side, d)
    # Both ends moved data on the CPU, so at least the client and server are drawn.
    drawn = [side for side, d in fd["sides"].items() if d["svg"] is not None]
    assert {"client", "server"} <= set(drawn), fd["sides"]
    for side in drawn:
        assert ET.parse(cdir / fd["sides"][side]["svg"]).getroot().tag.endswith("svg"), side


@pytest.mark.parametrize(
    "args",
    [
        ["--vary", "gso=on,off", "--gso", "on"],
        ["--vary", "gsx=1,2"],
        ["--stack", "tcp", "--topology", "loopback", "--vary", "gro=on,off"],
        ["--stack", "quic", "--vary", "send-mode=gso,sendmsg"],
    ],
)
def test_compare_bad_input_before_anything_runs(runs_dir, args):
    r = qprof("compare", *args, "--duration", "1s", runs_dir=runs_dir)
    assert r.returncode == (STACK_CANNOT if "send-mode=gso,sendmsg" in args else 4), r.stderr
    one_sentence(r.stderr)
    assert not runs_dir.exists()
    assert leftovers() == []


QUIC_PROBES = ("--probes", "syscalls,packets")
# quic with GSO on and off, twice each, interleaved, with the default
# instruments: test_check holds one configuration to the other, the tests
# here their first runs to what the probes saw.
QUIC_GSO = ("--stack", "quic", "--vary", "gso=on,off", "--repeat", "2", "--duration", "1s", "--warmup", "0.5s")


def torn_bytes(calls, datagram) -> int:
    """What the edges can tear from a receive call's count of messages: a
    call whose messages were added and its bytes not yet as an edge read
    them (probes/syscalls.bpf.c adds msgs_returned, then bytes), once at
    each edge (offload.EDGE_TORN_CALLS), and a recvmmsg call returns up to
    the vector it asked for (msgs_requested over its calls)."""
    vlen = math.ceil(calls["msgs_requested"] / (calls["calls"] - calls["errors"])) if calls.get("msgs_requested") else 1
    return offload.EDGE_TORN_CALLS * vlen * datagram


def test_quic_gso_off_sends_single_datagrams(shared):
    _, comp = shared("compare", *QUIC_GSO)
    (on, _), (off, _) = compared(comp)
    for rec in (on, off):
        assert rec["status"] == "complete" and rec["verified"] is True
    # Requested, msquic's own report and the probes agree.
    assert off["offload"]["effective"] == {"gso": "off", "gro": "off"}
    assert off["offload"]["observed"]["stack_reports"] == {"library": "msquic", "gso": "off", "gro": "off"}
    assert off["offload"]["observed"]["gso"] == "off" and tx(off)["client_tx_gso_skbs"] == 0
    assert on["offload"]["observed"]["gso"] == "on" and tx(on)["client_tx_gso_share"] > 0.9
    # The interposer failed msquic's start-up GSO send in each process, and only that.
    steered = off["offload"]["interposer"]
    for role in ("client", "server"):
        assert [(x["call"], x["action"]) for x in steered[role] if x["option"] == "UDP_SEGMENT"] == [("sendmsg", "EIO")]
    assert on["offload"]["interposer"] is None
    # msquic's fallback: sendmmsg of single datagrams instead of GSO sendmsg.
    calls_off, calls_on = off["syscalls"]["client"]["by_syscall"], on["syscalls"]["client"]["by_syscall"]
    assert calls_off["sendmmsg"]["msgs_returned"] > 10 * calls_off["sendmmsg"]["calls"]
    assert calls_off.get("sendmsg", {}).get("bytes", 0) < 0.01 * calls_off["sendmmsg"]["bytes"]
    assert calls_on["sendmsg"]["bytes"] / calls_on["sendmsg"]["calls"] > 10 * 1472
    # Each datagram now goes through the kernel's UDP send path on its own
    # (no GSO skb, above): many more skbs per MB, where with GSO on an skb
    # carried many packets. How many packets a MB takes is msquic's own
    # choice in each run (CI saw 6% more with GSO off), so the runs are not
    # held to each other's.
    assert per_mb(tx(off)["client_tx_skbs"], off) > 10 * per_mb(tx(on)["client_tx_skbs"], on)
    assert tx(on)["client_tx_wire_packets"] > 10 * tx(on)["client_tx_skbs"]
    # Syscalls per MB hardly change: the fallback still batches (sendmmsg).
    assert off["syscalls"]["client"]["datagrams_per_send_call"] > 10


def test_quic_gro_off_keeps_gso(runs_dir, shared):
    rec = run_json(runs_dir, "--stack", "quic", "--gro", "off", *SHORT, *QUIC_PROBES)
    obs = rec["offload"]["observed"]
    assert obs["stack_reports"] == {"library": "msquic", "gso": "on", "gro": "off"}
    assert obs["gso"] == "on" and obs["gro"] == "off"
    # Super-packets arrive, and the socket splits them back into datagrams
    # of at most the path's largest, but for what the edges tear (torn_bytes).
    ev, calls = tx(rec), rec["syscalls"]["server"]["by_syscall"]["recvmmsg"]
    most = ev["max_datagram_bytes"]
    assert calls["bytes"] <= calls["msgs_returned"] * most + torn_bytes(calls, most), (calls, ev)
    _, comp = shared("compare", *QUIC_GSO)
    (on, _), _ = compared(comp)
    assert tx(on)["recv_bytes_per_message"] > 10 * 1472


def test_interposer_not_taking_effect_is_an_error(runs_dir):
    r = qprof(
        "run",
        "--stack",
        "quic",
        "--gso",
        "off",
        "--inject-fault",
        "no-interposer",
        *SHORT,
        *QUIC_PROBES,
        runs_dir=runs_dir,
    )
    assert r.returncode == OFFLOAD_CONTRADICTION, r.stderr
    line = one_sentence(r.stderr)
    assert "super-packets" in line and "msquic reports it on" in line
    assert run_statuses(runs_dir) == ["incomplete"]
    saved = json.loads(next(runs_dir.glob("*/run.json")).read_text())
    assert saved["offload"]["observed"]["gso"] == "on"  # the evidence is kept
    assert leftovers() == []


def udp_run(runs_dir, *args):
    rec = run_json(runs_dir, "--stack", "udp", *args, *SHORT, "--probes", "syscalls,packets")
    assert rec["status"] == "complete" and rec["verified"] is True
    c, s = rec["workload"]["client"]["report"], rec["workload"]["server"]["report"]
    # Sequence numbers account for every datagram: received + lost = sent.
    assert s["end_reason"] == "end"
    assert s["datagrams_expected"] == c["datagrams_sent"]
    assert s["datagrams"] + s["lost"] == s["datagrams_expected"]
    assert s["duplicates"] == 0
    # A second instrument: every datagram lost by sequence number was
    # dropped by the receiver's kernel (its namespace's Udp InErrors, in skbs).
    drops = rec["crosscheck"]["server"]["udp_drops"]
    assert drops["own"] == s["lost"]
    assert drops["kernel"] == pytest.approx(s["lost"], rel=0.01, abs=6)  # 6: the end datagram's repeats
    # Over the whole run nothing arrives that was not sent (inside the
    # window the edges may split datagrams in flight either way).
    assert c["app_bytes"] >= s["app_bytes"] > 0 and rec["bytes"] > 0 and rec["bytes_sent"] > 0
    return rec


def test_udp_gso_carries_many_datagrams_per_call(runs_dir):
    rec = udp_run(runs_dir, "--send-mode", "gso")
    c = rec["syscalls"]["client"]
    assert c["bytes_per_send_call"] > 10 * 1472
    assert c["datagrams_per_send_call"] > 10
    assert tx(rec)["client_tx_gso_share"] > 0.99
    # GRO on (default): super-packets reach the socket whole.
    assert rec["workload"]["server"]["window"]["gro_segments"] > 0
    assert tx(rec)["recv_bytes_per_message"] > 10 * 1472


@pytest.mark.parametrize("mode", ["sendmsg", "sendmmsg"])
def test_udp_without_gso(runs_dir, mode):
    rec = udp_run(runs_dir, "--send-mode", mode, "--gro", "off")
    c = rec["syscalls"]["client"]
    assert tx(rec)["client_tx_gso_skbs"] == 0
    calls = c["by_syscall"]
    if mode == "sendmsg":
        # One datagram a call: each call that did not fail sent 1472 bytes
        # (but for a call torn from its bytes at each edge: EDGE_TORN_CALLS).
        sent = calls["sendmsg"]
        assert abs(sent["bytes"] - (sent["calls"] - sent["errors"]) * 1472) <= offload.EDGE_TORN_CALLS * 1472, sent
        assert "sendmmsg" not in calls
    else:
        batch = rec["workload"]["client"]["report"]["batch"]
        # batch messages asked of every call, but for a call torn from its
        # count at each edge (EDGE_TORN_CALLS).
        asked, made = calls["sendmmsg"]["msgs_requested"], calls["sendmmsg"]["calls"]
        assert asked % batch == 0 and abs(asked - batch * made) <= offload.EDGE_TORN_CALLS * batch, calls
        assert c["datagrams_per_send_call"] == pytest.approx(batch, rel=0.02)
    assert rec["workload"]["server"]["window"]["gro_segments"] == 0
    # Every datagram the server received is one message of 1472 bytes, but
    # for what the edges tear from a call (torn_bytes): the baseline read
    # 1471.83 bytes a message once, some twenty datagrams of a recvmmsg
    # counted at the end edge before its bytes.
    got = rec["syscalls"]["server"]["by_syscall"]["recvmmsg"]
    assert abs(got["bytes"] - got["msgs_returned"] * 1472) <= torn_bytes(got, 1472), got
    assert tx(rec)["recv_bytes_per_message"] == pytest.approx(got["bytes"] / got["msgs_returned"])


def test_compare_interrupted_leaves_nothing_and_says_so(runs_dir):
    import signal

    from conftest import started, wait_for_transfer

    with started(
        "compare", "--stack", "udp", "--vary", "gro=on,off", "--duration", "30s", "--sample-hz", "0", runs_dir=runs_dir
    ) as p:
        wait_for_transfer(runs_dir)  # its first run's two workloads are going
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert "interrupted" in one_sentence(err)
    assert run_statuses(runs_dir) == ["incomplete"]
    comparison = json.loads(next(runs_dir.glob("comparisons/*/comparison.json")).read_text())
    assert comparison["status"] == "incomplete" and "interrupted" in comparison["error"]
    assert comparison["runs"] == []  # the interrupted run never completed
    assert leftovers() == []


# --- the side that sends -----------------------------------------------------------
# GSO is the sending side's, GRO the receiving side's: the server's for
# --direction down and downloads, each side's for --direction both.


def sides(rec, key):
    return {role: s[key] for role, s in rec["offload"]["observed"]["sides"].items()}


def one_datagram_a_message(rec, role):
    """Every message the role received was one datagram, but for what the edges tear."""
    most = tx(rec)["max_datagram_bytes"]
    for name, calls in rec["syscalls"][role]["by_syscall"].items():
        if name in ("recvmmsg", "recvmsg", "recvfrom"):
            msgs = calls["msgs_returned"] if name == "recvmmsg" else calls["calls"] - calls["errors"]
            assert calls["bytes"] <= msgs * most + torn_bytes(calls, most), (name, calls)
    return True


def test_quic_down_gso_on_is_the_servers_super_packets(runs_dir):
    rec = run_json(runs_dir, "--stack", "quic", "--direction", "down", "--gso", "on", *SHORT, *QUIC_PROBES)
    assert rec["status"] == "complete" and rec["verified"] is True
    obs, ev = rec["offload"]["observed"], tx(rec)
    assert sides(rec, "sends") == {"client": False, "server": True}
    assert obs["gso"] == "on" and sides(rec, "gso") == {"client": None, "server": "on"}
    assert ev["server_tx_gso_share"] > 0.9 and "client_tx_gso_skbs" not in ev
    # The client took the server's super-packets whole.
    assert sides(rec, "gro") == {"client": "on", "server": None} and ev["recv_bytes_per_message"] > 10 * 1472
    assert obs["stack_reports"] == {"library": "msquic", "gso": "on", "gro": "on"}


DOWN = ("--direction", "down", *SHORT)
DOWNLOADS = ("--pattern", "download", "--size", "4M", "--count", "3", "--sample-hz", "0")


@pytest.mark.parametrize("stack,way", [("ngtcp2", DOWN), ("quinn", DOWNLOADS)])
def test_gro_off_on_a_library_that_takes_setsockopts_word(runs_dir, stack, way):
    """quinn and ngtcp2 believe UDP_GRO's setsockopt, which the interposer
    takes and ignores: their sockets receive single datagrams while they
    report GRO on, and the probes decide."""
    rec = run_json(runs_dir, "--stack", stack, *way, "--gro", "off", *QUIC_PROBES)
    assert rec["status"] == "complete" and rec["verified"] is True
    obs = rec["offload"]["observed"]
    # The server sends, with GSO: seen there (ngtcp2 --direction down read the client's once, and said off).
    assert obs["gso"] == "on" and tx(rec)["server_tx_gso_skbs"] > 0
    assert obs["gro"] == "off" and sides(rec, "gro")["client"] == "off" and one_datagram_a_message(rec, "client")
    steered = rec["offload"]["interposer"]["client"]
    assert ("setsockopt", "UDP_GRO", "ignored") in {(x["call"], x["option"], x["action"]) for x in steered}
    # The library's word is kept in its environment, and left out of the evidence.
    assert rec["environment"]["quic_library"]["recv_coalescing"]["client"] is True
    assert obs["stack_reports"] == {"library": stack, "gso": "on", "gro": None}


def test_tcp_down_gro_is_the_clients_veth(runs_dir):
    args = ("--stack", "tcp", "--direction", "down", "--gso", "off", "--gro", "on")
    rec = run_json(runs_dir, *args, *SHORT, *QUIC_PROBES)
    assert rec["status"] == "complete" and rec["verified"] is True
    ev = tx(rec)
    assert rec["offload"]["observed"]["gro"] == "on" and ev["client_rx_gro_entries"] > 0
    assert "server_rx_gro_entries" not in ev and ev["server_tx_gso_skbs"] == 0


@pytest.mark.parametrize(
    "stack,offloads", [("quic", ("--gso", "on", "--gro", "on")), ("tcp", ("--gso", "off", "--gro", "on"))]
)
def test_both_directions_check_each_side(runs_dir, stack, offloads):
    rec = run_json(runs_dir, "--stack", stack, "--direction", "both", *offloads, *SHORT, *QUIC_PROBES)
    assert rec["status"] == "complete" and rec["verified"] is True
    assert sides(rec, "sends") == sides(rec, "receives") == {"client": True, "server": True}
    want_gso = offloads[1]
    assert sides(rec, "gso") == {"client": want_gso, "server": want_gso}
    assert sides(rec, "gro") == {"client": "on", "server": "on"}
    ev = tx(rec)
    for role in ("client", "server"):
        if stack == "tcp":
            assert ev[f"{role}_tx_gso_skbs"] == 0 and ev[f"{role}_rx_gro_entries"] > 0, ev
        else:
            assert ev[f"{role}_tx_gso_share"] > 0.5 and ev[f"{role}_recv_bytes_per_message"] > 2 * 1472, ev
