# SPDX-License-Identifier: GPL-2.0-only
"""Resolve, then run: the user's options become a complete, immutable Plan
before anything starts.

`resolve` checks every option's range (the table, describe/options.py),
then every rule between options, once, and fills every default the table
declares (its `fill`) where it applies. Each step returns new options
(dataclasses.replace); nothing here, or downstream, changes what it was
given. What only the machine can answer (root, kernel TLS, a congestion
control, a qdisc) is collectors/preflight.py's, after this.

A Plan is the options, resolved, and its endpoints: one flow for a run,
N for a `--mix`, each with its stack, its own options, its port and its
GSO/GRO plan. The runner measures any Plan the same way.
"""

from dataclasses import dataclass, replace
from typing import Dict, Optional, Tuple

from qprof import errors
from qprof.describe import external, link, mix, offload, options, patterns, transports
from qprof.describe.options import RunOptions
from qprof.describe.transports import UDP_IP_HEADERS


@dataclass(frozen=True)
class FlowPlan:
    """One client and server pair: what it runs, on which port."""

    index: int
    stack: transports.Stack
    options: RunOptions  # the flow's own: a mix's flow sees only what applies to it
    offload: offload.OffloadPlan
    mix_flow: Optional[mix.Flow] = None  # a mix's flow as the user gave it

    @property
    def port(self) -> int:
        return self.options.port


@dataclass(frozen=True)
class Plan:
    options: RunOptions  # every default filled
    flows: Tuple[FlowPlan, ...]  # one for a run; a mix's N

    @property
    def is_mix(self) -> bool:
        return self.options.mix is not None


def resolve(opts: RunOptions, cpus: int = 1) -> Plan:
    """The complete plan of a run or a mix (cpus: the machine's, which
    bounds a mix's flows), or the first rule it breaks as a QprofError."""
    options.check(opts)
    _hosts(opts)
    if opts.categories is not None and opts.guest:
        raise errors.BadValue(
            "--categories: a guest run's stacks are read by qprof in the guest, where the file is not; "
            "drop --guest, or categorise the run later with `qprof flame`."
        )
    if opts.mix:
        for flag, given in (("--server-cmd", opts.server_cmd), ("--client-cmd", opts.client_cmd)):
            if given is not None:
                raise errors.BadMix(
                    f"{flag} runs one program in one side's place, and a --mix's flows each run their own "
                    f"qprof-wl; drop {flag}."
                )
        if opts.server_stack is not None:
            raise errors.BadMix(
                "--server-stack pairs the two sides of one run, and a --mix's flows each name their own stack; "
                "drop --server-stack."
            )
        return _resolve_mix(opts, cpus)
    opts, stack = resolve_one(opts)
    return Plan(opts, (_flow(0, stack, opts),))


def resolve_one(opts: RunOptions) -> Tuple[RunOptions, transports.Stack]:
    """One flow's options, every rule checked and every default filled."""
    if opts.mix:
        raise errors.BadMix("--mix is run by `qprof run` alone; drop --mix here.")
    stack = transports.validate(opts.stack, opts.tls_version, opts.cipher, opts.sendfile)
    if opts.io_size is None:
        opts = replace(opts, io_size=stack.io_size)
    opts = _pattern(opts)
    # A pattern's step may name the stack (bulk: two programs of the user's are "external").
    stack = transports.STACKS[opts.stack]
    _implementation(opts, stack)
    if patterns.row(opts).window == "timed":
        opts = _bulk_length(opts)
    opts = _link(opts)
    _stack_knobs(opts)
    if opts.interval_s and opts.interval_s < options.MIN_INTERVAL_S:
        raise errors.BadValue(
            f"--interval {opts.interval_s * 1e3:g}ms is below {options.MIN_INTERVAL_S * 1e3:g}ms, finer than "
            "the marks it reads can be taken without disturbing the run; raise it, or 0 for none."
        )
    off = offload.plan(opts.stack, opts.topology, opts.gso, opts.gro, opts.send_mode, opts.batch, opts.dgram_size)
    if off.sets_device_gro and not opts.packets_rx:
        # The run checks what it set against the receive side (offload.observe).
        opts = replace(opts, packets_rx=True)
    if opts.dgram_size is not None and opts.topology == "netns" and opts.dgram_size > opts.mtu - UDP_IP_HEADERS:
        raise errors.BadValue(
            f"--dgram-size {opts.dgram_size} does not fit the veth MTU {opts.mtu} "
            f"(at most {opts.mtu - UDP_IP_HEADERS} bytes of UDP payload); lower it."
        )
    _option_rows(opts)
    if opts.server_stack is not None:
        _server_stack(opts)
    role = external.role_of(opts)
    if role is not None:
        _one_side_msquic(opts, f"the {role} is {external.FLAGS[role]}'s program", external.FLAGS[role])
    return opts, stack


