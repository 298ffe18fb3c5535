"""`qprof run`: one measured bulk transfer, from options to run record.

The nesting of context managers is the order of ownership: the run
directory outlives the topology, which outlives the workload processes,
so on any exit the processes die first, then the namespaces go, then the
record is marked for what happened.
"""
import json
import os
import subprocess
from contextlib import contextmanager
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Optional

from . import cpu, derive, environment, errors, floor, guest, listen, netstat, offload, options, paths, remains, stacks
from qprof.flamegraphs import summary as flame_summary
from qprof.flamegraphs.sides import side_bytes

from .perf import PerfRecorder
from .faults import NO_FAULTS, Faults
from .options import RunOptions
from .probes import ProbeSet, target_for
from .rundir import RunDir
from .topology import Topology
from .window import Window, counter_delta, sleep_watching, take_edge
from .workload import WorkloadProcess

STACKS = options.STACK_NAMES
PROBES = options.PROBE_NAMES

DEFAULT_WARMUP_S = 1.0
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
UDP_IP_HEADERS = 28   # IPv4 + UDP
MSQUIC_MAX_MTU = 1500  # msquic's default MaximumMtu


def log(msg: str) -> None:
    """Progress for a person watching; scripts get stderr for errors only."""
    if sys.stderr.isatty():
        print(f"qprof: {msg}", file=sys.stderr, flush=True)


def check_options(opts: RunOptions) -> stacks.Stack:
    """Refuse options that cannot run together, before anything starts;
    fills in the stack's defaults."""
    options.check(opts)
    stack = stacks.validate(opts.stack, opts.tls_version, opts.cipher, opts.sendfile, opts.guest)
    if opts.io_size is None:
        opts.io_size = stack.io_size
    if opts.bytes is not None:
        if opts.bytes <= 0:
            raise errors.BadValue(f"--bytes {opts.bytes} moves nothing; give a size such as 64K or 1G, "
                                  "or --duration for a timed run.")
        if opts.warmup_s:
            raise errors.BadValue("--warmup does not apply to --bytes: a fixed-size transfer is measured whole, "
                                  "handshake included; drop --warmup, or use --duration for a steady-state window.")
        opts.warmup_s = 0.0
    elif opts.warmup_s is None:
        opts.warmup_s = DEFAULT_WARMUP_S
    offload.plan(opts.stack, opts.topology, opts.gso, opts.gro, opts.send_mode, opts.batch, opts.dgram_size)
    if opts.dgram_size is not None and opts.topology == "netns" and opts.dgram_size > opts.mtu - UDP_IP_HEADERS:
        raise errors.BadValue(f"--dgram-size {opts.dgram_size} does not fit the veth MTU {opts.mtu} "
                              f"(at most {opts.mtu - UDP_IP_HEADERS} bytes of UDP payload); lower it.")
    return stack


def preflight(opts: RunOptions) -> Path:
    check_options(opts)
    if os.geteuid() != 0:
        raise errors.NotRoot("qprof run needs root (network namespaces, perf, eBPF); run it as root, e.g. with sudo.")
    return paths.workload_binary()


def make_certificate(run_path: Path) -> tuple:
    cert, key = run_path / "server-cert.pem", run_path / "server-key.pem"
    r = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=qprof", "-keyout", str(key), "-out", str(cert)],
        capture_output=True, text=True,
    )
    if r.returncode != 0:
        raise errors.TransportOpenFailed(f"openssl could not make the run's certificate ({r.stderr.strip()}); check that openssl is installed.")
    return cert, key


def workload_argv(binary: Path, opts: RunOptions, role: str, addr: str, port: int,
                  plan: Optional[offload.OffloadPlan] = None, run_path: Optional[Path] = None) -> list:
    stack = stacks.STACKS[opts.stack]
    argv = [str(binary), "--stack", opts.stack, "--role", role, "--addr", addr, "--port", str(port), "--control"]
    argv += options.workload_args(opts, role)
    argv += stacks.workload_args(stack, role, opts.tls_version, opts.cipher, opts.sendfile)
    env = listen.server_env(stack.name, addr, port, run_path) if role == "server" else {}
    if plan is not None:
        env = listen.merge(plan.env[role], env)
        argv += plan.args[role]
    return offload.argv_with_env(env, argv)


