# SPDX-License-Identifier: GPL-2.0-only
"""Which role sends the data and which checks it, said once for every
pattern by its row (describe/patterns/): bulk's by --direction (up,
down or both), each other pattern's by its row."""

from typing import Tuple

from qprof.describe import patterns

DIRECTIONS = ("up", "down", "both")
ROLES = patterns.ROLES


def bulk_direction(opts) -> str:
    return getattr(opts, "direction", None) or "up"


def senders(opts) -> Tuple[str, ...]:
    """The roles that send the measured bytes."""
    row = patterns.row(opts)
    if row.senders is not None:
        return row.senders
    return {"up": ("client",), "down": ("server",), "both": ROLES}[bulk_direction(opts)]


def receivers(opts) -> Tuple[str, ...]:
    """The roles that verify what arrives."""
    row = patterns.row(opts)
    if row.receivers is not None:
        return row.receivers
    return {"up": ("server",), "down": ("client",), "both": ROLES}[bulk_direction(opts)]


def window_receiver(opts) -> str:
    """Whose verified bytes a window counts: a role, or "both"."""
    row = patterns.row(opts)
    if row.window_receiver is not None:
        return row.window_receiver
    got = receivers(opts)
    return got[0] if len(got) == 1 else "both"


def server_told(opts) -> bool:
    """Whether the server serves until told (Pattern.server_told)."""
    return patterns.row(opts).server_told


def other(role: str) -> str:
    return "client" if role == "server" else "server"