def _server_stack(opts: RunOptions) -> None:
    """--server-stack: the server's library runs what the client's does,
    each refusing what its own row refuses; msquic's knobs (--msquic
    among them) would reach one side of a pair only."""
    server = transports.validate(opts.server_stack, opts.tls_version, opts.cipher, opts.sendfile)
    _implementation(opts, server)
    if opts.resume:
        transports.refuse_resume(opts.server_stack)
    offload.plan(opts.server_stack, opts.topology, opts.gso, opts.gro)
    if opts.server_stack != opts.stack:
        _one_side_msquic(
            opts, f"the server runs {opts.server_stack}, whose workload keeps its library's own", "--server-stack"
        )


def _one_side_msquic(opts: RunOptions, server: str, flag: str) -> None:
    """msquic's knobs (--msquic among them) would reach the client alone
    when the server is not msquic's qprof-wl: refused, naming the server."""
    for o in options.OPTIONS:
        value = getattr(opts, o.field)
        if o.stacks == ("quic",) and value not in (None, False, o.default, o.fill):
            raise errors.StackCannot(f"--{o.name} is msquic's, and {server}; drop --{o.name} or {flag}.")


def _flow(index: int, stack: transports.Stack, o: RunOptions, mix_flow: Optional[mix.Flow] = None) -> FlowPlan:
    plan = offload.plan(o.stack, o.topology, o.gso, o.gro, o.send_mode, o.batch, o.dgram_size)
    return FlowPlan(index, stack, o, plan, mix_flow)


def _resolve_mix(opts: RunOptions, cpus: int) -> Plan:
    """The mix as a whole (describe/mix.py), then each flow as a single
    run of its stack; a mix has no probes and no stack samples."""
    flows = mix.check(opts, cpus)
    opts = _link(_bulk_length(replace(opts, probes=(), sample_hz=0)))
    planned = []
    for f in flows:
        fo, stack = resolve_one(mix.flow_options(opts, f))
        planned.append(_flow(f.index, stack, fo, f))
    # The mix's own options (its record's config) say what its flows of
    # requests resolved: their --period and --payload.
    for o in (options.BY_NAME["period"], options.BY_NAME["payload"]):
        fo = next((fp.options for fp in planned if fp.options.pattern in o.patterns), None)
        if fo is not None:
            opts = replace(opts, **{o.field: getattr(fo, o.field)})
    return Plan(opts, tuple(planned))


def _implementation(opts: RunOptions, stack: transports.Stack) -> None:
    """A stack whose row names the patterns its transport runs (None: every one) refuses the rest."""
    if stack.patterns is not None and opts.pattern not in stack.patterns:
        raise errors.StackCannot(
            f"--stack {stack.name} runs --pattern {patterns.words(stack.patterns)}, not {opts.pattern}; "
            "use --stack quic (msquic) for it."
        )


def _bulk_length(opts: RunOptions) -> RunOptions:
    """A bulk transfer of --bytes (measured whole) or --duration (after a warm-up)."""
    if opts.bytes is not None:
        if opts.bytes <= 0:
            raise errors.BadValue(
                f"--bytes {opts.bytes} moves nothing; give a size such as 64K or 1G, or --duration for a timed run."
            )
        if opts.warmup_s:
            raise errors.BadValue(
                "--warmup does not apply to --bytes: a fixed-size transfer is measured whole, "
                "handshake included; drop --warmup, or use --duration for a steady-state window."
            )
        return replace(opts, warmup_s=0.0)
    return options.filled(opts, "warmup", "duration")


def _pattern(opts: RunOptions) -> RunOptions:
    """What --pattern allows: each option of some patterns only (the
    option table's patterns and set_by), then the pattern's own step."""
    row = patterns.row(opts)
    # An option of other patterns (the option table's patterns and set_by).
    for o in options.OPTIONS:
        if not o.patterns or row.name in o.patterns + o.set_by or getattr(opts, o.field) in (None, False):
            continue
        one = len(o.patterns) == 1
        which, fix = (f"{o.patterns[0]} only", "add it") if one else (patterns.words(o.patterns), "use one of them")
        raise errors.StackCannot(f"--{o.name} applies to --pattern {which}; {fix}, or drop --{o.name}.")
    if row.senders is not None and opts.direction is not None:  # bulk's: --direction says
        raise errors.StackCannot(
            "--direction applies to --pattern bulk only (a download goes down, rr both ways); drop --direction."
        )
    if row.connections and transports.datagram(opts.stack):
        raise errors.StackCannot(
            f"--pattern {row.name} {row.connections}, and {opts.stack} has no connection; "
            "use quic, tcp, tcp-tls or tcp-ktls."
        )
    return row.resolve(opts)


