# SPDX-License-Identifier: GPL-2.0-only
"""The floor under each stack, as figures: what one copy per side and the
AEAD's seal and open cost per byte on this machine (measured by
collectors/floor.py with workloads/floor/), and the run's CPU per byte as
a multiple of it."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Spec:
    binary: str  # under build/bin
    record_bytes: int
    crypto: bool


SPECS = {
    "quic": Spec("qprof-floor-quictls", 1440, True),  # 1500 - IP, UDP, short header, tag
    "tcp-tls": Spec("qprof-floor", 16384, True),
    "tcp-ktls": Spec("qprof-floor", 16384, True),
    "tcp": Spec("qprof-floor", 16384, False),
    "udp": Spec("qprof-floor", 1472, False),
}


def measured_for(opts) -> bool:
    """Whether a run has one floor: one stack of qprof's on both sides (not
    a pair of libraries, --server-stack, nor a program of the user's)."""
    sides = [opts.stack if not getattr(opts, f"{r}_cmd", None) else None for r in ("client", "server")]
    if getattr(opts, "server_stack", None):
        sides[1] = opts.server_stack
    return sides[0] is not None and sides == [opts.stack] * 2


def figures(stack: str, parts: dict, cpu: dict, sendfile: bool = False) -> dict:
    """Each side's floor and the run's CPU per byte as a multiple of it.
    With sendfile the client copies nothing across the socket API."""
    if "absent" in parts:
        return parts
    spec = SPECS[stack]
    copy = parts["copy_ns_per_byte"]
    client = (0.0 if sendfile else copy) + (parts["seal_ns_per_byte"] if spec.crypto else 0.0)
    server = copy + (parts["open_ns_per_byte"] if spec.crypto else 0.0)
    floor = {"client": client, "server": server, "system": client + server}
    measured = {
        "client": cpu["client"]["ns_per_byte"]["total"],
        "server": cpu["server"]["ns_per_byte"]["total"],
        "system": cpu["system"]["ns_per_byte"]["total"],
    }
    return {
        **parts,
        "includes": ("one copy on the server (the client sendfile()s)" if sendfile else "one copy per side")
        + (", AES-128-GCM seal (client) and open (server)" if spec.crypto else ""),
        "ns_per_byte": floor,
        "times_floor": {
            side: (measured[side] / floor[side] if measured[side] is not None and floor[side] > 0 else None)
            for side in floor
        },
    }
