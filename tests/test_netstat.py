# SPDX-License-Identifier: GPL-2.0-only
"""The kernel's loss counters: parsing this machine's own /proc text, the
verdict built from them, and a real transfer's record."""

from pathlib import Path

import pytest

from qprof.collectors import procfs
from qprof.describe import netstat

from conftest import needs_build
from test_floor import ALONE_2S

DATA = Path(__file__).parent / "data" / "netstat"


@pytest.mark.unit
def test_parse_snmp_and_netstat_tables():
    snmp = netstat.parse_snmp((DATA / "snmp.txt").read_text())
    ext = netstat.parse_snmp((DATA / "netstat.txt").read_text())
    assert {"Ip", "Tcp", "Udp", "Icmp"} <= set(snmp)
    assert {"TcpExt", "IpExt"} <= set(ext)
    assert snmp["Tcp"]["RetransSegs"] >= 0 and "TCPDSACKRecvSegs" in ext["TcpExt"]
    # Every watched counter exists on the kernel the data came from.
    tables = {**snmp, **ext}
    missing = [f"{t}.{c}" for t, cs in netstat.WATCHED.items() for c in cs if c not in tables.get(t, {})]
    assert missing == []


@pytest.mark.unit
def test_parse_softnet_sums_cpus_in_hex():
    text = "0000000a 00000002 00000003 0 0\n00000001 00000001 00000000 0 0\n"
    assert netstat.parse_softnet(text) == {"dropped": 3, "time_squeeze": 3}
    real = netstat.parse_softnet((DATA / "softnet_stat.txt").read_text())
    assert set(real) == {"dropped", "time_squeeze"}


@pytest.mark.unit
def test_spurious_retransmits_are_not_drops():
    window = {
        "client": {
            "Tcp.RetransSegs": 100,
            "TcpExt.TCPFastRetrans": 100,
            "TcpExt.TCPDSACKRecvSegs": 95,
            "TcpExt.TCPSACKReorder": 3,
        },
        "server": {"TcpExt.TCPOFOQueue": 7, "Udp.InErrors": 0},
    }
    out = netstat.losses(window, {"dropped": 0, "time_squeeze": 4}, {"client": None, "server": None})
    assert out["dropped"] is False and out["where"] == []
    assert out["retransmitted_segments"] == 100 and out["duplicate_segments"] == 95 and out["reordering_seen"]
    assert "Udp.InErrors" not in out["window"]["server"]  # only what moved is kept


@pytest.mark.unit
def test_drops_are_named_where_they_happened():
    window = {"client": {"Tcp.RetransSegs": 0}, "server": {"Udp.RcvbufErrors": 5, "Udp.InErrors": 5}}
    out = netstat.losses(
        window,
        {"dropped": 2, "time_squeeze": 0},
        {"client": {"qdisc_drops": 9, "qdisc_overlimits": 40, "link_tx_dropped": 0}, "server": None},
    )
    assert out["dropped"] is True
    assert out["where"] == [
        "server Udp.RcvbufErrors 5",
        "server Udp.InErrors 5",
        "machine softnet backlog dropped 2",
        "client veth qdisc_drops 9",
    ]


@pytest.mark.unit
def test_unmeasured_is_absent_not_zero():
    out = netstat.losses({"client": None, "server": None}, None, {"client": None, "server": None})
    assert out["dropped"] is None and out["retransmitted_segments"] is None


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("stack", ["tcp-tls", "quic"])
def test_transfer_names_its_drops_and_explains_its_retransmits(shared, stack):
    _, rec = shared("run", "--stack", stack, *ALONE_2S)
    k = rec["kernel_loss"]
    assert k["dropped"] is not None and k["window"]["client"] is not None and k["window"]["server"] is not None
    assert k["dropped"] == bool(k["where"])
    for side in ("client", "server"):
        assert all(v > 0 for v in k["window"][side].values())
    if stack == "tcp-tls":
        # TCP's own count agrees with the namespace's (one connection there).
        ti = rec["workload"]["client"]["window"]["tcp_info"]
        assert k["retransmitted_segments"] == pytest.approx(
            ti["total_retrans"], abs=max(10, ti["total_retrans"] * 0.02)
        )
        # A retransmit on this loss-free veth is explained: a drop named, or
        # the receiver reported duplicates / reordering was detected.
        if k["retransmitted_segments"]:
            assert k["dropped"] or k["duplicate_segments"] or k["reordering_seen"], k


@pytest.mark.unit
def test_parse_net_dev_takes_each_direction_by_its_columns():
    """/proc/net/dev as this kernel writes it (its two header lines), each
    column a distinct number: a device's drops are the receive and the
    transmit "drop" columns, not their neighbours."""
    head = (
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|"
        "bytes    packets errs drop fifo colls carrier compressed\n"
    )
    row = "  qpx1c: " + " ".join(str(100 + i) for i in range(16)) + "\n"
    got = procfs.parse_net_dev(head + "    lo: " + " ".join(["0"] * 16) + "\n" + row)
    assert got["qpx1c"] == {
        "rx_bytes": 100,
        "rx_packets": 101,
        "rx_errs": 102,
        "rx_drop": 103,
        "rx_fifo": 104,
        "tx_bytes": 108,
        "tx_packets": 109,
        "tx_errs": 110,
        "tx_drop": 111,
        "tx_fifo": 112,
    }
    assert set(got) == {"lo", "qpx1c"}
    # And this machine's own file parses, every device with its columns.
    live = procfs.parse_net_dev(Path("/proc/net/dev").read_text())
    assert "lo" in live and all(len(v) == 10 for v in live.values())
