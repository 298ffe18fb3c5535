# SPDX-License-Identifier: GPL-2.0-only
"""Which bytes a side's CPU is divided by: one answer for the record's
figures (collectors) and the flame graphs' (flamegraphs)."""


def side_bytes(record: dict, side: str) -> int:
    """The bytes a side's CPU is divided by: what it sent for a raw UDP
    sender (datagrams may be lost), else what the receiver verified."""
    sent = record.get("bytes_sent")
    if side == "client" and record.get("stack") == "udp" and isinstance(sent, int) and sent > 0:
        return sent
    return int(record["bytes"])
