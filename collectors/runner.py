# SPDX-License-Identifier: GPL-2.0-only
"""`qprof run`: one measured bulk transfer, from options to run record.

The nesting of context managers is the order of ownership: the run
directory outlives the topology, which outlives the workload processes,
so on any exit the processes die first, then the namespaces go, then the
record is marked for what happened.
"""

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Optional

from qprof import errors, paths, remains
from qprof.rundir import RunDir, write_text_atomic

from . import (
    capabilities,
    environment,
    floor,
    guest,
    link,
    listen,
    netstat,
    offload,
    options,
    record,
    topology,
    transports,
)
from .faults import NO_FAULTS, Faults
from .measurement import MEASUREMENT, Measurement
from .options import RunOptions
from .perf import PerfRecorder
from .probes import ProbeSet, target_for
from .topology import Topology
from .window import Window, edge_sample, interval_figures, sample_intervals, sleep_watching, take_edge
from .workload import WorkloadProcess

DEFAULT_WARMUP_S = 1.0
# A guest run without a --duration (--bytes, downloads) may take this long, plus boot and set-up.
GUEST_UNTIMED_S = 600
MIN_RR_PERIOD_S = 100e-6  # qprof-wl's --period-us floor
GUEST_SLACK_S = 300
# What a guest run takes beyond its warm-up and window: boot, set-up in
# the emulator, the record (a 1 s tcp run took 28.9 s here, a 4 s one 33.4).
GUEST_OVERHEAD_S = 27.0
READY_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
FINISH_TIMEOUT_S = 30.0
# The client keeps sending this long past the window's end, so the end
# edge is taken while the transfer is still in its steady state.
TAIL_S = 0.3
# A fixed-size transfer may take as long as it needs, but not stall: the
# server's progress is read this often, and no new byte for STALL_S ends it.
PROGRESS_CHECK_S = 5.0
STALL_S = 30.0
# qprof-wl's pattern period is max(--io-size, this) (workloads/wl.h, WL_PAT_PERIOD_MIN).
PATTERN_PERIOD_MIN = 64 << 10
# The guest-deadline fault's deadline, boot included: a guest run of a longer --duration cannot meet it.
GUEST_DEADLINE_FAULT_S = 10.0


def log(msg: str) -> None:
    """Progress for a person watching; scripts get stderr for errors only."""
    if sys.stderr.isatty():
        print(f"qprof: {msg}", file=sys.stderr, flush=True)


def check_options(opts: RunOptions, faults: Faults = NO_FAULTS) -> transports.Stack:
    """Refuse options that cannot run together, before anything starts;
    fills in the stack's defaults. faults: the no-netem fault reaches the
    netem check here."""
    options.check(opts)
    if opts.mix:
        raise errors.BadMix("--mix is run by `qprof run` alone (collectors/mixrun.py); drop --mix here.")
    stack = transports.validate(opts.stack, opts.tls_version, opts.cipher, opts.sendfile, opts.guest)
    if opts.io_size is None:
        opts.io_size = stack.io_size
    check_pattern(opts)
    if opts.pattern in ("bulk", "rr"):
        check_bulk_length(opts)
    check_link(opts, faults)
    check_tcp_cc(opts)
    if opts.interval_s and opts.interval_s < options.MIN_INTERVAL_S:
        raise errors.BadValue(
            f"--interval {opts.interval_s * 1e3:g}ms is below {options.MIN_INTERVAL_S * 1e3:g}ms, finer than "
            "the marks it reads can be taken without disturbing the run; raise it, or 0 for none."
        )
    offload.plan(opts.stack, opts.topology, opts.gso, opts.gro, opts.send_mode, opts.batch, opts.dgram_size)
    if opts.dgram_size is not None and opts.topology == "netns" and opts.dgram_size > opts.mtu - record.UDP_IP_HEADERS:
        raise errors.BadValue(
            f"--dgram-size {opts.dgram_size} does not fit the veth MTU {opts.mtu} "
            f"(at most {opts.mtu - record.UDP_IP_HEADERS} bytes of UDP payload); lower it."
        )
    return stack


