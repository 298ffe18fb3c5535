"""`qprof run`: one measured bulk transfer, from options to run record.

The nesting of context managers is the order of ownership: the run
directory outlives the topology, which outlives the workload processes,
so on any exit the processes die first, then the namespaces go, then the
record is marked for what happened.
"""
import os
import subprocess
from contextlib import contextmanager
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from . import cpu, derive, environment, errors, paths
from .probes import PROBES as PROBE_ARGV, ProbeSet, target_for
from .rundir import RunDir
from .topology import Topology
from .window import Window, counter_delta, sleep_watching, take_edge
from .workload import WorkloadProcess

STACKS = ("quic",)
PROBES = tuple(PROBE_ARGV)
TOPOLOGIES = ("netns", "loopback")
EXEC_PROFILES = ("lowlat", "maxtput")
FAULTS = ("handshake", "kill-server", "bad-cert")

READY_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
FINISH_TIMEOUT_S = 30.0
# The client keeps sending this long past the window's end, so the end
# edge is taken while the transfer is still in its steady state.
TAIL_S = 0.3


@dataclass
class RunOptions:
    stack: str = "quic"
    duration_s: float = 10.0          # the measured window; ignored with bytes
    bytes: Optional[int] = None       # per stream: a fixed-size transfer instead
    warmup_s: float = 1.0             # after the handshake, before the window
    streams: int = 1
    topology: str = "netns"
    mtu: int = 1500
    port: int = 4433
    io_size: int = 65536              # bytes per send request
    exec_profile: str = "lowlat"      # msquic execution profile
    probes: tuple = tuple(PROBES)     # eBPF probes attached around the run
    runs_dir: str = "runs"
    fault: Optional[str] = None       # tests only: inject a real failure


def log(msg: str) -> None:
    """Progress for a person watching; scripts get stderr for errors only."""
    if sys.stderr.isatty():
        print(f"qprof: {msg}", file=sys.stderr, flush=True)


def preflight(opts: RunOptions) -> Path:
    if opts.stack not in STACKS:
        raise errors.UnknownStack(f"unknown stack '{opts.stack}'; valid stacks are: {', '.join(STACKS)}.")
    if os.geteuid() != 0:
        raise errors.NotRoot("qprof run needs root (network namespaces, perf, eBPF); run it with sudo.")
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


def workload_argv(binary: Path, opts: RunOptions, role: str, addr: str, port: int) -> list:
    argv = [str(binary), "--stack", opts.stack, "--role", role, "--addr", addr,
            "--port", str(port), "--streams", str(opts.streams), "--control"]
    if role == "client":
        argv += ["--io-size", str(opts.io_size), "--exec-profile", opts.exec_profile]
        if opts.bytes:
            argv += ["--bytes", str(opts.bytes)]
    else:
        argv += ["--exec-profile", opts.exec_profile]
    return argv


def run(opts: RunOptions, on_progress: Callable[[str], None] = log) -> dict:
    binary = preflight(opts)
    with RunDir(Path(opts.runs_dir)) as rundir:
        rundir.record.update({"stack": opts.stack, "config": asdict(opts)})
        cert, key = make_certificate(rundir.path)
        if opts.fault == "bad-cert":
            cert.write_text("not a certificate\n")
        with Topology(opts.topology, rundir.id[-6:], mtu=opts.mtu) as topo:
            on_progress(f"run {rundir.id}: {opts.stack} over {topo.kind}"
                        + (f" {topo.subnet}" if topo.subnet else "") + f", output in {rundir.path}")
            record = _transfer(opts, binary, topo, rundir.path, cert, key, on_progress)
        rundir.complete(record)
        return rundir.record


def _transfer(opts, binary, topo, run_path, cert, key, on_progress) -> dict:
    server_argv = workload_argv(binary, opts, "server", topo.server.addr, opts.port)
    server_argv += ["--cert", str(cert), "--key", str(key)]
    connect_port = opts.port + 1 if opts.fault == "handshake" else opts.port
    client_argv = workload_argv(binary, opts, "client", topo.server.addr, connect_port) + ["--wait-start"]

    with WorkloadProcess("server", server_argv, topo.server, run_path / "server.log") as server, \
            _client_with_probes(opts, client_argv, topo, run_path, server) as (client, probes):
        connected, window = _measure(opts, server, client, probes, on_progress)
        client_done = client.finish(FINISH_TIMEOUT_S)
        server_done = server.finish(FINISH_TIMEOUT_S)
        probe_records = probes.records()
    for p in (client, server):
        if p.done.get("exit_code") != 0:
            p.raise_exit()
    if window.bytes <= 0:
        raise errors.BadValue("no bytes arrived inside the window (the transfer ended during warm-up); raise --bytes or lower --warmup.")
    record = build_record(opts, topo, window, connected, client_done, server_done)
    record["probes"] = probe_records
    record.update(derive_probe_figures(record, {"client": client.pid, "server": server.pid}))
    return record


