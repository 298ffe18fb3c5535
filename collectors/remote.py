# SPDX-License-Identifier: GPL-2.0-only
"""A side of a run on a host (issue 26): this one (LocalSide) or another
reached over SSH (RemoteSide), behind one small interface, so the
endpoints, the edges and the instruments ask a side, never where it is:

    name, endpoint      the host, and where the side's processes run there
                        (a RemoteEndpoint's commands go through the host's
                        SSH master, so a workload or probe there is a
                        ControlledProcess like any here)
    environment, clock  the host (with the NIC toward the peer) and its
                        CLOCK_MONOTONIC against ours (None here)
    build_dir, binary   what of the host's own build it runs
    file_path           where a process of the side writes a file the run reads
    put, read_file      the run's files on another host (a server's there;
                        the side on this machine is a client's, whose
                        files are the run directory's)
    edge(pids, kernel)  the host's part of a window's edge, in its clock
                        (collectors/procfs.py read_edge, there by the agent)
    nic(dev)            what its NIC adds (procfs.read_nic), read outside
                        the window
    perf(...), stat(...)  stack samples and its process's hardware counters
                        on that host: a PerfRecorder and a PerfStat here,
                        a RemotePerf and a RemoteCounter there (the agent's)
"""

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from qprof import errors, interrupts, paths, remains
from qprof.collectors import environment, procfs
from qprof.collectors.perf import DWARF_STACK_BYTES, THREADS_FILE, PerfRecorder, PerfStat, capture_record
from qprof.collectors.ssh import REQUEST_TIMEOUT_S, Agent, ClockOffset, SshHost
from qprof.collectors.topology import Endpoint, tcp_congestion_control

LOCAL = "local"


@dataclass
class RemoteEndpoint(Endpoint):
    """An Endpoint on another host: its address there and the device it
    reaches the peer through; argv runs there, in the host's own
    namespace, through the master connection."""

    host: Optional[SshHost] = None

    def command(self, argv: List[str]) -> List[str]:
        return self.host.command(list(argv))

    def read_texts(self, paths: List[str]) -> Dict[str, Optional[str]]:
        """Each file as cat reads it there (None: not read)."""
        out: Dict[str, Optional[str]] = {}
        for p in paths:
            r = subprocess.run(self.command(["cat", p]), capture_output=True, text=True)
            out[p] = r.stdout if r.returncode == 0 else None
        return out

    def controlled(self, argv: List[str]) -> List[str]:
        """argv there, for a ControlledProcess, under a shell that says its
        pid there and how it ended: first {"event": "spawned", "pid": PID}
        on stdout (what ControlledProcess.pid is, for a process there); ssh
        reports a command killed by a signal only as its own exit 255,
        which is also how it reports a lost connection, so the shell exits
        128 + the signal and says so on stderr."""
        return self.host.command(["sh", "-c", SPAWN, "qprof", *argv])


# sh -c SPAWN qprof ARGV...: ARGV run with the shell's stdin (through fd 3:
# a background job's stdin is /dev/null before its own redirections), its pid said,
# its end passed on (128 + N when killed by signal N).
SPAWN = (
    'exec 3<&0; "$@" 0<&3 3<&- & p=$!; exec 3<&-; echo "{\\"event\\": \\"spawned\\", \\"pid\\": $p}"; wait "$p"; s=$?; '
    'if [ "$s" -gt 128 ]; then echo "killed by signal $((s - 128))" >&2; fi; exit "$s"'
)


class LocalSide:
    """A side on this machine, in its own network namespace, toward `peer`;
    its files go in `files_dir` (the run directory, once there is one)."""

    name = LOCAL
    clock: Optional[ClockOffset] = None

    def __init__(self, peer: str, files_dir: Optional[Path] = None):
        self.environment = {**environment.describe(), "nic": environment.nic(peer)}
        addr = source_address("this machine", self.environment, peer)
        self.endpoint = Endpoint(netns=None, addr=addr, ifname=self.environment["nic"]["device"])
        self.build_dir = paths.build_dir()
        self.files_dir = files_dir

    def binary(self, name: str) -> Path:
        return self.build_dir / "bin" / name

    def file_path(self, name: str) -> str:
        return str(self.files_dir / name)

    def edge(self, pids: Dict[str, int], kernel: bool = True) -> dict:
        return procfs.read_edge(pids, kernel)

    def nic(self, dev: str) -> dict:
        return procfs.read_nic(dev)

    def perf(
        self, run_path: Path, sample_hz: int, call_graph: Optional[str], keep_data: bool = False, dwarf_bytes=None
    ):
        return PerfRecorder(run_path, sample_hz, keep_data, call_graph, dwarf_bytes or DWARF_STACK_BYTES)

    def stat(self, run_path: Path, pid: int, tag: str):
        return PerfStat(run_path, pid, tag)

    def device(self, dev: str) -> Endpoint:
        """Another device of this host, as an endpoint (a --link's, --link-dev)."""
        return Endpoint(netns=None, addr=self.endpoint.addr, ifname=dev)

    def claim_link(self, dev: str) -> None:
        """A --link on dev is this run's: in this machine's ledger, so a
        qprof killed before it takes it off leaves it to the next reclaim."""
        with interrupts.deferred():
            remains.ledger().claim("qdiscs", dev)

    def release_link(self, dev: str) -> None:
        remains.ledger().release("qdiscs", dev)


