# SPDX-License-Identifier: GPL-2.0-only
"""`qprof run --mix`: the flows of collectors/mix.py, started together on
one topology and link, measured over one window.

Ownership nests as in runner.run: the run directory outlives the
topology, which outlives every flow's processes (one ExitStack holds
them, so any exit stops them all before the namespaces go).
"""

import os
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from qprof import errors, paths, remains
from qprof.rundir import RunDir, write_text_atomic

from . import cpu, environment, link, mix, offload, options, runner
from .faults import NO_FAULTS
from .options import RunOptions
from .topology import Topology
from .window import MARK_TIMEOUT_S, sleep_watching
from .workload import WorkloadProcess

MIX_MEASUREMENT = "measurement.json"

Flows = List[Tuple[mix.Flow, RunOptions]]


def check(opts: RunOptions) -> Flows:
    """The mix as a whole (collectors/mix.py), then each flow as a single
    run of its stack would be checked; fills in every default."""
    options.check(opts)
    flows = mix.check(opts, os.cpu_count() or 1)
    runner.check_bulk_length(opts)
    runner.check_link(opts)
    out = []
    for f in flows:
        fo = mix.flow_options(opts, f)
        runner.check_options(fo)
        out.append((f, fo))
    if any(fo.pattern == "rr" for _, fo in out):
        rr = next(fo for _, fo in out if fo.pattern == "rr")
        opts.period_s, opts.payload = rr.period_s, rr.payload
    return out


def run(opts: RunOptions, on_progress: Callable[[str], None] = runner.log, on_guest=None) -> dict:
    flows = check(opts)
    if os.geteuid() != 0:
        raise errors.NotRoot("qprof run needs root (network namespaces, perf, eBPF); run it as root, e.g. with sudo.")
    binary = paths.workload_binary()
    with remains.exclusive("run"):
        if opts.guest:
            return runner.run_in_guest(opts, on_progress, NO_FAULTS, on_guest)
        return _run(opts, flows, binary, on_progress)


def _run(opts: RunOptions, flows: Flows, binary: Path, on_progress) -> dict:
    with RunDir(Path(opts.runs_dir)) as rundir:
        rundir.record.update({"stack": "mix", "config": asdict(opts)})
        cert, key = runner.make_certificate(rundir.path)
        plans = {
            f.index: offload.plan(fo.stack, fo.topology, fo.gso, fo.gro, fo.send_mode, fo.batch, fo.dgram_size)
            for f, fo in flows
        }
        devices: Dict[str, str] = {}
        for p in plans.values():
            devices.update(p.devices)
        with Topology(opts.topology, rundir.id[-6:], mtu=opts.mtu) as topo:
            what = f"run {rundir.id}: {len(flows)} flows ({opts.mix})"
            emulated = runner.set_up(topo, opts, devices, what, rundir.path, on_progress)
            m = _measure(opts, flows, plans, binary, topo, rundir.path, cert, key, on_progress, emulated)
            m.link = emulated.applied if emulated else None
        write_text_atomic(rundir.path / MIX_MEASUREMENT, m.to_json())
        rec = {"stack": "mix", "config": asdict(opts), **mix.describe(m)}
        rec["environment"] = m.environment
        rec["measured_at"] = m.measured_at
        rundir.complete(rec)
        return rundir.record