def check_bulk_length(opts: RunOptions) -> None:
    """A bulk transfer of --bytes (measured whole) or --duration (after a
    warm-up); fills in the defaults."""
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
        opts.warmup_s = 0.0
        return
    if opts.warmup_s is None:
        opts.warmup_s = DEFAULT_WARMUP_S
    if opts.duration_s is None:
        opts.duration_s = options.DEFAULT_DURATION_S


def check_pattern(opts: RunOptions) -> None:
    """What --pattern allows: a download's window is its downloads, so
    the bulk transfer's length and warm-up do not apply; --size, --count and
    --resume apply to downloads only. Fills in the download defaults."""
    if opts.pattern != "download":
        for name, value in (("size", opts.size), ("count", opts.count), ("resume", opts.resume or None)):
            if value is not None:
                raise errors.BadValue(f"--{name} applies to --pattern download only; add it, or drop --{name}.")
    if opts.pattern != "rr":
        for name, value in (
            ("period", opts.period_s),
            ("payload", opts.payload),
            ("rr-streams", opts.rr_streams),
            ("tcp-conns", opts.tcp_conns),
        ):
            if value is not None:
                raise errors.BadValue(f"--{name} applies to --pattern rr only; add it, or drop --{name}.")
    if opts.pattern == "rr":
        check_rr(opts)
    if opts.pattern != "download":
        return
    if opts.stack == "udp":
        raise errors.BadValue(
            "--pattern download opens a connection per download, and udp has no connection; "
            "use quic, tcp, tcp-tls or tcp-ktls."
        )
    for name, given in (
        ("duration", opts.duration_s is not None),
        ("bytes", opts.bytes is not None),
        ("warmup", bool(opts.warmup_s)),
    ):
        if given:
            raise errors.BadValue(
                f"--{name} does not apply to --pattern download, whose window is its --count downloads "
                f"of --size bytes each; drop --{name}."
            )
    if opts.streams != 1:
        raise errors.BadValue("--pattern download uses one stream per connection; drop --streams.")
    if opts.resume and opts.stack == "tcp":
        raise errors.BadValue("--resume resumes a TLS or QUIC session, and tcp has none; use quic or tcp-tls.")
    if opts.size is None:
        opts.size = options.DEFAULT_DOWNLOAD_SIZE
    if opts.count is None:
        opts.count = options.DEFAULT_DOWNLOAD_COUNT
    opts.warmup_s = 0.0


def check_rr(opts: RunOptions) -> None:
    """Requests and responses: a connection's stack, the stack's own
    choice of streams or connections, a timed window."""
    if opts.stack == "udp":
        raise errors.BadValue(
            "--pattern rr matches each response to its request on a connection, and udp has none; "
            "use quic, tcp, tcp-tls or tcp-ktls."
        )
    if opts.rr_streams is not None and opts.stack != "quic":
        raise errors.BadValue("--rr-streams chooses QUIC's streams; for TCP stacks use --tcp-conns.")
    if opts.tcp_conns is not None and opts.stack not in options.TCP_STACKS:
        raise errors.BadValue("--tcp-conns chooses TCP connections; for quic use --rr-streams.")
    for name, given in (("bytes", opts.bytes is not None), ("streams", opts.streams != 1)):
        if given:
            raise errors.BadValue(f"--{name} does not apply to --pattern rr, which runs for --duration; drop --{name}.")
    if opts.period_s is None:
        opts.period_s = options.DEFAULT_RR_PERIOD_S
    # In nanoseconds: 100us parses to 9.999999999999999e-05 s, which is not below the floor.
    if round(opts.period_s * 1e9) < round(MIN_RR_PERIOD_S * 1e9):
        raise errors.BadValue(
            f"--period {opts.period_s * 1e6:g}us is below {MIN_RR_PERIOD_S * 1e6:g}us, faster than one "
            "client can keep a schedule; raise it."
        )
    duration_s = opts.duration_s or options.DEFAULT_DURATION_S
    if opts.period_s >= duration_s:
        raise errors.BadValue(
            f"--period {opts.period_s:g}s is not shorter than the {duration_s:g} s window, so no request "
            "would be due inside it; lower --period or raise --duration."
        )
    if opts.payload is None:
        opts.payload = options.DEFAULT_RR_PAYLOAD


