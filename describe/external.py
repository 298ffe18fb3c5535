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

Both given, the run is a program pair, --stack external (its row in
describe/transports.py): no qprof-wl runs, so nothing counts the bytes
but the syscalls probe. The window is timed as any bulk run's (the
client's start, the warm-up, --duration, the client still sending at
its end); its bytes are what the receiver's receive calls took
(counted_bytes: UDP payload, QUIC's headers and acks inside it), and
nothing is verified.
"""

import shlex
import string
from dataclasses import replace
from typing import Dict, List, Optional

import tomllib

from qprof import errors
from qprof.describe import options, transports
from qprof.describe.derive import RECV, SEND

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


def roles(opts) -> tuple:
    """The sides that are programs of the user's: none, one, or both (a pair)."""
    return tuple(r for r in FLAGS if template(opts, r) is not None)


def role_of(opts) -> Optional[str]:
    """Which side is a program of the user's, with the other qprof-wl's; None for none or a pair."""
    out = roles(opts)
    return out[0] if len(out) == 1 else None


def is_pair(opts) -> bool:
    """Both sides programs of the user's (--stack external)."""
    return len(roles(opts)) == 2


# What a pair's bytes are, in the record (counted_by).
PAIR_COUNT = (
    "the syscalls probe: the UDP payload the {receiver} program's receive calls took inside the window "
    "(QUIC's packet headers, acks and frames included; no side verified the bytes)"
)


def counted_bytes(syscalls_window: dict, pid: int) -> int:
    """A pair's bytes: what pid's receive calls took over the probe's window."""
    return sum(t["bytes"] for t in syscalls_window["threads"] if t["tgid"] == pid and t["sys"] in RECV)


def sent_bytes(syscalls_window: dict, pid: int) -> int:
    """What pid's send calls handed the kernel over the probe's window."""
    return sum(t["bytes"] for t in syscalls_window["threads"] if t["tgid"] == pid and t["sys"] in SEND)


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
    if is_pair(opts) or transports.STACKS[opts.stack].programs:
        return _pair(opts)
    role = role_of(opts)
    if role is None:
        return opts
    flag, way = FLAGS[role], SENDS[role]
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


def _pair(opts):
    """A program pair's rules (module docstring): --stack external, a
    timed window, the syscalls probe on, one direction (down unless said)."""
    given = roles(opts)
    if len(given) < 2:
        missing = next(FLAGS[r] for r in FLAGS if r not in given)
        raise errors.StackCannot(
            f"--stack external runs two programs of yours, and {missing} is not given; give --client-cmd and "
            "--server-cmd, or pick a stack of qprof's."
        )
    if opts.stack != options.BY_NAME["stack"].default and not transports.STACKS[opts.stack].programs:
        raise errors.StackCannot(
            f"--stack {opts.stack}: with --client-cmd and --server-cmd both sides are your programs, so no "
            f"{opts.stack} runs; drop --stack."
        )
    for role in given:
        words(template(opts, role), role)
    if opts.proto == "qprof":
        raise errors.StackCannot(
            "--proto qprof: --client-cmd and --server-cmd run your programs, which do not speak qprof's own "
            "protocol; drop --proto."
        )
    if opts.direction == "both":
        raise errors.StackCannot(
            "--direction both: a program pair's bytes are what one side's receive calls took, one way; "
            "give --direction up or down."
        )
    if opts.bytes:
        raise errors.StackCannot(
            "--bytes: a program pair's window is timed (qprof reads the programs' CPU while they run, and "
            "nothing tells it a transfer's end); give --duration, and {bytes} is 0."
        )
    for name in ("gso", "gro"):
        if getattr(opts, name) is not None:
            raise errors.StackCannot(
                f"--{name}: qprof steers a QUIC library's offloads through qprof-wl, and a program pair has none; "
                f"drop --{name} (your programs' own flags go in their commands)."
            )
    if "syscalls" not in (opts.probes or ()):
        raise errors.StackCannot(
            "a program pair's bytes are counted by the syscalls probe, which this run leaves out; "
            "add syscalls to --probes."
        )
    for name, given_value in (
        ("--server-stack", opts.server_stack),
        ("--server", opts.server),
        ("--guest", opts.guest),
    ):
        if given_value:
            raise errors.StackCannot(
                f"{name}: --client-cmd and --server-cmd run their programs in the two namespaces on this "
                f"machine; drop {name}."
            )
    pair = next(n for n, s in transports.STACKS.items() if s.programs)
    return replace(opts, stack=pair, direction=opts.direction or "down")


# --stack-file's keys, each the option it stands for (protocol: the one the programs speak).
STACK_FILE_KEYS = {"server": "server_cmd", "client": "client_cmd", "categories": "categories", "protocol": None}


def from_stack_file(opts, text: str, where: str, base: str):
    """opts with --stack-file's programs and rules in place: where, the
    file's path as given; base, its directory, which a relative
    categories path is taken from. What the file and a flag both give is
    refused, as is anything the file names that qprof does not take."""
    flag = f"--stack-file {where}"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise errors.BadValue(f'{flag} is not TOML ({e}); write it as key = "value" lines.') from None
    unknown = [k for k in data if k not in STACK_FILE_KEYS]
    if unknown:
        raise errors.BadValue(
            f"{flag} names '{unknown[0]}', which qprof does not take; it takes " + ", ".join(STACK_FILE_KEYS) + "."
        )
    for key, value in data.items():
        if not isinstance(value, str) or not value.strip():
            raise errors.BadValue(f'{flag}\'s {key} is not a text; write {key} = "...".')
    if data.get("protocol", ALPN) != ALPN:
        raise errors.BadValue(
            f"{flag} says protocol {data['protocol']!r}; qprof speaks to programs of yours in the QUIC "
            f"performance protocol only ({ALPN})."
        )
    if "server" not in data and "client" not in data:
        raise errors.BadValue(f'{flag} names neither a server nor a client; give server = "CMD" or client = "CMD".')
    filled = {}
    for key, field in STACK_FILE_KEYS.items():
        if field is None or key not in data:
            continue
        if getattr(opts, field) is not None:
            given = "--" + field.replace("_", "-")
            raise errors.BadValue(f"{flag} gives the {key} and {given} gives it too; give one of them.")
        value = data[key]
        if key == "categories" and not value.startswith("/"):
            value = f"{base.rstrip('/')}/{value}"
        filled[field] = value
    return replace(opts, **filled)
