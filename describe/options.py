# SPDX-License-Identifier: GPL-2.0-only
"""The options of one measured transfer, declared once.

Each Option says what it is (type, unit, range, default), which stacks
it applies to, whether `qprof compare --vary` may vary it, and how it
reaches the workload. From this table come: RunOptions (the frozen value
object a plan is made of), the click options of `qprof run` and `qprof
compare` (cli/run_options.py) with their "[default: ...]" help, the
`--vary` parsers, the range and choice checks (`check`), the defaults
describe/plan.py's `resolve` fills where an option applies (`fill`), and
the guest hand-over (`to_json` / `from_json`).

Rules that relate two options or need the stack (TLS on a stack without
it, GSO against the send mode, a datagram larger than the MTU, what a
pattern allows) are checked once, by `resolve` (describe/plan.py), with
describe/transports.py and describe/offload.py, which know why.
"""

import json
from dataclasses import asdict, field, fields, make_dataclass, replace
from typing import Callable, Dict, List, Optional, Tuple

from qprof import errors
from qprof.describe import link, patterns, pinning, transports
from qprof.describe.direction import DIRECTIONS
from qprof.units import parse_duration_s, parse_rate_bit, parse_size_bytes, rate_text

# The stacks, and the kinds options name, from their rows (describe/transports.py).
STACK_NAMES = tuple(transports.STACKS)
# The QUIC stacks qprof-wl runs (not "external", two programs of the user's).
QUIC_STACKS = tuple(n for n, s in transports.STACKS.items() if s.is_quic and not s.programs)
SESSION_STACKS = tuple(n for n, s in transports.STACKS.items() if s.sessions)
CONNECTION_STACKS = tuple(n for n, s in transports.STACKS.items() if not s.datagram)
# Stacks whose sides are programs of the user's (a pair): no qprof-wl takes a flag there.
PROGRAM_STACKS = tuple(n for n, s in transports.STACKS.items() if s.programs)
PROBE_NAMES = ("syscalls", "packets", "cputhread")
TOPOLOGIES = ("netns", "loopback")
EXEC_PROFILES = ("lowlat", "maxtput")
ONOFF = ("on", "off")
UDP_SEND_MODES = ("sendmsg", "sendmmsg", "gso")
CALL_GRAPHS = ("dwarf", "fp")


# The patterns, from their rows (describe/patterns/).
PATTERNS = tuple(patterns.PATTERNS)
TCP_STACKS = tuple(n for n, s in transports.STACKS.items() if s.transport == "tcp")
APPS = ("h1", "h2", "h3")
PROTOS = ("qprof", "perf")  # bulk on a QUIC stack: the wire's protocol (qprof-wl --proto)
MIN_INTERVAL_S = 0.1


