# SPDX-License-Identifier: GPL-2.0-only
"""GSO and GRO on made-up records: who sends is whoever the direction
says, each side's evidence is its own, and a contradiction names the side
and the library; what a library cannot do is refused before the run."""

import pytest

from qprof import errors
from qprof.describe import offload

from refusals import refused

pytestmark = pytest.mark.unit
DATAGRAM = 1472
TOPOLOGY = {
    "kind": "netns",
    "client": {"ifname": "veth-c", "netns": "qprof-c"},
    "server": {"ifname": "veth-s", "netns": "qprof-s"},
}


def device(side, tx_gso_skbs, rx_gro_entries=None, tcp=False):
    """A side's packets-probe window: 100 skbs sent, tx_gso_skbs of them super-packets."""
    skbs = "tcp_skbs" if tcp else "udp_skbs"
    d = {
        "dev": f"veth-{side[0]}@qprof-{side[0]}",
        "role": side,
        "tx": {skbs: 100, "gso_skbs": tx_gso_skbs, "wire_packets": 100 + 20 * tx_gso_skbs},
        "rx": None,
    }
    if rx_gro_entries is not None:
        d["rx"] = {"gro_entry": rx_gro_entries, "gso_skbs": 0}
    return d


def receives(per_message):
    """A side's syscall figures: 1000 messages of per_message bytes each."""
    return {
        "datagrams_per_send_call": 1.0,
        "bytes_per_send_call": 100.0,
        "by_syscall": {
            "recvmmsg": {"bytes": int(1000 * per_message), "msgs_returned": 1000, "calls": 100, "errors": 0}
        },
    }


def record(stack, direction=None, pattern="bulk", gro=None, client=None, server=None, syscalls=None, says=None):
    """A record with what observe reads; says: the library's own word, role -> (gso, gro) as booleans."""
    rec = {
        "stack": stack,
        "config": {"pattern": pattern, "direction": direction, "gro": gro},
        "probes": {"packets": {"status": "present", "window": {"devices": [d for d in (client, server) if d]}}},
        "environment": {"topology": TOPOLOGY},
        "syscalls": syscalls or {},
    }
    if says is not None:
        rec["environment"]["quic_library"] = {
            "send_segmentation": {role: v[0] for role, v in says.items()},
            "recv_coalescing": {role: v[1] for role, v in says.items()},
        }
    return rec


ONE_DGRAM, COALESCED = 1400.0, 60000.0


def test_direction_down_reads_the_servers_sends_and_the_clients_receives():
    # ngtcp2 --direction down: the server sent super-packets, the client's
    # uploads of acks none. Before sides, observe read the client's sends
    # and recorded gso "off" (issue 39, defect 2).
    rec = record(
        "ngtcp2",
        "down",
        client=device("client", 0),
        server=device("server", 70),
        syscalls={"client": receives(COALESCED), "server": receives(100.0)},
        says={"client": (True, True), "server": (True, True)},
    )
    obs = offload.observe(rec, DATAGRAM)
    assert obs["gso"] == "on" and obs["gro"] == "on"
    assert obs["sides"]["server"]["sends"] and not obs["sides"]["server"]["receives"]
    assert obs["sides"]["server"]["gso"] == "on" and obs["sides"]["client"]["gso"] is None
    assert obs["sides"]["client"]["gro"] == "on" and obs["sides"]["client"]["gro_applies"] is True
    assert obs["evidence"]["server_tx_gso_skbs"] == 70 and "client_tx_gso_skbs" not in obs["evidence"]
    assert obs["evidence"]["recv_bytes_per_message"] == COALESCED
    assert obs["stack_reports"] == {"library": "ngtcp2", "gso": "on", "gro": "on"}
    assert offload.contradictions({"gso": "on", "gro": "on"}, obs) == []
    # --gso off that the server did not honour is caught on the server.
    found = offload.contradictions({"gso": "off", "gro": None}, obs)
    assert found == [
        "GSO was set off but the server sent 70 super-packets",
        "GSO was set off but the server's ngtcp2 reports it on",
    ]


def test_download_pattern_is_the_server_sending_too():
    rec = record("quic", pattern="download", client=device("client", 0), server=device("server", 5))
    obs = offload.observe(rec, DATAGRAM)
    assert obs["gso"] == "on" and obs["sides"]["server"]["sends"] and obs["evidence"]["server_tx_gso_skbs"] == 5


def test_direction_both_checks_each_side_and_names_it():
    rec = record(
        "quic",
        "both",
        client=device("client", 60),
        server=device("server", 0),
        syscalls={"client": receives(ONE_DGRAM), "server": receives(COALESCED)},
        says={"client": (True, False), "server": (False, True)},
    )
    obs = offload.observe(rec, DATAGRAM)
    # One side seen on is enough for the run's own gso/gro to say on; the sides say who.
    assert obs["gso"] == "on" and obs["gro"] == "on"
    assert {r: s["gso"] for r, s in obs["sides"].items()} == {"client": "on", "server": "off"}
    assert {r: s["gro"] for r, s in obs["sides"].items()} == {"client": "off", "server": "on"}
    # Two ways at once: the syscall figures are keyed by side.
    ev = obs["evidence"]
    assert ev["client_recv_bytes_per_message"] == ONE_DGRAM and ev["server_recv_bytes_per_message"] == COALESCED
    assert "recv_bytes_per_message" not in ev and "client_datagrams_per_send_call" in ev
    # The client got no super-packets to coalesce (the server sent none): its GRO off is no contradiction.
    assert obs["sides"]["client"]["gro_applies"] is False
    assert offload.contradictions({"gso": "on", "gro": None}, obs) == [
        "GSO was set on but the server sent no super-packets",
        "GSO was set on but the server's msquic reports it off",
    ]
    assert offload.contradictions({"gso": None, "gro": "off"}, obs) == [
        "GRO was set off but the server received 60000 bytes per message, more than one datagram",
        "GRO was set off but the server's msquic reports it on",
    ]


