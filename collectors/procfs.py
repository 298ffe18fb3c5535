# SPDX-License-Identifier: GPL-2.0-only
"""The kernel's counters as qprof reads them at a window's edges: /proc's
CPU accounting (clock ticks and schedstat), a namespace's SNMP and netstat
tables, softnet, a veth's qdisc and link counters, and kernel TLS's
counters. The parsing and every figure made from them live in
describe/cpu.py and describe/netstat.py; this module only reads."""

import json
import os
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Dict, Optional

from qprof.collectors.topology import Endpoint
from qprof.describe import measurement, nic
from qprof.describe.cpu import ProcessCpu, SystemCpu, parse_pid_stat, parse_proc_stat
from qprof.describe.netstat import WATCHED, parse_snmp, parse_softnet, parse_udp

TCP_ULP = Path("/proc/sys/net/ipv4/tcp_available_ulp")


def read_system() -> SystemCpu:
    with open("/proc/stat") as f:
        return parse_proc_stat(f.read())


def read_process(pid: int) -> ProcessCpu:
    with open(f"/proc/{pid}/stat") as f:
        utime_s, stime_s = parse_pid_stat(f.read())
    oncpu_ns, threads = 0, 0
    task_dir = f"/proc/{pid}/task"
    for tid in os.listdir(task_dir):
        try:
            with open(f"{task_dir}/{tid}/schedstat") as f:
                oncpu_ns += int(f.read().split()[0])
            threads += 1
        except FileNotFoundError:
            pass  # thread exited between listdir and open
    return ProcessCpu(utime_s, stime_s, oncpu_ns / 1e9, threads)


def read_tasks() -> Dict[tuple, int]:
    """Every task's on-CPU nanoseconds (schedstat), keyed (pid, tid); the
    idle tasks are not in /proc, so they are left out as perf's are."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # exited meanwhile
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    out[(int(pid), int(tid))] = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return out


def read_kernel(pids: Dict[str, int]) -> tuple:
    """The kernel's part of an edge for the processes (role -> pid): every
    task's schedstat, each process's TLS counters, its namespace's loss
    counters and the machine's softnet; (tasks, tls_stat, net)."""
    tasks = read_tasks()
    tls_stat = {role: read_tls_stat(pid) for role, pid in pids.items()}
    net = {**{role: read_namespace(pid) for role, pid in pids.items()}, "softnet": read_softnet()}
    return tasks, tls_stat, net


def read_edge(pids: Dict[str, int], kernel: bool = True) -> dict:
    """This machine's part of a window's edge for its processes (role ->
    pid), as JSON: its clock, /proc/stat, each process's CPU and (kernel)
    read_kernel's counters, every task's schedstat keyed "pid/tid". What
    an agent answers for its host (collectors/agent.py)."""
    t_ns = time.monotonic_ns()
    out = {
        "t_ns": t_ns,
        "system": asdict(read_system()),
        "processes": {role: asdict(read_process(pid)) for role, pid in pids.items()},
    }
    if kernel:
        tasks, tls_stat, net = read_kernel(pids)
        out.update(tasks=measurement.tasks_out(tasks), tls_stat=tls_stat, net=net)
    return out


SNMP = "/proc/net/snmp"


def read_udp(endpoint: Endpoint) -> Optional[Dict[str, int]]:
    text = endpoint.read_texts([SNMP])[SNMP]
    return parse_udp(text) if text is not None else None


def read_namespace(pid: int) -> Optional[Dict[str, int]]:
    """The watched counters of pid's network namespace, as "Table.Name"."""
    tables: Dict[str, Dict[str, int]] = {}
    try:
        for name in ("snmp", "netstat"):
            tables.update(parse_snmp(Path(f"/proc/{pid}/net/{name}").read_text()))
    except OSError:
        return None
    return {f"{t}.{c}": tables[t][c] for t, cs in WATCHED.items() if t in tables for c in cs if c in tables[t]}


def read_softnet() -> Optional[Dict[str, int]]:
    try:
        return parse_softnet(Path("/proc/net/softnet_stat").read_text())
    except OSError:
        return None