class Option:
    """One option. kind: int, size (bytes, 64K syntax), duration (seconds,
    10s syntax), rate (bits per second, 2.5mbit syntax), choice, flag
    (bool), text, probes (a comma list) or link
    (a link spec, describe/link.py, kept as the user wrote it)."""

    def __init__(
        self,
        name: str,
        kind: str,
        default,
        help: str,
        *,
        field_name: Optional[str] = None,
        short: Optional[str] = None,
        lo: Optional[float] = None,
        hi: Optional[float] = None,
        choices: Tuple[str, ...] = (),
        power_of_two: bool = False,
        stacks: Tuple[str, ...] = (),
        vary: bool = False,
        workload: Optional[str] = None,
        workload_stacks: Tuple[str, ...] = (),
        roles: Tuple[str, ...] = ("client", "server"),
        cli: bool = True,
        metavar: Optional[str] = None,
        show_default: bool = True,
        error: type = errors.BadValue,
        envvar: Optional[str] = None,
        workload_value: Callable = str,
        fill=None,
        fill_note: Optional[str] = None,
        default_text: Optional[str] = None,
    ):
        self.name = name  # the flag without "--", and the --vary key
        self.field = field_name or name.replace("-", "_")
        self.kind = kind
        self.default = default  # None: the stack's or the workload's own
        self.help = help
        self.short = short
        self.lo, self.hi = lo, hi
        self.choices = choices
        self.power_of_two = power_of_two
        self.stacks = stacks  # () = every stack
        self.vary = vary
        self.workload = workload  # qprof-wl's flag when the value is passed straight on
        self.workload_stacks = workload_stacks or stacks  # ...for these stacks (the rest qprof sets up itself)
        self.roles = roles  # which workload roles get it
        self.cli = cli
        self.metavar = metavar
        self.show_default = show_default
        self.error = error  # the QprofError a bad value raises (its exit code)
        self.envvar = envvar  # the environment variable that sets it too
        self.workload_value = workload_value  # the value as qprof-wl's flag takes it
        # Unset (None) on the command line, and filled by describe/plan.py's
        # resolve with `fill` where the option applies (fill_note says where).
        self.fill = fill
        self.fill_note = fill_note
        self.default_text = default_text  # a default that is the stack's or the workload's, in words
        # The patterns whose runs take it (() = every one), and those that
        # set it themselves, holding a value given to theirs (video's count,
        # rr's settings it fixes): describe/plan.py refuses it elsewhere.
        # Each pattern's row says (its `options` and `sets`), so these are
        # filled from the rows once the table is made.
        self.patterns: Tuple[str, ...] = ()
        self.set_by: Tuple[str, ...] = ()

    @property
    def help_text(self) -> str:
        """The help, with its "[default: ...]" made from the table."""
        if self.fill is not None:
            note = f"; {self.fill_note}" if self.fill_note else ""
            return f"{self.help} [default: {self.value_text(self.fill)}{note}]."
        if self.default_text is not None:
            return f"{self.help} [default: {self.default_text}]."
        return self.help

    def value_text(self, value) -> str:
        """A value as a user would write it: 10s, 10ms, 1M."""
        if self.kind == "duration":
            return f"{value:g}s" if value >= 1 else f"{value * 1e3:g}ms"
        if self.kind == "size":
            return _size_text(value)
        if self.kind == "rate":
            return rate_text(value)
        return str(value)

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def parse(self, text: str):
        """A value from text as a user writes it (a --vary value)."""
        if self.kind == "int":
            digits = str(text).strip()
            if not (digits.isascii() and digits.isdigit()) or len(digits.lstrip("0")) > 15:  # int() reads more
                raise errors.BadValue(f"{self.flag} takes a whole number, not '{text}'.")
            value = int(digits)
        elif self.kind == "size":
            value = parse_size_bytes(text, self.flag)
        elif self.kind == "rate":
            value = parse_rate_bit(text, self.flag)
        elif self.kind == "duration":
            value = parse_duration_s(text, self.flag)
        elif self.kind == "flag":
            if text not in ("on", "off"):
                raise errors.BadValue(f"{self.flag} takes on or off as a --vary value, not '{text}'.")
            value = text == "on"
        elif self.kind == "probes":
            value = parse_probes(text)
        else:
            value = text
        self.check(value)
        return value

    def check(self, value) -> None:
        """Refuse a value outside the option's range or choices (None: unset)."""
        if value is None:
            return
        if self.kind in ("int", "size", "rate") and not isinstance(value, bool):
            if (
                (self.lo is not None and value < self.lo)
                or (self.hi is not None and value > self.hi)
                or (self.power_of_two and value & (value - 1))
            ):
                raise self.error(f"{self.flag} {self.value_text(value)} is not {self.range_text()}.")
        if self.kind == "duration" and self.lo is not None and value <= self.lo:
            raise self.error(f"{self.flag} must be more than zero; write it like 10s.")
        if self.kind == "choice" and value not in self.choices:
            raise self.error(f"{self.flag} takes {', '.join(self.choices[:-1])} or {self.choices[-1]}, not '{value}'.")
        if self.kind == "link":
            link.parse(value)
        if self.kind == "cpus":
            pinning.parse(value)
        if self.kind == "probes":
            unknown = [p for p in value if p not in PROBE_NAMES]
            if unknown:
                raise errors.BadValue(
                    f"unknown probe '{unknown[0]}'; the probes are: {', '.join(PROBE_NAMES)} (or none)."
                )

    def range_text(self) -> str:
        if self.power_of_two:
            return f"a power of two from {_size_text(self.lo)} to {_size_text(self.hi)}"
        lo, hi = (self.value_text(v) if v is not None else None for v in (self.lo, self.hi))
        if hi is None:
            return f"at least {lo}"
        return f"from {lo} to {hi}"


