# SPDX-License-Identifier: GPL-2.0-only
"""What one run measured, raw: the window's two edges, the workloads'
reports, the probes' snapshots, the stack samples' counts, the kernel's
counters around the run, and the environment it ran in.

collectors/placement.py produces a Measurement and writes it to the run directory as
measurement.json; record.describe() turns it into run.json, a pure
function of it (and of the folded stacks beside it). Keeping the raw
values means a record can be derived again, and tested against a stored
measurement (tests/test_record_golden.py).
"""

import json
from dataclasses import asdict, dataclass, fields
from typing import Dict, Optional

from qprof.describe import cpu, mix
from qprof.describe.window import Edge, Window

MEASUREMENT = "measurement.json"


@dataclass
class Measurement:
    options: dict  # asdict(RunOptions), resolved by describe/plan.py
    environment: dict  # environment.describe(), with "topology" (Topology.describe())
    measured_at: str  # local time, when the window closed
    pids: Dict[str, int]  # side -> workload pid
    window: Window
    connected: dict  # the client's "connected" event
    done: Dict[str, dict]  # side -> the workload's final report
    tls_before: Dict[str, Optional[dict]]  # side -> /proc/<pid>/net/tls_stat before the window
    udp: Dict[str, Dict[str, Optional[dict]]]  # "before"/"after" -> side -> /proc/net/snmp Udp
    devices: Dict[str, Dict[str, Optional[dict]]]  # "before"/"after" -> side -> link counters
    probes: dict  # probe name -> its record (status, window, edges, ...)
    perf: Optional[dict]  # the stack samples' capture, None with --sample-hz 0
    server_binds: Optional[list]  # what the QUIC server's bind interposer steered
    offload: dict  # plan (describe()), device_features, interposer reports
    floor_parts: dict  # floor.measure(stack)
    link: Optional[dict] = None  # with --link: link.apply's plan and the qdiscs read back
    reports: Optional[Dict[str, list]] = None  # --pattern download: side -> its per-download events
    intervals: Optional[list] = None  # --interval: window.sample_intervals' samples between the edges
    placement: Optional[dict] = None  # where it ran, beyond this machine: {"guest_run": its directory}
    # A run on hosts: role -> {"host", "address", "environment" (with its
    # "nic"), "clock" (its CLOCK_MONOTONIC against this side's, ssh.py's
    # ClockOffset; None for this machine)}, and "same_kernel".
    hosts: Optional[dict] = None

    def to_json(self) -> str:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
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
        w = d["window"]
        d["window"] = Window(_edge_in(w["start"]), _edge_in(w["end"]), w.get("receiver", "server"))
        return cls(**d)


def load(text: str):
    """A stored measurement of either shape: a run's (Measurement) or a
    mix's (describe/mix.py MixMeasurement, which has flows)."""
    if "flows" in json.loads(text):
        return mix.MixMeasurement.from_json(text)
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