class RemoteSide:
    """One host's side of a run: its endpoint toward `peer` (the address
    the other side is reached at), its build, and what its agent reads."""

    def __init__(
        self, host: SshHost, agent: Agent, peer: str, clock: Optional[ClockOffset] = None, addr: Optional[str] = None
    ):
        """addr: the side's address for the run's data (its server listens
        there); by default the one the host was reached at over SSH."""
        self.host, self.agent = host, agent
        self.name = host.name
        self.clock = clock
        self.environment = self._ask("environment", peer=peer)
        self.endpoint = RemoteEndpoint(
            netns=None, addr=addr or host.address, ifname=self.environment["nic"]["device"], host=host
        )
        self.build_dir = Path(agent.hello["build_dir"])
        self._dir: Optional[str] = None

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
        paths_there = self._ask("files", files=files)["paths"]
        if paths_there:
            self._dir = str(Path(next(iter(paths_there.values()))).parent)
        return paths_there

    def file_path(self, name: str) -> str:
        """Where a process there may write a file the run reads back (in the agent's directory)."""
        if self._dir is None:
            self.put({".qprof": ""})
        return str(Path(self._dir) / name)

    def read_file(self, name: str) -> Optional[str]:
        return self._ask("read", name=name)["text"]

    def edge(self, pids: Dict[str, int], kernel: bool = True) -> dict:
        """That host's part of an edge for its processes (procfs.read_edge, read there)."""
        return self._ask("edge", pids=pids, kernel=kernel)

    def nic(self, dev: str) -> dict:
        """What that host's NIC dev adds (procfs.read_nic, read there)."""
        return self._ask("nic", dev=dev)

    def perf(
        self, run_path: Path, sample_hz: int, call_graph: Optional[str], keep_data: bool = False, dwarf_bytes=None
    ):
        return RemotePerf(self, sample_hz, call_graph, dwarf_bytes or DWARF_STACK_BYTES)

    def stat(self, run_path: Path, pid: int, tag: str):
        return RemoteCounter(self, pid, tag)

    def device(self, dev: str) -> "RemoteEndpoint":
        return RemoteEndpoint(netns=None, addr=self.endpoint.addr, ifname=dev, host=self.host)

    def claim_link(self, dev: str) -> None:
        """A --link on dev is this run's: handed to the agent, which keeps
        it in its host's ledger and takes it off if the run cannot (agent.py's link)."""
        self._ask("link", do="claim", dev=dev)

    def release_link(self, dev: str) -> None:
        try:
            self._ask("link", do="release", dev=dev)
        except errors.QprofError:
            pass  # the agent has gone: it took the link off as it ended, or left it to its host's reclaim


class AgentControl:
    """A perf of another host's, run by its agent (agent.py's perf and stat
    ops), which it ends with: started on entering, then enabled and
    disabled at the window's edges as a PerfControl here is."""

    def __init__(self, side: "RemoteSide", op: str, **ident):
        self.side, self.op, self.ident = side, op, ident

    def _do(self, do: str, timeout_s: float = REQUEST_TIMEOUT_S, **kw) -> dict:
        return self.side._ask(self.op, timeout_s=timeout_s, do=do, **self.ident, **kw)

    def __exit__(self, *exc) -> None:
        pass

    def enable(self) -> None:
        self._do("enable")

    def disable(self) -> None:
        self._do("disable")


class RemotePerf(AgentControl):
    """perf record there; capture() as PerfRecorder.capture, the folded files brought here."""

    def __init__(self, side: "RemoteSide", sample_hz: int, call_graph: Optional[str], dwarf_bytes: int):
        super().__init__(side, "perf")
        self.sample_hz, self.call_graph, self.dwarf_bytes = sample_hz, call_graph, dwarf_bytes

    def __enter__(self) -> "RemotePerf":
        got = self._do("start", sample_hz=self.sample_hz, call_graph=self.call_graph, dwarf_bytes=self.dwarf_bytes)
        self.period_ns, self.call_graph = got["period_ns"], got["call_graph"]
        return self

    def capture(self, pids: Dict[str, int], out_dir: Path) -> dict:
        got = self._do("fold", timeout_s=FOLD_TIMEOUT_S, pids=pids)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in got["files"].items():
            (out_dir / Path(name).name).write_text(text)
        return {k: got[k] for k in ("samples", "samples_per_cpu", "period_ns")}


