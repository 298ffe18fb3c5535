# SPDX-License-Identifier: GPL-2.0-only
"""The eBPF probe tools (build/bin/qprof-NAME) attached around a run.

Each probe is a ControlledProcess: started with the run's pids (or its
devices) before the client connects, marked at the window's edges like
the workloads, told to exit after. A probe that fails to build, load,
attach or answer is *absent*: the run says which and why, carries on, and
the record holds its reason instead of figures. Never zeros.

Snapshots are cumulative since attach; `delta` turns two of them into the
window's figures.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from qprof import errors, paths
from qprof.collectors.controlled import ControlledProcess, ProcessEnded
from qprof.collectors.topology import Topology

READY_TIMEOUT_S = 15.0
MARK_TIMEOUT_S = 5.0


@dataclass
class Target:
    """What the probes watch: the two workload processes and their devices."""

    pids: Dict[str, int]  # side -> pid
    devices: Dict[str, str]  # side -> "IFNAME@NETNS" (loopback: both "lo@host")


def _pid_list(t: Target) -> str:
    return ",".join(str(p) for p in t.pids.values())


def _devices(t: Target) -> List[str]:
    args = []
    for dev in dict.fromkeys(t.devices.values()):  # loopback: one device
        args += ["-d", dev]
    return args


# name -> argv after the binary
PROBES: Dict[str, Callable[[Target], List[str]]] = {
    "syscalls": lambda t: ["-p", _pid_list(t), "--control"],
    "packets": lambda t: _devices(t) + ["--control"],
    "cputhread": lambda t: ["-p", _pid_list(t), "--control"],
}

# name -> the tool's flags the run's options turn on (describe/options.py):
# what costs more than the default set should is opt-in.
OPTION_FLAGS: Dict[str, Callable[[object], List[str]]] = {
    # The receive side counted: the device's packets and the datagrams each receive call took.
    "syscalls": lambda o: (["--time"] if o.syscall_time else []) + (["--datagrams"] if o.packets_rx else []),
    "packets": lambda o: ["--rx"] if o.packets_rx else [],
    "cputhread": lambda o: ["--softirqs"] if o.softirq_time else [],
}


def target_for(topo: Topology, pids: Dict[str, int]) -> Target:
    if topo.kind == "loopback":
        devices = {"client": "lo@host", "server": "lo@host"}
    else:
        devices = {side: f"{ep.ifname}@{ep.netns}" for side, ep in (("client", topo.client), ("server", topo.server))}
    return Target(pids=pids, devices=devices)


@dataclass
class Probe:
    name: str
    proc: Optional[ControlledProcess] = None
    absent: Optional[str] = None  # why there are no figures
    marks: Dict[str, dict] = field(default_factory=dict)
    ready: Dict[str, object] = field(default_factory=dict)  # what the tool said of itself when ready

    def record(self) -> dict:
        if self.absent is not None:
            return {"status": "absent", "reason": self.absent}
        info = {k: v for k, v in self.ready.items() if k not in ("event", "pid")}
        edges = {name: {k: m[k] for k in EDGE_TIMES if k in m} for name, m in self.marks.items()}
        out = {
            "status": "present",
            **info,
            "window": scaled_stats(delta(self.marks["start"], self.marks["end"]), self.marks),
            "edges": {name: e for name, e in edges.items() if not name.endswith(BRACKET_READS)},
        }
        if all(f"{e}{r}" in self.marks for e in ("start", "end") for r in BRACKET_READS):
            out["bracket"] = bracket(self.marks, edges)
        return out


# The reads before and after an edge's marks (collectors/edges.py): "start-", "start+".
BEFORE, AFTER = "-", "+"
BRACKET_READS = (BEFORE, AFTER)


def bracket(marks: Dict[str, dict], edges: Dict[str, dict]) -> dict:
    """The window's counts at their least and most for any instrument that
    read an edge while its marks were asked for: a workload's mark came
    after the probe's "start-" read and before its "start+" (and so at the
    end), so what the probe counted up to that mark lies between the two.
    least: "start+" to "end-"; most: "start-" to "end+". Where a workload's
    count of something and the probe's part, the workload's lies between
    the probe's least and most (but for an event torn at each edge), at any
    speed."""
    keep = ("threads", "devices")
    return {
        "least": {k: v for k, v in delta(marks["start+"], marks["end-"]).items() if k in keep},
        "most": {k: v for k, v in delta(marks["start-"], marks["end+"]).items() if k in keep},
        "edges": {name: e for name, e in edges.items() if name.endswith(BRACKET_READS)},
    }


def scaled_stats(window: dict, marks: Dict[str, dict]) -> dict:
    """The window with its programs' run time and runs over all of it: the
    kernel's statistics were on for bpf_stats_on_ns of it only (a tenth, in
    slices spread over it; probe_common.c says why), so both scale by the
    window's time over that. Unscaled when the tool did not say (older
    tools kept them on throughout); not measured (progs None) when no
    slice fell in the window, never a zero cost."""
    if "bpf_stats_on_ns" not in window or "progs" not in window:
        return window
    on = window["bpf_stats_on_ns"]
    if not on:
        return {**window, "progs": None, "bpf_stats_scale": None}
    factor = (marks["end"]["t_ns"] - marks["start"]["t_ns"]) / on
    progs = [
        {**p, "run_time_ns": round(p["run_time_ns"] * factor), "run_cnt": round(p["run_cnt"] * factor)}
        for p in window["progs"]
    ]
    return {**window, "progs": progs, "bpf_stats_scale": factor}


def warn(msg: str) -> None:
    print(f"qprof: warning: {msg}", file=sys.stderr, flush=True)


class ProbeSet:
    """Starts the named probes on `target`, with the flags `opts` (the
    run's options; None: the tools' defaults) turns on; owns their
    processes. side: a collectors/remote.py RemoteSide, whose host runs
    the probes (its own build; its agent checked that the build is whole),
    for that host's processes and devices; None: here."""

    def __init__(self, names: List[str], target: Target, run_path: Path, opts=None, side=None, tag: str = ""):
        self.target = target
        self.run_path = run_path
        self.opts = opts
        self.side = side
        self.tag = tag  # the role whose host this set watches, in its logs' names (HostProbes)
        self.probes = [Probe(n) for n in names]

    def __enter__(self) -> "ProbeSet":
        # Every probe loads and attaches at once; each is then waited for.
        try:
            for p in self.probes:
                self._launch(p)
            for p in self.probes:
                self._ready(p)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _launch(self, p: Probe) -> None:
        if self.side is None:
            binary, where = paths.probe_binary(p.name), list
            if not binary.exists():
                return self._lose(p, f"not built ({binary} is missing; run `make build`)")
        else:
            binary, where = self.side.binary(f"qprof-{p.name}"), self.side.endpoint.command
        argv = [str(binary)] + PROBES[p.name](self.target)
        if self.opts is not None and p.name in OPTION_FLAGS:
            argv += OPTION_FLAGS[p.name](self.opts)
        argv = where(argv)
        log = f"probe-{self.tag}-{p.name}.log" if self.tag else f"probe-{p.name}.log"
        p.proc = ControlledProcess(f"{p.name} probe", argv, self.run_path / log)
        p.proc.__enter__()

    def _ready(self, p: Probe) -> None:
        if p.proc is None:
            return
        try:
            p.ready = p.proc.wait_event("ready", READY_TIMEOUT_S)
        except (ProcessEnded, errors.Timeout):
            self._lose(p, "failed to load or attach: " + p.proc.how_it_ended())

    def _lose(self, p: Probe, reason: str) -> None:
        p.absent = reason
        on = f" on the {self.tag}'s host" if self.tag else ""
        warn(f"probe {p.name}{on} is absent: {reason}")
        if p.proc is not None:
            p.proc.kill()

    def request_mark(self, name: str) -> None:
        for p in self.probes:
            if p.absent is None:
                p.proc.request_mark(name)

    def collect_mark(self, name: str) -> None:
        for p in self.probes:
            if p.absent is not None:
                continue
            try:
                p.marks[name] = p.proc.wait_event("mark", MARK_TIMEOUT_S)
            except (ProcessEnded, errors.Timeout):
                edge = name.rstrip("".join(BRACKET_READS))  # its reads around the marks are the edge's
                self._lose(p, f"stopped answering at the {edge} edge: " + p.proc.how_it_ended())

    def records(self) -> Dict[str, dict]:
        return {p.name: p.record() for p in self.probes}

    def close(self) -> None:
        for p in self.probes:
            if p.proc is not None and p.proc.exited() is None:
                p.proc.send("exit")
        for p in self.probes:
            if p.proc is not None:
                try:
                    p.proc.proc.wait(timeout=2)
                except Exception:
                    pass
                p.proc.kill()