def check_tcp_cc(opts: RunOptions) -> None:
    """A TCP congestion control this kernel has, for a TCP stack's sockets."""
    if opts.tcp_cc is None:
        return
    if opts.stack not in options.TCP_STACKS:
        raise errors.BadValue(
            f"--tcp-cc sets TCP's congestion control, and {opts.stack} does not use TCP "
            "(msquic has its own, cubic); drop --tcp-cc or use a TCP stack."
        )
    if opts.guest:
        return  # the guest's kernel says (a refusal there comes back with its sentence)
    have = Path(topology.TCP_CC_AVAILABLE).read_text().split()
    if opts.tcp_cc not in have:
        raise errors.KernelFeatureMissing(
            f"this kernel has no TCP congestion control '{opts.tcp_cc}' (it has: {', '.join(have)}); "
            "pick one of those, or load its module (modprobe tcp_NAME)."
        )


def check_link(opts: RunOptions, faults: Faults = NO_FAULTS) -> None:
    """A --link the topology and this kernel can carry; a lossy or jittery
    link without a rate turns GSO off (collectors/link.py says why)."""
    if opts.link is None:
        return
    spec = link.parse(opts.link)
    if opts.topology == "loopback":
        raise errors.BadLink(
            "--link emulates the veth between two namespaces, and the loopback topology has none; "
            "drop --topology loopback or --link."
        )
    if spec.needs_wire_packets:
        if opts.gso == "on":
            raise errors.BadLink(
                f"--link '{opts.link}' has loss or jitter but no rate, and netem would then drop or delay "
                "each GSO packet whole; add a rate to the link (tbf splits GSO packets) or drop --gso on."
            )
        opts.gso = "off"
    if opts.guest or os.geteuid() != 0:
        return  # the guest's kernel has the qdiscs; a user is refused by preflight
    for kind in spec.qdisc_kinds:
        why = capabilities.qdisc_missing(kind, no_netem=faults.no_netem)
        if why is not None:
            raise errors.LinkUnsupported(
                f"--link '{opts.link}' needs {kind}, which this kernel cannot add ({why}); "
                "run it in a QEMU guest with Debian's kernel: add --guest."
            )


def preflight(opts: RunOptions, faults: Faults = NO_FAULTS) -> Path:
    check_options(opts, faults)
    if os.geteuid() != 0:
        raise errors.NotRoot("qprof run needs root (network namespaces, perf, eBPF); run it as root, e.g. with sudo.")
    return paths.workload_binary()


def make_certificate(run_path: Path) -> tuple:
    cert, key = run_path / "server-cert.pem", run_path / "server-key.pem"
    r = subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=qprof",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise errors.TransportOpenFailed(
            f"openssl could not make the run's certificate ({r.stderr.strip()}); check that openssl is installed."
        )
    return cert, key


def workload_argv(
    binary: Path,
    opts: RunOptions,
    role: str,
    addr: str,
    port: int,
    plan: Optional[offload.OffloadPlan] = None,
    run_path: Optional[Path] = None,
) -> list:
    stack = transports.STACKS[opts.stack]
    argv = [str(binary), "--stack", opts.stack, "--role", role, "--addr", addr, "--port", str(port), "--control"]
    argv += options.workload_args(opts, role)
    sender = "server" if opts.pattern == "download" else "client"
    argv += transports.workload_args(stack, role, opts.tls_version, opts.cipher, opts.sendfile, sender)
    env = listen.server_env(stack.name, addr, port, run_path) if role == "server" else {}
    if plan is not None:
        env = listen.merge(plan.env[role], env)
        argv += plan.args[role]
    return offload.argv_with_env(env, argv)


