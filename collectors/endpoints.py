# SPDX-License-Identifier: GPL-2.0-only
"""A plan's endpoints on a topology: each flow's server and client (one
flow for a run, N for a mix), and the instruments around a run of one
flow: the eBPF probes attached to both processes before the client
connects, perf's stack samples, the kernel's UDP and device counters.

Endpoints is the one owner of those processes: on any exit, every
client, probe and server stops, in reverse order, before the topology
goes (collectors/runner.py nests it inside the topology)."""

import subprocess
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional

from qprof import errors
from qprof.collectors import devices, environment, external, listen, procfs
from qprof.collectors.external import ExternalClient, ExternalServer
from qprof.collectors.faults import NO_FAULTS, Faults
from qprof.collectors.perf import STACKS_DIR
from qprof.collectors.topology import Topology
from qprof.collectors.workload import WorkloadProcess
from qprof.describe import direction, mix, offload, options, patterns, pinning, transports
from qprof.describe import external as describe_external
from qprof.describe.measurement import Measurement
from qprof.describe.plan import FlowPlan, Plan
from qprof.describe.window import Window

if TYPE_CHECKING:
    from qprof.collectors.windows import Taken

READY_TIMEOUT_S = 10.0
FINISH_TIMEOUT_S = 30.0
# How long an external client (--client-cmd) may run on past the run's
# end, beyond the margin its {duration_s} runs past the window's.
CLIENT_HANG_S = 10.0


def make_certificate(run_path: Path) -> tuple:
    cert, key = run_path / "server-cert.pem", run_path / "server-key.pem"
    r = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        + ["-days", "1", "-subj", "/CN=qprof", "-keyout", str(key), "-out", str(cert)],
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
    opts,
    role: str,
    addr: str,
    port: int,
    plan: Optional[offload.OffloadPlan] = None,
    env: Optional[Dict[str, str]] = None,
    run_path: Optional[Path] = None,
    build_dir: Optional[Path] = None,
) -> List[str]:
    """qprof-wl's command line for one role of a flow (env: the role's
    offload environment, collectors/devices.py; run_path: where the
    server's bind report goes, on its host; build_dir: that host's build)."""
    stack = transports.STACKS[transports.side_stack(opts, role)]
    argv = [str(binary), "--stack", stack.name, "--role", role, "--addr", addr, "--port", str(port), "--control"]
    argv += options.workload_args(opts, role)
    argv += transports.workload_args(
        stack, role, opts.tls_version, opts.cipher, opts.sendfile, role in direction.senders(opts)
    )
    role_env = listen.server_env(stack.name, addr, port, run_path, build_dir) if role == "server" else {}
    if plan is not None:
        role_env = listen.merge((env or {}).get(role, {}), role_env)
        argv += plan.args[role]
    return offload.argv_with_env(role_env, pinning.wrapped(argv, _pinned(opts, role)))


def _pinned(opts, role: str) -> Optional[List[int]]:
    """--cpus' CPUs for the role, or None."""
    return pinning.parse(opts.cpus).get(role) if opts.cpus else None


# The name qprof-wl's loader looks for (its DT_NEEDED); its RUNPATH gives
# way to LD_LIBRARY_PATH.
MSQUIC_SONAME = "libmsquic.so.2"


def msquic_dir(run_path: Path, library: str) -> Path:
    """A directory of the run's holding MSQUIC_SONAME, a link to --msquic's
    file, for the workloads' LD_LIBRARY_PATH: the user's file may be named
    anything."""
    d = run_path / "msquic"
    d.mkdir(exist_ok=True)
    link = d / MSQUIC_SONAME
    if not link.is_symlink():
        link.symlink_to(Path(library).expanduser().resolve())
    return d


