# SPDX-License-Identifier: GPL-2.0-only
"""The machine a run was measured on, so two records can be compared later."""

import os
import platform
import socket
from typing import Optional

from qprof import __version__

from .cpu import CLK_TCK


def cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


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
        "emulated": False,
    }