def run(opts: RunOptions, on_progress: Callable[[str], None] = log, faults: Faults = NO_FAULTS) -> dict:
    """faults: real failures for the tests (collectors/faults.py), never in the record."""
    binary = preflight(opts)
    with remains.exclusive("run"):
        if opts.guest:
            return run_in_guest(opts, on_progress, faults)
        return _run(opts, binary, on_progress, faults)


def _run(opts: RunOptions, binary: Path, on_progress, faults: Faults) -> dict:
    with RunDir(Path(opts.runs_dir)) as rundir:
        rundir.record.update({"stack": opts.stack, "config": asdict(opts)})
        cert, key = make_certificate(rundir.path)
        if faults.bad_cert:
            cert.write_text("not a certificate\n")
        plan = offload.plan(opts.stack, opts.topology, opts.gso, opts.gro, opts.send_mode, opts.batch,
                            opts.dgram_size, run_path=rundir.path)
        if faults.no_interposer:   # the steering silently not taking effect
            plan.env = {"client": {}, "server": {}}
        floor_parts = floor.measure(opts.stack)  # cached; before anything else runs
        with Topology(opts.topology, rundir.id[-6:], mtu=opts.mtu) as topo:
            on_progress(f"run {rundir.id}: {opts.stack} over {topo.kind}"
                        + (f" {topo.subnet}" if topo.subnet else "") + f", output in {rundir.path}")
            for ep in ((topo.client, topo.server) if topo.kind == "netns" else ()):
                offload.set_device_features(ep, plan.devices)
            record = _transfer(opts, binary, topo, rundir.path, cert, key, on_progress, plan, faults)
        record["floor"] = floor.figures(opts.stack, floor_parts, record["cpu"], opts.sendfile)
        rundir.record["offload"] = record["offload"]
        offload.verify(plan.effective, record["offload"]["observed"])
        rundir.complete(record)
        return rundir.record


def _transfer(opts, binary, topo, run_path, cert, key, on_progress, plan, faults: Faults) -> dict:
    server_argv = workload_argv(binary, opts, "server", topo.server.addr, opts.port, plan, run_path)
    server_argv += ["--cert", str(cert), "--key", str(key)]
    connect_port = opts.port + 1 if faults.handshake else opts.port
    client_argv = workload_argv(binary, opts, "client", topo.server.addr, connect_port, plan) + ["--wait-start"]
    if faults.tls_mismatch:
        client_argv += ["--tls", "1.2" if (opts.tls_version or "1.3") == "1.3" else "1.3"]

    with WorkloadProcess("server", server_argv, topo.server, run_path / "server.log") as server, \
            _client_with_probes(opts, client_argv, topo, run_path, server) as (client, probes), \
            _perf(opts, run_path) as perf:
        udp_before = {side: netstat.read_udp(ep) for side, ep in (("client", topo.client), ("server", topo.server))}
        dev_before = {side: netstat.read_device(ep) for side, ep in (("client", topo.client), ("server", topo.server))}
        connected, window, tls_before = _measure(opts, server, client, probes, perf, on_progress, faults)
        client_done = client.finish(FINISH_TIMEOUT_S)
        server_done = server.finish(FINISH_TIMEOUT_S)
        udp_after = {side: netstat.read_udp(ep) for side, ep in (("client", topo.client), ("server", topo.server))}
        dev_after = {side: netstat.read_device(ep) for side, ep in (("client", topo.client), ("server", topo.server))}
        probe_records = probes.records()
        flame = None
        if perf is not None:
            perf.stop()
            samples = perf.fold({"client": client.pid, "server": server.pid}, run_path / "stacks")
            flame = {"event": "cpu-clock", "sample_period_ns": perf.period_ns, "sample_hz": perf.sample_hz,
                     "call_graph": perf.call_graph,
                     "samples": samples, "samples_per_cpu": perf.samples_per_cpu(), "stacks_dir": "stacks"}
    for p in (client, server):
        if p.done.get("exit_code") != 0:
            p.raise_exit()
    if window.bytes <= 0:
        raise errors.PeerDied("no bytes arrived inside the window though both sides reported success; see the run's logs.")
    record = build_record(opts, topo, window, connected, client_done, server_done, tls_before,
                          {"client": client.pid, "server": server.pid})
    record["probes"] = probe_records
    # The whole run's UDP counters of each namespace (the host's, on loopback).
    record["kernel_udp"] = {side: counter_delta(udp_before[side], udp_after[side]) for side in udp_before}
    record["listen"] = {"server_binds": listen.read_report(run_path)}
    record["kernel_loss"] = netstat.losses(
        {side: counter_delta(window.start.net[side], window.end.net[side]) for side in ("client", "server")},
        counter_delta(window.start.net["softnet"], window.end.net["softnet"]),
        {side: counter_delta(dev_before[side], dev_after[side]) for side in dev_before})
    if topo.kind == "loopback":
        record["kernel_loss"]["source"] += "; on loopback both sides read the host's namespace, other traffic included"
    record["flame"] = flame
    if flame is not None:
        flame.update(sample_coverage(flame["samples_per_cpu"], record["cpu_window_s"], flame["sample_hz"],
                                     record["environment"]["cpu_count"]))
        flame["sides"] = flame_summary.run_figures(record, run_path / flame["stacks_dir"])
    record.update(derive_probe_figures(record, {"client": client.pid, "server": server.pid}))
    record["observers"] = derive.observer_cost(probe_records, record["bytes"], flame)
    if opts.stack == "udp" and topo.kind == "netns":
        # Every datagram the receiver's sequence numbers call lost was
        # dropped by its kernel, in its own namespace (whole run).
        # The kernel counts skbs (InErrors includes RcvbufErrors): with GSO
        # and GRO each reaches the socket whole, carrying a batch.
        k = record["kernel_udp"]["server"] or {}
        c = client_done
        per_skb = c.get("batch", 1) if c.get("send_mode") == "gso" and server_done.get("gro") else 1
        dropped = k["InErrors"] * per_skb if "InErrors" in k else None
        lost = server_done.get("lost")
        record["crosscheck"].setdefault("server", {})["udp_drops"] = {
            "kernel": dropped, "own": lost, "ratio": dropped / lost if dropped is not None and lost else None,
            "source": f"kernel Udp InErrors x {per_skb} datagrams per skb (server namespace, whole run) "
                      "against the receiver's sequence gaps"}
    record["offload"] = offload_record(opts, topo, plan, record, run_path)
    return record


