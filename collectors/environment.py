# SPDX-License-Identifier: GPL-2.0-only
"""The machine a run was measured on, so two records can be compared later."""

import json
import os
import platform
import re
import socket
import subprocess
from pathlib import Path
from typing import Optional

from qprof import __version__
from qprof.describe import offload
from qprof.describe.cpu import CLK_TCK


def cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def qprof_commit() -> Optional[str]:
    """The git commit qprof's source tree is checked out at; None when it
    is not a git checkout (an installed copy) or git cannot say."""
    src = Path(__file__).resolve().parent.parent
    if not (src / ".git").exists():
        return None
    try:
        # safe.directory: a checkout owned by another user than root is still read.
        r = subprocess.run(
            ["git", "-c", f"safe.directory={src}", "-C", str(src), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = r.stdout.strip()
    return commit if r.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", commit) else None


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> Optional[str]:
    """The running kernel's boot: two hosts that give the same one are one
    kernel (namespaces of one machine), whose machine-wide counters a run
    must count once."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


# Where the kernel lists a hardware PMU's events (hybrid CPUs have two).
PMU_DIRS = ("cpu", "cpu_core", "cpu_atom")


def pmu() -> Optional[str]:
    """The hardware PMU perf would count cycles on, or None (a VM without one)."""
    for name in PMU_DIRS:
        if Path(f"/sys/bus/event_source/devices/{name}").is_dir():
            return name
    return None


def describe() -> dict:
    u = os.uname()
    return {
        "boot_id": boot_id(),
        "pmu": pmu(),
        "kernel_release": u.release,
        "kernel_version": u.version,
        "machine": u.machine,
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "clock_ticks_per_s": CLK_TCK,
        "python": platform.python_version(),
        "qprof_version": __version__,
        "qprof_commit": qprof_commit(),
        "emulated": False,
    }


def _ethtool(*args: str) -> Optional[str]:
    try:
        r = subprocess.run(["ethtool", *args], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def nic(peer: str) -> dict:
    """The device this host reaches peer through, as `ip route get`,
    ethtool and /sys say: driver and firmware, link speed, MTU and the
    offloads' states (`ethtool -k`; "[fixed]" ones listed apart). A part
    that cannot be read is None, with the reason under absent_reason."""
    out: dict = {"peer": peer, "device": None, "absent_reason": {}}
    try:
        r = subprocess.run(["ip", "-j", "route", "get", peer], capture_output=True, text=True, timeout=5)
        route = json.loads(r.stdout)[0] if r.returncode == 0 else {}
        dev, source = route.get("dev"), route.get("prefsrc")
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError):
        dev = source = None
    if dev is None:
        out["absent_reason"]["device"] = f"`ip route get {peer}` gave no device"
        return out
    out["device"] = dev
    out["source"] = source  # this host's address toward peer
    sysfs = Path("/sys/class/net") / dev
    for key, name in (("mtu", "mtu"), ("speed_mbit", "speed")):
        try:
            value = int((sysfs / name).read_text().strip())
            out[key] = value if value >= 0 else None  # virtual devices say -1 for speed
        except (OSError, ValueError):
            out[key] = None
        if out[key] is None:
            out["absent_reason"][key] = f"{sysfs / name} unreadable or unknown for this device"
    info = _ethtool("-i", dev)
    fields = dict(line.split(": ", 1) for line in (info or "").splitlines() if ": " in line)
    for key, name in (("driver", "driver"), ("driver_version", "version"), ("firmware", "firmware-version")):
        out[key] = fields.get(name) or None
    if info is None:
        out["absent_reason"]["driver"] = f"`ethtool -i {dev}` failed"
    for key in ("driver_version", "firmware"):
        if info is not None and out[key] is None:
            out["absent_reason"][key] = f"`ethtool -i {dev}` reports none"
    features = _ethtool("-k", dev)
    if features is None:
        out["offloads"] = None
        out["absent_reason"]["offloads"] = f"`ethtool -k {dev}` failed"
    else:
        states = offload.parse_features(features)
        out["offloads"] = {name: state.startswith("on") for name, state in states.items()}
        out["offloads_fixed"] = [name for name, state in states.items() if "[fixed]" in state]
    return out