class Endpoints:
    """Every flow's server, then every client waiting for "start" (a run's
    probes attached to both before it connects); perf armed, not yet
    sampling. servers[i], clients[i]: flow i's processes.

    sides: where the two sides run (collectors/sides.py): both on this
    machine, in topo (OnMachine), or each on its host (OnHosts, whose
    HostsTopology topo is); whichever, each side's workload, probes, perf
    and part of each edge are asked of them."""

    def __init__(
        self,
        plan: Plan,
        sides,
        topo: Topology,
        run_path: Path,
        cert,
        key,
        faults: Faults = NO_FAULTS,
    ):
        self.plan, self.sides, self.topo, self.run_path = plan, sides, topo, run_path
        self.cert, self.key, self.faults = cert, key, faults
        self.single = not plan.is_mix
        self.servers: Dict[int, WorkloadProcess] = {}
        self.clients: Dict[int, WorkloadProcess] = {}
        self.probes = None  # the probes (a run of one flow), perf: what sides.instruments gave
        self.perf = None
        self.envs = {fp.index: self._env(fp) for fp in plan.flows}
        self._stack = ExitStack()

    def _env(self, fp: FlowPlan) -> Dict[str, Dict[str, str]]:
        # The interposer's reports go in the run directory, for a run's one flow.
        env = self.faults.interposer_env(devices.interposer_env(fp.offload, self.run_path if self.single else None))
        if fp.options.msquic is not None:
            lib_dir = msquic_dir(self.run_path, fp.options.msquic)
            env = {role: {**env.get(role, {}), "LD_LIBRARY_PATH": str(lib_dir)} for role in ("client", "server")}
        return env

    def _log(self, fp: FlowPlan, role: str) -> Path:
        return self.run_path / (f"{role}.log" if self.single else f"flow{fp.index}-{role}.log")

    def _argv(self, fp: FlowPlan, role: str, port: int) -> List[str]:
        # The other side another implementation's (--server-cmd, --client-cmd):
        # its bytes are counted, not held to the pattern.
        other = ["--verify", "size"] if describe_external.role_of(fp.options) not in (None, role) else []
        return (
            workload_argv(
                self.sides.binary(role, fp.stack.workload),
                fp.options,
                role,
                self.topo.server.addr,
                port,
                fp.offload,
                self.envs[fp.index],
                self.sides.report_dir(role) if self.single else None,  # a run's one server's bind report
                self.sides.build_dir(role),
            )
            + other
        )

    def __enter__(self) -> "Endpoints":
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def _start(self) -> None:
        cert, key = self.sides.server_files(self.cert, self.key)
        for fp in self.plan.flows:
            self.servers[fp.index] = self._stack.enter_context(self._server(fp, cert, key))
        for fp in self.plan.flows:
            self.servers[fp.index].wait_event("ready", self.faults.patience(READY_TIMEOUT_S))
            self.clients[fp.index] = self._stack.enter_context(self._client(fp, cert, key))
            # Each side's end is read beside its peer's (WorkloadProcess.raise_exit).
            self.clients[fp.index].peer = self.servers[fp.index]
            self.servers[fp.index].peer = self.clients[fp.index]
        pids = {"server": self.server.pid, "client": self.client.pid}
        self.probes, self.perf = self.sides.instruments(
            self._stack, self.plan.options, pids, self.run_path, self.single
        )

    def _server(self, fp: FlowPlan, cert: str, key: str):
        """The flow's server: qprof-wl, or the user's program (--server-cmd)."""
        log = self._log(fp, "server")
        if fp.options.server_cmd is not None:
            argv = external.program_argv(fp.options, "server", self.topo.server.addr, fp.port, cert, key)
            return ExternalServer(argv, self.topo.server, log, fp.port, _pinned(fp.options, "server"))
        argv = self._argv(fp, "server", fp.port) + ["--cert", cert, "--key", key] + self.faults.server_args(fp.options)
        return WorkloadProcess("server", argv, self.topo.server, log)

    def _client(self, fp: FlowPlan, cert: str, key: str):
        """The flow's client: qprof-wl waiting for "start", or the user's
        program (--client-cmd), which a shell holds until then."""
        log = self._log(fp, "client")
        port = self.faults.client_port(fp.port)
        if fp.options.client_cmd is not None:
            argv = external.program_argv(fp.options, "client", self.topo.server.addr, port, cert, key)
            hang_s = describe_external.CLIENT_MARGIN_S + self.faults.patience(CLIENT_HANG_S)
            return ExternalClient(argv, self.topo.client, log, hang_s, _pinned(fp.options, "client"))
        argv = self._argv(fp, "client", port) + ["--wait-start"] + self.faults.client_args(fp.options)
        return WorkloadProcess("client", argv, self.topo.client, log)

    @property
    def server(self) -> WorkloadProcess:
        return self.servers[self.plan.flows[0].index]

    @property
    def client(self) -> WorkloadProcess:
        return self.clients[self.plan.flows[0].index]

    @property
    def pairs(self) -> list:
        return [(self.servers[fp.index], self.clients[fp.index]) for fp in self.plan.flows]

    @property
    def processes(self) -> List[WorkloadProcess]:
        return [*self.servers.values(), *self.clients.values()]

    def finish(self) -> Dict[int, Dict[str, dict]]:
        """Each flow's final reports, clients first (a workload that failed
        is raised by the placement, once every process has stopped). A
        server that cannot tell the client's last connection is told, once
        the client is done (direction.server_told)."""
        out = {}
        for fp in self.plan.flows:
            i = fp.index
            client = self.clients[i].finish(FINISH_TIMEOUT_S)
            if direction.server_told(fp.options):
                self.servers[i].send("stop")
            out[i] = {"client": client, "server": self.servers[i].finish(FINISH_TIMEOUT_S)}
        return out

    def stacks(self) -> Optional[dict]:
        """perf stopped and its samples folded per side: the capture (on
        hosts, each side's hardware counters read too)."""
        if self.perf is None:
            return None
        pids, out_dir = {"client": self.client.pid, "server": self.server.pid}, self.run_path / STACKS_DIR
        return self.sides.capture(self.perf, pids, out_dir)

    def endpoint_pairs(self):
        return (("client", self.topo.client), ("server", self.topo.server))

    def cpu_now(self) -> dict:
        """The machine's CPU (every host's) and both sides' on-CPU seconds now: an interval's sample."""
        return self.sides.cpu_now({"server": self.server.pid, "client": self.client.pid})

    def tls_stat(self) -> dict:
        """Each side's kernel TLS counters now (None without kernel TLS)."""
        return self.sides.tls_stat({"client": self.client.pid, "server": self.server.pid})

    def kernel_counters(self) -> dict:
        """The namespaces' UDP counters and the veths' device counters (a run's, around its window)."""
        return {
            "udp": {side: procfs.read_udp(ep) for side, ep in self.endpoint_pairs()},
            "devices": {side: procfs.read_device(ep) for side, ep in self.endpoint_pairs()},
        }


