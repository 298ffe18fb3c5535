# SPDX-License-Identifier: GPL-2.0-only
"""--server-cmd: the user's program in the server's place, run where
qprof-wl's server would run (the server's namespace) and measured by its
pid as qprof-wl is: its CPU, its syscalls and packets, its stack samples.

It is asked nothing. What the run asks a workload, ExternalServer
answers for it:
- "ready": the program holds a UDP socket bound to the run's port in its
  namespace (its group's sockets, in /proc/PID/net/udp{,6});
- a mark: the time, and no counter of its own (the client, qprof-wl,
  counts the bytes);
- "stop": an external server cannot be told; the run's client stops the
  answer instead, as secnetperf's timed download does (STOP_SENDING);
- "done": once its client is done, the program is ended (SIGTERM, then
  SIGKILL) unless it ended by itself with exit 0, and whatever of its
  process group outlived it is killed and named.

Each way a program can fail to be a server has its sentence and exit
code (core/errors.py, External*), and nothing of it is left behind: its
process group is killed on every way out."""

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Optional, Set

from qprof import errors, interrupts, remains
from qprof.collectors.controlled import ControlledProcess, start_owned
from qprof.collectors.topology import Endpoint
from qprof.describe import external

# How long a server that holds UDP sockets, none on the run's port, is
# given to bind it before it is said to listen elsewhere.
OTHER_PORT_GRACE_S = 2.0
# How long it is given to end after SIGTERM before SIGKILL.
TERM_GRACE_S = 2.0
POLL_S = 0.02
_SOCKET = re.compile(r"socket:\[(\d+)\]")


def program_path(argv: List[str]) -> str:
    """The program the command runs, found as exec would find it; a
    command that names none is refused before anything starts."""
    found = shutil.which(argv[0])
    if found is None:
        raise errors.ExternalNotFound(
            f"--server-cmd's program '{argv[0]}' is not found"
            + (" or not executable" if "/" in argv[0] else " on PATH")
            + "; give its path."
        )
    return found