def run(
    opts: RunOptions,
    on_progress: Callable[[str], None] = log,
    faults: Faults = NO_FAULTS,
    on_interval: Optional[Callable[[dict], None]] = None,
    on_guest: Optional[Callable[[str, float, Optional[float]], None]] = None,
) -> dict:
    """faults: real failures for the tests (collectors/faults.py), never in
    the record. on_interval: each --interval's figures as it ends (the
    live lines; not from a guest). on_guest: a guest run's stages (see
    run_in_guest)."""
    binary = preflight(opts, faults)
    with remains.exclusive("run"):
        if opts.guest:
            return run_in_guest(opts, on_progress, faults, on_guest)
        return _run(opts, binary, on_progress, faults, on_interval)


def _run(opts: RunOptions, binary: Path, on_progress, faults: Faults, on_interval=None) -> dict:
    with RunDir(Path(opts.runs_dir)) as rundir:
        rundir.record.update({"stack": opts.stack, "config": asdict(opts)})
        cert, key = make_certificate(rundir.path)
        if faults.bad_cert:
            cert.write_text("not a certificate\n")
        plan = offload.plan(
            opts.stack,
            opts.topology,
            opts.gso,
            opts.gro,
            opts.send_mode,
            opts.batch,
            opts.dgram_size,
            run_path=rundir.path,
        )
        if faults.no_interposer:  # the steering silently not taking effect
            plan.env = {"client": {}, "server": {}}
        floor_parts = floor.measure(opts.stack)  # cached; before anything else runs
        with Topology(opts.topology, rundir.id[-6:], mtu=opts.mtu) as topo:
            emulated = set_up(topo, opts, plan.devices, f"run {rundir.id}: {opts.stack}", rundir.path, on_progress)
            m = _transfer(
                opts,
                binary,
                topo,
                rundir.path,
                cert,
                key,
                on_progress,
                plan,
                faults,
                floor_parts,
                emulated,
                on_interval,
            )
            m.link = emulated.applied if emulated else None
        # The raw measurement first: if describing it fails, the evidence stays.
        write_text_atomic(rundir.path / MEASUREMENT, m.to_json())
        rec = record.describe(m, rundir.path)
        rundir.record["offload"] = rec["offload"]
        offload.verify(plan.effective, rec["offload"]["observed"])
        rundir.complete(rec)
        return rundir.record


def set_up(topo: Topology, opts: RunOptions, devices: dict, what: str, run_path: Path, on_progress):
    """The topology made ready for a run: the veths' offload features and
    the --link (its Emulated, or None)."""
    on_progress(f"{what} over {topo.kind}" + (f" {topo.subnet}" if topo.subnet else "") + f", output in {run_path}")
    for ep in (topo.client, topo.server) if topo.kind == "netns" else ():
        offload.set_device_features(ep, devices)
    if not opts.link:
        return None
    return link.apply(link.parse(opts.link), {"client": topo.client, "server": topo.server}, opts.mtu)


