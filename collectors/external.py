# SPDX-License-Identifier: GPL-2.0-only
"""--server-cmd and --client-cmd: the user's program in one side's place,
run where qprof-wl's would run (that side's namespace, pinned by --cpus
as qprof-wl is) and measured by its pid as qprof-wl is: its CPU, its
syscalls and packets, its stack samples.

It is asked nothing. What the run asks a workload, ExternalServer and
ExternalClient answer for it:
- a server's "ready": the program holds a UDP socket bound to the run's
  port in its namespace (its group's sockets, in /proc/PID/net/udp{,6});
- a client's "start": the shell that holds it (WAIT_THEN_EXEC) execs it,
  so the pid the instruments attach to first is the program's; its
  "connected" is its server's, qprof-wl's;
- a mark: the time, and no counter of its own (qprof-wl's side counts
  the bytes);
- "stop": a program cannot be told; a server's answer is stopped by its
  client instead, as secnetperf's timed download does (STOP_SENDING), and
  a client ends by itself, after its {duration_s};
- "done": a server, once its client is done, is ended (SIGTERM, then
  SIGKILL) unless it ended by itself with exit 0; a client must exit 0
  by itself in time; whatever of its process group outlived it is killed
  and named.

Each way a program can fail to be a server or a client has its sentence
and exit code (core/errors.py, External*), and nothing of it is left
behind: its process group is killed on every way out."""

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Optional, Set

from qprof import errors
from qprof.collectors.controlled import ControlledProcess, start_owned
from qprof.collectors.topology import Endpoint
from qprof.describe import external, pinning

# How long a server that holds UDP sockets, none on the run's port, is
# given to bind it before it is said to listen elsewhere.
OTHER_PORT_GRACE_S = 2.0
# How long it is given to end after SIGTERM before SIGKILL.
TERM_GRACE_S = 2.0
POLL_S = 0.02
_SOCKET = re.compile(r"socket:\[(\d+)\]")


