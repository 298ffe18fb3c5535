"""One qprof-wl process (a server or a client role) under qprof's control.

A WorkloadProcess is a context manager and the one owner of its process:
on every exit path the process is killed and reaped. It reads the JSON
event lines the workload writes on stdout and sends it control commands
on stdin (see workloads/wl.h).
"""
import ctypes
import json
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import List, Optional

from . import errors
from .topology import Endpoint

PR_SET_PDEATHSIG = 1


class WorkloadExit:
    """qprof-wl's exit codes (workloads/wl.h, enum wl_exit)."""

    OK = 0
    USAGE = 2
    LIB_OPEN = 3
    HANDSHAKE = 4
    VERIFY = 5
    ADDR_IN_USE = 6
    CONN_LOST = 7
    INTERNAL = 8


def _die_with_parent():
    # If qprof itself is killed outright, its workloads must not outlive it.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class WorkloadProcess:
    def __init__(self, role: str, argv: List[str], endpoint: Endpoint, log_path: Path):
        self.role = role
        self.argv = endpoint.command(argv)
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None
        self.events: "queue.Queue[dict]" = queue.Queue()
        self.done: Optional[dict] = None
        self._reader: Optional[threading.Thread] = None

    def __enter__(self) -> "WorkloadProcess":
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            preexec_fn=_die_with_parent, process_group=0,
        )
        self._reader = threading.Thread(target=self._read_events, name=f"{self.role}-events", daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read_events(self) -> None:
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if ev.get("event") == "done":
                self.done = ev
            self.events.put(ev)
        self.events.put({"event": "eof"})

    def send(self, command: str) -> None:
        try:
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # it has gone; whoever waits on it finds out why

    def wait_event(self, name: str, timeout_s: float) -> dict:
        """The next event called `name`; a premature exit raises."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.Timeout(f"the {self.role} gave no '{name}' event within {timeout_s:.0f} s; see {self.log_path}.")
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if ev["event"] == name:
                return ev
            # A clean report still answers marks until told to exit (the
            # sender of a fixed-size transfer finishes before the window).
            if ev["event"] == "eof" or (ev["event"] == "done" and ev.get("exit_code") != 0):
                self.raise_exit()

    def mark(self, name: str, timeout_s: float = 5.0) -> dict:
        self.send(f"mark {name}")
        return self.wait_event("mark", timeout_s)

    def exited(self) -> Optional[int]:
        return self.proc.poll()

    def finish(self, timeout_s: float) -> dict:
        """The done report, after letting the process exit."""
        report = self.done or self.wait_event("done", timeout_s)
        self.send("exit")
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise errors.Timeout(f"the {self.role} did not exit within {timeout_s:.0f} s of its report; see {self.log_path}.")
        return report

    def last_message(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].removeprefix("qprof-wl: ") if lines else ""

    def raise_exit(self) -> None:
        """Turn the process's end into the QprofError that explains it."""
        if self.done is not None:
            self.send("exit")  # it reported and waits for leave to go
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        msg = self.last_message() or "no message"
        where = f"; see {self.log_path}"
        if code == WorkloadExit.ADDR_IN_USE:
            raise errors.PortInUse(f"{msg}: pick a free one with --port{where}.")
        if code == WorkloadExit.LIB_OPEN:
            raise errors.TransportOpenFailed(f"the {self.role} could not open msquic ({msg}); run `qprof doctor` and `make build`{where}.")
        if code == WorkloadExit.HANDSHAKE:
            raise errors.HandshakeFailed(f"{msg}; check that the server is reachable and the topology is up{where}.")
        if code == WorkloadExit.VERIFY:
            raise errors.VerifyFailed(f"{msg}: the data the server received is not what the client sent{where}.")
        if code == WorkloadExit.USAGE:
            raise errors.BadValue(f"the {self.role} refused its options ({msg}){where}.")
        if code is not None and code < 0:
            raise errors.PeerDied(f"the {self.role} was killed by signal {-code} mid-run{where}.")
        raise errors.PeerDied(f"the {self.role} ended mid-run (exit {code}: {msg}){where}.")

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except (OSError, BrokenPipeError):
                pass
        if self._reader:
            self._reader.join(timeout=1)
        self._log.close()