def _transfer(
    opts,
    binary,
    topo,
    run_path,
    cert,
    key,
    on_progress,
    plan,
    faults: Faults,
    floor_parts: dict,
    emulated=None,
    on_interval=None,
) -> Measurement:
    """The transfer and every instrument around it; what they read, raw."""
    server_argv = workload_argv(binary, opts, "server", topo.server.addr, opts.port, plan, run_path)
    server_argv += ["--cert", str(cert), "--key", str(key)]
    if faults.verify:  # the server expects another pattern period than the client sends
        period = max(opts.io_size, PATTERN_PERIOD_MIN)
        server_argv += ["--io-size", str(period * 2 if period < 1 << 20 else period // 2)]
    connect_port = opts.port + 1 if faults.handshake else opts.port
    client_argv = workload_argv(binary, opts, "client", topo.server.addr, connect_port, plan) + ["--wait-start"]
    if faults.tls_mismatch:
        client_argv += ["--tls", "1.2" if (opts.tls_version or "1.3") == "1.3" else "1.3"]
    if faults.ktls_claim:
        client_argv += ["--fault", "ktls-claim"]
    sides = (("client", topo.client), ("server", topo.server))

    with (
        WorkloadProcess("server", server_argv, topo.server, run_path / "server.log") as server,
        _client_with_probes(opts, client_argv, topo, run_path, server) as (client, probes),
        _perf(opts, run_path) as perf,
    ):
        udp_before = {side: netstat.read_udp(ep) for side, ep in sides}
        dev_before = {side: netstat.read_device(ep) for side, ep in sides}
        connected, window, tls_before, intervals = _measure(
            opts, server, client, probes, perf, on_progress, faults, emulated, on_interval
        )
        measured_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        client_done = client.finish(FINISH_TIMEOUT_S)
        server_done = server.finish(FINISH_TIMEOUT_S)
        udp_after = {side: netstat.read_udp(ep) for side, ep in sides}
        dev_after = {side: netstat.read_device(ep) for side, ep in sides}
        probe_records = probes.records()
        capture = None
        if perf is not None:
            perf.stop()
            samples = perf.fold({"client": client.pid, "server": server.pid}, run_path / "stacks")
            capture = {
                "event": "cpu-clock",
                "sample_period_ns": perf.period_ns,
                "sample_hz": perf.sample_hz,
                "call_graph": perf.call_graph,
                "samples": samples,
                "samples_per_cpu": perf.samples_per_cpu(),
                "stacks_dir": "stacks",
            }
    for p in (client, server):
        if p.done.get("exit_code") != 0:
            p.raise_exit()
    if window.bytes <= 0:
        raise errors.PeerDied(
            "no bytes arrived inside the window though both sides reported success; see the run's logs."
        )
    env = environment.describe()
    env["topology"] = topo.describe()
    return Measurement(
        options=asdict(opts),
        environment=env,
        measured_at=measured_at,
        pids={"client": client.pid, "server": server.pid},
        window=window,
        connected=connected,
        done={"client": client_done, "server": server_done},
        tls_before=tls_before,
        udp={"before": udp_before, "after": udp_after},
        devices={"before": dev_before, "after": dev_after},
        probes=probe_records,
        perf=capture,
        server_binds=listen.read_report(run_path),
        reports={"client": client.reports, "server": server.reports} if opts.pattern != "bulk" else None,
        offload={
            **plan.describe(),
            "device_features": (
                {side: offload.read_device_features(ep) for side, ep in sides} if topo.kind == "netns" else None
            ),
            "interposer": offload.read_interposer_reports(run_path),
        },
        floor_parts=floor_parts,
        intervals=intervals,
    )


@contextmanager
def _perf(opts, run_path):
    if not opts.sample_hz:
        yield None
        return
    with PerfRecorder(run_path, opts.sample_hz, opts.keep_perf_data, opts.call_graph) as perf:
        yield perf


def _measure(opts, server, client, probes, perf, on_progress, faults: Faults, emulated=None, on_interval=None):
    """Connect, warm up, and take the window's two edges. A fixed-size
    transfer is measured whole: the window opens before the client
    connects and closes when the server has the last byte."""
    tls_before = {"client": transports.read_tls_stat(client.pid), "server": transports.read_tls_stat(server.pid)}
    procs = (server, client)
    if opts.pattern == "download":
        if perf is not None:
            perf.enable()
        start = take_edge("start", server, client, probes, emulated)
        client.send("start")
        if faults.stall:  # the sender freezes; the watchdog below must end the run
            os.kill(server.pid, signal.SIGSTOP)
        on_progress(f"{opts.count} downloads of {opts.size:,} bytes, each on a new connection")
        _wait_for_done(
            client,
            lambda got: (
                f"the downloads stalled: the client received no byte for {STALL_S:.0f} s "
                f"({sum(e['event'] == 'download' for e in client.reports)} of {opts.count} downloads done); "
                f"see {client.log_path}."
            ),
        )
        end = take_edge("end", server, client, probes, emulated)
        if perf is not None:
            perf.disable()
        connected = next((e for e in client.reports if e["event"] == "connected"), None) or {}
        return connected, Window(start, end, receiver="client"), tls_before, None
    if opts.bytes:
        if perf is not None:
            perf.enable()
        start = take_edge("start", server, client, probes, emulated)
        client.send("start")
        connected = client.wait_event("connected", CONNECT_TIMEOUT_S)
        if faults.stall:  # the sender freezes; the watchdog below must end the run
            os.kill(client.pid, signal.SIGSTOP)
        on_progress("measuring until the last byte arrives")
        _wait_for_done(
            server,
            lambda got: (
                f"the fixed-size transfer stalled: the server received no byte for {STALL_S:.0f} s "
                f"({got} of {opts.bytes * opts.streams} bytes arrived); see {server.log_path}."
            ),
        )
        end = take_edge("end", server, client, probes, emulated)
        if perf is not None:
            perf.disable()
        return connected, Window(start, end), tls_before, None
    client.send("start")
    connected = client.wait_event("connected", CONNECT_TIMEOUT_S)
    on_progress(f"connected; warming up {opts.warmup_s:g} s")
    sleep_watching(connected["t_ns"] + int(opts.warmup_s * 1e9), procs)
    if emulated is not None and emulated.spec.rate_bit and opts.pattern == "bulk":
        on_progress("waiting for the link to fill")
        emulated.applied["before_window"] = link.wait_saturated(
            emulated.endpoints["client"],
            emulated.spec,
            lambda s: sleep_watching(time.monotonic_ns() + int(s * 1e9), procs),
        )
    if perf is not None:
        perf.enable()
    start = take_edge("start", server, client, probes, emulated)
    on_progress(f"measuring {opts.duration_s:g} s")
    if faults.kill_server:
        sleep_watching(start.t_ns + int(opts.duration_s * 0.3e9), procs)
        server.proc.kill()
    end_ns = start.t_ns + int(opts.duration_s * 1e9)
    intervals = None
    if opts.interval_s and opts.pattern == "bulk":
        intervals = sample_intervals(
            start,
            end_ns,
            opts.interval_s,
            server,
            server,
            client,
            lambda a, b: on_interval(interval_line(a, b, start.t_ns)) if on_interval else None,
        )
    else:
        sleep_watching(end_ns, procs)
    end = take_edge("end", server, client, probes, emulated)
    if perf is not None:
        perf.disable()
    sleep_watching(end.t_ns + int(TAIL_S * 1e9), procs)
    client.send("stop")
    if intervals is not None and on_interval:
        last = intervals[-1] if intervals else edge_sample(start, "server")
        on_interval(interval_line(last, edge_sample(end, "server"), start.t_ns))
    return connected, Window(start, end), tls_before, intervals


def interval_line(a: dict, b: dict, t0_ns: int) -> dict:
    """An interval's figures with its place in the window (s from its start)."""
    return {"start_s": (a["t_ns"] - t0_ns) / 1e9, "end_s": (b["t_ns"] - t0_ns) / 1e9, **interval_figures(a, b)}


def _wait_for_done(receiver, stalled: Callable[[int], str]) -> None:
    """The receiver's done report, however long the transfer takes while
    bytes keep arriving; a stall of STALL_S is a Timeout, its sentence
    stalled(bytes received so far)."""
    seen, last_progress = -1, time.monotonic()
    while True:
        try:
            receiver.wait_event("done", PROGRESS_CHECK_S)
            return
        except errors.Timeout:
            pass
        got = receiver.mark("progress")["app_bytes"]
        if got > seen:
            seen, last_progress = got, time.monotonic()
        elif time.monotonic() - last_progress > STALL_S:
            raise errors.Timeout(stalled(got))


@contextmanager
def _client_with_probes(opts, client_argv, topo, run_path, server):
    """The client (waiting for "start") and the probes attached to both
    processes before it connects; torn down in reverse order."""
    server.wait_event("ready", READY_TIMEOUT_S)
    with WorkloadProcess("client", client_argv, topo.client, run_path / "client.log") as client:
        target = target_for(topo, {"server": server.pid, "client": client.pid})
        with ProbeSet(list(opts.probes), target, run_path) as probes:
            yield client, probes


def guest_expected_s(opts: RunOptions) -> Optional[float]:
    """About how long a guest run takes; None when its length is the
    transfer's (--bytes, downloads)."""
    if opts.duration_s is None:
        return None
    return GUEST_OVERHEAD_S + (opts.warmup_s or 0.0) + opts.duration_s


def run_in_guest(opts: RunOptions, on_progress, faults: Faults, on_guest=None) -> dict:
    """The whole measurement inside a QEMU guest; its record comes back here.
    on_guest(stage, seconds since boot began, guest_expected_s) as each
    stage is reached ("boot" first)."""
    art = guest.artifacts()
    with RunDir(Path(opts.runs_dir)) as rundir:
        rundir.record.update({"stack": "mix" if opts.mix else opts.stack, "config": asdict(opts)})
        out = (rundir.path / "guest").resolve()
        out.mkdir()
        # The same options for the guest's qprof, as JSON (collectors/options.py).
        # Not a guest again inside the guest; its runs go where the host reads them.
        (out / "options.json").write_text(options.to_json(replace(opts, guest=False, runs_dir=str(out / "runs"))))
        (out / "cmd.sh").write_text(
            guest.guest_command(["--options-file", str(out / "options.json"), *faults.argv()], out)
        )
        on_progress(
            f"run {rundir.id}: {opts.stack} in a QEMU guest ({art.kernel_release}, TCG), output in {rundir.path}"
        )
        timeout_s = opts.warmup_s + (opts.duration_s or GUEST_UNTIMED_S) + GUEST_SLACK_S
        if faults.guest_deadline:
            timeout_s = GUEST_DEADLINE_FAULT_S
        with guest.GuestVM(art, out, rundir.path / "console.log") as vm:
            expected = guest_expected_s(opts)

            def stage(name: str, s: float) -> None:
                on_progress(f"guest: {name} after {s:.0f} s")
                if on_guest:
                    on_guest(name, s, expected)

            stage("boot", 0.0)
            stages = vm.wait(timeout_s, stage)
        rc_file = out / "rc"
        if not rc_file.exists():
            raise errors.GuestBootFailed(
                f"the guest stopped at stage '{stages[-1] if stages else 'boot'}' "
                f"(last console line: {vm.last_console_line()}); see {rundir.path / 'console.log'}."
            )
        rc = int(rc_file.read_text().strip() or 1)
        if rc != 0:
            lines = [l for l in (out / "run.stderr").read_text(errors="replace").splitlines() if l.strip()]
            sentence = lines[-1].removeprefix("qprof: ") if lines else f"qprof exited {rc} in the guest"
            raise errors.by_exit_code(rc, f"in the guest: {sentence}")
        rec = json.loads((out / "run.stdout").read_text())
        rec["guest_run"] = str(Path("guest") / "runs" / rec.pop("id"))
        rec.pop("status", None)
        rec["config"] = asdict(opts)
        env = rec["environment"]
        env["emulated"] = True
        env["guest"] = {
            "kernel_package": art.package,
            "kernel_release": art.kernel_release,
            "qemu": guest.qemu_version(),
            "accel": "tcg",
            "cpu": "max",
            "cpus": guest.GUEST_CPUS,
            "memory_mb": guest.GUEST_MEMORY_MB,
        }
        env["host"] = environment.describe()
        rundir.complete(rec)
        return rundir.record
