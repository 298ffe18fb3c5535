# SPDX-License-Identifier: GPL-2.0-only
"""One qprof-wl process (a server or a client role) under qprof's control
(see workloads/wl.h for its events and commands), and what its ending
means as a QprofError."""

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Optional

from qprof import errors
from qprof.collectors.controlled import ControlledProcess, ProcessEnded
from qprof.collectors.topology import Endpoint


class WorkloadExit:
    """qprof-wl's exit codes. Declared in workloads/wl.h (enum wl_exit);
    these are its names without WL_EXIT_, and tests/test_wl_contract.py
    holds the two to each other. Tests import them from here."""

    OK = 0
    USAGE = 2
    LIB_OPEN = 3
    HANDSHAKE = 4
    VERIFY = 5
    ADDR_IN_USE = 6
    CONN_LOST = 7
    INTERNAL = 8
    TLS_CONFIG = 9


SSH_FAILED = 255  # ssh's exit when it, not the command, failed

# The ends that explain themselves. A side that fails on its own (its
# content check, TLS, its port, its options) takes its peer down with it,
# and the peer then ends with a lost connection; the run's error is the
# first side's. So does a side on a host that was lost (its ssh session
# ended: errors.RemoteLost): its peer here then ends with a lost
# connection, which may be seen first. PEER_GRACE_S: how long a side that
# ended otherwise waits for its peer to end with one of these.
OWN_CAUSES = (
    WorkloadExit.USAGE,
    WorkloadExit.LIB_OPEN,
    WorkloadExit.HANDSHAKE,
    WorkloadExit.VERIFY,
    WorkloadExit.ADDR_IN_USE,
    WorkloadExit.TLS_CONFIG,
)
PEER_GRACE_S = 1.0


# A handshake that failed on the application protocol, in each library's words.
_ALPN = re.compile(r"ALPN|application.protocol|APPLICATION_PROTOCOL", re.IGNORECASE)


def external_failure(code, msg: str, where: str) -> Optional[errors.QprofError]:
    """A client's end against --server-cmd's program, as the error that
    explains it (None: the client's own, as against qprof-wl)."""
    if code == WorkloadExit.HANDSHAKE and _ALPN.search(msg):
        return errors.ExternalAlpn(
            f"{msg}: the server program does not speak ALPN perf, the QUIC performance protocol; "
            f"give --server-cmd a perf server{where}."
        )
    if code == WorkloadExit.HANDSHAKE:
        return errors.HandshakeFailed(
            f"{msg}; check that the server program is a QUIC server on TLS 1.3 that takes {{addr}} and {{port}}{where}."
        )
    if code == WorkloadExit.VERIFY:
        # --verify size: the client counts the answer, and the server ended it early.
        return errors.ExternalAnsweredShort(
            f"{msg}: the server program answered fewer bytes than the client asked{where}."
        )
    return None


class WorkloadProcess(ControlledProcess):
    """One side's qprof-wl (an ExternalProgram, external, is the user's)."""

    external = False

    def __init__(self, role: str, argv: List[str], endpoint: Endpoint, log_path: Path):
        # Another host's (collectors/remote.py RemoteEndpoint): it runs there through ssh.
        self.host = getattr(endpoint, "host", None)
        super().__init__(role, endpoint.controlled(argv), log_path, spawned=self.host is not None)
        self.role = role
        # The other side of its flow, once it runs: a qprof-wl or an ExternalProgram.
        self.peer: Optional[ControlledProcess] = None

    def wait_event(self, name: str, timeout_s: float) -> dict:
        try:
            return super().wait_event(name, timeout_s)
        except ProcessEnded:
            self.raise_exit()

    def finish(self, timeout_s: float) -> dict:
        """The done report, after letting the process exit."""
        report = self.done or self.wait_event("done", timeout_s)
        self.send("exit")
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise errors.Timeout(
                f"the {self.role} did not exit within {timeout_s:.0f} s of its report; see {self.log_path}."
            )
        return report

    def _there(self, code, msg: str):
        """The end of a process on another host as if it were here: the
        shell it runs under exits 128 + N for signal N (-N here); ssh's own
        255, or any end once the host's master connection has gone, is the
        connection lost (errors.RemoteLost)."""
        if self._host_lost(code):
            raise self.host.lost(f"the {self.role}", f"its ssh session ended ({msg})")
        if code is not None and code > 128 and msg.startswith("killed by signal"):
            return -(code - 128)
        return code

    def raise_exit(self) -> None:
        """Turn the process's end into the QprofError that explains it."""
        if self.done is not None:
            self.send("exit")  # it reported and waits for leave to go
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        msg = self.last_message("qprof-wl: ") or "no message"
        where = f"; see {self.log_path}"
        if self.host is not None:
            code = self._there(code, msg)
        if code not in OWN_CAUSES and self.peer is not None and self.peer._ends_with_own_cause(PEER_GRACE_S):
            self.peer.raise_exit()
        if self.peer is not None and self.peer.external:
            # Its server is a program of the user's (--server-cmd): what its client's end says of it.
            failure = external_failure(code, msg, where)
            if failure is not None:
                raise failure
        if code == WorkloadExit.ADDR_IN_USE:
            raise errors.PortInUse(f"{msg}: pick a free one with --port{where}.")
        if code == WorkloadExit.TLS_CONFIG:
            raise errors.BadTls(f"{msg}; list the names with `openssl ciphers -v`{where}.")
        if code == WorkloadExit.LIB_OPEN:
            raise errors.TransportOpenFailed(
                f"the {self.role} could not set up its transport ({msg}); run `qprof doctor`{where}."
            )
        if code == WorkloadExit.HANDSHAKE:
            raise errors.HandshakeFailed(
                f"{msg}; check that both sides agree on the TLS version and cipher"
                f" and that the server is reachable{where}."
            )
        if code == WorkloadExit.VERIFY:
            raise errors.VerifyFailed(f"{msg}: the data the server received is not what the client sent{where}.")
        if code == WorkloadExit.USAGE:
            raise errors.BadValue(f"the {self.role} refused its options ({msg}){where}.")
        if code is not None and code < 0:
            on = f" on {self.host.name}" if self.host is not None else ""
            raise errors.PeerDied(f"the {self.role}{on} was killed by {_signal_name(-code)} mid-run{where}.")
        raise errors.PeerDied(f"the {self.role} ended mid-run (exit {code}: {msg}){where}.")

    def _host_lost(self, code) -> bool:
        """The process ran on another host and its end is the connection's:
        ssh's own exit, or the host's master connection gone."""
        return self.host is not None and (code == SSH_FAILED or not self.host.alive())

    def _ends_with_own_cause(self, within_s: float) -> bool:
        """Whether the process ends, within within_s, with an end that
        explains itself (OWN_CAUSES, or its host lost)."""
        deadline = time.monotonic() + within_s
        while (code := self.exited()) is None and time.monotonic() < deadline:
            if self._host_lost(code):
                return True
            time.sleep(0.02)
        return code in OWN_CAUSES or self._host_lost(code)  # another host's: its shell passes the code on


def _signal_name(n: int) -> str:
    try:
        return f"signal {signal.Signals(n).name}"
    except ValueError:
        return f"signal {n}"