class HostProbes:
    """A run on hosts: each role's ProbeSet on its own host, marked together.
    A probe's record keeps each host's under "hosts" (role -> record), and
    is present only where every host's is (else absent, saying where). A
    present one's window is theirs merged (merge_windows), so figures made
    per side (by a pid, a device) read it as a run's on one machine."""

    def __init__(self, sets: Dict[str, "ProbeSet"], same_kernel: bool):
        self.sets = sets
        self.same_kernel = same_kernel

    def request_mark(self, name: str) -> None:
        for s in self.sets.values():
            s.request_mark(name)

    def collect_mark(self, name: str) -> None:
        for s in self.sets.values():
            s.collect_mark(name)

    def records(self) -> Dict[str, dict]:
        per_role = {role: s.records() for role, s in self.sets.items()}
        out = {}
        for name in next(iter(per_role.values())):
            hosts = {role: recs[name] for role, recs in per_role.items()}
            absent = [f"on the {role}'s host: {r['reason']}" for role, r in hosts.items() if r["status"] != "present"]
            if absent:
                out[name] = {"status": "absent", "reason": "; ".join(absent), "hosts": hosts}
                continue
            first = next(iter(hosts.values()))
            merged = {k: v for k, v in first.items() if k not in ("window", "edges", "bracket")}
            # What a tool says it did (call_time, datagrams) holds for the run only where every host did it.
            merged.update({k: all(r.get(k) for r in hosts.values()) for k, v in first.items() if isinstance(v, bool)})
            merged["window"] = merge_windows({role: r["window"] for role, r in hosts.items()}, self.same_kernel)
            out[name] = {**merged, "hosts": hosts}
        return out