def _size_text(n) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def parse_probes(text: str) -> tuple:
    if text.strip() == "none":
        return ()
    return tuple(p.strip() for p in text.split(",") if p.strip())


# In the order `--help` shows them. `stack` and `runs-dir` are set by the
# commands themselves (run: --stack; compare: --stack/--stacks).
OPTIONS: List[Option] = [
    Option("stack", "choice", "quic", "Transport stack.", choices=STACK_NAMES, cli=False, error=errors.UnknownStack),
    Option(
        "pattern",
        "choice",
        "bulk",
        "What moves: " + patterns.words((f"{p.name} ({p.what})" for p in patterns.PATTERNS.values()), "or") + ".",
        choices=PATTERNS,
        workload="--pattern",
        # video is rr's closed loop, one segment in flight, for --count segments (describe/plan.py).
        workload_value=lambda p: "rr" if p == "video" else p,
    ),
    Option(
        "duration",
        "duration",
        None,
        "Length of the measured window (after warm-up); video: the media's length",
        field_name="duration_s",
        short="-d",
        lo=0.0,
        fill=10.0,
        fill_note="bulk, rr and handshakes, not with --bytes",
    ),
    Option(
        "bytes",
        "size",
        None,
        "Send this many bytes per stream instead of for a duration (e.g. 1G); the "
        "window is then the whole transfer, handshake included.",
        short="-b",
        workload="--bytes",
    ),
    Option(
        "size",
        "size",
        None,
        "download: bytes per download (e.g. 64K, 2M)",
        lo=1,
        fill=1 << 20,
        vary=True,
        workload="--size",
    ),
    Option(
        "count",
        "int",
        None,
        "download: downloads, each on a new connection",
        lo=1,
        fill=10,
        hi=100_000,
        workload="--count",
    ),
    Option(
        "resume",
        "flag",
        False,
        "download and handshakes: each connection resumes an earlier one's session (QUIC 0-RTT, "
        "TLS 1.3 resumption); the record says which did.",
        stacks=SESSION_STACKS,
        workload="--resume",
    ),
    Option(
        "period",
        "duration",
        None,
        "rr: time between requests, on a fixed schedule whatever the replies do (--rr-mode open); "
        "handshakes: time between new connections, an open loop of at most --conns at once "
        "(unset: a new connection as each closes)",
        field_name="period_s",
        fill=0.010,
        fill_note="rr's",
        lo=0.0,
        vary=True,
        workload="--period-us",
        workload_value=lambda s: str(round(s * 1e6)),
    ),
    Option(
        "payload",
        "size",
        None,
        "rr: bytes per request and per response",
        lo=16,
        fill=256,
        hi=16 << 20,
        vary=True,
        workload="--payload",
    ),
    Option(
        "request",
        "size",
        None,
        "rr: bytes per request, apart from the response (secnetperf's rps: 512)",
        default_text="--payload",
        lo=16,
        hi=16 << 20,
        vary=True,
        workload="--request",
    ),
    Option(
        "response",
        "size",
        None,
        "rr: bytes per response (secnetperf's rps: 4000)",
        default_text="--payload",
        lo=16,
        hi=16 << 20,
        vary=True,
        workload="--response",
    ),
    Option(
        "rr-streams",
        "choice",
        None,
        "rr, QUIC stacks: a new stream per request (as HTTP/3) or one long stream",
        default_text="per-request",
        choices=("per-request", "one"),
        stacks=QUIC_STACKS,
        vary=True,
        workload="--rr-streams",
        metavar="per-request|one",
    ),
    Option(
        "tcp-conns",
        "choice",
        None,
        "rr, TCP stacks: one persistent connection, or a new one whenever every open one waits for "
        "a reply (as an HTTP/1.1 client)",
        default_text="one",
        choices=("one", "on-demand"),
        stacks=TCP_STACKS,
        vary=True,
        workload="--tcp-conns",
        metavar="one|on-demand",
    ),
    Option(
        "app",
        "choice",
        None,
        "rr and video: an application protocol over the stack, each request and response one message of "
        "it, framed by its own library: h1 (HTTP/1.1 over a TCP stack, POST and 200 with Content-Length, "
        "http-parser), h2 (HTTP/2 over a TCP stack, a stream per request on one connection, nghttp2 and its "
        "HPACK) or h3 (HTTP/3 over a QUIC stack, a stream per request, nghttp3 and its QPACK); the record splits "
        "the bytes per request into payload, the protocol's framing and headers, and the transport's "
        "(unset: the bare messages)",
        choices=APPS,
        stacks=QUIC_STACKS + TCP_STACKS,
        vary=True,
        workload="--app",
        metavar="|".join(APPS),
    ),
    Option(
        "bitrate",
        "rate",
        None,
        "video: the media's bitrate, one rung of a ladder (a segment is bitrate x --segment bytes)",
        fill=2_500_000,
        fill_note="video",
        lo=8_000,
        hi=256_000_000,
        vary=True,
    ),
    Option(
        "segment",
        "duration",
        None,
        "video: the media each segment holds, fetched as one request",
        fill=2.0,
        fill_note="video",
        lo=0.0,
        vary=True,
    ),
    Option(
        "prebuffer",
        "duration",
        None,
        "video: media in the buffer before playback starts (whole segments: rounded up)",
        fill=2.0,
        fill_note="video",
        lo=0.0,
        vary=True,
    ),
    Option(
        "rr-mode",
        "choice",
        None,
        "rr: open (requests every --period, whatever the replies do) or closed (the next request goes "
        "when an answer comes, --streams in flight per connection, as secnetperf's rps and latency and "
        "netperf's TCP_RR)",
        fill="open",
        fill_note="rr",
        choices=("open", "closed"),
        vary=True,
        workload="--rr-mode",
        metavar="open|closed",
    ),
    Option(
        "warmup",
        "duration",
        None,
        "Time after the handshake left out of the window",
        field_name="warmup_s",
        fill=1.0,
        fill_note="bulk and rr, not with --bytes",
    ),
    Option(
        "streams",
        "int",
        1,
        "Streams in each connection (rr --rr-mode closed: requests in flight on each; bulk: at most 64 in all).",
        short="-n",
        lo=1,
        hi=1000,
        vary=True,
        workload="--streams",
    ),
    Option(
        "conns",
        "int",
        None,
        "bulk and rr: connections (as secnetperf -conns, iperf3 -P), each with its --streams on quic; "
        "TCP stacks carry a stream (rr: a request in flight) per connection, so --conns C --streams S "
        "opens C x S; handshakes: connections opening at once",
        fill=1,
        fill_note="bulk, rr and handshakes",
        lo=1,
        hi=64,
        vary=True,
        workload="--conns",
    ),
    Option(
        "direction",
        "choice",
        None,
        "bulk: who sends: up (the client, as iperf3), down (the server, as iperf3 -R and secnetperf's "
        "download) or both (--streams each way at once, as iperf3 --bidir; each direction's goodput)",
        choices=DIRECTIONS,
        fill="up",
        fill_note="bulk",
        stacks=CONNECTION_STACKS,
        workload_stacks=tuple(n for n in CONNECTION_STACKS if n not in PROGRAM_STACKS),
        vary=True,
        workload="--direction",
        metavar="up|down|both",
    ),
    Option(
        "proto",
        "choice",
        None,
        "bulk, QUIC stacks: the wire's protocol: qprof (qprof's own) or perf, the QUIC performance "
        "protocol (draft-banks-quic-performance, ALPN perf) that msquic's secnetperf and the other "
        "libraries' perf tools speak: a bidirectional stream each, the client's first 8 bytes the count "
        "it wants back (0 up; down: --bytes, or 2^64-1 stopped at --duration's end)",
        choices=PROTOS,
        fill="perf",
        fill_note="bulk on a QUIC stack",
        stacks=QUIC_STACKS,
        vary=True,
        workload="--proto",
        metavar="|".join(PROTOS),
    ),
    Option(
        "topology",
        "choice",
        "netns",
        "Two network namespaces joined by veth, or the host loopback.",
        choices=TOPOLOGIES,
    ),
    Option(
        "link",
        "link",
        None,
        f"Emulate a link on the veth pair (netem, tbf): a preset ({', '.join(link.PRESETS)}), keys "
        f"({link.KEY_HELP}), or a preset then keys that override it (lte,loss=1%).",
        vary=True,
        metavar="PRESET|KEY=V,...",
    ),
    Option(
        "mix",
        "text",
        None,
        "Flows of several stacks at once through the --link, each its own client and server: "
        "STACK:COUNT[:rr],... (e.g. quic:1,tcp:2); per-flow goodput, retransmissions and CPU, Jain's "
        "index, the bottleneck's counters. No probes or stack samples. `qprof run` only.",
        cli=False,
        metavar="STACK:N,...",
    ),
    Option(
        "tcp-cc",
        "text",
        None,
        "TCP stacks: each socket's TCP congestion control (TCP_CONGESTION, as iperf3 -C), e.g. cubic, bbr, reno",
        default_text="the namespace's; the record says which ran",
        stacks=TCP_STACKS,
        vary=True,
        workload="--tcp-cc",
        metavar="NAME",
    ),
    Option(
        "interval",
        "duration",
        1.0,
        "bulk --duration runs: goodput and CPU per side every this long inside the window, "
        "a line each on a terminal (as iperf3 -i) and in the record; 0 for none.",
        field_name="interval_s",
    ),
    Option(
        "mtu",
        "int",
        1500,
        "The veths' MTU, e.g. 9000 for jumbo frames (TCP's segments grow with it; msquic 2.5.1 "
        "caps its own packets at 1500, and the record's quic conn_settings say so).",
        lo=576,
        hi=9000,
        vary=True,
    ),
    Option("port", "int", 4433, "Server port.", short="-p", lo=1, hi=65535),
    Option(
        "io-size",
        "size",
        None,
        "Bytes per send request, a power of two from 1K to 1M",
        default_text="64K for quic and udp (msquic's secnetperf), 128K for TCP stacks (iperf3); describe/transports.py",
        lo=1 << 10,
        hi=1 << 20,
        power_of_two=True,
        vary=True,
        workload="--io-size",
    ),
    Option(
        "exec-profile",
        "choice",
        "lowlat",
        "msquic execution profile.",
        choices=EXEC_PROFILES,
        stacks=("quic",),
        vary=True,
        workload="--exec-profile",
    ),
    Option(
        "pacing",
        "choice",
        None,
        "quic: msquic's send pacing (PacingEnabled, as secnetperf -pacing); the record says what ran",
        default_text="msquic's: on",
        choices=ONOFF,
        stacks=("quic",),
        vary=True,
        workload="--pacing",
        metavar="on|off",
    ),
    Option(
        "quic-cc",
        "choice",
        None,
        "quic: msquic's congestion control (CongestionControlAlgorithm, as secnetperf -cc)",
        default_text="msquic's: cubic",
        choices=("cubic", "bbr"),
        stacks=("quic",),
        vary=True,
        workload="--quic-cc",
        metavar="cubic|bbr",
    ),
    Option(
        "ecn",
        "choice",
        None,
        "quic: msquic's ECN marking and feedback (EcnEnabled, as secnetperf -ecn); TCP stacks: "
        "net.ipv4.tcp_ecn in both namespaces (1 or 0), each connection's TCP_INFO saying whether it "
        "negotiated ECN; the record says what ran",
        default_text="msquic's: off; TCP: the kernel's (2: taken, not asked)",
        choices=ONOFF,
        stacks=("quic",) + TCP_STACKS,
        vary=True,
        workload="--ecn",
        workload_stacks=("quic",),
        metavar="on|off",
    ),
    Option(
        "server-stack",
        "choice",
        None,
        "QUIC stacks: the server's library, when it is not --stack's (the client's): two libraries meeting as "
        "they would on a network, each side measured as itself; the record's environment.quic_library "
        "names both",
        default_text="--stack's",
        choices=QUIC_STACKS,
        stacks=QUIC_STACKS,
        metavar="STACK",
    ),
    Option(
        "server-cmd",
        "text",
        None,
        "bulk, QUIC stacks: run this program as the server instead of qprof-wl, in the server's place, "
        "and profile it: a QUIC performance protocol server (ALPN perf) of any implementation, yours "
        "included; {addr} {port} {cert} {key} {alpn} {bytes} {duration_s} are filled in. The client is "
        "--stack's qprof-wl, which asks for the bytes and counts them (--direction down); with --client-cmd "
        "too, the two are a program pair (--stack external: docs/own-implementation.md)",
        stacks=QUIC_STACKS + ("external",),
        metavar="CMD",
    ),
    Option(
        "client-cmd",
        "text",
        None,
        "bulk, QUIC stacks: run this program as the client instead of qprof-wl, in the client's place, "
        "and profile it: a QUIC performance protocol client (ALPN perf) of any implementation that uploads "
        "for {duration_s} seconds or {bytes} bytes (--direction up); the server is --stack's qprof-wl, which "
        "counts what arrives. The same placeholders as --server-cmd",
        stacks=QUIC_STACKS + ("external",),
        metavar="CMD",
    ),
    Option(
        "stack-file",
        "text",
        None,
        "bulk: your implementation's programs and rules in a TOML file you write once: server = CMD, "
        "client = CMD (either or both, as --server-cmd and --client-cmd), categories = FILE (as --categories, "
        'relative to the file), protocol = "perf" (docs/own-implementation.md)',
        stacks=QUIC_STACKS + ("external",),
        metavar="FILE",
    ),
    Option(
        "msquic",
        "text",
        None,
        "quic: run both sides on this libmsquic.so (your branch, your build flags) instead of the project's; "
        "the record names the file each side loaded, its version and git hash",
        default_text="the project's build/msquic/lib",
        stacks=("quic",),
        vary=True,
        metavar="PATH",
        error=errors.MsquicUnusable,
    ),
    Option(
        "cpus",
        "cpus",
        None,
        "Hold each side's workload to CPUs, as iperf3 -A and secnetperf -affinitize: client=LIST,server=LIST, "
        "LIST as taskset -c takes it (0,2-3); a side left out runs anywhere. The record's placement says where "
        "each side's threads ran.",
        default_text="anywhere",
        metavar="client=LIST,server=LIST",
        error=errors.BadCpus,
    ),
    Option(
        "encrypt",
        "choice",
        None,
        "quic: off sends 1-RTT packets unencrypted, both ends asking "
        "(QUIC_PARAM_CONN_DISABLE_1RTT_ENCRYPTION, as secnetperf -encrypt:0), so crypto's share is "
        "measured, not inferred; the record proves what ran. TLS over TCP: compare tcp-tls against tcp.",
        default_text="on",
        choices=ONOFF,
        stacks=("quic",),
        vary=True,
        workload="--encrypt",
        metavar="on|off",
    ),
    Option(
        "tls",
        "choice",
        None,
        "tcp-tls, tcp-ktls: TLS version",
        default_text="1.3",
        field_name="tls_version",
        choices=("1.2", "1.3"),
        stacks=("tcp-tls", "tcp-ktls"),
        vary=True,
        metavar="1.2|1.3",
        error=errors.BadTls,
    ),
    Option(
        "cipher",
        "text",
        None,
        "tcp-tls, tcp-ktls: OpenSSL cipher",
        default_text="AES-128-GCM, QUIC's AEAD",
        stacks=("tcp-tls", "tcp-ktls"),
        metavar="NAME",
    ),
    Option(
        "sendfile",
        "flag",
        False,
        "tcp, tcp-ktls: the client sendfile()s its data (zero copy).",
        stacks=("tcp", "tcp-ktls"),
    ),
    Option(
        "gso",
        "choice",
        None,
        "Segmentation offload. quic: msquic's UDP_SEGMENT (an interposer fails its "
        "start-up probe; GRO follows); udp: --send-mode gso or sendmmsg; tcp stacks: TSO+GSO of the veth "
        "pair",
        default_text="as the stack starts",
        choices=ONOFF,
        vary=True,
        metavar="on|off",
    ),
    Option(
        "gro",
        "choice",
        None,
        "Receive coalescing. quic, udp: the receiver's UDP_GRO; tcp stacks: GRO of the veth pair",
        default_text="as the stack starts",
        choices=ONOFF,
        vary=True,
        metavar="on|off",
    ),
    Option(
        "send-mode",
        "choice",
        None,
        "udp: one datagram per sendmsg, a batch per sendmmsg, or a batch per GSO send",
        default_text="gso",
        choices=UDP_SEND_MODES,
        stacks=("udp",),
        vary=True,
        metavar="|".join(UDP_SEND_MODES),
    ),
    Option(
        "batch",
        "int",
        None,
        "udp: datagrams per sendmmsg or GSO send",
        default_text="the workload's (build/bin/qprof-wl --help)",
        lo=1,
        hi=1024,
        stacks=("udp",),
        vary=True,
    ),
    Option(
        "dgram-size",
        "int",
        None,
        "udp: UDP payload bytes per datagram",
        default_text="1472, MTU 1500",
        lo=16,
        hi=65507,
        stacks=("udp",),
        vary=True,
    ),
    Option(
        "guest",
        "flag",
        False,
        "Run the whole measurement in a QEMU guest with Debian's kernel (for kTLS); `make guest` first.",
    ),
    Option(
        "server",
        "text",
        None,
        "Run the server on another host, reached over SSH: user@host, host:port or a Host of your ssh config. "
        "qprof there must be this commit, installed by the README's commands (docs/remote.md); this machine "
        "runs the client, and each side is measured on its own host.",
        metavar="HOST",
        show_default=False,
    ),
    Option(
        "client",
        "text",
        None,
        "With --server: run the client on another host too, reached over SSH as --server is; this machine then "
        "only drives the run, and the data flows between the two hosts.",
        metavar="HOST",
        show_default=False,
    ),
    Option(
        "server-addr",
        "text",
        None,
        "With --server: the address the server listens on and the client connects to, on the server's host",
        default_text="the address --server was reached at over SSH",
        metavar="ADDR",
    ),
    Option(
        "link-dev",
        "text",
        None,
        "With --server and --link: the device of each side the link goes on, as HOST:DEV,HOST:DEV (HOST as given "
        "to --server or --client, or local for this machine): emulating a link changes a real NIC's qdisc, which "
        "qprof does only where named, and undoes on every exit",
        default_text="none: --link is refused on hosts",
        metavar="HOST:DEV,HOST:DEV",
    ),
    Option(
        "ssh-config",
        "text",
        None,
        "ssh's configuration file for the hosts, as `ssh -F FILE` (it replaces ~/.ssh/config and /etc/ssh/ssh_config).",
        metavar="FILE",
        show_default=False,
    ),
    Option("probes", "probes", PROBE_NAMES, "eBPF probes to attach, comma-separated, or 'none'."),
    Option(
        "syscall-time",
        "flag",
        False,
        "syscalls probe: also time each call (time inside, sum and histogram), at the cost of a "
        "sys_enter program and two clock reads a call; without it those figures are null.",
    ),
    Option(
        "softirq-time",
        "flag",
        False,
        "cputhread probe: also time softirqs (by vector, system-wide, and the part served on each side's "
        "stack), at the cost of two programs and two clock reads a softirq; without it those figures are null.",
    ),
    Option(
        "packets-rx",
        "flag",
        False,
        "packets probe: also count what each veth receives, and GRO, at the cost of up to three programs a "
        "received packet, and the syscalls probe the UDP datagrams each receive call took (reading its control "
        "data); without it those figures are null (over veth each skb arrives as the peer sent it). "
        "On by itself where the run sets the veths' GRO (--gro on|off on a TCP stack), which only the receive side "
        "shows.",
    ),
    Option(
        "sample-hz",
        "int",
        99,
        "perf cpu-clock stack samples per CPU-second over the window (0: no stacks; "
        "see RESULTS.md for what each rate costs).",
        lo=0,
        hi=20000,
    ),
    Option(
        "call-graph",
        "choice",
        None,
        "How perf walks user stacks: dwarf (from .eh_frame, complete through "
        "code without frame pointers such as OpenSSL's) or fp (frame pointers, smaller perf.data)",
        default_text="dwarf",
        choices=CALL_GRAPHS,
        metavar="|".join(CALL_GRAPHS),
    ),
    Option(
        "categories",
        "text",
        None,
        "Flame categories of your own: a file of CATEGORY<TAB>REGEX rules (flamegraphs/categories.rules' "
        "format), tried before qprof's at each frame; your library's frames, say. Kept in the run directory, "
        "so every later command reads the run's stacks by them",
        metavar="FILE",
    ),
    Option("keep-perf-data", "flag", False, "Keep perf.data in the run directory after folding."),
    Option("runs-dir", "text", "runs", "Where run directories are written.", envvar="QPROF_RUNS_DIR"),
]
BY_NAME: Dict[str, Option] = {o.name: o for o in OPTIONS}
for _o in OPTIONS:  # what each pattern's row says it takes and sets, in the rows' order
    _o.patterns = tuple(p.name for p in patterns.PATTERNS.values() if _o.name in p.options)
    _o.set_by = tuple(p.name for p in patterns.PATTERNS.values() if _o.name in p.sets)