# An SSH destination, as collectors/ssh.py's parse_destination takes it.
DESTINATION = "user@host, host:port, user@host:port, [IPv6]:port or a Host name from your ssh config"
# What an empty value of each option that names a host or a file should be.
_NAMES = {
    "--server": f"an SSH destination ({DESTINATION})",
    "--client": f"an SSH destination ({DESTINATION})",
    "--host": f"an SSH destination ({DESTINATION})",
    "HOST": f"an SSH destination ({DESTINATION})",
    "--ssh-config": "an ssh config file (ssh -F)",
    "--server-addr": "the server's address on the link between the hosts",
    "--link-dev": "a device on each side as HOST:DEV,HOST:DEV",
    "--msquic": "the path of a built libmsquic.so",
}


def not_empty(flag: str, value: Optional[str]) -> None:
    """An option that names a host or a file, given but empty (--server ""):
    refused, where it would otherwise read as not given; `qprof remote`
    and `qprof clean --host` refuse theirs with the same sentence."""
    if value is not None and not value.strip():
        drop = f", or drop {flag}" if flag.startswith("--") else ""
        raise errors.BadValue(f"{flag} {value!r} is empty; give {_NAMES[flag]}{drop}.")


def _hosts(opts: RunOptions) -> None:
    """--server places the server on another host over SSH: the rest of the
    run must be one that can be placed there."""
    for flag, value in (
        ("--server", opts.server),
        ("--client", opts.client),
        ("--ssh-config", opts.ssh_config),
        ("--server-addr", opts.server_addr),
        ("--link-dev", opts.link_dev),
        ("--msquic", opts.msquic),
    ):
        not_empty(flag, value)
    if opts.guest and opts.cpus is not None:
        raise errors.BadValue(
            "--cpus holds each side to this host's CPUs, and --guest runs both sides in a QEMU guest whose "
            "vCPUs QEMU runs in turn on one host thread (TCG, thread=single), so no CPU of the guest is a "
            "side's own; drop --cpus or --guest."
        )
    if opts.server is None:
        for given, flag in (
            (opts.ssh_config, "--ssh-config"),
            (opts.client, "--client"),
            (opts.server_addr, "--server-addr"),
            (opts.link_dev, "--link-dev"),
        ):
            if given is not None:
                raise errors.BadValue(
                    f"{flag} goes with a server on another host (--server HOST); add --server or drop {flag}."
                )
        return
    refuse = [
        (opts.guest, "--guest runs both sides in a QEMU guest here", "--guest"),
        (opts.mix is not None, "--mix runs its flows between two namespaces here", "--mix"),
        (opts.topology == "loopback", "--topology loopback runs both sides on this host's loopback", "--topology"),
        (opts.mtu != options.BY_NAME["mtu"].default, "--mtu sets the veths' MTU; a host's NIC keeps its own", "--mtu"),
        (opts.cpus is not None, "--cpus names this machine's CPUs, which the hosts need not have", "--cpus"),
        (opts.msquic is not None, "--msquic names a file on this machine", "--msquic"),
        (
            opts.ecn is not None and opts.stack in options.TCP_STACKS,
            "--ecn on a TCP stack sets net.ipv4.tcp_ecn in the run's namespaces, which a host's own does not have",
            "--ecn",
        ),
        (
            opts.link is not None and opts.link_dev is None,
            "--link would change the qdisc of a real NIC, which qprof does only on devices named with "
            "--link-dev HOST:DEV,HOST:DEV",
            "--link (or name the devices)",
        ),
        (
            opts.gso is not None or opts.gro is not None,
            "--gso and --gro set offloads through a preloaded library or on the devices, "
            "which a run on a real NIC does not change",
            "--gso/--gro",
        ),
    ]
    for bad, why, flag in refuse:
        if bad:
            raise errors.BadValue(f"--server places the server on another host, and {why}; drop {flag} or --server.")
    if opts.link_dev is not None:
        link_devices(opts)


LOCAL_HOST = "local"