def program_path(argv: List[str], role: str = "server") -> str:
    """The program the command runs, found as exec would find it; a
    command that names none is refused before anything starts."""
    found = shutil.which(argv[0])
    found = os.path.abspath(found) if found is not None else None
    if found is None:
        raise errors.ExternalNotFound(
            f"{external.FLAGS[role]}'s program '{argv[0]}' is not found"
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


class ExternalProgram(ControlledProcess):
    """A program of the user's in one side's place (module docstring):
    what both roles answer alike."""

    external = True

    def __init__(
        self, role: str, argv: List[str], endpoint: Endpoint, log_path: Path, cpus=None, prefix: List[str] = ()
    ):
        """argv: the program's command line; cpus: --cpus' list for its
        role (taskset, which execs it); prefix: what runs first and execs
        it (a client's WAIT_THEN_EXEC)."""
        self.program = program_path(argv, role)
        super().__init__(role, endpoint.command([*prefix, *pinning.wrapped(argv, cpus)]), log_path)
        self.role, self.host = role, None
        self._stdin = subprocess.PIPE if prefix else subprocess.DEVNULL
        self.peer: Optional[ControlledProcess] = None
        self._marks: List[dict] = []
        self.ended_by_us = False

    def __enter__(self):
        self._log = open(self.log_path, "wb")
        try:
            start_owned(self, self.argv, stdin=self._stdin, stdout=self._log, stderr=subprocess.STDOUT)
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def _stop(self) -> None:
        """Its whole process group, whatever of it outlived the program (ControlledProcess.kill reaps it)."""
        self._kill_group(signal.SIGKILL)

    def _kill_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    @property
    def reports(self) -> List[dict]:
        return []

    def request_mark(self, name: str) -> None:
        """A mark of its own: the time, and no counter (qprof-wl's side counts)."""
        self._marks.append({"event": "mark", "name": name, "t_ns": time.monotonic_ns(), "external": True})

    def mark(self, name: str, timeout_s: float = 5.0) -> dict:
        self.request_mark(name)
        return self.wait_event("mark", timeout_s)

    def wait_event(self, name: str, timeout_s: float) -> dict:
        if name == "mark":
            return self._marks.pop(0)
        if name == "done":
            if self.done is None:
                self.done = self._end(timeout_s)
            return self.done
        raise errors.Timeout(f"the {self.role} program gives no '{name}' event; see {self.log_path}.")

    def finish(self, timeout_s: float) -> dict:
        return self.wait_event("done", timeout_s)

    def _exited_early(self) -> None:
        code = self.proc.poll()
        if code is None:
            return
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        raise errors.ExternalExited(
            f"the {self.role} program {how} before the run was over; its output is in {self.log_path}."
        )

    def _end(self, timeout_s: float) -> dict:
        raise NotImplementedError

    def _done(self, ended_by) -> dict:
        """Its done, once whatever of its group outlived it (given
        TERM_GRACE_S to follow it) is killed and named."""
        deadline = time.monotonic() + TERM_GRACE_S
        while (left := group_pids(self.proc.pid)) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if left:
            names = ", ".join(f"{p} ({_comm(p)})" for p in left)
            self._kill_group(signal.SIGKILL)
            raise errors.ExternalLeftBehind(
                f"the {self.role} program left {len(left)} process{'es' if len(left) > 1 else ''} of its own "
                f"behind when it ended ({names}); qprof killed them: make it end what it starts before it exits."
            )
        return {
            "event": "done",
            "exit_code": 0,
            "external": True,
            "program": self.program,
            "ended_by": ended_by,
            "verified": None,
        }

    def _ends_with_own_cause(self, within_s: float) -> bool:
        """Whether it ends within within_s: a program qprof did not end explains the run's end."""
        deadline = time.monotonic() + within_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return self.proc.poll() is not None and not self.ended_by_us

    def raise_exit(self) -> None:
        """Its end, raised as the error that explains it."""
        self._exited_early()
        raise errors.ExternalExited(f"the {self.role} program stopped answering; its output is in {self.log_path}.")


class ExternalServer(ExternalProgram):
    """--server-cmd's program: ready once it listens on the run's port,
    ended once its client is done."""

    def __init__(self, argv: List[str], endpoint: Endpoint, log_path: Path, port: int, cpus=None):
        super().__init__("server", argv, endpoint, log_path, cpus)
        self.port = port

    def send(self, command: str) -> None:
        if command == "stop" and self.peer is not None:
            # The answer is stopped by its client (perf: STOP_SENDING).
            self.peer.send("stop")

    def wait_event(self, name: str, timeout_s: float) -> dict:
        if name == "ready":
            return self._wait_listening(timeout_s)
        return super().wait_event(name, timeout_s)

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
                if now - elsewhere_since >= OTHER_PORT_GRACE_S or now >= deadline:
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

    def _end(self, timeout_s: float) -> dict:
        """Its client is done: the program ended (SIGTERM, then SIGKILL
        after TERM_GRACE_S), unless it ended by itself with exit 0."""
        if self.proc.poll() not in (None, 0):
            self._exited_early()  # a server that failed, once its client was done
        self.ended_by_us = self.proc.poll() is None
        if self.ended_by_us:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        return self._done({0: "itself", -signal.SIGTERM: "SIGTERM", -signal.SIGKILL: "SIGKILL"}.get(code, code))


# A client started by a shell that waits for the run's "start", then
# becomes the program (exec): its pid, which the instruments attach to
# before it starts, is the program's.
WAIT_THEN_EXEC = ["/bin/sh", "-c", 'read _ && exec "$@"', "sh"]


class ExternalClient(ExternalProgram):
    """--client-cmd's program: started at the run's "start", connected
    when its server says so, done when it exits by itself within
    `hang_s` of the run's asking (its {duration_s} past the window)."""

    def __init__(self, argv: List[str], endpoint: Endpoint, log_path: Path, hang_s: float, cpus=None):
        self.hang_s = hang_s
        self.started_ns: Optional[int] = None
        super().__init__("client", argv, endpoint, log_path, cpus, prefix=WAIT_THEN_EXEC)

    def send(self, command: str) -> None:
        """ "start" lets it run; it ends by itself, so nothing else is said."""
        if command == "start":
            self.started_ns = time.monotonic_ns()
            try:
                self.proc.stdin.write(b"go\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

    def wait_event(self, name: str, timeout_s: float) -> dict:
        if name == "connected":
            return self._wait_connected(timeout_s)
        return super().wait_event(name, timeout_s)

    def _wait_connected(self, timeout_s: float) -> dict:
        """The program says nothing; its server, qprof-wl, says when it
        connected. It may end first (its handshake failed: another ALPN,
        another address), and its end says so. A program pair's server
        says nothing either: the client's start stands for its connect, so
        the handshake is inside the warm-up (describe/external.py)."""
        if getattr(self.peer, "external", False):
            self._exited_early()
            return {"event": "connected", "t_ns": self.started_ns, "external": True}
        deadline = time.monotonic() + timeout_s
        while True:
            self._exited_early()
            try:
                return self.peer.wait_event("connected", min(0.2, max(0.0, deadline - time.monotonic())))
            except errors.Timeout:
                if time.monotonic() >= deadline:
                    raise errors.ExternalNoConnection(
                        f"the client program made no connection to the server within {timeout_s:g} s; check that "
                        f"it takes {{addr}} and {{port}} and speaks QUIC; its output is in {self.log_path}."
                    ) from None

    def _end(self, timeout_s: float) -> dict:
        """Its exit, within hang_s: 0, else the code explains the run's end."""
        try:
            self.proc.wait(timeout=self.hang_s)
        except subprocess.TimeoutExpired:
            self.ended_by_us = True
            self._kill_group(signal.SIGKILL)
            self.proc.wait()
            raise errors.ExternalHung(
                f"the client program was still running {self.hang_s:g} s after the run's end; qprof killed it: "
                f"make it stop after {{duration_s}} seconds (or {{bytes}} bytes)."
            ) from None
        if self.proc.returncode != 0:
            code = self.proc.returncode
            how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
            raise errors.ExternalExited(f"the client program {how}; its output is in {self.log_path}.")
        return self._done("itself")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "gone"


def program_argv(opts, role: str, addr: str, port: int, cert: str, key: str) -> List[str]:
    """The role's program's command line in this run (describe/external.py)."""
    return external.argv(external.template(opts, role), external.values(opts, addr, port, cert, key, role), role)