BY_FIELD: Dict[str, Option] = {o.field: o for o in OPTIONS}
# `qprof compare --vary rtt=10ms,50ms` sets one key of the link on top of --link.
LINK_PARTS: Tuple[str, ...] = ("rtt", "loss", "rate", "jitter")
VARY_KEYS: Tuple[str, ...] = tuple(o.name for o in OPTIONS if o.vary) + LINK_PARTS

_PYTYPES = {
    "int": Optional[int],
    "size": Optional[int],
    "rate": Optional[int],
    "duration": Optional[float],
    "choice": Optional[str],
    "flag": bool,
    "text": Optional[str],
    "probes": tuple,
    "link": Optional[str],
    "cpus": Optional[str],
}

# The value object runner.run takes: one field per option, its default the table's.
# Frozen: describe/plan.py resolves options into new ones, never in place.
RunOptions = make_dataclass(
    "RunOptions", [(o.field, _PYTYPES[o.kind], field(default=o.default)) for o in OPTIONS], frozen=True
)
RunOptions.__doc__ = "One measured transfer's settings; fields and defaults from describe/options.py OPTIONS."


def filled(opts, *names: str):
    """opts with each named option's table `fill` where it is unset (a new object)."""
    values = {BY_NAME[n].field: BY_NAME[n].fill for n in names if getattr(opts, BY_NAME[n].field) is None}
    return replace(opts, **values) if values else opts