def _measure(opts, flows: Flows, plans, binary, topo, run_path, cert, key, on_progress, emulated):
    """Every flow's server, then every client waiting for "start"; all
    told to start at once; the window's edges read every process."""
    with ExitStack() as stack:
        servers, clients = {}, {}
        for f, fo in flows:
            argv = runner.workload_argv(binary, fo, "server", topo.server.addr, f.port, plans[f.index])
            servers[f.index] = stack.enter_context(
                WorkloadProcess(
                    "server",
                    argv + ["--cert", str(cert), "--key", str(key)],
                    topo.server,
                    run_path / f"flow{f.index}-server.log",
                )
            )
        for f, fo in flows:
            servers[f.index].wait_event("ready", runner.READY_TIMEOUT_S)
            argv = runner.workload_argv(binary, fo, "client", topo.server.addr, f.port, plans[f.index])
            clients[f.index] = stack.enter_context(
                WorkloadProcess("client", argv + ["--wait-start"], topo.client, run_path / f"flow{f.index}-client.log")
            )
        procs = [*servers.values(), *clients.values()]
        for c in clients.values():
            c.send("start")
        connected = {i: c.wait_event("connected", runner.CONNECT_TIMEOUT_S) for i, c in clients.items()}
        on_progress(f"{len(flows)} flows connected; warming up {opts.warmup_s:g} s")
        sleep_watching(max(e["t_ns"] for e in connected.values()) + int(opts.warmup_s * 1e9), procs)
        if emulated is not None and emulated.spec.rate_bit and any(fo.pattern == "bulk" for _, fo in flows):
            on_progress("waiting for the link to fill")
            emulated.applied["before_window"] = link.wait_saturated(
                emulated.endpoints["client"],
                emulated.spec,
                lambda s: sleep_watching(time.monotonic_ns() + int(s * 1e9), procs),
            )
        start = _edge("start", servers, clients, emulated)
        on_progress(f"measuring {opts.duration_s:g} s")
        sleep_watching(start[0]["t_ns"] + int(opts.duration_s * 1e9), procs)
        end = _edge("end", servers, clients, emulated)
        measured_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        sleep_watching(end[0]["t_ns"] + int(runner.TAIL_S * 1e9), procs)
        for c in clients.values():
            c.send("stop")
        done = {
            i: {
                "client": clients[i].finish(runner.FINISH_TIMEOUT_S),
                "server": servers[i].finish(runner.FINISH_TIMEOUT_S),
            }
            for i in clients
        }
    for p in procs:
        if p.done.get("exit_code") != 0:
            p.raise_exit()
    env = environment.describe()
    env["topology"] = topo.describe()
    measured = []
    for f, fo in flows:
        i = f.index
        measured.append(
            mix.FlowMeasurement(
                flow=asdict(f),
                options=asdict(fo),
                pids={"client": clients[i].pid, "server": servers[i].pid},
                connected=connected[i],
                marks={"start": start[2][i], "end": end[2][i]},
                cpu={"start": start[1][i], "end": end[1][i]},
                done=done[i],
                reports=list(clients[i].reports) if fo.pattern == "rr" else None,
            )
        )
    if not any(_moved(fm) for fm in measured):
        raise errors.PeerDied(
            "no flow's bytes arrived inside the window though every side reported success; see the run's logs."
        )
    return mix.MixMeasurement(
        options=asdict(opts),
        environment=env,
        measured_at=measured_at,
        edges={"start": start[0], "end": end[0]},
        flows=measured,
    )


def _moved(fm: mix.FlowMeasurement) -> bool:
    return fm.marks["end"]["server"]["app_bytes"] > fm.marks["start"]["server"]["app_bytes"]


def _edge(name: str, servers: dict, clients: dict, emulated):
    """Every process's mark asked for at once, the kernel's counters read
    meanwhile, then the answers collected (as window.take_edge, for many)."""
    for i in clients:
        servers[i].request_mark(name)
        clients[i].request_mark(name)
    t_ns = time.monotonic_ns()
    system = cpu.read_system()
    cpus = {
        i: {"client": asdict(cpu.read_process(clients[i].pid)), "server": asdict(cpu.read_process(servers[i].pid))}
        for i in clients
    }
    qdiscs = link.read_counters(emulated.endpoints) if emulated else None
    marks = {
        i: {
            "server": servers[i].wait_event("mark", MARK_TIMEOUT_S),
            "client": clients[i].wait_event("mark", MARK_TIMEOUT_S),
        }
        for i in clients
    }
    return {"t_ns": t_ns, "system": asdict(system), "qdiscs": qdiscs}, cpus, marks