def _measure(opts, server, client, probes, on_progress):
    """Connect, warm up, and take the window's two edges."""
    client.send("start")
    connected = client.wait_event("connected", CONNECT_TIMEOUT_S)
    procs = (server, client)
    on_progress(f"connected; warming up {opts.warmup_s:g} s")
    sleep_watching(connected["t_ns"] + int(opts.warmup_s * 1e9), procs)
    start = take_edge("start", server, client, probes)
    if opts.bytes:
        on_progress("measuring until the last byte arrives")
        server.wait_event("done", timeout_s=3600)
        end = take_edge("end", server, client, probes)
    else:
        on_progress(f"measuring {opts.duration_s:g} s")
        if opts.fault == "kill-server":
            sleep_watching(start.t_ns + int(opts.duration_s * 0.3e9), procs)
            server.proc.kill()
        sleep_watching(start.t_ns + int(opts.duration_s * 1e9), procs)
        end = take_edge("end", server, client, probes)
        sleep_watching(end.t_ns + int(TAIL_S * 1e9), procs)
        client.send("stop")
    return connected, Window(start, end)


@contextmanager
def _client_with_probes(opts, client_argv, topo, run_path, server):
    """The client (waiting for "start") and the probes attached to both
    processes before it connects; torn down in reverse order."""
    server.wait_event("ready", READY_TIMEOUT_S)
    with WorkloadProcess("client", client_argv, topo.client, run_path / "client.log") as client:
        target = target_for(topo, {"server": server.pid, "client": client.pid})
        with ProbeSet(list(opts.probes), target, run_path) as probes:
            yield client, probes


def build_record(opts, topo, window: Window, connected: dict, client_done: dict, server_done: dict) -> dict:
    nbytes = window.bytes
    env = environment.describe()
    env["msquic_version"] = connected.get("msquic_version")
    env["msquic_send_segmentation"] = {"client": client_done.get("send_segmentation"),
                                       "server": server_done.get("send_segmentation")}
    env["msquic_recv_coalescing"] = {"client": client_done.get("recv_coalescing"),
                                     "server": server_done.get("recv_coalescing")}
    env["topology"] = topo.describe()

    verified = (server_done.get("verified") is True
                and server_done["app_bytes"] == client_done["app_bytes"]
                and server_done["streams_completed"] == opts.streams)
    if not verified:
        raise errors.VerifyFailed(
            f"the server verified {server_done['app_bytes']} bytes on {server_done['streams_completed']} streams "
            f"but the client sent {client_done['app_bytes']} on {opts.streams}; see the run's logs.")

    ncpu = env["cpu_count"]
    return {
        "stack": opts.stack,
        "config": asdict(opts),
        "environment": env,
        "bytes": nbytes,
        "bytes_total": server_done["app_bytes"],
        "verified": verified,
        "window_s": window.seconds,
        "cpu_window_s": window.cpu_seconds,
        "throughput_gbps": nbytes * 8 / window.seconds / 1e9,
        "cpu": {
            "client": cpu.process_figures(window.end.client - window.start.client, nbytes),
            "server": cpu.process_figures(window.end.server - window.start.server, nbytes),
            "system": cpu.system_figures(window.end.system - window.start.system, nbytes,
                                         window.cpu_seconds, ncpu),
        },
        "workload": {
            side: {
                "window": {
                    "app_bytes": e.end_mark["app_bytes"] - e.start_mark["app_bytes"],
                    "perf_counters": counter_delta(e.start_mark.get("perf_counters"), e.end_mark.get("perf_counters")),
                    "conn_stats": counter_delta(e.start_mark.get("conn_stats"), e.end_mark.get("conn_stats")),
                },
                "report": done,
            }
            for side, e, done in (
                ("client", _Marks(window, "client"), client_done),
                ("server", _Marks(window, "server"), server_done),
            )
        },
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


class _Marks:
    def __init__(self, window: Window, side: str):
        self.start_mark = getattr(window.start, f"{side}_mark")
        self.end_mark = getattr(window.end, f"{side}_mark")


def _packets_dev(probe: dict, dev: str) -> Optional[dict]:
    if probe.get("status") != "present":
        return None
    for d in probe["window"].get("devices", []):
        if d.get("dev") == dev:
            return d
    return None


def derive_probe_figures(rec: dict, pids: dict) -> dict:
    """Per-side syscall figures and the cross-checks with msquic's counters."""
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
            **derive.syscall_figures(calls, nbytes, rec["cpu"][side]["total_s"], out_dgrams, in_dgrams),
        }
        pc = rec["workload"][side]["window"].get("perf_counters") or {}
        f = sides[side]
        checks[side] = {
            "udp_send_calls": derive.compare(f["send_calls"], pc.get("udp_send_calls")),
            "udp_recv_events": derive.compare(f["recv_calls_with_data"], pc.get("udp_recv_events")),
            "udp_send_datagrams": derive.compare(out_dgrams, pc.get("udp_send")),
            "udp_recv_datagrams": derive.compare(in_dgrams, pc.get("udp_recv")),
        }
    return {"syscalls": sides, "crosscheck": {"msquic": checks}}