def not_taken(name: str, stack: str) -> str:
    """The sentence that refuses an option on a stack its row does not name."""
    o = BY_NAME[name]
    return (
        f"--{o.name} applies to --stack {', '.join(o.stacks)}, and {stack}'s workload does not take it; "
        f"drop --{o.name}."
    )


def check(opts) -> None:
    """Every option's own range and choices. Whether an option applies to
    the stack is checked by transports.validate and offload.plan, which know why
    (describe/plan.py's resolve calls them next)."""
    for o in OPTIONS:
        o.check(getattr(opts, o.field))


def workload_args(opts, role: str) -> List[str]:
    """The options passed straight on to qprof-wl, for one role."""
    argv = []
    for o in OPTIONS:
        value = getattr(opts, o.field)
        stacks = o.workload_stacks
        if not o.workload or role not in o.roles or value is None or (stacks and opts.stack not in stacks):
            continue
        if o.kind == "flag":
            argv += [o.workload] if value else []
        else:
            argv += [o.workload, o.workload_value(value)]
    return argv


def to_json(opts) -> str:
    """The guest hand-over: every field, as JSON."""
    return json.dumps(asdict(opts), indent=1)


def from_json(text: str):
    data = json.loads(text)
    known = {f.name for f in fields(RunOptions)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise errors.BadValue(
            f"the options file has unknown fields ({', '.join(unknown)}); it was written by another qprof version."
        )
    if "probes" in data:
        data["probes"] = tuple(data["probes"])
    opts = RunOptions(**data)
    check(opts)
    return opts