def link_devices(opts: RunOptions) -> Dict[str, Tuple[str, str]]:
    """--link-dev as role -> (host, device): one device on each side's
    host, HOST as given to --server or --client, or "local" for this
    machine's side; BadLink otherwise."""
    if opts.link is None:
        raise errors.BadLink("--link-dev names where --link goes; add --link or drop --link-dev.")
    hosts = {opts.server: "server", opts.client or LOCAL_HOST: "client"}
    out: Dict[str, Tuple[str, str]] = {}
    for part in opts.link_dev.split(","):
        host, sep, dev = part.strip().rpartition(":")
        if not sep or not host or not dev:
            raise errors.BadLink(f"--link-dev {part!r} is not HOST:DEV; name a device of each side, e.g. local:eth1.")
        role = hosts.get(host)
        if role is None:
            raise errors.BadLink(
                f"--link-dev names {host!r}, which is not a host of this run ({', '.join(hosts)}); name those."
            )
        if role in out:
            raise errors.BadLink(f"--link-dev names two devices of the {role} ({host}); name one on each side.")
        out[role] = (host, dev)
    missing = [f"{role} ({h})" for h, role in hosts.items() if role not in out]
    if missing:
        raise errors.BadLink(
            f"--link-dev names no device of the {' or '.join(missing)}: a link goes on each side's egress, "
            "as between namespaces; name one on each side."
        )
    return out


def _stack_knobs(opts: RunOptions) -> None:
    """--tcp-cc is TCP's (whether this kernel has it is preflight's); the
    quic knobs are msquic's (the rest: _option_rows)."""
    if opts.tcp_cc is not None and opts.stack not in options.TCP_STACKS:
        quic_cc = opts.stack in options.BY_NAME["quic-cc"].stacks
        fix = "use --quic-cc" if quic_cc else "drop --tcp-cc or use a TCP stack"
        raise errors.StackCannot(f"--tcp-cc sets TCP's congestion control, and {opts.stack} does not use TCP; {fix}.")
    if opts.msquic is not None and opts.guest:
        raise errors.BadValue(
            "--msquic names a file on this machine, and --guest runs the workloads in a QEMU guest of their "
            "own; drop --guest or --msquic."
        )
    if opts.ecn is not None and opts.stack in options.TCP_STACKS and opts.topology == "loopback":
        raise errors.BadValue(
            "--ecn on a TCP stack sets net.ipv4.tcp_ecn in the run's two namespaces, and --topology loopback "
            "runs in the host's, which qprof does not change; drop --topology loopback or --ecn."
        )
    if transports.datagram(opts.stack) and opts.ecn is not None:
        raise errors.StackCannot(
            "--ecn is msquic's for quic and net.ipv4.tcp_ecn for the TCP stacks; udp's datagrams get no "
            "ECN feedback. Drop --ecn."
        )


def _option_rows(opts: RunOptions) -> None:
    """Every option whose row names the stacks it applies to is refused on
    the others (options.Option.stacks): the catch-all behind the rules
    before it, which say more where there is more to say. A value the plan
    filled in itself (Option.fill) is no one's choice."""
    tcp = opts.stack in options.TCP_STACKS
    why = {
        "pacing": "TCP's pacing is the kernel's (fq or bbr's own: --tcp-cc bbr)",
        "quic-cc": "TCP's congestion control is --tcp-cc",
        "encrypt": "for TLS over TCP, compare tcp-tls against tcp (qprof compare --stacks tcp,tcp-tls)",
    }
    for o in options.OPTIONS:
        value = getattr(opts, o.field)
        if not o.stacks or opts.stack in o.stacks or value in (None, False, o.default, o.fill):
            continue
        if o.stacks == ("quic",):
            reason = why[o.name] if tcp and o.name in why else f"{opts.stack}'s workload keeps its library's own"
            if o.name == "msquic":
                reason = f"{opts.stack} does not use msquic"
            raise errors.StackCannot(f"--{o.name} is msquic's, for --stack quic; {reason}. Drop --{o.name}.")
        raise errors.StackCannot(options.not_taken(o.name, opts.stack))


def _link(opts: RunOptions) -> RunOptions:
    """A --link the topology can carry; a lossy or jittery link without a
    rate turns GSO off (describe/link.py says why)."""
    if opts.link is None:
        return opts
    spec = link.parse(opts.link)
    if opts.topology == "loopback":
        raise errors.BadLink(
            "--link emulates the veth between two namespaces, and the loopback topology has none; "
            "drop --topology loopback or --link."
        )
    if spec.needs_wire_packets:
        if opts.server is not None:
            raise errors.BadLink(
                f"--link '{opts.link}' has loss or jitter but no rate, which needs GSO off, and a run on hosts "
                "does not change its sides' offloads; add a rate to the link (tbf splits GSO packets)."
            )
        if opts.gso == "on":
            raise errors.BadLink(
                f"--link '{opts.link}' has loss or jitter but no rate, and netem would then drop or delay "
                "each GSO packet whole; add a rate to the link (tbf splits GSO packets) or drop --gso on."
            )
        return replace(opts, gso="off")
    return opts
