# SPDX-License-Identifier: GPL-2.0-only
"""What one run measured, raw: a run of one flow's window (its two
edges, every instrument read at each: the workloads' marks, the probes'
snapshots, the stack samples' counts, the kernel's counters around it,
the workloads' reports), or a mix's (each flow's marks and CPU at the
machine's two edges); and the environment it ran in.

collectors/placement.py produces a Measurement and writes it to the run directory as
measurement.json; record.describe() turns it into run.json, a pure
function of it (and of the folded stacks beside it). Keeping the raw
values means a record can be derived again, and tested against a stored
measurement (tests/test_record_golden.py).
"""

import json
from dataclasses import asdict, dataclass, fields
from typing import Dict, List, Optional

from qprof.describe import cpu, mix
from qprof.describe.window import Edge, Window

MEASUREMENT = "measurement.json"


@dataclass
class Measurement:
    """One type for every run: a mix's has flows and edges, a run of one
    flow the rest (what only a run of one flow measures is None in a
    mix's, and a mix's two fields None in a run's)."""

    options: dict  # asdict(RunOptions), resolved by describe/plan.py
    environment: dict  # environment.describe(), with "topology" (Topology.describe())
    measured_at: str  # local time, when the window closed
    pids: Optional[Dict[str, int]] = None  # side -> workload pid
    window: Optional[Window] = None
    connected: Optional[dict] = None  # the client's "connected" event
    done: Optional[Dict[str, dict]] = None  # side -> the workload's final report
    tls_before: Optional[Dict[str, Optional[dict]]] = None  # side -> /proc/<pid>/net/tls_stat before the window
    udp: Optional[Dict[str, Dict[str, Optional[dict]]]] = None  # "before"/"after" -> side -> /proc/net/snmp Udp
    devices: Optional[Dict[str, Dict[str, Optional[dict]]]] = None  # "before"/"after" -> side -> link counters
    probes: Optional[dict] = None  # probe name -> its record (status, window, edges, ...)
    perf: Optional[dict] = None  # the stack samples' capture, None with --sample-hz 0
    server_binds: Optional[list] = None  # what the QUIC server's bind interposer steered
    offload: Optional[dict] = None  # plan (describe()), device_features, interposer reports
    floor_parts: Optional[dict] = None  # floor.measure(stack)
    link: Optional[dict] = None  # with --link: link.apply's plan and the qdiscs read back
    reports: Optional[Dict[str, list]] = None  # a pattern with events: side -> its per-event reports
    intervals: Optional[list] = None  # --interval: window.sample_intervals' samples between the edges
    placement: Optional[dict] = None  # where it ran, beyond this machine: {"guest_run": its directory}
    # A run on hosts: role -> {"host", "address", "environment" (with its
    # "nic"), "clock" (its CLOCK_MONOTONIC against this side's, ssh.py's
    # ClockOffset; None for this machine)}, and "same_kernel".
    hosts: Optional[dict] = None
    # A mix: edge -> {t_ns, system: asdict(SystemCpu), qdiscs}, and each
    # flow's marks and CPU at those edges (describe/mix.py).
    edges: Optional[Dict[str, dict]] = None
    flows: Optional[List[mix.FlowMeasurement]] = None

    @property
    def is_mix(self) -> bool:
        return self.flows is not None

    def to_json(self) -> str:
        if self.is_mix:
            d = {name: getattr(self, name) for name in MIX_FIELDS}
            d["flows"] = [asdict(f) for f in self.flows]
            return json.dumps(d, indent=1)
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("edges", "flows")}
        for name in ("placement", "hosts"):
            if d[name] is None:  # a run on this machine: as measurements were before placements
                del d[name]
        d["window"] = {"start": _edge_out(self.window.start), "end": _edge_out(self.window.end)}
        if self.window.receiver != "server":
            d["window"]["receiver"] = self.window.receiver
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Measurement":
        d = json.loads(text)
        if "flows" in d:
            d["flows"] = [mix.FlowMeasurement(**f) for f in d["flows"]]
            return cls(**{k: v for k, v in d.items() if k in MIX_FIELDS})
        w = d["window"]
        d["window"] = Window(_edge_in(w["start"]), _edge_in(w["end"]), w.get("receiver", "server"))
        return cls(**d)


# What a mix's measurement holds, in the order it is stored.
MIX_FIELDS = ("options", "environment", "measured_at", "edges", "flows", "link", "placement")


def load(text: str) -> Measurement:
    """A stored measurement, a run's or a mix's."""
    return Measurement.from_json(text)


def tasks_out(tasks: dict) -> dict:
    """Every task's schedstat as JSON keys: (pid, tid) -> "pid/tid"."""
    return {f"{pid}/{tid}": ns for (pid, tid), ns in tasks.items()}


def _edge_out(e: Edge) -> dict:
    d = asdict(e)
    d["tasks"] = tasks_out(e.tasks)
    for side in ("server", "client"):
        if d[side]["threads"] is None:  # stored before threads were read: as it was
            del d[side]["threads"]
    if e.hosts is None:  # a run on one machine: as edges were before hosts
        del d["hosts"]
    return d


def _edge_in(d: dict) -> Edge:
    d = dict(d)
    d["system"] = cpu.SystemCpu(**d["system"])
    d["server"] = cpu.ProcessCpu(**d["server"])
    d["client"] = cpu.ProcessCpu(**d["client"])
    d["tasks"] = {tuple(int(x) for x in k.split("/")): ns for k, ns in d["tasks"].items()}
    return Edge(**d)