class RemoteCounter(AgentControl):
    """perf stat of a process there; output() as PerfStat.output."""

    def __init__(self, side: "RemoteSide", pid: int, tag: str):
        super().__init__(side, "stat", tag=tag)
        self.pid = pid

    def __enter__(self) -> "RemoteCounter":
        self._do("start", pid=self.pid)
        return self

    def output(self) -> str:
        return self._do("output")["output"]


class HostsPerf:
    """perf on each side's host (role -> its side's perf(...)), and each
    side's hardware counters (its stat(...)), switched together; the
    capture merges what each host folded: a side's stacks from its own
    host, the others of every kernel (once where the hosts are one kernel,
    whose perfs then each saw both sides), each host's files kept under
    stacks/hosts/ROLE."""

    def __init__(self, perfs: Dict[str, object], counters: Dict[str, object]):
        self.perfs, self.counters = perfs, counters
        first = next(iter(perfs.values()), None)
        if first is not None:
            self.period_ns, self.call_graph, self.sample_hz = first.period_ns, first.call_graph, first.sample_hz

    def enable(self) -> None:
        for p in [*self.perfs.values(), *self.counters.values()]:
            p.enable()

    def disable(self) -> None:
        for p in [*self.perfs.values(), *self.counters.values()]:
            p.disable()

    def counted(self) -> Dict[str, str]:
        """Each side's perf stat output (once its process has ended, perf stat has too)."""
        return {role: c.output() for role, c in self.counters.items()}

    def capture(self, pids: Dict[str, int], out_dir: Path, same_kernel: bool) -> Optional[dict]:
        if not self.perfs:
            return None
        parts = {}
        for role, perf in self.perfs.items():
            (out_dir / "hosts" / role).mkdir(parents=True, exist_ok=True)
            parts[role] = perf.capture(pids if same_kernel else {role: pids[role]}, out_dir / "hosts" / role)
        out_dir.mkdir(parents=True, exist_ok=True)
        kernels = [next(iter(self.perfs))] if same_kernel else list(self.perfs)
        for role in self.perfs:
            (out_dir / f"{role}.folded").write_text((out_dir / "hosts" / role / f"{role}.folded").read_text())
        (out_dir / "others.folded").write_text(
            "".join((out_dir / "hosts" / r / "others.folded").read_text() for r in kernels)
        )
        threads = []
        for role in self.perfs:
            lines = (out_dir / "hosts" / role / THREADS_FILE).read_text().splitlines()
            threads += [l for l in lines if l.startswith(f"{role}/")]
        (out_dir / THREADS_FILE).write_text("".join(l + "\n" for l in threads))
        samples = {role: parts[role]["samples"][role] for role in self.perfs}
        samples["others"] = sum(parts[r]["samples"]["others"] for r in kernels)
        return {
            **capture_record(self, samples, parts[kernels[0]]["samples_per_cpu"]),
            "hosts": {role: {"samples_per_cpu": p["samples_per_cpu"]} for role, p in parts.items()},
        }


class HostsTopology:
    """Where a run placed on hosts has its two ends: each side's endpoint
    on its host (a Topology's interface for the endpoints), and whether
    the hosts are one kernel."""

    kind = "hosts"
    subnet = None
    mtu = None

    def __init__(self, sides: Dict[str, object]):
        self.sides = sides
        self.client, self.server = sides["client"].endpoint, sides["server"].endpoint
        boots = {s.environment.get("boot_id") for s in sides.values()}
        self.same_kernel = len(boots) == 1 and None not in boots

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "mtu": None,
            "subnet": None,
            "same_kernel": self.same_kernel,
            **{
                role: {
                    "host": side.name,
                    "netns": None,
                    "addr": side.endpoint.addr,
                    "ifname": side.endpoint.ifname,
                    "tcp_congestion_control": tcp_congestion_control(side.endpoint),
                }
                for role, side in self.sides.items()
            },
        }


# Folding a long DWARF capture takes a while (perf script unwinds every sample).
FOLD_TIMEOUT_S = 600.0


def source_address(where: str, environment: dict, peer: str) -> str:
    """A side's address toward peer: where its route to it leaves from
    (environment.nic's source, `ip route get PEER` on its host); refused
    where there is no route."""
    source = (environment.get("nic") or {}).get("source")
    if source is None:
        raise errors.BadValue(
            f"{where} has no route to the server's address {peer} (`ip route get {peer}` there); "
            "give --server-addr an address of the server's host that the client's host reaches."
        )
    return source