class Collected(NamedTuple):
    """What the endpoints gave around a window (collectors/placement.py):
    when it was measured, each flow's "done", and with one flow the
    kernel's counters before and after, the probes' records, the stack
    samples and the floor's parts."""

    measured_at: str
    done: dict
    before: Optional[dict] = None
    after: Optional[dict] = None
    probe_records: Optional[dict] = None
    capture: Optional[dict] = None
    floor_parts: Optional[dict] = None


def run_measurement(ep: Endpoints, w: "Taken", c: Collected) -> Measurement:
    """What a run of one flow measured, raw: its window whole, what came around it."""
    opts, fp = ep.plan.options, ep.plan.flows[0]
    window = Window(w.start.edge(), w.end.edge(), receiver=w.receiver)
    if fp.stack.programs:
        window.counted = _pair_bytes(ep, window, c.probe_records or {})
    if window.bytes <= 0:
        raise errors.PeerDied(patterns.row(opts).empty_window)
    env = environment.describe()
    env["topology"] = ep.topo.describe()
    netns = ep.topo.kind == "netns"
    return Measurement(
        options=asdict(opts),
        environment=env,
        measured_at=c.measured_at,
        pids={"client": ep.client.pid, "server": ep.server.pid},
        window=window,
        connected=w.connected[fp.index],
        done=c.done[fp.index],
        tls_before=w.tls_before,
        udp={"before": c.before["udp"], "after": c.after["udp"]},
        devices={"before": c.before["devices"], "after": c.after["devices"]},
        probes=c.probe_records,
        perf=c.capture,
        server_binds=ep.sides.binds(ep.run_path),
        reports={"client": ep.client.reports, "server": ep.server.reports} if patterns.row(opts).events else None,
        offload={
            **fp.offload.describe(),
            "device_features": (
                {side: devices.read_device_features(e) for side, e in ep.endpoint_pairs()} if netns else None
            ),
            "interposer": devices.read_interposer_reports(ep.run_path),
        },
        floor_parts=c.floor_parts,
        intervals=w.intervals,
        hosts=ep.sides.hosts(),
    )


