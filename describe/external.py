# SPDX-License-Identifier: GPL-2.0-only
"""--server-cmd and --client-cmd: a program of the user's in one side's
place, the describing side of it: its command line from the user's
template, and what a run with one refuses.

The program speaks the QUIC performance protocol (ALPN perf) to the other
side, --stack's qprof-wl, which counts the bytes as they arrive (--verify
size: they need not be qprof's pattern). So qprof-wl's side is the
window's receiver: an external server sends (bulk down), an external
client uploads (bulk up), and every byte the window counts is one
qprof-wl received. The program itself is measured by its pid, as
qprof-wl is (collectors/external.py starts it); what only its own
counters could say (its library, its settings, its cross-check) is
absent from the record, with the reason.
"""

import shlex
import string
from dataclasses import replace
from typing import Dict, List, Optional

from qprof import errors

# What a template may name, each filled in by the run (values()).
PLACEHOLDERS = ("addr", "port", "cert", "key", "alpn", "bytes", "duration_s", "duration_ms")
ALPN = "perf"
FLAGS = {"server": "--server-cmd", "client": "--client-cmd"}
# The direction each filled in: the external side sends, qprof-wl's receives.
SENDS = {"server": "down", "client": "up"}
# A client's {duration_s} runs past the window's end by this much, so that
# it is still sending when the end edge is read.
CLIENT_MARGIN_S = 1.0


def template(opts, role: str) -> Optional[str]:
    return getattr(opts, f"{role}_cmd", None)


def role_of(opts) -> Optional[str]:
    """Which side is a program of the user's, if either."""
    return next((r for r in FLAGS if template(opts, r) is not None), None)


def absent_reason(role: str) -> str:
    """Why an external side's own figures are absent from the record."""
    return f"the {role} is an external program ({FLAGS[role]}): qprof cannot see into it"


def words(text: str, role: str = "server") -> List[str]:
    """The template's words, as a shell would split them (no shell runs
    it), each naming only PLACEHOLDERS."""
    flag = FLAGS[role]
    try:
        out = shlex.split(text)
    except ValueError as e:
        raise errors.BadValue(f"{flag} '{text}' does not parse ({e}); balance its quotes.") from None
    if not out:
        raise errors.BadValue(f"{flag} is empty; give the {role} program's command line.")
    for word in out:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(word) if f is not None]
        except ValueError as e:
            raise errors.BadValue(
                f"{flag}'s word '{word}' is not a template ({e}); write a literal brace as {{{{ or }}}}."
            ) from None
        unknown = [f for f in fields if f not in PLACEHOLDERS]
        if unknown:
            raise errors.BadValue(
                f"{flag} names {{{unknown[0]}}}, which qprof does not fill in; it fills in "
                + " ".join(f"{{{p}}}" for p in PLACEHOLDERS)
                + "."
            )
    return out


def argv(text: str, values: Dict[str, str], role: str = "server") -> List[str]:
    """The program's command line, every placeholder filled in."""
    return [word.format_map(values) for word in words(text, role)]


def values(opts, addr: str, port: int, cert: str, key: str, role: str = "server") -> Dict[str, str]:
    """What the placeholders stand for in this run: the server's address
    and port, the run's certificate and key, the ALPN, --bytes (0: timed)
    and the seconds (or ms) the program must run at least: a server, the warm-up
    and the window; a client, those and CLIENT_MARGIN_S, so that it still
    sends when the window ends."""
    duration = (opts.warmup_s or 0) + (opts.duration_s or 0)
    if role == "client" and opts.duration_s:
        duration += CLIENT_MARGIN_S
    return {
        "addr": addr,
        "port": str(port),
        "cert": cert,
        "key": key,
        "alpn": ALPN,
        "bytes": str(opts.bytes or 0),
        "duration_s": f"{duration:g}",
        "duration_ms": str(round(duration * 1000)),
    }


def resolve(opts):
    """A run with --server-cmd or --client-cmd, its rules checked and its
    direction filled (the external side sends); opts unchanged without."""
    role = role_of(opts)
    if role is None:
        return opts
    flag, way = FLAGS[role], SENDS[role]
    if opts.server_cmd is not None and opts.client_cmd is not None:
        raise errors.StackCannot(
            "--server-cmd and --client-cmd together: qprof-wl on one side counts the bytes the other sends; "
            "drop one of them."
        )
    words(template(opts, role), role)
    if opts.proto == "qprof":
        raise errors.StackCannot(
            f"{flag} runs a program that speaks the QUIC performance protocol, not qprof's own; drop --proto qprof."
        )
    if opts.direction not in (None, way):
        raise errors.StackCannot(
            f"--direction {opts.direction}: with {flag} qprof-wl's {'client' if role == 'server' else 'server'} "
            f"counts the bytes as they arrive, so the {role} sends; drop --direction or give {way}."
        )
    for name, given in (("--server-stack", opts.server_stack), ("--server", opts.server), ("--guest", opts.guest)):
        if given:
            raise errors.StackCannot(
                f"{name}: {flag} runs its program in the {role}'s namespace on this machine, beside --stack's "
                f"qprof-wl; drop {name} or {flag}."
            )
    return replace(opts, direction=way)
