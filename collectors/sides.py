# SPDX-License-Identifier: GPL-2.0-only
"""A run's two sides, wherever they run, behind one interface, so the
endpoints (collectors/endpoints.py) and the edges (collectors/edges.py)
never ask where a side is:

    binary(role, name), build_dir(role), report_dir(role)
                        what a role's workload runs, from which build,
                        and where its server writes its bind report
    server_files(cert, key)  the certificate and key where the server runs
    instruments(stack, opts, pids, run_path, single)
                        the probes and perf, on whichever host each side is
    read(flows, kernel) the instant of an edge: the machine's CPU, each
                        flow's processes' (role -> pid each), and (kernel:
                        a run of one flow) the tasks' schedstat, TLS and
                        loss counters (the marks are edges.take's)
    nics(kernel)        what a side's NIC adds, read outside the window
    cpu_now(pids), tls_stat(pids)  an interval's CPU, the TLS counters now
    capture(perf, pids, out_dir)   perf stopped and folded per side
    binds(run_path), hosts()       the measurement's server_binds and hosts

- OnMachine: both sides on this machine (two network namespaces joined by
  veth, or the loopback): one kernel, so one reading serves both sides,
  and one probe process and one perf watch both processes (the
  instruments' cost is the decided one, each record's `observers`).
- OnHosts: each side on its host (collectors/remote.py: a LocalSide here or
  a RemoteSide over SSH), each part read there and merged.
"""

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional

from qprof.collectors import listen, procfs
from qprof.collectors.edges import Reading
from qprof.collectors.perf import PerfRecorder, capture_record
from qprof.collectors.probes import HostProbes, ProbeSet, Target, target_for
from qprof.collectors.remote import LOCAL, HostsPerf
from qprof.describe import cpu, transports


class OnMachine:
    """Both sides on this machine, in the topology's network namespaces
    (or on its loopback); binary: qprof-wl in this machine's build."""

    same_kernel = True

    def __init__(self, binary: Path, topo, run_path: Path):
        self.bin, self.topo, self.run_path = binary, topo, run_path

    def binary(self, role: str, name: str) -> Path:
        return self.bin.with_name(name)

    def build_dir(self, role: str) -> Optional[Path]:
        return None  # the workload's own (its binary's)

    def report_dir(self, role: str) -> Path:
        return self.run_path

    def server_files(self, cert: Path, key: Path) -> tuple:
        return str(cert), str(key)

    def instruments(self, stack, opts, pids: Dict[str, int], run_path: Path, single: bool) -> tuple:
        """(probes, perf): the probes on a run of one flow's two processes, perf over the machine."""
        probes = perf = None
        if single:
            target = target_for(self.topo, pids)
            probes = stack.enter_context(ProbeSet(list(opts.probes), target, run_path, opts))
        if opts.sample_hz:
            dwarf = transports.STACKS[opts.stack].dwarf_stack_bytes
            perf = stack.enter_context(
                PerfRecorder(run_path, opts.sample_hz, opts.keep_perf_data, opts.call_graph, dwarf)
            )
        return probes, perf

    def read(self, flows: List[Dict[str, int]], kernel: bool) -> Reading:
        t_ns = time.monotonic_ns()
        system = procfs.read_system()
        cpus = [{role: procfs.read_process(pid) for role, pid in f.items()} for f in flows]
        tasks = tls_stat = net = None
        if kernel:
            tasks, tls_stat, net = procfs.read_kernel(flows[0])
        return Reading(t_ns, system, cpus, None, tasks, tls_stat, net)

    def nics(self, kernel: bool) -> dict:
        return {}  # the veths' counters are the kernel counters' (Endpoints.kernel_counters)

    def cpu_now(self, pids: Dict[str, int]) -> dict:
        return {
            "system": asdict(procfs.read_system()),
            **{f"{role}_oncpu_s": procfs.read_process(pid).oncpu_s for role, pid in pids.items()},
        }

    def tls_stat(self, pids: Dict[str, int]) -> dict:
        return {role: procfs.read_tls_stat(pid) for role, pid in pids.items()}

    def capture(self, perf, pids: Dict[str, int], out_dir: Path) -> dict:
        got = perf.capture(pids, out_dir)
        return capture_record(perf, got["samples"], got["samples_per_cpu"])

    def binds(self, run_path: Path):
        return listen.read_report(run_path)

    def hosts(self) -> Optional[dict]:
        return None


