# SPDX-License-Identifier: GPL-2.0-only
"""The kernel's own counters of loss and drops, as a second instrument
beside the workloads' (sequence gaps, TCP_INFO retransmits).

Per side, the SNMP counters of its network namespace, read through
/proc/<pid>/net/{snmp,netstat} of a process inside it (no fork, cheap
enough for a window edge); the machine's softnet backlog drops
(/proc/net/softnet_stat, not per namespace); and each veth's qdisc and
link drops over the whole run (tc and ip, which fork: not at an edge).
"""

from typing import Dict, List, Optional

# The counters read, by kind and table. Measured here (2026-11-22, netns +
# veth, no netem): TCP retransmits thousands of segments a second while no
# drop counter moves; the receiver reports nearly all of them back as
# duplicates (TCPDSACKRecvSegs ~ RetransSegs), with SACK/timestamp
# reordering detected: the originals arrived late, not never. iperf3 shows
# the same (~6,000-9,000 retransmits/s), and pinning both ends to one CPU
# makes it vanish: veth hands each packet to the backlog of the CPU that
# sent it, and one flow's data leaves from two CPUs (the sender's
# syscalls, and its ACK processing in softirq on the receiver's CPU).
DROPS = {
    "Tcp": ("InErrs",),
    "TcpExt": (
        "TCPBacklogDrop",
        "TCPRcvQDrop",
        "TCPOFODrop",
        "TCPZeroWindowDrop",
        "TCPMinTTLDrop",
        "TCPDeferAcceptDrop",
        "PFMemallocDrop",
        "ListenDrops",
        "ListenOverflows",
        "RcvPruned",
        "OfoPruned",
        "TCPMemoryPressures",
        "TCPRetransFail",
        "TCPWqueueTooBig",
    ),
    "Udp": ("InErrors", "RcvbufErrors", "SndbufErrors", "NoPorts", "InCsumErrors", "MemErrors"),
    "Ip": ("InDiscards", "OutDiscards", "InHdrErrors", "InAddrErrors", "ReasmFails", "FragFails"),
    "IpExt": ("InNoRoutes", "InTruncatedPkts", "InCsumErrors"),
}
RETRANSMITS = {
    "Tcp": ("RetransSegs",),
    "TcpExt": (
        "TCPFastRetrans",
        "TCPSlowStartRetrans",
        "TCPLostRetransmit",
        "TCPTimeouts",
        "TCPLossProbes",
        "TCPSpuriousRTOs",
    ),
}
REORDERING = {
    "TcpExt": (
        "TCPDSACKRecvSegs",
        "TCPDSACKRecv",
        "TCPDSACKOldSent",
        "TCPSACKReorder",
        "TCPTSReorder",
        "TCPRenoReorder",
        "TCPOFOQueue",
        "TCPDSACKUndo",
    ),
}
KINDS = {"drops": DROPS, "retransmits": RETRANSMITS, "reordering": REORDERING}
WATCHED = {
    t: tuple(c for kind in KINDS.values() for c in kind.get(t, ()))
    for t in dict.fromkeys(t for kind in KINDS.values() for t in kind)
}


def parse_snmp(text: str) -> Dict[str, Dict[str, int]]:
    """/proc/net/snmp or /proc/net/netstat: header line, value line, per table."""
    out: Dict[str, Dict[str, int]] = {}
    lines = [l.split() for l in text.splitlines() if ":" in l]
    for head, vals in zip(lines[::2], lines[1::2]):
        if head and vals and head[0] == vals[0]:
            try:
                out[head[0].rstrip(":")] = {k: int(v) for k, v in zip(head[1:], vals[1:])}
            except ValueError:
                continue
    return out


def parse_udp(text: str) -> Dict[str, int]:
    """The Udp header line and value line of /proc/net/snmp as a dict."""
    return parse_snmp(text).get("Udp", {})


def parse_softnet(text: str) -> Dict[str, int]:
    """/proc/net/softnet_stat summed over CPUs: backlog drops (column 2)
    and squeezes (column 3, net_rx_action out of budget or time)."""
    dropped = squeezed = 0
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 3:
            dropped += int(cols[1], 16)
            squeezed += int(cols[2], 16)
    return {"dropped": dropped, "time_squeeze": squeezed}


def _kind(key: str) -> str:
    table, _, name = key.partition(".")
    return next(k for k, tables in KINDS.items() if name in tables.get(table, ()))


def losses(
    window: Dict[str, Optional[Dict[str, int]]],
    softnet: Optional[Dict[str, int]],
    devices: Dict[str, Optional[Dict[str, int]]],
) -> dict:
    """What the kernel dropped and where (`dropped`, `where`), and what TCP
    sent again (`retransmitted_segments`) and the receiver reported back as
    duplicates (`duplicate_segments`: those retransmits were spurious)."""
    where: List[str] = []
    moved = {side: ({k: v for k, v in d.items() if v} if d is not None else None) for side, d in window.items()}
    for side, d in moved.items():
        for k, v in (d or {}).items():
            if _kind(k) == "drops":
                where.append(f"{side} {k} {v}")
    if softnet and softnet.get("dropped"):
        where.append(f"machine softnet backlog dropped {softnet['dropped']}")
    for side, d in devices.items():
        for k in ("qdisc_drops", "link_tx_dropped", "link_rx_dropped"):
            if (d or {}).get(k):
                where.append(f"{side} veth {k} {d[k]}")
    measured = any(d is not None for d in window.values())
    client, server = moved.get("client") or {}, moved.get("server") or {}
    return {
        "dropped": bool(where) if measured else None,
        "where": where,
        "retransmitted_segments": client.get("Tcp.RetransSegs", 0) if moved.get("client") is not None else None,
        "duplicate_segments": client.get("TcpExt.TCPDSACKRecvSegs", 0) if moved.get("client") is not None else None,
        "reordering_seen": any(
            _kind(k) == "reordering" and k != "TcpExt.TCPDSACKRecvSegs" for d in (client, server) for k in d
        ),
        "window": moved,
        "softnet_window": softnet,
        "devices_run": devices,
        "source": "per side: the namespace's /proc/net/snmp and netstat over the window (only counters "
        "that moved); softnet_stat is the whole machine's; devices: tc qdisc and ip link over "
        "the whole run",
    }
