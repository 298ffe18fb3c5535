# SPDX-License-Identifier: GPL-2.0-only
"""Real failures injected for the tests, never part of a run's options or
record: the hidden `qprof run --inject-fault NAME` builds a Faults, and
runner.run takes it beside the RunOptions. Each one makes a real part
fail (a wrong port, a broken certificate, a killed server, a TLS version
the server refuses, the GSO/GRO interposer left out), so the tests see
qprof's real handling of it."""

from dataclasses import dataclass
from typing import List, Optional

FAULTS = ("handshake", "kill-server", "bad-cert", "tls-mismatch", "no-interposer")


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

    def argv(self) -> List[str]:
        """The same faults for a qprof started elsewhere (the guest)."""
        return ["--inject-fault", self.name] if self.name else []


NO_FAULTS = Faults()