class OnHosts:
    """Each side on its own host (role -> a collectors/remote.py side), the
    endpoints' topology theirs (a HostsTopology): each side's workload,
    probes, perf and hardware counters run from its host's build, and each
    edge is its parts read there at once."""

    def __init__(self, sides: Dict[str, object], topo):
        self.sides, self.topo = sides, topo
        self.same_kernel = topo.same_kernel
        self.counted: Dict[str, str] = {}  # each side's perf stat output, once its perf is folded

    def binary(self, role: str, name: str) -> Path:
        return self.sides[role].binary(name)

    def build_dir(self, role: str) -> Optional[Path]:
        return self.sides[role].build_dir

    def report_dir(self, role: str) -> Path:
        return Path(self.sides[role].file_path(listen.REPORT_NAME)).parent

    def server_files(self, cert: Path, key: Path) -> tuple:
        there = self.sides["server"].put({"server-cert.pem": cert.read_text(), "server-key.pem": key.read_text()})
        return there["server-cert.pem"], there["server-key.pem"]

    def instruments(self, stack, opts, pids: Dict[str, int], run_path: Path, single: bool) -> tuple:
        """Each side's probes on its own host, for its own process and its
        NIC; perf on each host, and each side's hardware counters."""
        sets, perfs, counters = {}, {}, {}
        dwarf = transports.STACKS[opts.stack].dwarf_stack_bytes
        for role, side in self.sides.items():
            target = Target(pids={role: pids[role]}, devices={role: f"{side.endpoint.ifname}@host"})
            remote = side if side.name != LOCAL else None
            sets[role] = stack.enter_context(ProbeSet(list(opts.probes), target, run_path, opts, side=remote, tag=role))
        if opts.sample_hz:
            for role, side in self.sides.items():
                perfs[role] = stack.enter_context(
                    side.perf(run_path, opts.sample_hz, opts.call_graph, opts.keep_perf_data, dwarf)
                )
        for role, side in self.sides.items():
            counters[role] = stack.enter_context(side.stat(run_path, pids[role], role))
        return HostProbes(sets, self.same_kernel), HostsPerf(perfs, counters)

    def read(self, flows: List[Dict[str, int]], kernel: bool) -> Reading:
        """An edge of a run on hosts: each role's part read on its host, in
        its own clock (its side's edge), t_ns ours. The machine's CPU and
        softnet are every kernel's summed (once where the hosts are one
        kernel); a side's CPU, TLS and namespace counters are its own
        host's; the task table holds each side's own threads, and each host
        keeps its whole one, with its clock and /proc/stat, under hosts
        (their others are theirs: pids of two kernels are not one key space)."""
        pids, sides = flows[0], self.sides
        t_ns = time.monotonic_ns()

        def ask(role: str, pid: int):
            # Its answer and when it came, in our clock: the host read its part
            # between t_ns and then (its clock's offset places it there).
            return sides[role].edge({role: pid}, kernel), time.monotonic_ns()

        # Every host at once: one read after another would put each later
        # host's reading a whole round trip (a slow host's read) after the marks.
        with ThreadPoolExecutor(len(pids)) as pool:
            asked = {role: pool.submit(ask, role, pid) for role, pid in pids.items()}
            answers = {role: f.result() for role, f in asked.items()}
        parts = {role: part for role, (part, _) in answers.items()}
        kernels = [next(iter(parts))] if self.same_kernel else list(parts)
        system = sum(
            (cpu.SystemCpu(**parts[r]["system"]) for r in kernels[1:]), cpu.SystemCpu(**parts[kernels[0]]["system"])
        )
        cpus = [{role: cpu.ProcessCpu(**parts[role]["processes"][role]) for role in pids}]
        hosts = {
            role: {"host": sides[role].name, "t_ns": p["t_ns"], "answered_ns": answers[role][1], "system": p["system"]}
            for role, p in parts.items()
        }
        if not kernel:
            return Reading(t_ns, system, cpus, None, hosts=hosts)
        tasks, tls_stat, net = {}, {}, {}
        for role, p in parts.items():
            host_tasks = {tuple(int(x) for x in k.split("/")): ns for k, ns in p["tasks"].items()}
            tasks.update({k: ns for k, ns in host_tasks.items() if k[0] == pids[role]})
            hosts[role]["tasks"] = p["tasks"]
            tls_stat[role] = p["tls_stat"][role]
            net[role] = p["net"][role]
        softnets = [parts[r]["net"]["softnet"] for r in kernels]
        net["softnet"] = None if None in softnets else {k: sum(s[k] for s in softnets) for k in softnets[0]}
        return Reading(t_ns, system, cpus, None, tasks, tls_stat, net, hosts)

    def nics(self, kernel: bool) -> dict:
        """Each side's NIC read on its host, all hosts at once (kernel: a run of one flow)."""
        if not kernel:
            return {}
        with ThreadPoolExecutor(len(self.sides)) as pool:
            asked = {role: pool.submit(side.nic, side.endpoint.ifname) for role, side in self.sides.items()}
            return {role: f.result() for role, f in asked.items()}

    def cpu_now(self, pids: Dict[str, int]) -> dict:
        r = self.read([pids], False)
        f = r.flows[0]
        return {"system": asdict(r.system), **{f"{role}_oncpu_s": f[role].oncpu_s for role in pids}}

    def tls_stat(self, pids: Dict[str, int]) -> dict:
        return {role: self.sides[role].edge({role: pid})["tls_stat"][role] for role, pid in pids.items()}

    def capture(self, perf, pids: Dict[str, int], out_dir: Path) -> Optional[dict]:
        self.counted = perf.counted()  # each side's hardware counters, while their perf stats are ours
        return perf.capture(pids, out_dir, self.same_kernel)

    def binds(self, run_path: Path):
        return listen.parse_report(self.sides["server"].read_file(listen.REPORT_NAME))

    def hosts(self) -> dict:
        """Each role's host, where it was reached, its environment and its
        clock against ours (Measurement.hosts)."""
        out = {
            role: {
                "host": side.name,
                "address": side.endpoint.addr,
                "environment": side.environment,
                "clock": asdict(side.clock) if side.clock is not None else None,
                "perf_stat": {"output": self.counted[role]} if role in self.counted else None,
            }
            for role, side in self.sides.items()
        }
        return {**out, "same_kernel": self.same_kernel}
