# SPDX-License-Identifier: GPL-2.0-only
"""tracefs, which bpftrace's tracepoint probes (and libbpf's, outside
tp_btf) need. This host does not mount it; perf mounts it on its own and
leaves it. `mounted()` mounts it only if absent and unmounts only what it
mounted, so the machine is left as it was found."""

import os
import subprocess
from contextlib import contextmanager

TRACEFS = "/sys/kernel/tracing"


def is_mounted(path: str = TRACEFS) -> bool:
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path and line.split()[2] == "tracefs" for line in f)


@contextmanager
def mounted(path: str = TRACEFS):
    if is_mounted(path):
        yield path
        return
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tracefs", "nodev", path], check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", path], capture_output=True)
