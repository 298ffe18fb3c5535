# SPDX-License-Identifier: GPL-2.0-only
"""The transport stacks qprof drives ("stack" in options and records;
call stacks are flamegraphs' business), and what differs between them: the
workload's options, which checks apply before a run, which syscalls carry
the data, and how the transport describes itself in the record."""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from qprof import errors

TLS_VERSIONS = ("1.2", "1.3")
UDP_IP_HEADERS = 28  # IPv4 + UDP
TCP = "TCP_INFO tcpi_total_retrans (segments)"  # the TCP stacks' retransmissions


# The transport's state at an --interval sample (describe/state.py): levels
# at the sample, and two running counts (lost, retransmitted).
STATE_FIELDS = (
    "cwnd_bytes",
    "rtt_us",
    "in_flight_bytes",
    "pacing_bytes_per_s",
    "lost_packets",
    "retransmitted_packets",
    "send_queue_bytes",
    "recv_queue_bytes",
)


@dataclass(frozen=True)
class StateSource:
    """Where a stack's marks hold each value of the transport's state at an
    --interval sample (describe/state.py's FIELDS), as (field, "group.key"),
    why each value its library does not give is null, as (field, why), and
    why one it gives only at times may be missing from a mark (sometimes)."""

    given: Tuple[Tuple[str, str], ...]
    absent: Tuple[Tuple[str, str], ...]
    sometimes: Tuple[Tuple[str, str], ...] = ()


def _state(given: Dict[str, str], absent: Dict[str, str], sometimes: Optional[Dict[str, str]] = None) -> StateSource:
    return StateSource(tuple(given.items()), tuple(absent.items()), tuple((sometimes or {}).items()))


_QUIC_RETRANSMITS = "QUIC resends no packet: a lost packet's frames go out in new ones (lost_packets counts those)"
_NO_PACING = "{} exposes no pacing rate"
_QUIC_QUEUES = "{} owns its UDP socket and stream buffers and reports no queue levels"

# Each open connection's TCP_INFO and SIOCOUTQ/SIOCINQ, summed over them
# (rtt: their mean): workloads/wl_tcp.c, tcp_counts_add.
TCP_STATE = _state(
    given={
        "cwnd_bytes": "state.cwnd_bytes",
        "rtt_us": "state.rtt_us",
        "in_flight_bytes": "state.in_flight_bytes",
        "pacing_bytes_per_s": "state.pacing_bytes_per_s",
        "retransmitted_packets": "state.retransmitted_packets",
        "send_queue_bytes": "state.send_queue_bytes",
        "recv_queue_bytes": "state.recv_queue_bytes",
    },
    absent={
        "lost_packets": "TCP_INFO keeps no count of lost segments (tcpi_lost is those marked lost now); "
        "retransmitted_packets counts the ones sent again",
    },
)


@dataclass(frozen=True)
class Stack:
    name: str
    transport: str  # "udp" or "tcp"
    tls: str  # "quic" (inside QUIC), "user", "kernel" or "none"
    sendfile: bool  # the client can sendfile() its data
    rw_is_network: bool  # read()/write() on the socket carry the data
    io_size: int  # default bytes per send: secnetperf's for QUIC, iperf3's for TCP
    library: str = ""  # a QUIC stack's implementation: msquic, quinn
    workload: str = "qprof-wl"  # the workload's program (build/bin)
    # A transport of qprof-wl's in a library of its own, which qprof-wl
    # loads for the stack (build/lib; workloads/wl_plugin.c says why).
    plugin: str = ""
    dwarf_stack_bytes: int = 8192  # user stack perf copies per sample (collectors/perf.py says why)
    # A QUIC library's GRO, as qprof's interposer steers it (describe/offload.py):
    # "receive" when the library believes GRO only once a receive came
    # coalesced, "setsockopt" when UDP_GRO's setsockopt taking is its word
    # (the interposer takes it and ignores it, so under --gro off the
    # socket does not coalesce and the library's word is not evidence),
    # "none" when the library never asks for GRO (--gro on is refused).
    gro_word: str = "receive"
    gro_needs_gso: bool = False  # the library tests GRO only after a GSO send: GSO off means GRO off
    # A flow of datagrams with no connection (udp): nothing to open, answer
    # requests on, resume or share; one way, client to server, whose
    # receiver counts what was lost; its sender's CPU is per byte sent.
    datagram: bool = False
    sessions: bool = True  # a TLS or QUIC session a connection may resume (--resume)
    # The patterns its workload runs (describe/patterns/); None: every one.
    patterns: Optional[Tuple[str, ...]] = None
    # Where a --mix flow's retransmissions come from: the sender's own count
    # over the connection's life, in its own words; None: it keeps none
    # (ngtcp2 counts a closed stream's losses, and a bulk flow's stream is
    # open until the end; udp resends nothing).
    retransmits_source: Optional[str] = None
    # The transport's state at each --interval sample (describe/state.py);
    # None: qprof reads none from the stack's marks (every value null, and why).
    state: Optional[StateSource] = None

    @property
    def configurable_tls(self) -> bool:
        return self.tls in ("user", "kernel")

    @property
    def is_quic(self) -> bool:
        return self.tls == "quic"

    @property
    def programs(self) -> bool:
        """Run by programs of the user's, not qprof-wl (describe/external.py)."""
        return not self.workload

    @property
    def msquic(self) -> bool:
        """msquic's: its reports, counters and knobs are msquic's own."""
        return self.library == "msquic"

    @property
    def has_quic_stats(self) -> bool:
        """A QUIC library beside msquic: its workload's counters are quic_stats."""
        return self.is_quic and self.library != "msquic"