def test_gso_on_is_held_where_a_side_had_more_than_a_datagram_to_send():
    # rr of small requests and large responses, --gso on: the client's
    # requests fit a datagram each, so it sends no super-packets and is not
    # held to them; the server's responses are, and so is it.
    def rr(server_gso_skbs, **cfg):
        rec = record("quic", pattern="rr", client=device("client", 0), server=device("server", server_gso_skbs))
        rec["config"].update(cfg)
        return offload.observe(rec, DATAGRAM)

    obs = rr(30, request=100, response=64000)
    assert obs["sides"]["client"]["gso_applies"] is False and obs["sides"]["server"]["gso_applies"] is True
    assert offload.contradictions({"gso": "on", "gro": None}, obs) == []
    assert offload.contradictions({"gso": "on", "gro": None}, rr(0, request=100, response=64000)) == [
        "GSO was set on but the server sent no super-packets"
    ]
    # Messages of a datagram or less each way: GSO has nothing to do on either side.
    assert offload.contradictions({"gso": "on", "gro": None}, rr(0, payload=512)) == []
    # Handshakes never; video's server (its segments), not its client.
    hs = record("quic", pattern="handshakes", client=device("client", 0), server=device("server", 0))
    assert offload.contradictions({"gso": "on", "gro": None}, offload.observe(hs, DATAGRAM)) == []
    video = record("quic", pattern="video", client=device("client", 0), server=device("server", 0))
    assert offload.contradictions({"gso": "on", "gro": None}, offload.observe(video, DATAGRAM)) == [
        "GSO was set on but the server sent no super-packets"
    ]


def test_tcp_direction_down_reads_the_clients_veth_for_gro():
    # tcp --direction down --gro on: the client's veth merged what the server sent.
    rec = record("tcp", "down", client=device("client", 0, 40, tcp=True), server=device("server", 0, 0, tcp=True))
    obs = offload.observe(rec, DATAGRAM)
    assert obs["gro"] == "on" and obs["evidence"]["client_rx_gro_entries"] == 40
    assert "server_rx_gro_entries" not in obs["evidence"] and obs["gro_absent_reason"] is None
    assert offload.contradictions({"gso": None, "gro": "on"}, obs) == []
    assert offload.contradictions({"gso": None, "gro": "off"}, obs) == [
        "GRO was set off but the client's veth ran GRO 40 times"
    ]


@pytest.mark.parametrize("stack", ["quinn", "ngtcp2"])
def test_a_library_whose_gro_word_is_setsockopts_is_not_taken_under_gro_off(stack):
    # The interposer takes UDP_GRO's setsockopt and ignores it: the library
    # says on, the receiver got one datagram a message (issue 39, defect 5).
    says = {"client": (True, True), "server": (True, True)}
    rec = record(stack, gro="off", server=device("server", 0), syscalls={"server": receives(ONE_DGRAM)}, says=says)
    obs = offload.observe(rec, DATAGRAM)
    assert obs["gro"] == "off" and obs["stack_reports"] == {"library": stack, "gso": "on", "gro": None}
    assert offload.contradictions({"gso": None, "gro": "off"}, obs) == []
    # Where the socket did coalesce, the probes say so, whatever the library said.
    rec["syscalls"]["server"] = receives(COALESCED)
    assert offload.contradictions({"gso": None, "gro": "off"}, offload.observe(rec, DATAGRAM)) == [
        "GRO was set off but the server received 60000 bytes per message, more than one datagram"
    ]


def test_a_library_that_tests_gro_by_a_receive_is_held_to_its_word():
    says = {"client": (True, False), "server": (True, True)}
    rec = record("quiche", gro="off", syscalls={"server": receives(ONE_DGRAM)}, says=says)
    obs = offload.observe(rec, DATAGRAM)
    assert offload.contradictions({"gso": None, "gro": "off"}, obs) == [
        "GRO was set off but the server's quiche reports it on"
    ]


def test_what_a_library_cannot_do_is_refused_before_the_run():
    # msquic tests GRO only after a GSO send: its row says so.
    refused(["--stack", "quic", "--gso", "off", "--gro", "on"], errors.StackCannot.exit_code, ["msquic", "--gso off"])
    refused(["--stack", "quinn", "--send-mode", "gso"], errors.StackCannot.exit_code, ["--stack udp only"])
    # quic-go never asks for GRO (its row's gro_word "none"): --gro on cannot be honoured, off is planned.
    refused(["--stack", "quic-go", "--gro", "on"], errors.StackCannot.exit_code, ["quic-go never asks", "drop it"])
    assert offload.plan("quic-go", "netns", "off", "off").env["server"] == {"QPROF_GSO": "off", "QPROF_GRO": "off"}
    # The others' GSO and GRO are independent: each way round is planned.
    for stack in ("quinn", "ngtcp2", "quiche"):
        for gso, gro in (("off", "on"), ("on", "off")):
            assert offload.plan(stack, "netns", gso, gro).effective == {"gso": gso, "gro": gro}
