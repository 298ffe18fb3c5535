# SPDX-License-Identifier: GPL-2.0-only
"""Files read as a process in a named network namespace reads them
(/proc/net/..., /proc/sys/net/...), without `ip netns exec NS cat`.

A thread of this process joins the namespace (setns(2) moves only the
calling thread), reads, and ends; nothing else of the process moves.
Each exec that replaces costs two processes (ip, then cat): ~2 ms here,
~180 ms under the guest's emulated CPU, where a run's edges and its
description read a dozen such files. /proc/net is the thread group
leader's view, so a path under it is read through /proc/thread-self/net;
/proc/sys/net is the reader's own.
"""

import os
import subprocess
import threading
from typing import Callable, Dict, List, Optional

from qprof import remains

CLONE_NEWNET = 0x40000000


def _inside(netns: str, work: Callable[[], None]) -> bool:
    """work() on a thread of this process that joined the namespace; False
    (work not done) where it could not join (the namespace gone)."""
    joined = []

    def thread() -> None:
        try:
            fd = os.open(os.path.join(remains.NETNS_DIR, netns), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if remains.libc().setns(fd, CLONE_NEWNET) != 0:
                return
        finally:
            os.close(fd)
        joined.append(True)
        work()

    t = threading.Thread(target=thread, name=f"netns-{netns}", daemon=True)
    t.start()
    t.join()
    return bool(joined)


def read(netns: str, paths: List[str]) -> Dict[str, Optional[str]]:
    """Each path's text as seen in the namespace named netns (ip netns
    add's name), or None where it could not be read (absent, or the
    namespace gone)."""
    out: Dict[str, Optional[str]] = {p: None for p in paths}

    def work() -> None:
        for p in paths:
            seen = "/proc/thread-self/net/" + p[len("/proc/net/") :] if p.startswith("/proc/net/") else p
            try:
                with open(seen) as f:
                    out[p] = f.read()
            except OSError:
                pass

    _inside(netns, work)
    return out


def run(netns: str, argv: List[str]) -> subprocess.CompletedProcess:
    """A short command run in the namespace (its process forked from a
    thread that joined it, so it starts there: one process where `ip netns
    exec` made two). Not for a process that outlives the call: a parent
    death signal would come when that thread ends. Its output as text; a
    namespace that could not be joined is exit 255, saying so."""
    done: List[subprocess.CompletedProcess] = []
    if not _inside(netns, lambda: done.append(subprocess.run(argv, capture_output=True, text=True))):
        return subprocess.CompletedProcess(argv, 255, "", f"network namespace {netns} could not be joined")
    return done[0]