def read_qdiscs(dev: str, netns: Optional[str] = None) -> Optional[Dict[str, int]]:
    """Every qdisc on a device, summed: drops, overlimits, requeues (tc)."""
    ns = ["-n", netns] if netns else []
    q = subprocess.run(["tc", *ns, "-s", "-j", "qdisc", "show", "dev", dev], capture_output=True, text=True)
    if q.returncode:
        return None
    out = {"drops": 0, "overlimits": 0, "requeues": 0}
    for qd in json.loads(q.stdout or "[]"):
        for k in out:
            out[k] += qd.get(k, 0)
    return out


def read_nic(dev: str) -> dict:
    """What a NIC adds at an edge (describe/nic.py): `ethtool -S`, its
    queues' interrupts per CPU, the network softirqs per CPU, its drop
    counters and its qdiscs'. A part not read is None, with its reason."""
    out: dict = {"device": dev, "absent_reason": {}}
    try:
        r = subprocess.run(["ethtool", "-S", dev], capture_output=True, text=True, timeout=5)
        out["ethtool"] = nic.parse_ethtool_stats(r.stdout) if r.returncode == 0 else None
        why = r.stderr.strip() or r.stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        out["ethtool"], why = None, str(e)
    if out["ethtool"] is None:
        out["absent_reason"]["ethtool_stats"] = f"`ethtool -S {dev}` gave none ({why[:80]})"
    names = [dev]
    try:
        names.append(os.path.basename(os.readlink(f"/sys/class/net/{dev}/device")))  # virtio2, 0000:00:03.0
    except OSError:
        pass
    out["interrupts"] = nic.parse_interrupts(Path("/proc/interrupts").read_text(), names)
    out["softirqs"] = nic.parse_softirqs(Path("/proc/softirqs").read_text())
    drops = {}
    for name in nic.DEVICE_DROPS:
        try:
            drops[name] = int(Path(f"/sys/class/net/{dev}/statistics/{name}").read_text())
        except (OSError, ValueError):
            pass
    out["drops"] = drops or None
    out["qdisc"] = read_qdiscs(dev)
    return out


def read_device(endpoint: Endpoint) -> Optional[Dict[str, int]]:
    """A veth's qdisc drops, overlimits and requeues (every qdisc on it,
    from tc) and its link's dropped counters (its namespace's
    /proc/net/dev: a veth has no missed errors to add to its rx drops)."""
    if endpoint.netns is None:
        return None
    ns, dev = endpoint.netns, endpoint.ifname
    qdiscs = read_qdiscs(dev, ns)
    link = parse_net_dev(endpoint.read_texts([NET_DEV])[NET_DEV] or "").get(dev)
    if qdiscs is None or link is None:
        return None
    out = {f"qdisc_{k}": v for k, v in qdiscs.items()}
    out["link_tx_dropped"] = link["tx_drop"]
    out["link_rx_dropped"] = link["rx_drop"]
    return out


NET_DEV = "/proc/net/dev"
NET_DEV_FIELDS = ("bytes", "packets", "errs", "drop", "fifo")


def parse_net_dev(text: str) -> Dict[str, Dict[str, int]]:
    """/proc/net/dev: per device, its first receive and transmit columns
    ({"rx_bytes", ..., "tx_drop", "tx_fifo"})."""
    out = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        cols = rest.split()
        if not sep or len(cols) < 16:
            continue
        rx, tx = cols[:5], cols[8:13]
        out[name.strip()] = {
            **{f"rx_{k}": int(v) for k, v in zip(NET_DEV_FIELDS, rx)},
            **{f"tx_{k}": int(v) for k, v in zip(NET_DEV_FIELDS, tx)},
        }
    return out


def kernel_has_tls(ulp_path: Path = TCP_ULP) -> bool:
    try:
        return "tls" in ulp_path.read_text().split()
    except OSError:
        return False


def read_tls_stat(pid: int) -> Optional[Dict[str, int]]:
    """The kernel's TLS counters of the process's network namespace;
    None where the kernel has no TLS (the file is absent)."""
    try:
        text = Path(f"/proc/{pid}/net/tls_stat").read_text()
    except OSError:
        return None
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}