def has_quic_stats(stack_name: str) -> bool:
    stack = STACKS.get(stack_name)
    return stack is not None and stack.has_quic_stats


def msquic(stack_name: Optional[str]) -> bool:
    """The stack's row says msquic (Stack.msquic)."""
    stack = STACKS.get(stack_name)
    return stack is not None and stack.msquic


def datagram(stack_name: Optional[str]) -> bool:
    """The stack's row says a flow of datagrams (Stack.datagram)."""
    stack = STACKS.get(stack_name)
    return stack is not None and stack.datagram


def sessions(stack_name: Optional[str]) -> bool:
    """The stack's row says a session to resume (Stack.sessions)."""
    stack = STACKS.get(stack_name)
    return stack is not None and stack.sessions


def side_stack(opts, side: str) -> Optional[str]:
    """The stack a side runs: --stack's, or the server's own
    (--server-stack); None for a program of the user's (--server-cmd,
    --client-cmd), which is no row of qprof's."""
    if getattr(opts, f"{side}_cmd", None):
        return None
    if side == "server" and getattr(opts, "server_stack", None):
        return opts.server_stack
    return opts.stack


def refuse_resume(stack_name: str) -> None:
    """--resume on a stack whose row says no session to resume: one sentence, the stacks that have one."""
    if not sessions(stack_name):
        have = ", ".join(n for n, s in STACKS.items() if s.sessions)
        raise errors.StackCannot(
            f"--resume resumes a TLS or QUIC session, and {stack_name} has none to resume; use one of {have}."
        )