def group_pids(pgid: int) -> List[int]:
    """Every live process in process group pgid (the program and whatever it started)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


def socket_inodes(pids: List[int]) -> Set[str]:
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                m = _SOCKET.match(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                continue
            if m:
                inodes.add(m.group(1))
    return inodes


def bound_udp_ports(pid: int, inodes: Set[str]) -> Set[int]:
    """The local ports of those UDP sockets (IPv4 and IPv6) in pid's namespace."""
    ports = set()
    for name in ("udp", "udp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[9] in inodes:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


class ExternalServer(ControlledProcess):
    """The user's server program, in the server's place (module docstring)."""

    external = True

    def __init__(self, argv: List[str], endpoint: Endpoint, log_path: Path, port: int):
        self.program = program_path(argv)
        super().__init__("server", endpoint.command(argv), log_path)
        self.role, self.port, self.host = "server", port, None
        self.peer: Optional[ControlledProcess] = None
        self._marks: List[dict] = []
        self.ended_by_us = False

    def __enter__(self):
        self._log = open(self.log_path, "wb")
        try:
            start_owned(self, self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def kill(self) -> None:
        """The program's whole process group, killed and reaped."""
        if self.proc is None:
            return
        with interrupts.deferred():
            self._kill_group(signal.SIGKILL)
            self.proc.wait()
            if self._claim is not None:
                remains.ledger().release("pids", self._claim)
                self._claim = None
            if self._log:
                self._log.close()

    def _kill_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    @property
    def reports(self) -> List[dict]:
        return []

    def send(self, command: str) -> None:
        if command == "stop" and self.peer is not None:
            # The answer is stopped by its client (perf: STOP_SENDING).
            self.peer.send("stop")

    def request_mark(self, name: str) -> None:
        """A mark of its own: the time, and no counter (its client counts)."""
        self._marks.append({"event": "mark", "name": name, "t_ns": time.monotonic_ns(), "external": True})

    def mark(self, name: str, timeout_s: float = 5.0) -> dict:
        self.request_mark(name)
        return self.wait_event("mark", timeout_s)

    def wait_event(self, name: str, timeout_s: float) -> dict:
        if name == "mark":
            return self._marks.pop(0)
        if name == "ready":
            return self._wait_listening(timeout_s)
        if name == "done":
            if self.done is None:
                self.done = self._end()
            return self.done
        raise errors.Timeout(f"the server program gives no '{name}' event; see {self.log_path}.")

    def finish(self, timeout_s: float) -> dict:
        return self.wait_event("done", timeout_s)

    def _exited_early(self) -> None:
        code = self.proc.poll()
        if code is None:
            return
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        raise errors.ExternalExited(
            f"the server program {how} before the run was over; its output is in {self.log_path}."
        )

    def _wait_listening(self, timeout_s: float) -> dict:
        """Its "ready": its group holds a UDP socket bound to the run's port."""
        deadline = time.monotonic() + timeout_s
        elsewhere_since = None
        while True:
            self._exited_early()
            pids = group_pids(self.proc.pid)
            ports = bound_udp_ports(self.proc.pid, socket_inodes(pids))
            if self.port in ports:
                return {"event": "ready", "port": self.port, "pid": self.proc.pid}
            now = time.monotonic()
            others = sorted(p for p in ports if p)
            if others:
                elsewhere_since = elsewhere_since or now
                if now - elsewhere_since >= OTHER_PORT_GRACE_S:
                    raise errors.ExternalWrongPort(
                        f"the server program listens on UDP port {', '.join(map(str, others))}, not the run's "
                        f"{self.port}; put {{port}} in --server-cmd where it takes its port."
                    )
            if now >= deadline:
                raise errors.ExternalNotListening(
                    f"the server program bound no UDP port within {timeout_s:g} s (the run's is {self.port}); "
                    f"check that it is a QUIC server and takes {{port}}; its output is in {self.log_path}."
                )
            time.sleep(POLL_S)

    def _end(self) -> dict:
        """The run is over: the program ended (SIGTERM, then SIGKILL after
        TERM_GRACE_S), and whatever of its group outlived it (given
        TERM_GRACE_S to follow it) killed and named."""
        if self.proc.poll() not in (None, 0):
            self._exited_early()  # a server that failed, once its client was done
        # One that served its client and ended by itself (exit 0) is done too.
        self.ended_by_us = self.proc.poll() is None
        if self.ended_by_us:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        deadline = time.monotonic() + TERM_GRACE_S
        while (left := group_pids(self.proc.pid)) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if left:
            names = ", ".join(f"{p} ({_comm(p)})" for p in left)
            self._kill_group(signal.SIGKILL)
            raise errors.ExternalLeftBehind(
                f"the server program left {len(left)} process{'es' if len(left) > 1 else ''} of its own behind "
                f"when it ended ({names}); qprof killed them: make it end what it starts when it gets SIGTERM."
            )
        return {
            "event": "done",
            "exit_code": 0,
            "external": True,
            "program": self.program,
            "ended_by": {0: "itself", -signal.SIGTERM: "SIGTERM", -signal.SIGKILL: "SIGKILL"}.get(code, code),
            "verified": None,
        }

    def _ends_with_own_cause(self, within_s: float) -> bool:
        """Whether it ends within within_s: a server qprof did not end explains the run's end."""
        deadline = time.monotonic() + within_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return self.proc.poll() is not None and not self.ended_by_us

    def raise_exit(self) -> None:
        """Its end, raised as the error that explains it."""
        self._exited_early()
        raise errors.ExternalExited(f"the server program stopped answering; its output is in {self.log_path}.")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "gone"


def server_argv(opts, addr: str, port: int, cert: str, key: str) -> List[str]:
    return external.argv(opts.server_cmd, external.values(opts, addr, port, cert, key))