def offload_record(opts, topo, plan, record: dict, run_path: Path) -> dict:
    """Requested, set up, and observed GSO/GRO, with each instrument's evidence."""
    if opts.stack == "udp":
        max_dgram = record["workload"]["client"]["report"].get("dgram_size") or opts.dgram_size
    else:
        max_dgram = min(opts.mtu if topo.kind == "netns" else MSQUIC_MAX_MTU, MSQUIC_MAX_MTU) - UDP_IP_HEADERS
    devices = ({side: offload.read_device_features(ep) for side, ep in (("client", topo.client), ("server", topo.server))}
               if topo.kind == "netns" else None)
    return {**plan.describe(), "device_features": devices,
            "interposer": offload.read_interposer_reports(run_path),
            "observed": offload.observe(record, max_dgram)}


# A CPU that recorded less than this share of window x rate lost samples.
SAMPLE_COVERAGE_MIN = 0.95


def sample_coverage(per_cpu: dict, window_s: float, hz: int, ncpu: int) -> dict:
    """Each CPU's samples against window x rate (idle samples included)."""
    expected = window_s * hz
    coverage = {str(c): per_cpu.get(str(c), 0) / expected for c in range(ncpu)}
    short = [c for c, v in coverage.items() if v < SAMPLE_COVERAGE_MIN]
    return {"coverage_per_cpu": coverage, "complete": not short,
            "incomplete_reason": (f"CPU {', '.join(short)} recorded "
                                  + ", ".join(f"{coverage[c] * 100:.0f}%" for c in short)
                                  + " of its expected samples: its cpu-clock timer did not fire "
                                  "every period, so graphs on it undercount") if short else None}


@contextmanager
def _perf(opts, run_path):
    if not opts.sample_hz:
        yield None
        return
    with PerfRecorder(run_path, opts.sample_hz, opts.keep_perf_data, opts.call_graph) as perf:
        yield perf


