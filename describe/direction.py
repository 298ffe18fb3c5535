# SPDX-License-Identifier: GPL-2.0-only
"""Which role sends the data and which checks it, said once for every
pattern: bulk by --direction (up: the client sends, as iperf3; down: the
server, as iperf3 -R and secnetperf's download; both: --streams each way,
as iperf3 --bidir), a download from the server, rr both ways, video both
ways too (requests up, segments down), its window counting the segments.

A window counts the bytes its receiver verified: "server", "client", or
"both" (the two receivers' bytes added, each direction its own goodput).
"""

from typing import Tuple

DIRECTIONS = ("up", "down", "both")
ROLES = ("client", "server")


def bulk_direction(opts) -> str:
    return getattr(opts, "direction", None) or "up"


def senders(opts) -> Tuple[str, ...]:
    """The roles that send the measured bytes."""
    if opts.pattern == "download":
        return ("server",)
    if opts.pattern in ("rr", "handshakes", "video"):
        return ROLES
    return {"up": ("client",), "down": ("server",), "both": ROLES}[bulk_direction(opts)]


def receivers(opts) -> Tuple[str, ...]:
    """The roles that verify what arrives."""
    if opts.pattern == "download":
        return ("client",)
    if opts.pattern in ("rr", "handshakes", "video"):
        return ROLES
    return {"up": ("server",), "down": ("client",), "both": ROLES}[bulk_direction(opts)]


def window_receiver(opts) -> str:
    """Whose verified bytes a window counts: a role, or "both"."""
    if opts.pattern in ("rr", "handshakes"):
        return "server"
    if opts.pattern == "video":
        return "client"
    got = receivers(opts)
    return got[0] if len(got) == 1 else "both"


def server_told(opts) -> bool:
    """Whether the server serves until told: handshakes come on new
    connections, so it cannot know the client's last one."""
    return opts.pattern == "handshakes"


def other(role: str) -> str:
    return "client" if role == "server" else "server"
