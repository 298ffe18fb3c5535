# SPDX-License-Identifier: GPL-2.0-only
"""--server-cmd: a program of the user's in the server's place, the
describing side of it: its command line from the user's template, and
what a run with one refuses.

The program speaks the QUIC performance protocol (ALPN perf) to the
client, --stack's qprof-wl, which asks for the bytes and counts them as
they arrive (--verify size: they need not be qprof's pattern). So the
client is the window's receiver: the server sends (bulk down), and every
byte the window counts is one the client received. The program itself
is measured by its pid, as qprof-wl is (collectors/external.py starts
it); what only its own counters could say (its library, its settings,
its cross-check) is absent from the record, with the reason.
"""

import shlex
import string
from dataclasses import replace
from typing import Dict, List

from qprof import errors

# What a template may name, each filled in by the run (values()).
PLACEHOLDERS = ("addr", "port", "cert", "key", "alpn", "bytes", "duration_s")
ALPN = "perf"
# Where the record says why an external side's own figures are absent.
ABSENT_REASON = "the server is an external program (--server-cmd): qprof cannot see into it"


def words(template: str) -> List[str]:
    """The template's words, as a shell would split them (no shell runs
    it), each naming only PLACEHOLDERS."""
    try:
        out = shlex.split(template)
    except ValueError as e:
        raise errors.BadValue(f"--server-cmd '{template}' does not parse ({e}); balance its quotes.") from None
    if not out:
        raise errors.BadValue("--server-cmd is empty; give the server program's command line.")
    for word in out:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(word) if f is not None]
        except ValueError as e:
            raise errors.BadValue(
                f"--server-cmd's word '{word}' is not a template ({e}); write a literal brace as {{{{ or }}}}."
            ) from None
        unknown = [f for f in fields if f not in PLACEHOLDERS]
        if unknown:
            raise errors.BadValue(
                f"--server-cmd names {{{unknown[0]}}}, which qprof does not fill in; it fills in "
                + " ".join(f"{{{p}}}" for p in PLACEHOLDERS)
                + "."
            )
    return out


def argv(template: str, values: Dict[str, str]) -> List[str]:
    """The program's command line, every placeholder filled in."""
    return [word.format_map(values) for word in words(template)]


def values(opts, addr: str, port: int, cert: str, key: str) -> Dict[str, str]:
    """What the placeholders stand for in this run: the server's address
    and port, the run's certificate and key, the ALPN, --bytes (0: timed)
    and the seconds the server must serve at least (warm-up and window)."""
    duration = (opts.warmup_s or 0) + (opts.duration_s or 0)
    return {
        "addr": addr,
        "port": str(port),
        "cert": cert,
        "key": key,
        "alpn": ALPN,
        "bytes": str(opts.bytes or 0),
        "duration_s": f"{duration:g}",
    }


def resolve(opts):
    """A run with --server-cmd, its rules checked and its direction filled
    (down: the client receives and counts); opts unchanged without one."""
    if opts.server_cmd is None:
        return opts
    words(opts.server_cmd)
    if opts.proto == "qprof":
        raise errors.StackCannot(
            "--server-cmd runs a program that speaks the QUIC performance protocol, not qprof's own; "
            "drop --proto qprof."
        )
    if opts.direction not in (None, "down"):
        raise errors.StackCannot(
            f"--direction {opts.direction}: with --server-cmd the client asks for the bytes and counts them as "
            "they arrive, so the server sends; drop --direction or give down."
        )
    for name, given in (("--server-stack", opts.server_stack), ("--server", opts.server), ("--guest", opts.guest)):
        if given:
            raise errors.StackCannot(
                f"{name}: --server-cmd runs its program in the server's namespace on this machine; "
                f"drop {name} or --server-cmd."
            )
    return replace(opts, direction="down")