def _measure(opts, server, client, probes, perf, on_progress, faults: Faults):
    """Connect, warm up, and take the window's two edges. A fixed-size
    transfer is measured whole: the window opens before the client
    connects and closes when the server has the last byte."""
    tls_before = {"client": stacks.read_tls_stat(client.pid), "server": stacks.read_tls_stat(server.pid)}
    procs = (server, client)
    if opts.bytes:
        if perf is not None:
            perf.enable()
        start = take_edge("start", server, client, probes)
        client.send("start")
        connected = client.wait_event("connected", CONNECT_TIMEOUT_S)
        on_progress("measuring until the last byte arrives")
        _wait_for_last_byte(server, opts.bytes * opts.streams)
        end = take_edge("end", server, client, probes)
        if perf is not None:
            perf.disable()
        return connected, Window(start, end), tls_before
    client.send("start")
    connected = client.wait_event("connected", CONNECT_TIMEOUT_S)
    on_progress(f"connected; warming up {opts.warmup_s:g} s")
    sleep_watching(connected["t_ns"] + int(opts.warmup_s * 1e9), procs)
    if perf is not None:
        perf.enable()
    start = take_edge("start", server, client, probes)
    on_progress(f"measuring {opts.duration_s:g} s")
    if faults.kill_server:
        sleep_watching(start.t_ns + int(opts.duration_s * 0.3e9), procs)
        server.proc.kill()
    sleep_watching(start.t_ns + int(opts.duration_s * 1e9), procs)
    end = take_edge("end", server, client, probes)
    if perf is not None:
        perf.disable()
    sleep_watching(end.t_ns + int(TAIL_S * 1e9), procs)
    client.send("stop")
    return connected, Window(start, end), tls_before


def _wait_for_last_byte(server, total: int) -> None:
    """The server's done report, however long the transfer takes while
    bytes keep arriving; a stall of STALL_S is a Timeout."""
    seen, last_progress = -1, time.monotonic()
    while True:
        try:
            server.wait_event("done", PROGRESS_CHECK_S)
            return
        except errors.Timeout:
            pass
        got = server.mark("progress")["app_bytes"]
        if got > seen:
            seen, last_progress = got, time.monotonic()
        elif time.monotonic() - last_progress > STALL_S:
            raise errors.Timeout(f"the fixed-size transfer stalled: the server received no byte for {STALL_S:.0f} s "
                                 f"({got} of {total} bytes arrived); see {server.log_path}.")


@contextmanager
def _client_with_probes(opts, client_argv, topo, run_path, server):
    """The client (waiting for "start") and the probes attached to both
    processes before it connects; torn down in reverse order."""
    server.wait_event("ready", READY_TIMEOUT_S)
    with WorkloadProcess("client", client_argv, topo.client, run_path / "client.log") as client:
        target = target_for(topo, {"server": server.pid, "client": client.pid})
        with ProbeSet(list(opts.probes), target, run_path) as probes:
            yield client, probes


