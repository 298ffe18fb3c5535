# SPDX-License-Identifier: GPL-2.0-only
"""Real failures injected for the tests, never part of a run's options or
record: the hidden `qprof run --inject-fault NAME` builds a Faults, and
runner.run takes it beside the RunOptions. Each one makes a real part
fail (a wrong port, a broken certificate, a killed server, a TLS version
the server refuses, the GSO/GRO interposer left out, a server checking
against another pattern, a frozen sender, a kernel without netem, a
workload claiming kTLS it never enabled, a guest out of time, a quic
server that keeps encryption on, a TCP server that accepts one
connection), so the
tests see qprof's real handling of it."""

from dataclasses import dataclass
from typing import List, Optional

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
)


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

    def argv(self) -> List[str]:
        """The same faults for a qprof started elsewhere (the guest)."""
        return ["--inject-fault", self.name] if self.name else []


NO_FAULTS = Faults()
