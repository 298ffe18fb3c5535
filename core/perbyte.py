# SPDX-License-Identifier: GPL-2.0-only
"""Which bytes a side's CPU is divided by: one answer for the record's
figures (collectors) and the flame graphs' (flamegraphs)."""


def side_bytes(record: dict, side: str) -> int:
    """The bytes a side's CPU is divided by: what it sent for a sender of
    raw datagrams (the record's transport: UDP with no TLS, so no
    reliability, and datagrams may be lost), else what the receiver
    verified."""
    sent = record.get("bytes_sent")
    transport = record.get("transport") or {}
    raw = transport.get("protocol") == "udp" and transport.get("tls") == "none"
    if side == "client" and raw and isinstance(sent, int) and sent > 0:
        return sent
    return int(record["bytes"])