# Lists in a probe's window that count the whole machine, not the watched
# processes: on hosts that are one kernel, each host's probe saw all of it.
MACHINE_WIDE = ("softirq", "hardirq_ns")
# Numbers of a window that are one host's clock or setting, not a count.
NOT_SUMMED = ("bpf_stats_on_ns", "bpf_stats_scale", "t_ns", "read_ns")


def merge_windows(windows: Dict[str, dict], same_kernel: bool) -> dict:
    """Each host's window of one probe as one: entries of its processes and
    devices listed together, each saying whose host it is ("role"); what
    counts a machine summed over the kernels (once where the hosts are one
    kernel); counts summed."""
    roles = list(windows)
    out: dict = {}
    for key in dict.fromkeys(k for w in windows.values() for k in w):
        values = {r: windows[r][key] for r in roles if key in windows[r]}
        first = next(iter(values.values()))
        kernels = [r for r in ([roles[0]] if same_kernel else roles) if r in values]
        if key in MACHINE_WIDE and isinstance(first, list):
            out[key] = _sum_entries([values[r] for r in kernels])
        elif key in MACHINE_WIDE:
            out[key] = None if any(values[r] is None for r in kernels) else sum(values[r] for r in kernels)
        elif isinstance(first, list) and all(isinstance(x, dict) for v in values.values() for x in v):
            out[key] = [{**x, "role": r} for r, v in values.items() for x in v]
        elif isinstance(first, (int, float)) and not isinstance(first, bool) and key not in NOT_SUMMED:
            out[key] = sum(v for v in values.values() if v is not None) if None not in values.values() else None
        else:
            out[key] = first
    return out


def _sum_entries(lists: List[list]) -> list:
    """Lists of entries summed entry by entry, paired by their identity."""
    by_id: Dict[tuple, dict] = {}
    for entries in lists:
        for e in entries:
            k = _identity(e)
            by_id[k] = _add(by_id[k], e) if k in by_id else e
    return list(by_id.values())


def _add(a, b):
    if isinstance(b, bool) or isinstance(b, str):
        return b
    if isinstance(b, (int, float)):
        return (a or 0) + b
    if isinstance(b, dict):
        a = a if isinstance(a, dict) else {}
        return {
            k: (b.get(k, a.get(k)) if k in IDENTITY else _add(a.get(k), b[k]) if k in b else a[k])
            for k in dict.fromkeys([*a, *b])
        }
    return b


# When a probe read its counters (its clock) and how long the read took:
# levels, taken as they are, not subtracted.
EDGE_TIMES = ("t_ns", "read_ns")
# Levels too: the most a probe saw at once since it began (one receive call's datagrams).
LEVELS = EDGE_TIMES + ("datagrams_most",)

# Fields of an entry in a snapshot list that say *which* thing it counts,
# so two snapshots' entries can be paired.
IDENTITY = ("tgid", "tid", "comm", "sys", "dev", "netns_ino", "ifindex", "vec", "name", "event")


def delta(a, b):
    """b - a for cumulative snapshots: numbers subtract, lists of numbers
    subtract elementwise, dicts recurse, lists of entries pair by their
    identity fields (an entry new in b counts from zero)."""
    if isinstance(b, bool) or isinstance(b, str):
        return b
    if isinstance(b, (int, float)):
        return b - (a if isinstance(a, (int, float)) and not isinstance(a, bool) else 0)
    if isinstance(b, dict):
        a = a if isinstance(a, dict) else {}
        return {k: (v if k in IDENTITY or k in LEVELS else delta(a.get(k), v)) for k, v in b.items()}
    if isinstance(b, list):
        if all(isinstance(x, (int, float)) for x in b):
            a = a if isinstance(a, list) else []
            return [x - (a[i] if i < len(a) else 0) for i, x in enumerate(b)]
        if all(isinstance(x, dict) for x in b):
            before = {_identity(x): x for x in (a or [])}
            return [delta(before.get(_identity(x)), x) for x in b]
    return b


def _identity(entry: dict) -> tuple:
    return tuple((k, entry.get(k)) for k in IDENTITY if k in entry and k != "comm")
