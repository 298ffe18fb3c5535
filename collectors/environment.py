# SPDX-License-Identifier: GPL-2.0-only
"""The machine a run was measured on, so two records can be compared later."""

import os
import platform
import re
import socket
import subprocess
from pathlib import Path
from typing import Optional

from qprof import __version__
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


def describe() -> dict:
    u = os.uname()
    return {
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
