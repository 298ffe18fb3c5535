# SPDX-License-Identifier: GPL-2.0-only
"""What a NIC adds, on a run between hosts (issue 26): its own counters
(`ethtool -S`), the interrupts of its queues and the CPUs that took them
(/proc/interrupts), the network softirqs per CPU (/proc/softirqs), and
drops at the device and at its qdiscs, over the window. Socket-layer drops
are the namespaces' counters (describe/netstat.py, `kernel_loss`).

collectors/procfs.py's read_nic reads them at each edge, on the side's
host; this module parses the texts and turns two readings into the
window's figures. A part that could not be read is None, with its reason
under absent_reason: never zero.
"""

from typing import Dict, List, Optional

NET_SOFTIRQS = ("NET_RX", "NET_TX")
# /sys/class/net/DEV/statistics files that count what the device dropped or lost.
DEVICE_DROPS = (
    "rx_dropped",
    "tx_dropped",
    "rx_missed_errors",
    "rx_fifo_errors",
    "rx_over_errors",
    "rx_errors",
    "tx_errors",
    "tx_fifo_errors",
    "tx_aborted_errors",
)


def parse_ethtool_stats(text: str) -> Dict[str, int]:
    """`ethtool -S DEV`: "NIC statistics:" then "name: value" lines."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.strip().rpartition(":")
        if sep and value.strip().lstrip("-").isdigit():
            out[name.strip()] = int(value)
    return out


def parse_interrupts(text: str, names: List[str]) -> Dict[str, List[int]]:
    """/proc/interrupts' lines whose action names (the last column) hold
    one of `names` (the device, its bus device: virtio2, 0000:00:03.0):
    action name -> count per CPU."""
    lines = text.splitlines()
    if not lines:
        return {}
    ncpu = len(lines[0].split())
    out = {}
    for line in lines[1:]:
        irq, sep, rest = line.partition(":")
        if not sep or not irq.strip().isdigit():
            continue  # NMI, LOC and the other per-CPU events are not a NIC's
        fields = rest.split()
        counts = [int(x) for x in fields[:ncpu] if x.isdigit()]
        action = fields[-1] if len(fields) > ncpu else ""
        if len(counts) == ncpu and any(_names_device(action, n) for n in names):
            out[action] = counts
    return out


def _names_device(action: str, name: str) -> bool:
    """eth0-TxRx-0 and eth0 name eth0; virtio2-input.0 names virtio2; an
    mlx5_comp0@pci:0000:00:03.0 names 0000:00:03.0."""
    return action == name or action.startswith(f"{name}-") or action.endswith(f"@pci:{name}")


def parse_softirqs(text: str, names=NET_SOFTIRQS) -> Dict[str, List[int]]:
    """/proc/softirqs' rows of `names`: name -> count per CPU."""
    out = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if sep and name.strip() in names:
            out[name.strip()] = [int(x) for x in rest.split()]
    return out


def _delta(a: Optional[dict], b: Optional[dict]) -> Optional[dict]:
    if a is None or b is None:
        return None
    return {k: v - a[k] for k, v in b.items() if k in a}


def _per_cpu(a: Dict[str, List[int]], b: Dict[str, List[int]]) -> Dict[str, Dict[str, int]]:
    out = {}
    for name, counts in b.items():
        before = a.get(name, [0] * len(counts))
        out[name] = {str(cpu): n - before[cpu] for cpu, n in enumerate(counts) if n - before[cpu]}
    return out


def figures(start: dict, end: dict, nbytes: int) -> dict:
    """The window's figures of a side's NIC from its readings at the two
    edges (procfs.read_nic): the counters `ethtool -S` moved, interrupts
    (all of the NIC's queues; per MB of the window's verified bytes; by
    CPU and by queue), NET_RX and NET_TX softirqs by CPU (the machine's,
    not only this NIC's), and drops at the device and its qdiscs."""
    absent = {**(start.get("absent_reason") or {}), **(end.get("absent_reason") or {})}
    ethtool = _delta(start.get("ethtool"), end.get("ethtool"))
    irqs = None
    if start.get("interrupts") is not None and end.get("interrupts") is not None:
        by_queue = _per_cpu(start["interrupts"], end["interrupts"])
        by_cpu: Dict[str, int] = {}
        for counts in by_queue.values():
            for cpu, n in counts.items():
                by_cpu[cpu] = by_cpu.get(cpu, 0) + n
        total = sum(by_cpu.values())
        irqs = {
            "total": total,
            "per_mb": total / (nbytes / 1e6) if nbytes > 0 else None,
            "by_cpu": dict(sorted(by_cpu.items(), key=lambda kv: int(kv[0]))),
            "by_queue": {q: sum(c.values()) for q, c in by_queue.items()},
        }
        if not end["interrupts"]:
            absent.setdefault("interrupts", "no line of /proc/interrupts names this device (a virtual one has none)")
    softirqs = None
    if start.get("softirqs") is not None and end.get("softirqs") is not None:
        softirqs = _per_cpu(start["softirqs"], end["softirqs"])
    return {
        "device": end.get("device"),
        "ethtool_stats": {k: v for k, v in ethtool.items() if v} if ethtool is not None else None,
        "interrupts": irqs,
        "softirqs_by_cpu": softirqs,
        "drops": {
            "device": _delta(start.get("drops"), end.get("drops")),
            "qdisc": _delta(start.get("qdisc"), end.get("qdisc")),
        },
        "absent_reason": absent,
    }
