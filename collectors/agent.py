# SPDX-License-Identifier: GPL-2.0-only
"""qprof's side on another host: `qprof agent`, started over SSH, speaking
JSON lines on its stdin and stdout (the SSH channel's), and opening no
port of its own.

On start it reclaims what qprof processes that died on its host left
(their ledgers, core/remains.py; its own directory is in its ledger),
then says who it is, one line:

    {"event": "hello", "qprof_version": ..., "qprof_commit": ...,
     "euid": 0, "build_dir": ..., "missing": [...], "reclaimed": [...]}

`missing` names what `make build` makes and this host lacks. Then it
answers one request a line, {"op": NAME, "id": N, ...}, with {"id": N,
...} or {"id": N, "error": SENTENCE}, in order:

    clock   {"t_ns": CLOCK_MONOTONIC now}, answered before anything else
            is read, so the other side can bound the clocks' offset by the
            round trip (collectors/ssh.py: best of N)
    edge    {"pids": {ROLE: PID}, "kernel": true}: this host's part of a
            window's edge, read at one instant as collectors/edges.py reads
            the local one: its clock, /proc/stat, each process's CPU, and
            (kernel: true, the default) every task's schedstat and each
            process's TLS and namespace counters and softnet
    nic     {"dev": DEV}: what that NIC adds (procfs.read_nic), read apart
            from an edge, outside the window (collectors/edges.py)
    environment  {"peer": ADDR}: collectors/environment.py's description of
            this host, with the NIC it reaches ADDR through
    files   {"files": {NAME: TEXT}}: each written (0600) into the agent's
            own private directory, made on first use and removed when the
            agent ends: {"paths": {NAME: PATH}} (a run's certificate and
            key, for the side it runs there)
    read    {"name": NAME}: {"text": ...} of a file in that directory (what
            a side wrote there: the QUIC server's bind report), or
            {"text": null} when there is none
    stat    {"do": "start", "pid": PID, "tag": ROLE}, then "enable" and
            "disable" at the window's edges, then "output": perf stat's
            cycles and instructions of that process (collectors/perf.py
            PerfStat), {"output": its CSV}
    link    {"do": "claim"|"release", "dev": DEV}: the measuring qprof put
            a --link on this host's DEV (its root qdisc, through tc over
            ssh) and hands it to this agent, which keeps it in this host's
            ledger and, if it is still claimed when the agent ends (EOF:
            the connection lost), deletes it; an agent killed with -9
            leaves it to the next agent's or `qprof clean`'s reclaim
    perf    {"do": "start", "sample_hz": N, "call_graph": G}, then "enable"
            and "disable" at the window's edges, then {"do": "fold",
            "pids": {ROLE: PID}}: collectors/perf.py's PerfRecorder on this
            host, in the agent's directory, stopped and folded there:
            {"samples", "samples_per_cpu", "period_ns", "files": {NAME:
            TEXT}} (the folded stacks); perf ends with the agent
    exit    {"id": N}, then the agent ends (so does EOF)

An unknown op is answered with an error and the agent goes on.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

from qprof import __version__, interrupts, paths, remains
from qprof.collectors import environment, procfs
from qprof.collectors.perf import DWARF_STACK_BYTES, PerfRecorder, PerfStat

# What `make build` makes that a side of a run needs on its host.
NEEDED = ("bin/qprof-wl", "bin/qprof-syscalls", "bin/qprof-packets", "bin/qprof-cputhread")


def hello(reclaimed=()) -> dict:
    build = paths.build_dir()
    return {
        "reclaimed": list(reclaimed),
        "event": "hello",
        "qprof_version": __version__,
        "qprof_commit": environment.qprof_commit(),
        "euid": os.geteuid(),
        "build_dir": str(build),
        "missing": [n for n in NEEDED if not os.access(build / n, os.X_OK)],
    }


def _clock(req: dict) -> dict:
    return {"t_ns": time.monotonic_ns()}


def _edge(req: dict) -> dict:
    pids = {role: int(pid) for role, pid in req["pids"].items()}
    return procfs.read_edge(pids, req.get("kernel", True))


def _environment(req: dict) -> dict:
    return {**environment.describe(), "nic": environment.nic(req["peer"])}


def _nic(req: dict) -> dict:
    return procfs.read_nic(req["dev"])


OPS: Dict[str, Callable[[dict], dict]] = {"clock": _clock, "edge": _edge, "environment": _environment, "nic": _nic}


def _file_name(name: str) -> str:
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ValueError(f"{name!r} is not a file name")
    return name


class Scratch:
    """The agent's private directory, made on first use, gone with it, and
    the perf recorder that writes there (stopped first)."""

    def __init__(self):
        self.dir = None
        self.perf = None
        self.stats: Dict[str, PerfStat] = {}
        self.qdiscs: List[str] = []

    def stat_op(self, req: dict) -> dict:
        do, tag = req.get("do"), _file_name(req.get("tag", ""))
        if do == "start":
            if tag in self.stats:
                raise ValueError(f"perf stat {tag!r} is already started")
            st = PerfStat(Path(self.path()), int(req["pid"]), tag)
            st.__enter__()
            self.stats[tag] = st
            return {}
        if tag not in self.stats:
            raise ValueError(f"perf stat {tag!r} is not started")
        if do == "enable":
            self.stats[tag].enable()
            return {}
        if do == "disable":
            self.stats[tag].disable()
            return {}
        if do == "output":
            return {"output": self.stats[tag].output()}
        raise ValueError(f"stat knows start, enable, disable and output, not {do!r}")

    def link_op(self, req: dict) -> dict:
        dev = req["dev"]
        if not isinstance(dev, str) or not dev or "/" in dev:
            raise ValueError(f"{dev!r} is not a device name")
        with interrupts.deferred():
            if req.get("do") == "claim" and dev not in self.qdiscs:
                remains.ledger().claim("qdiscs", dev)
                self.qdiscs.append(dev)
            elif req.get("do") == "release" and dev in self.qdiscs:
                remains.ledger().release("qdiscs", dev)
                self.qdiscs.remove(dev)
        return {"claimed": list(self.qdiscs)}

    def path(self) -> str:
        if self.dir is None:
            with interrupts.deferred():  # made and in this host's ledger as one step
                self.dir = tempfile.mkdtemp(prefix="qprof-agent-")
                remains.ledger().claim("paths", self.dir)
        return self.dir

    def files(self, req: dict) -> dict:
        out = {}
        for name, text in req["files"].items():
            path = os.path.join(self.path(), _file_name(name))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            out[name] = path
        return {"paths": out}

    def read(self, req: dict) -> dict:
        try:
            with open(os.path.join(self.path(), _file_name(req["name"]))) as f:
                return {"text": f.read()}
        except FileNotFoundError:
            return {"text": None}

    def perf_op(self, req: dict) -> dict:
        do = req.get("do")
        if do == "start":
            if self.perf is not None:
                raise ValueError("perf is already started")
            rec = PerfRecorder(
                Path(self.path()),
                int(req["sample_hz"]),
                False,
                req.get("call_graph"),
                int(req.get("dwarf_bytes") or DWARF_STACK_BYTES),
            )
            rec.__enter__()
            self.perf = rec
            return {"period_ns": rec.period_ns, "call_graph": rec.call_graph}
        if self.perf is None:
            raise ValueError("perf is not started")
        if do == "enable":
            self.perf.enable()
            return {}
        if do == "disable":
            self.perf.disable()
            return {}
        if do == "fold":
            stacks = Path(self.path()) / "stacks"
            got = self.perf.capture({role: int(pid) for role, pid in req["pids"].items()}, stacks)
            self.perf.close()
            self.perf = None
            return {**got, "files": {p.name: p.read_text() for p in sorted(stacks.iterdir()) if p.is_file()}}
        raise ValueError(f"perf knows start, enable, disable and fold, not {do!r}")

    def remove(self) -> None:
        for dev in list(self.qdiscs):  # a link still on: the run could not take it off
            subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)
            remains.ledger().release("qdiscs", dev)
        self.qdiscs.clear()
        for st in self.stats.values():
            st.close()
        self.stats.clear()
        if self.perf is not None:
            self.perf.close()
            self.perf = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            remains.ledger().release("paths", self.dir)
            self.dir = None


def serve(inp=None, out=None) -> int:
    """The agent's loop until "exit" or EOF; 0. First it reclaims what
    qprof processes that died on this host left (core/remains.py: an
    agent killed with -9 leaves its directory, with a run's key in it),
    as a run does here; its hello says what."""
    inp, out = inp or sys.stdin, out or sys.stdout
    reclaimed = remains.reclaim() if os.geteuid() == 0 else []
    scratch = Scratch()
    try:
        ops = {**OPS, "files": scratch.files, "read": scratch.read, "perf": scratch.perf_op, "link": scratch.link_op}
        ops["stat"] = scratch.stat_op
        return _serve(inp, out, ops, reclaimed)
    finally:
        scratch.remove()


def _serve(inp, out, ops: Dict[str, Callable[[dict], dict]], reclaimed=()) -> int:

    def say(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    say(hello(reclaimed))
    for line in inp:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op, rid = req["op"], req.get("id")
        except (ValueError, KeyError, TypeError):
            say({"id": None, "error": f"not a request: {line.strip()[:80]!r}"})
            continue
        if op == "exit":
            say({"id": rid})
            return 0
        fn = ops.get(op)
        if fn is None:
            say({"id": rid, "error": f"unknown op {op!r}; this agent knows {', '.join(sorted(ops))} and exit"})
            continue
        try:
            say({"id": rid, **fn(req)})
        except Exception as e:  # one failed request is the caller's to judge, not the agent's end
            say({"id": rid, "error": f"{op} failed: {e}"})
    return 0