STACKS: Dict[str, Stack] = {
    "quic": Stack(
        "quic",
        "udp",
        "quic",
        sendfile=False,
        rw_is_network=False,
        io_size=64 << 10,
        library="msquic",
        gro_needs_gso=True,
        retransmits_source="msquic SendSuspectedLostPackets (packets)",
        # QUIC_STATISTICS_V2 of the connection the marks report (wl_quic_report.c).
        state=_state(
            given={
                "cwnd_bytes": "conn_stats.send_congestion_window",
                "rtt_us": "conn_stats.rtt_us",
                "lost_packets": "conn_stats.send_suspected_lost_packets",
            },
            absent={
                "in_flight_bytes": "msquic gives bytes in flight only in its NETWORK_STATISTICS event, raised on "
                "every ACK once enabled (QUIC_SETTINGS.NetStatsEventEnabled): a cost the marks do not add",
                "pacing_bytes_per_s": _NO_PACING.format("msquic"),
                "retransmitted_packets": _QUIC_RETRANSMITS,
                "send_queue_bytes": _QUIC_QUEUES.format("msquic"),
                "recv_queue_bytes": _QUIC_QUEUES.format("msquic"),
            },
        ),
    ),
    # quinn's protocol crate (quinn-proto) on rustls, a transport of
    # qprof-wl's (in a library of its own beside qprof-wl:
    # workloads/rs/quinn): every pattern, written once, runs on it.
    "quinn": Stack(
        "quinn",
        "udp",
        "quic",
        sendfile=False,
        rw_is_network=False,
        io_size=64 << 10,
        library="quinn",
        plugin="libqprof-wl-quinn.so",
        dwarf_stack_bytes=32768,
        gro_word="setsockopt",  # the record's recv_coalescing: UDP_GRO taken, as quinn-udp says it
        retransmits_source="quinn PathStats lost_packets (packets)",
        # The other QUIC libraries' quic_stats: their connections' running
        # counts summed, the stats connection's levels (wl_quiclib.c, the Rust
        # and Go adapters).
        state=_state(
            given={
                "cwnd_bytes": "quic_stats.cwnd",
                "rtt_us": "quic_stats.rtt_us",
                "lost_packets": "quic_stats.lost_packets",
            },
            absent={
                "in_flight_bytes": "quinn-proto's PathStats give no bytes in flight (the path's in_flight is private)",
                "pacing_bytes_per_s": "quinn-proto's cubic, which qprof runs, says no pacing rate "
                "(its ControllerMetrics' pacing_rate is None)",
                "retransmitted_packets": _QUIC_RETRANSMITS,
                "send_queue_bytes": _QUIC_QUEUES.format("quinn-proto"),
                "recv_queue_bytes": _QUIC_QUEUES.format("quinn-proto"),
            },
        ),
    ),
    # ngtcp2 on its GnuTLS crypto helper (Debian's), a transport of
    # qprof-wl's beside msquic: every pattern, written once, runs on it.
    "ngtcp2": Stack(
        "ngtcp2",
        "udp",
        "quic",
        sendfile=False,
        rw_is_network=False,
        io_size=64 << 10,
        library="ngtcp2",
        gro_word="setsockopt",  # wl_ngtcp2.c's offloads(): UDP_GRO taken
        state=_state(
            given={
                "cwnd_bytes": "quic_stats.cwnd",
                "rtt_us": "quic_stats.rtt_us",
                "in_flight_bytes": "quic_stats.bytes_in_flight",
            },
            absent={
                "pacing_bytes_per_s": "ngtcp2 0.12's cubic, which qprof runs, sets no pacing rate "
                "(ngtcp2_conn_stat.pacing_rate stays 0, and ngtcp2 paces by a rule of its own)",
                "lost_packets": "ngtcp2 0.12 counts lost packets per stream, once the stream has closed "
                "(ngtcp2_conn_get_stream_loss_count), and a bulk stream is open until the end",
                "retransmitted_packets": _QUIC_RETRANSMITS,
                "send_queue_bytes": _QUIC_QUEUES.format("ngtcp2"),
                "recv_queue_bytes": _QUIC_QUEUES.format("ngtcp2"),
            },
        ),
    ),
    # quiche through its C API, a transport of qprof-wl's (in a library of
    # its own beside qprof-wl: workloads/quiche/wl_quiche.c): every pattern,
    # written once, runs on it.
    "quiche": Stack(
        "quiche",
        "udp",
        "quic",
        sendfile=False,
        rw_is_network=False,
        io_size=64 << 10,
        library="quiche",
        plugin="libqprof-wl-quiche.so",
        dwarf_stack_bytes=32768,
        retransmits_source="quiche Stats lost (packets)",
        state=_state(
            given={
                "cwnd_bytes": "quic_stats.cwnd",
                "rtt_us": "quic_stats.rtt_us",
                "lost_packets": "quic_stats.lost_packets",
                # Its Stats.retrans: packets that carried resent data.
                "retransmitted_packets": "quic_stats.retrans_packets",
            },
            absent={
                "in_flight_bytes": "quiche's Stats and PathStats give no bytes in flight",
                "pacing_bytes_per_s": "quiche exposes no pacing rate, only each packet's send time "
                "(quiche_send_info.at)",
                "send_queue_bytes": _QUIC_QUEUES.format("quiche"),
                "recv_queue_bytes": _QUIC_QUEUES.format("quiche"),
            },
        ),
    ),
    # quic-go (Go, crypto/tls) through its own UDP I/O, a transport of
    # qprof-wl's in a library of its own (workloads/go/quic-go, built as a
    # C shared library with its Go runtime inside): every pattern, written
    # once, runs on it.
    "quic-go": Stack(
        "quic-go",
        "udp",
        "quic",
        sendfile=False,
        rw_is_network=False,
        io_size=64 << 10,
        library="quic-go",
        plugin="libqprof-wl-quic-go.so",
        dwarf_stack_bytes=32768,
        gro_word="none",  # quic-go receives with recvmmsg, 8 datagrams a call, never UDP_GRO
        # quic-go's PacketsLost goes down when a packet declared lost arrives
        # after all: not a count a window's difference can be taken of.
        retransmits_source=None,
        state=_state(
            given={"cwnd_bytes": "quic_stats.cwnd", "rtt_us": "quic_stats.rtt_us"},
            absent={
                "in_flight_bytes": "quic-go's ConnectionStats give no bytes in flight",
                "pacing_bytes_per_s": _NO_PACING.format("quic-go"),
                "lost_packets": "quic-go's PacketsLost falls when a packet declared lost arrives after all: "
                "not a running count an interval can take the difference of",
                "retransmitted_packets": _QUIC_RETRANSMITS,
                "send_queue_bytes": _QUIC_QUEUES.format("quic-go"),
                "recv_queue_bytes": _QUIC_QUEUES.format("quic-go"),
            },
        ),
    ),
    # s2n-quic (Rust, s2n-tls on aws-lc) on its own tokio runtime and UDP
    # I/O, a transport of qprof-wl's in a library of its own
    # (workloads/rs/s2n-quic): every pattern, written once, runs on it.
    "s2n-quic": Stack(
        "s2n-quic",
        "udp",
        "quic",
        sendfile=False,
        rw_is_network=False,
        io_size=64 << 10,
        library="s2n-quic",
        plugin="libqprof-wl-s2n-quic.so",
        dwarf_stack_bytes=32768,
        gro_word="setsockopt",  # the record's recv_coalescing: UDP_GRO taken, as s2n-quic-platform says it
        retransmits_source="s2n-quic packet_lost events (packets)",
        # s2n-quic 1.91 resumes sessions (and has no 0-RTT) only behind its
        # unstable feature: --resume is refused, not run as full handshakes.
        sessions=False,
        state=_state(
            given={
                "cwnd_bytes": "quic_stats.cwnd",
                "rtt_us": "quic_stats.rtt_us",
                # Its RecoveryMetrics event's, as the last one said it.
                "in_flight_bytes": "quic_stats.bytes_in_flight",
                # Its PacingRateUpdated event's: the rate its pacer last spaced a burst by
                # (none below a 2 ms RTT: sometimes).
                "pacing_bytes_per_s": "quic_stats.pacing_rate",
                "lost_packets": "quic_stats.lost_packets",
            },
            absent={
                "retransmitted_packets": _QUIC_RETRANSMITS,
                "send_queue_bytes": _QUIC_QUEUES.format("s2n-quic"),
                "recv_queue_bytes": _QUIC_QUEUES.format("s2n-quic"),
            },
            sometimes={
                "pacing_bytes_per_s": "s2n-quic paces, and says its rate, only once the smoothed RTT reaches "
                "2 ms (MINIMUM_PACING_RTT)",
            },
        ),
    ),
    # tquic (Tencent's, Rust, on the BoringSSL it vendors) through its C
    # API, a transport of qprof-wl's in a library of its own
    # (workloads/tquic/wl_tquic.c) as quiche's: every pattern, written
    # once, runs on it.
    "tquic": Stack(
        "tquic",
        "udp",
        "quic",
        sendfile=False,
        rw_is_network=False,
        io_size=64 << 10,
        library="tquic",
        plugin="libqprof-wl-tquic.so",
        dwarf_stack_bytes=32768,
        retransmits_source="tquic ConnectionStats lost_count (packets)",
        state=_state(
            given={
                "cwnd_bytes": "quic_stats.cwnd",
                "rtt_us": "quic_stats.rtt_us",
                # Its path stats' pacing_rate: the BBR it runs says one.
                "pacing_bytes_per_s": "quic_stats.pacing_rate",
                "lost_packets": "quic_stats.lost_packets",
            },
            absent={
                "in_flight_bytes": "tquic's path stats give the most ever in flight (max_inflight), not the level",
                "retransmitted_packets": "tquic counts no resent packets apart from its losses (lost_packets)",
                "send_queue_bytes": _QUIC_QUEUES.format("tquic"),
                "recv_queue_bytes": _QUIC_QUEUES.format("tquic"),
            },
        ),
    ),
    # Two programs of the user's (--client-cmd and --server-cmd, both): no
    # qprof-wl runs, so no pattern's own counts; a bulk transfer whose bytes
    # the syscalls probe counts (describe/external.py), over UDP.
    "external": Stack(
        "external",
        "udp",
        "quic",
        sendfile=False,
        rw_is_network=False,
        io_size=0,
        workload="",
        dwarf_stack_bytes=32768,
        sessions=False,
        patterns=("bulk",),
    ),
    # Raw UDP, no reliability or crypto: the kernel's floor for a UDP transport.
    "udp": Stack(
        "udp",
        "udp",
        "none",
        sendfile=False,
        rw_is_network=False,
        io_size=64 << 10,
        datagram=True,
        sessions=False,
        state=_state(
            {}, dict.fromkeys(STATE_FIELDS, "raw datagrams: no congestion control, acknowledgement or resending")
        ),
    ),
    "tcp": Stack(
        "tcp",
        "tcp",
        "none",
        sendfile=True,
        rw_is_network=True,
        io_size=128 << 10,
        sessions=False,
        retransmits_source=TCP,
        state=TCP_STATE,
    ),
    "tcp-tls": Stack(
        "tcp-tls",
        "tcp",
        "user",
        sendfile=False,
        rw_is_network=True,
        io_size=128 << 10,
        retransmits_source=TCP,
        state=TCP_STATE,
    ),
    "tcp-ktls": Stack(
        "tcp-ktls",
        "tcp",
        "kernel",
        sendfile=True,
        rw_is_network=True,
        io_size=128 << 10,
        retransmits_source=TCP,
        state=TCP_STATE,
    ),
}