def _pair_bytes(ep: Endpoints, window: Window, probe_records: dict) -> int:
    """A program pair's bytes: what the receiver's receive calls took over
    the window, by the syscalls probe (describe/external.py). A receiver
    that sent more than it took was the sender: the run went the other way."""
    sys_probe = probe_records.get("syscalls") or {}
    if sys_probe.get("status") != "present":
        raise errors.InstrumentFailed(
            f"the syscalls probe, which counts a program pair's bytes, did not run ({sys_probe.get('reason')}); "
            "see `qprof doctor`."
        )
    receiver, sender = window.receiver, window.sender
    pid = {"client": ep.client.pid, "server": ep.server.pid}
    got = describe_external.counted_bytes(sys_probe["window"], pid[receiver])
    out = describe_external.sent_bytes(sys_probe["window"], pid[receiver])
    if got < out:
        way = "up" if receiver == "client" else "down"
        raise errors.ExternalWrongWay(
            f"the {receiver} program sent {out} bytes in the window and received {got}, so the {sender} did "
            f"not send the bytes as --direction {ep.plan.options.direction} says; give --direction {way}."
        )
    return got


def mix_measurement(ep: Endpoints, w: "Taken", c: Collected) -> Measurement:
    """What a mix measured, raw: the machine at the edges, each flow's marks and CPU."""
    start, end, connected, done = w.start, w.end, w.connected, c.done
    measured = []
    for k, fp in enumerate(ep.plan.flows):
        i = fp.index
        measured.append(
            mix.FlowMeasurement(
                flow=asdict(fp.mix_flow),
                options=asdict(fp.options),
                pids={"client": ep.clients[i].pid, "server": ep.servers[i].pid},
                connected=connected[i],
                marks={
                    "start": {"server": start.flows[k]["server_mark"], "client": start.flows[k]["client_mark"]},
                    "end": {"server": end.flows[k]["server_mark"], "client": end.flows[k]["client_mark"]},
                },
                cpu={
                    e: {side: asdict(r.flows[k][side]) for side in ("client", "server")}
                    for e, r in (("start", start), ("end", end))
                },
                done=done[i],
                reports=list(ep.clients[i].reports) if patterns.row(fp.options).events else None,
            )
        )
    if not any(fm.marks["end"]["server"]["app_bytes"] > fm.marks["start"]["server"]["app_bytes"] for fm in measured):
        raise errors.PeerDied(
            "no flow's bytes arrived inside the window though every side reported success; see the run's logs."
        )
    env = environment.describe()
    env["topology"] = ep.topo.describe()
    edge = lambda r: {"t_ns": r.t_ns, "system": asdict(r.system), "qdiscs": r.qdiscs}  # noqa: E731
    return Measurement(
        options=asdict(ep.plan.options),
        environment=env,
        measured_at=c.measured_at,
        edges={"start": edge(start), "end": edge(end)},
        flows=measured,
    )


def now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
