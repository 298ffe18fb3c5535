# SPDX-License-Identifier: GPL-2.0-only
"""A side of a run on another host (issue 26): where it runs, an Endpoint
whose commands go through the host's SSH master (collectors/ssh.py), so
a workload or probe there is a ControlledProcess like any here; what of
its host's build it runs; and its host's part of a window's edge, read
there by the host's agent (collectors/agent.py) in its own clock."""

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from qprof import errors
from qprof.collectors.ssh import Agent, SshHost
from qprof.collectors.topology import Endpoint


@dataclass
class RemoteEndpoint(Endpoint):
    """An Endpoint on another host: its address there and the device it
    reaches the peer through; argv runs there, in the host's own
    namespace, through the master connection."""

    host: Optional[SshHost] = None

    def command(self, argv: List[str]) -> List[str]:
        return self.host.command(list(argv))


class RemoteSide:
    """One host's side of a run: its endpoint toward `peer` (the address
    the other side is reached at), its build, and what its agent reads."""

    def __init__(self, host: SshHost, agent: Agent, peer: str):
        self.host, self.agent = host, agent
        self.environment = self._ask("environment", peer=peer)
        self.endpoint = RemoteEndpoint(
            netns=None, addr=host.address, ifname=self.environment["nic"]["device"], host=host
        )
        self.build_dir = Path(agent.hello["build_dir"])

    def _ask(self, op: str, **kw) -> dict:
        reply = self.agent.request(op, **kw)
        if "error" in reply:
            raise errors.InstrumentFailed(f"the agent on {self.host.name} could not answer {op}: {reply['error']}.")
        return reply

    def binary(self, name: str) -> Path:
        """A program of the build on that host (its own build directory)."""
        return self.build_dir / "bin" / name

    def put(self, files: Dict[str, str]) -> Dict[str, str]:
        """Files written on that host for the run (the agent's private
        directory, gone with it): name -> its path there."""
        return self._ask("files", files=files)["paths"]

    def edge(self, pids: Dict[str, int]) -> dict:
        """That host's part of an edge for its processes (agent.py's edge)."""
        return self._ask("edge", pids=pids)