def validate(stack_name: str, tls_version: Optional[str], cipher: Optional[str], sendfile: bool) -> Stack:
    """Refuse what cannot run, with the reason and the fix, before anything
    starts (whether this kernel has kernel TLS is collectors/preflight.py's)."""
    stack = STACKS.get(stack_name)
    if stack is None:
        raise errors.UnknownStack(f"unknown stack '{stack_name}'; valid stacks are: {', '.join(STACKS)}.")
    if (tls_version is not None or cipher is not None) and not stack.configurable_tls:
        what = "QUIC's TLS is fixed to TLS 1.3 with AES-128-GCM" if stack.is_quic else f"plain {stack.name} has no TLS"
        raise errors.BadTls(
            f"--tls and --cipher apply to tcp-tls and tcp-ktls only ({what}); drop them or pick one of those stacks."
        )
    if tls_version is not None and tls_version not in TLS_VERSIONS:
        raise errors.BadTls(f"unknown TLS version '{tls_version}'; use --tls 1.2 or --tls 1.3.")
    if sendfile and not stack.sendfile:
        why = (
            "user-space TLS must encrypt in user space"
            if stack.tls == "user"
            else "msquic sends from its own buffers"
            if stack.name == "quic"
            else "datagrams are sent from user buffers"
        )
        raise errors.SendfileUnsupported(
            f"--sendfile works with tcp and tcp-ktls only ({stack.name}: {why}); drop it or pick one of those."
        )
    return stack


def workload_args(
    stack: Stack, role: str, tls_version: Optional[str], cipher: Optional[str], sendfile: bool, sends: bool
) -> List[str]:
    """sends: the role sends the data (describe/direction.py)."""
    args = []
    if stack.configurable_tls:
        args += ["--tls", tls_version or "1.3"]
        if cipher:
            args += ["--cipher", cipher]
    if sendfile and sends:
        args += ["--sendfile"]
    return args


def ktls_label(client_send: Optional[bool], server_recv: Optional[bool]) -> str:
    """What runs in the kernel for the upload's direction: never claim more
    than the sockets reported."""
    if client_send and server_recv:
        return "tx+rx"
    if client_send:
        return "tx only"
    if server_recv:
        return "rx only"
    return "none"