def build_record(opts, topo, window: Window, connected: dict, client_done: dict, server_done: dict,
                 tls_before: dict, pids: dict) -> dict:
    nbytes = window.bytes
    stack = stacks.STACKS[opts.stack]
    env = environment.describe()
    env["topology"] = topo.describe()
    if stack.name == "quic":
        env["msquic_version"] = connected.get("msquic_version")
        env["msquic_send_segmentation"] = {"client": client_done.get("send_segmentation"),
                                           "server": server_done.get("send_segmentation")}
        env["msquic_recv_coalescing"] = {"client": client_done.get("recv_coalescing"),
                                         "server": server_done.get("recv_coalescing")}

    if stack.name == "udp":
        # No reliability: every datagram that arrived passed the content
        # check, and no more arrived than were sent; loss is a figure.
        verified = (server_done.get("verified") is True
                    and server_done["app_bytes"] <= client_done["app_bytes"])
    else:
        verified = (server_done.get("verified") is True
                    and server_done["app_bytes"] == client_done["app_bytes"]
                    and server_done["streams_completed"] == opts.streams)
    if not verified:
        raise errors.VerifyFailed(
            f"the server verified {server_done['app_bytes']} bytes on {server_done['streams_completed']} streams "
            f"but the client sent {client_done['app_bytes']} on {opts.streams}; see the run's logs.")

    ncpu = env["cpu_count"]
    # The sender's CPU is per byte it sent; for reliable stacks that is the
    # bytes received, for raw UDP it includes what was lost.
    sent = window.end.client_mark["app_bytes"] - window.start.client_mark["app_bytes"]
    client_bytes = sent if stack.name == "udp" else nbytes
    return {
        "stack": opts.stack,
        "config": asdict(opts),
        "environment": env,
        "transport": transport_record(stack, client_done, server_done, tls_before, window),
        "bytes": nbytes,
        "bytes_total": server_done["app_bytes"],
        "bytes_sent": sent,
        "verified": verified,
        "window_s": window.seconds,
        "cpu_window_s": window.cpu_seconds,
        "throughput_gbps": nbytes * 8 / window.seconds / 1e9,
        "cpu": {
            "client": cpu.process_figures(window.end.client - window.start.client, client_bytes),
            "server": cpu.process_figures(window.end.server - window.start.server, nbytes),
            "system": cpu.system_figures(window.end.system - window.start.system, nbytes,
                                         window.cpu_seconds, ncpu),
            "others": cpu.others_figures(window.start.tasks, window.end.tasks,
                                         set(pids.values()), nbytes),
        },
        "workload": {
            side: {"window": _mark_delta(getattr(window.start, f"{side}_mark"), getattr(window.end, f"{side}_mark")),
                   "report": done}
            for side, done in (("client", client_done), ("server", server_done))
        },
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# The raw UDP workload's counters (workloads/wl_udp.c).
UDP_COUNTERS = ("datagrams", "lost", "reordered", "duplicates", "gro_segments")


def _mark_delta(a: dict, b: dict) -> dict:
    """The workload's own counters over the window: every counter group its
    marks carry (msquic's perf_counters and conn_stats, or TCP_INFO)."""
    out = {"app_bytes": b["app_bytes"] - a["app_bytes"]}
    for k in ("io_calls",) + UDP_COUNTERS:
        if k in b and k in a:
            out[k] = b[k] - a[k]
    for group in ("perf_counters", "conn_stats", "tcp_info"):
        if group in b:
            out[group] = counter_delta(a.get(group), b.get(group))
    return out


def transport_record(stack, client_done: dict, server_done: dict, tls_before: dict, window: Window) -> dict:
    """TLS as the sockets reported it, and the kernel's proof for kTLS."""
    rec = {"protocol": stack.transport, "tls": stack.tls}
    if not stack.configurable_tls:
        return rec
    ktls = {"client_send": client_done.get("ktls_send"), "client_recv": client_done.get("ktls_recv"),
            "server_send": server_done.get("ktls_send"), "server_recv": server_done.get("ktls_recv")}
    tls_stat = {side: counter_delta(tls_before.get(side), window.end.tls_stat.get(side))
                for side in ("client", "server")}
    rec.update({
        "tls_version": client_done.get("tls_version"),
        "tls_cipher": client_done.get("tls_cipher"),
        "ktls": ktls,
        "ktls_label": stacks.ktls_label(ktls["client_send"], ktls["server_recv"]) if stack.tls == "kernel" else "none",
        "tls_stat_delta": tls_stat,
    })
    if stack.tls == "kernel":
        _prove_ktls(ktls, tls_stat)
    return rec


def _prove_ktls(ktls: dict, tls_stat: dict) -> None:
    """A direction is kTLS only if the kernel's own counters moved for it."""
    proofs = (("client_send", "client", "TlsTxSw"), ("server_recv", "server", "TlsRxSw"))
    claimed = [p for p in proofs if ktls[p[0]]]
    if not claimed:
        raise errors.KtlsUnproven("OpenSSL enabled kernel TLS in neither direction of the upload; "
                                  "check that the cipher is AES-GCM and the guest has the tls and gcm modules.")
    for flag, side, counter in claimed:
        moved = (tls_stat.get(side) or {}).get(counter, 0)
        if moved <= 0:
            raise errors.KtlsUnproven(f"the {side} reported kernel TLS ({flag}) but /proc/net/tls_stat {counter} "
                                      "did not move; the run is not kTLS and is not recorded as such.")


def _packets_dev(probe: dict, dev: str) -> Optional[dict]:
    if probe.get("status") != "present":
        return None
    for d in probe["window"].get("devices", []):
        if d.get("dev") == dev:
            return d
    return None


def derive_probe_figures(rec: dict, pids: dict) -> dict:
    """Per-side syscall figures and their cross-checks with the workload's own counts."""
    stack = stacks.STACKS[rec["stack"]]
    probes = rec["probes"]
    sys_probe, pkt_probe = probes.get("syscalls", {}), probes.get("packets", {})
    topo = rec["environment"]["topology"]
    nbytes = rec["bytes"]
    sides, checks = {}, {}
    for side in ("client", "server"):
        if sys_probe.get("status") != "present":
            sides[side] = None
            continue
        calls = derive.by_syscall(sys_probe["window"]["threads"], pids[side])
        out_dgrams = in_dgrams = None
        if topo["kind"] == "netns":
            me = f"{topo[side]['ifname']}@{topo[side]['netns']}"
            dev = _packets_dev(pkt_probe, me)
            if dev is not None:
                out_dgrams = dev["tx"].get("wire_packets")
                in_dgrams = dev["rx"].get("wire_packets")
        sides[side] = {
            "by_syscall": calls,
            **derive.syscall_figures(calls, side_bytes(rec, side), rec["cpu"][side]["total_s"], out_dgrams,
                                     in_dgrams, stack.rw_is_network),
        }
        checks[side] = derive.crosscheck(stack.name, side, sides[side], rec["workload"][side]["window"],
                                         out_dgrams, in_dgrams)
    thr = probes.get("cputhread", {})
    threads = (derive.thread_figures(thr["window"], pids, {side: side_bytes(rec, side) for side in pids}, nbytes)
               if thr.get("status") == "present" else None)
    if threads is not None:
        # Two instruments of one quantity: sched_switch timing against the
        # kernel's own sum_exec_runtime (/proc/<pid>/task/*/schedstat). The
        # kernel starts a woken task's clock before the switch when the
        # wake-up preempts idle, so schedstat lies between on-CPU and
        # on-CPU plus the wake-up latency (README, "Cross-checks").
        for side in pids:
            f = threads[side]
            f["oncpu_check"] = {**derive.agreement(f["oncpu_s"], rec["cpu"][side]["oncpu_schedstat_s"], "schedstat"),
                                "ebpf_plus_runq": f["oncpu_s"] + f["runq_s"]}
    return {"syscalls": sides, "crosscheck": checks, "cpu_threads": threads}


def run_in_guest(opts: RunOptions, on_progress, faults: Faults) -> dict:
    """The whole measurement inside a QEMU guest; its record comes back here."""
    art = guest.artifacts()
    with RunDir(Path(opts.runs_dir)) as rundir:
        rundir.record.update({"stack": opts.stack, "config": asdict(opts)})
        out = (rundir.path / "guest").resolve()
        out.mkdir()
        # The same options for the guest's qprof, as JSON (collectors/options.py).
        # Not a guest again inside the guest; its runs go where the host reads them.
        (out / "options.json").write_text(options.to_json(replace(opts, guest=False, runs_dir=str(out / "runs"))))
        (out / "cmd.sh").write_text(guest.guest_command(["--options-file", str(out / "options.json"),
                                                         *faults.argv()], out))
        on_progress(f"run {rundir.id}: {opts.stack} in a QEMU guest ({art.kernel_release}, TCG), "
                    f"output in {rundir.path}")
        timeout_s = opts.warmup_s + (opts.duration_s if not opts.bytes else 600) + 300
        with guest.GuestVM(art, out, rundir.path / "console.log") as vm:
            stages = vm.wait(timeout_s)
        rc_file = out / "rc"
        if not rc_file.exists():
            raise errors.GuestBootFailed(f"the guest stopped at stage '{stages[-1] if stages else 'boot'}' "
                                         f"(last console line: {vm.last_console_line()}); see {rundir.path / 'console.log'}.")
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
        env["guest"] = {"kernel_package": art.package, "kernel_release": art.kernel_release,
                        "qemu": guest.qemu_version(), "accel": "tcg", "cpu": "max",
                        "cpus": guest.GUEST_CPUS, "memory_mb": guest.GUEST_MEMORY_MB}
        env["host"] = environment.describe()
        rundir.complete(rec)
        return rundir.record
