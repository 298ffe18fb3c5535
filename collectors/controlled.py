# SPDX-License-Identifier: GPL-2.0-only
"""A child process that speaks qprof's control protocol: JSON event lines
on stdout, commands on stdin ("mark NAME" answered by a mark event,
"exit"). The workload and every probe tool speak it.

A ControlledProcess is a context manager and the one owner of its
process: on every exit path the process is killed and reaped, and it
dies with qprof (PR_SET_PDEATHSIG) if qprof itself is killed outright.
"""

import base64
import ctypes
import json
import queue
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import List, Optional

from qprof import errors, interrupts, remains
from qprof.describe import patterns

PR_SET_PDEATHSIG = 1


def die_with_parent():
    """A Popen preexec_fn: the child is SIGKILLed when qprof dies, even by
    kill -9, so no workload, probe, perf or QEMU outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


_die_with_parent = die_with_parent  # the name it had


def start_owned(owner, argv: List, **popen_kwargs) -> None:
    """A child that dies with qprof, started and entered in the ledger as one
    step, and handed to its owner (owner.proc, owner._claim) inside that
    step: a signal held back meanwhile is raised only once the owner holds
    both, so the owner's clean-up (which its __enter__ must run when this
    raises) finds what to kill and release."""
    with interrupts.deferred():
        owner.proc = subprocess.Popen(argv, preexec_fn=die_with_parent, process_group=0, **popen_kwargs)
        owner._claim = remains.ledger().claim_pid(owner.proc.pid)


class ProcessEnded(Exception):
    """The process ended (or reported its end) while we waited on it."""


# qprof-wl's "connected" and each pattern's report of one piece of work,
# its client's and its server's (a download's "download" and "served";
# workloads/wl.h), as the patterns' rows name them.
REPORT_EVENTS = (
    "connected",
    *dict.fromkeys(e for p in patterns.PATTERNS.values() for e in (p.event, p.server_event) if e),
)
# Those that come at the rate of the work (a closed loop answers 100k+
# requests a second) come packed, "EVENT_batch" (wl.h, wl_emit_packed):
# kept as they came and parsed once read, after the run, so that the
# reader costs the measured machine as little as it can (parsing each as
# it came took 40% of a CPU in a closed-loop rr run).
RAW_START = b'{"event":"'


def packed(line: bytes) -> bool:
    """A line of packed events: the name of its event, its first field,
    ends in _batch."""
    if not line.startswith(RAW_START):
        return False
    end = line.find(b'"', len(RAW_START), len(RAW_START) + 40)
    return end > 0 and line.endswith(b"_batch", len(RAW_START), end)


ABSENT = 2**64 - 1  # wl.h's WL_ABSENT: a field the stack did not measure


def event(line: bytes) -> Optional[dict]:
    """A control line's event: a JSON object naming its event. Any other
    line (a library's own output on stdout, a line cut short) is None, and
    skipped: it must not end the reader, whose end the run waits on."""
    try:
        ev = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past the parser
        return None
    return ev if isinstance(ev, dict) and isinstance(ev.get("event"), str) else None


def unpacked(line: bytes) -> List[dict]:
    """A report line as events: qprof-wl's packed batch (wl.h,
    wl_emit_packed: little-endian u64 records named by its fields, in
    base64) as one event a record, a WL_ABSENT field left out, or the one
    event a line holds (none for a line that is no event). A batch that
    does not unpack was written to another protocol than this qprof reads:
    NotBuilt, as a workload built from another commit is."""
    ev = event(line)
    if ev is None:
        return []
    if not ev["event"].endswith("_batch"):
        return [ev]
    event_name, fields = ev["event"][: -len("_batch")], ev.get("fields")
    names = fields.split(",") if isinstance(fields, str) else []
    blob = _base64(ev.get("b64"))
    if not names or not all(names) or blob is None or len(blob) % (8 * len(names)):
        shown = line[:60].decode("utf-8", "replace") + ("..." if len(line) > 60 else "")
        raise errors.NotBuilt(
            f"the workload's {event_name!r} batch does not unpack ({shown!r}): it was built from another commit "
            "than this qprof, so rebuild it with `make build`."
        )
    return [
        {"event": event_name, **{k: v for k, v in zip(names, rec) if v != ABSENT}}
        for rec in struct.iter_unpack(f"<{len(names)}Q", blob)
    ]


def _base64(text) -> Optional[bytes]:
    try:
        return base64.b64decode(text, validate=True) if isinstance(text, str) else None
    except ValueError:  # binascii.Error, or text that is not ASCII
        return None


# How long a process on another host may take to say its pid there.
SPAWN_TIMEOUT_S = 30.0


class ControlledProcess:
    """spawned: argv runs it on another host (collectors/remote.py
    RemoteEndpoint), whose shell says its pid there first, in a "spawned"
    event: that is its pid."""

    def __init__(self, name: str, argv: List[str], log_path: Path, spawned: bool = False):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None
        self.events: "queue.Queue[dict]" = queue.Queue()
        self.done: Optional[dict] = None
        # Reports that come one per piece of work (a download), kept in
        # order whatever is being waited for when they arrive; packed ones
        # as their lines, parsed into reports when read.
        self._reports: List[dict] = []
        self._raw: List[bytes] = []
        self._raw_lock = threading.Lock()
        self._reader: Optional[threading.Thread] = None
        self._log = None
        self._claim = None  # the ledger's entry for the process
        # Its pid on another host, where it runs through ssh (proc is then
        # the local ssh client); None: proc's own.
        self.spawned = spawned
        self.pid_there: Optional[int] = None
        self._spawned = threading.Event()

    def __enter__(self):
        self._log = open(self.log_path, "wb")
        try:
            start_owned(self, self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        except BaseException:
            self.kill()
            raise
        self._reader = threading.Thread(target=self._read_events, name=f"{self.name}-events", daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    @property
    def pid(self) -> int:
        """Its pid on the host it runs on."""
        if not self.spawned:
            return self.proc.pid
        if not self._spawned.wait(SPAWN_TIMEOUT_S) or self.pid_there is None:
            raise errors.Timeout(
                f"the {self.name} did not say its pid on its host within {SPAWN_TIMEOUT_S:.0f} s "
                f"({self.how_it_ended()}); see {self.log_path}."
            )
        return self.pid_there

    @property
    def reports(self) -> List[dict]:
        """The report events, in order within each kind."""
        with self._raw_lock:
            raw, self._raw = self._raw, []
        for line in raw:
            self._reports.extend(unpacked(line))
        return self._reports

    def _read_events(self) -> None:
        for line in self.proc.stdout:
            if packed(line):
                with self._raw_lock:
                    self._raw.append(line)
                continue
            ev = event(line)
            if ev is None:
                continue
            if ev["event"] == "spawned" and self.spawned and self.pid_there is None:
                if isinstance(ev.get("pid"), int) and not isinstance(ev["pid"], bool):
                    self.pid_there = ev["pid"]  # else pid says it never came
                self._spawned.set()
                continue
            if ev.get("event") == "done":
                self.done = ev
            if ev.get("event") in REPORT_EVENTS:
                self._reports.append(ev)
            self.events.put(ev)
        self._spawned.set()  # an end before it said its pid: pid says so
        self.events.put({"event": "eof"})

    def send(self, command: str) -> None:
        try:
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # it has gone; whoever waits on it finds out why

    def wait_event(self, name: str, timeout_s: float) -> dict:
        """The next event called `name`. Raises ProcessEnded if the process
        ends first (or reports a failed end), errors.Timeout on time-out."""
        if name == "done" and self.done is not None:
            return self.done  # it came while something else was awaited
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.Timeout(
                    f"the {self.name} gave no '{name}' event within {timeout_s:.0f} s; see {self.log_path}."
                )
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if ev["event"] == name:
                return ev
            # A clean report still answers marks until told to exit (the
            # sender of a fixed-size transfer finishes before the window).
            if ev["event"] == "eof" or (ev["event"] == "done" and ev.get("exit_code") != 0):
                raise ProcessEnded(self.name)

    def mark(self, name: str, timeout_s: float = 5.0) -> dict:
        self.send(f"mark {name}")
        return self.wait_event("mark", timeout_s)

    def request_mark(self, name: str) -> None:
        """The first half of mark(): ask now, collect with wait_event("mark")."""
        self.send(f"mark {name}")

    def exited(self) -> Optional[int]:
        return self.proc.poll()

    def last_message(self, prefix: str = "") -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].removeprefix(prefix).strip() if lines else ""

    def how_it_ended(self, prefix: str = "") -> str:
        """What a record says of a process that went quiet: "killed by
        SIGKILL" (and its last line, if any), else its last line, else
        "exit 3"."""
        try:
            code = self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        msg = self.last_message(prefix)
        if code is None:
            return msg or "no answer, still running"
        if code < 0:
            how = f"killed by {signal.Signals(-code).name}"
            return f"{how}: {msg}" if msg else how
        return msg or f"exit {code}"

    def _stop(self) -> None:
        """SIGKILL to what kill() ends: the process (a program of the user's: its group)."""
        if self.proc.poll() is None:
            self.proc.kill()

    def kill(self) -> None:
        if self.proc is None:
            return
        with interrupts.deferred():
            self._stop()
            self.proc.wait()
            if self._claim is not None:
                remains.ledger().release("pids", self._claim)
                self._claim = None
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is None:
                    continue
                try:
                    pipe.close()
                except (OSError, BrokenPipeError):
                    pass
            if self._reader:
                self._reader.join(timeout=1)
            if self._log:
                self._log.close()
