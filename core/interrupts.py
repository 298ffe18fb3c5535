# SPDX-License-Identifier: GPL-2.0-only
"""Ctrl-C, SIGTERM and SIGHUP: the first one interrupts, cleanup is never
cut half way.

The first of these signals raises KeyboardInterrupt where the program is,
and from then on every further one is ignored (SIG_IGN), so a burst of
Ctrl-Cs cannot interrupt the cleanup the first one started. Inside `deferred()`
(every owner's removal of what it made) a signal is held and raised only
when the outermost deferred block ends.

A signal that qprof inherits ignored stays ignored: a background job of a
non-interactive shell (`qprof run &` in a script) ignores SIGINT, and
`nohup` ignores SIGHUP, by design (as POSIX tools do); SIGTERM still stops
such a qprof cleanly.
"""

import signal
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_handled = []  # the signals qprof took over
_depth = 0  # nesting of deferred() blocks
_pending = None  # a signal that arrived inside deferred()
_interrupted = False


def _handler(signum, frame):
    global _pending
    if _depth:
        _pending = signum
        return
    _interrupt()


def _interrupt():
    """From here on the kernel drops these signals: the cleanup runs to its
    end, and so does the interpreter's own shutdown, which would put back
    the default (fatal) disposition of a handled, not an ignored, signal."""
    global _interrupted
    _interrupted = True
    for sig in _handled:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def install() -> None:
    """Take over the signals qprof was not started with ignored."""
    for sig in SIGNALS:
        if sig in _handled or signal.getsignal(sig) is signal.SIG_IGN:
            continue
        signal.signal(sig, _handler)
        _handled.append(sig)


def rearm() -> None:
    """For a process that runs one job after another (the guest's runner,
    collectors/resident.py): the signals it took over handled again and
    nothing pending, so the next job is interrupted as the first was."""
    global _pending, _interrupted
    for sig in _handled:
        signal.signal(sig, _handler)
    _pending, _interrupted = None, False


@contextmanager
def deferred():
    """A block no signal cuts: one arriving inside is raised at its end.
    Python runs signal handlers in the main thread only, so only there is
    there anything to hold; another thread's block holds nothing, and never
    raises the main thread's interrupt in its own place."""
    global _depth, _pending, _interrupted
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _pending is not None and not _interrupted:
            _pending = None
            _interrupt()


def interrupted() -> bool:
    return _interrupted
