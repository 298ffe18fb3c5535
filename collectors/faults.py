# SPDX-License-Identifier: GPL-2.0-only
"""Real failures injected for the tests, never part of a run's options or
record: the hidden `qprof run --inject-fault NAME` builds a Faults, and
runner.run takes it beside the RunOptions. Each one makes a real part
fail (a wrong port, a broken certificate, a killed server, a TLS version
the server refuses, the GSO/GRO interposer left out, a server checking
against another pattern, a frozen sender, a kernel without netem, a
workload claiming kTLS it never enabled, a guest out of time, a quic
server that keeps encryption on, a TCP server that accepts one
connection, a program in a side's place given 1 s to listen, connect or
end), so the
tests see qprof's real handling of it."""

import os
import signal
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

FAULTS = (
    "handshake",
    "kill-server",
    "bad-cert",
    "tls-mismatch",
    "no-interposer",
    "verify",
    "stall",
    "no-netem",
    "ktls-claim",
    "guest-deadline",
    "encrypt-one-side",
    "one-accept",
    "impatient",
)
# qprof-wl's pattern period is max(--io-size, this) (workloads/wl.h, WL_PAT_PERIOD_MIN).
PATTERN_PERIOD_MIN = 64 << 10


@dataclass(frozen=True)
class Faults:
    name: Optional[str] = None

    def __post_init__(self):
        if self.name is not None and self.name not in FAULTS:
            raise ValueError(f"unknown fault {self.name!r}")

    @property
    def handshake(self) -> bool:  # the client connects to the wrong port
        return self.name == "handshake"

    @property
    def kill_server(self) -> bool:  # the server is SIGKILLed mid-window
        return self.name == "kill-server"

    @property
    def bad_cert(self) -> bool:  # the server's certificate is not one
        return self.name == "bad-cert"

    @property
    def tls_mismatch(self) -> bool:  # the client asks for the other TLS version
        return self.name == "tls-mismatch"

    @property
    def no_interposer(self) -> bool:  # GSO/GRO steering silently not loaded
        return self.name == "no-interposer"

    @property
    def verify(self) -> bool:  # the server checks the data against another pattern period
        return self.name == "verify"

    @property
    def stall(self) -> bool:  # the sender of a fixed-size transfer is frozen (SIGSTOP) once it starts
        return self.name == "stall"

    @property
    def no_netem(self) -> bool:  # the netem probe asks the kernel for a qdisc kind it has no module for
        return self.name == "no-netem"

    @property
    def ktls_claim(self) -> bool:  # the kTLS client reports kTLS on send without enabling it
        return self.name == "ktls-claim"

    @property
    def guest_deadline(self) -> bool:  # the guest run's deadline is too short for any run
        return self.name == "guest-deadline"

    @property
    def encrypt_one_side(self) -> bool:  # the quic server is not told --encrypt off (only the client asks)
        return self.name == "encrypt-one-side"

    @property
    def one_accept(self) -> bool:  # the TCP server accepts its first connection only (later ones wait, handshaking)
        return self.name == "one-accept"

    @property
    def impatient(self) -> bool:  # a program of the user's is given 1 s to listen, connect or end
        return self.name == "impatient"

    def patience(self, wait_s: float) -> float:
        """How long qprof waits on a program of the user's (--server-cmd,
        --client-cmd) to listen, connect or end: the impatient fault's 1 s,
        for the tests of each such wait's verdict (tests/test_external.py)."""
        return 1.0 if self.impatient else wait_s

    def argv(self) -> List[str]:
        """The same faults for a qprof started elsewhere (the guest)."""
        return ["--inject-fault", self.name] if self.name else []

    # The workloads' start's named points (collectors/endpoints.py): each
    # changes a command line or an environment only for its fault.

    def interposer_env(self, env: Dict[str, Dict[str, str]]) -> Dict[str, Dict[str, str]]:
        """Each role's GSO/GRO steering environment: none under no-interposer
        (the steering silently not taking effect)."""
        return {"client": {}, "server": {}} if self.no_interposer else env

    def server_args(self, opts) -> List[str]:
        """What a flow's server (its options: opts) is told beside its own options."""
        if self.verify:  # the server expects another pattern period than the client sends
            period = max(opts.io_size, PATTERN_PERIOD_MIN)
            return ["--io-size", str(period * 2 if period < 1 << 20 else period // 2)]
        if self.encrypt_one_side:  # the last --encrypt wins: the server does not ask
            return ["--encrypt", "on"]
        return ["--fault", "one-accept"] if self.one_accept else []

    def client_port(self, port: int) -> int:
        """The port a client connects to: the next one under handshake."""
        return port + 1 if self.handshake else port

    def client_args(self, opts) -> List[str]:
        """What a flow's client is told beside its own options."""
        if self.tls_mismatch:
            return ["--tls", "1.2" if (opts.tls_version or "1.3") == "1.3" else "1.3"]
        return ["--fault", "ktls-claim"] if self.ktls_claim else []

    # The measured path's named points (collectors/windows.py): each calls
    # its hook, which does nothing unless its fault was asked for, so the
    # window itself holds no fault's logic.

    def sending(self, sender_pid: int) -> None:
        """A fixed-size transfer or the downloads started: the stall fault
        freezes the sender, and the watchdog must end the run."""
        if self.stall:
            os.kill(sender_pid, signal.SIGSTOP)

    def watchdog(self, patient: Tuple[float, float]) -> Tuple[float, float]:
        """(no byte for this long ends the run, progress read this often):
        the stall fault wants the watchdog's verdict, not its patience, so
        it gets a short one (tests/test_exit_codes.py)."""
        return (2.0, 0.5) if self.stall else patient

    def window_opened(self, wait_until: Callable[[int], None], t_start_ns: int, duration_s: float, server) -> None:
        """A timed window opened at t_start_ns: the kill-server fault
        SIGKILLs the server 30% into it (server: its WorkloadProcess)."""
        if self.kill_server:
            wait_until(t_start_ns + int(duration_s * 0.3e9))
            server.proc.kill()


NO_FAULTS = Faults()
