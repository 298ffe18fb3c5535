# SPDX-License-Identifier: GPL-2.0-only
"""Where a plan's endpoints run, each behind one small interface:

    prepare()  what it needs, before the run directory exists (or its refusal)
    measure(plan, rundir, on_progress, faults, on_interval) -> Measurement (a run's or a mix's)
    close()    what prepare() holds let go, on every path

- Local: two network namespaces joined by veth (with the --link's qdiscs
  on them), or the host's loopback; the endpoints, the window and every
  instrument run here.
- Guest: the same qprof inside a QEMU guest with Debian's kernel (kernel
  TLS, netem), given the plan's options as a job (collectors/resident.py):
  in the guest `qprof guest start` started, or one booted for the command
  (a comparison's runs share it); its measurement comes back and is
  described here like any other, with the guest and its host in the
  environment.

- Hosts: the server on another host reached over SSH (--server), the
  client here; each side's workload, probes, perf and edge readings on its
  own host (collectors/remote.py), the clocks' offset measured.
"""

import json
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional

from qprof import errors
from qprof.collectors import devices, emulation, environment, floor, guest, resident, ssh, windows
from qprof.collectors.endpoints import (
    Collected,
    Endpoints,
    make_certificate,
    mix_measurement,
    now_text,
    run_measurement,
)
from qprof.collectors.faults import Faults
from qprof.collectors.remote import HostsTopology, LocalSide, RemoteSide, source_address
from qprof.collectors.sides import OnHosts, OnMachine
from qprof.collectors.topology import Topology
from qprof.describe import floor as described_floor
from qprof.describe import link, measurement, options
from qprof.describe.plan import Plan, link_devices

# A guest run without a --duration (--bytes, downloads) may take this long, plus boot and set-up.
GUEST_UNTIMED_S = 600
GUEST_SLACK_S = 300
# What a guest run takes beyond its warm-up and window: the boot and the
# runner's start, then each run's set-up in the emulator and its record
# (a 1 s tcp run took 28.9 s here, a 4 s one 33.4, before the runner).
GUEST_BOOT_S = 15.0
GUEST_OVERHEAD_S = 27.0
# The guest-deadline fault's deadline, boot included: a guest run of a longer --duration cannot meet it.
GUEST_DEADLINE_FAULT_S = 10.0


class Local:
    """The endpoints in two network namespaces, or on the loopback."""

    def __init__(self, binary: Path):
        self.binary = binary

    def prepare(self) -> None:
        pass  # the topology is made inside the run directory's lifetime

    def close(self) -> None:
        pass

    def measure(self, plan: Plan, rundir, on_progress, faults: Faults, on_interval=None):
        opts = plan.options
        cert, key = make_certificate(rundir.path)
        if faults.bad_cert:
            cert.write_text("not a certificate\n")
        # Cached; before anything else runs. A run with no one floor (describe/floor.py) measures none.
        floor_parts = floor.measure(opts.stack) if not plan.is_mix and described_floor.measured_for(opts) else None
        features: Dict[str, str] = {}
        for fp in plan.flows:
            features.update(fp.offload.devices)
        what = f"run {rundir.id}: " + (f"{len(plan.flows)} flows ({opts.mix})" if plan.is_mix else opts.stack)
        # net.ipv4.tcp_ecn for the TCP flows (a mix's own stack is none of its flows').
        tcp = any(fp.options.stack in options.TCP_STACKS for fp in plan.flows)
        tcp_ecn = None if opts.ecn is None or not tcp else int(opts.ecn == "on")
        with Topology(opts.topology, rundir.id[-6:], mtu=opts.mtu, ecn=tcp_ecn) as topo:
            emulated = set_up(topo, opts, features, what, rundir.path, on_progress)
            ep = Endpoints(plan, OnMachine(self.binary, topo, rundir.path), topo, rundir.path, cert, key, faults)
            m = measure_endpoints(plan, ep, emulated, on_progress, faults, on_interval, floor_parts)
            m.link = emulated.applied if emulated else None
        return m


def measure_endpoints(plan: Plan, ep: Endpoints, emulated, on_progress, faults: Faults, on_interval, floor_parts):
    """The endpoints started, the pattern's window measured over them, every
    process stopped (a workload that failed raised once all have), and the
    raw measurement made of it."""
    with ep:
        before = ep.kernel_counters() if ep.single else None
        w = windows.measure(plan, ep, emulated, on_progress, faults, on_interval)
        c = Collected(now_text(), ep.finish())
        if ep.single:
            c = c._replace(
                before=before,
                after=ep.kernel_counters(),
                probe_records=ep.probes.records(),
                capture=ep.stacks(),
                floor_parts=floor_parts,
            )
    for i in ep.clients:
        for p in (ep.clients[i], ep.servers[i]):
            if p.done.get("exit_code") != 0:
                p.raise_exit()
    return (mix_measurement if plan.is_mix else run_measurement)(ep, w, c)


# The floor is this machine's (collectors/floor.py); a run on hosts has its server on another.
HOSTS_FLOOR_ABSENT = (
    "the floor is measured on the machine that runs qprof, and this run's server ran on another host; "
    "not measured there yet"
)


class Hosts:
    """The server on another host reached over SSH (--server), the client
    here or on another host too (--client): prepare() logs in to each (one
    master connection), starts qprof's agent there (root, this commit, its
    build: each refused in its own sentence, collectors/ssh.py) and
    measures its clock's offset to this machine's; each side's workload,
    probes, perf and edges then run on its own host. The server listens on
    --server-addr, by default the address its host was reached at. close()
    ends the agents and the connections, and with them whatever still runs
    there."""

    def __init__(
        self,
        server: str,
        ssh_config: Optional[str],
        client: Optional[str] = None,
        server_addr: Optional[str] = None,
    ):
        self.server, self.ssh_config = server, ssh_config
        self.client, self.server_addr = client, server_addr
        self.hosts: List[ssh.SshHost] = []
        self.sides: Dict[str, object] = {}

    def _reach(self, name: str):
        """The host logged in to, its agent started and checked, and what
        it reclaimed said; (host, agent)."""
        host = ssh.SshHost(name, self.ssh_config)
        self.hosts.append(host)
        host.__enter__()
        agent = host.open_agent()
        for item in agent.hello.get("reclaimed") or []:
            print(f"qprof: warning: removed on {name} {item}", file=sys.stderr, flush=True)
        return host, agent

    def prepare(self) -> None:
        try:
            server_host, server_agent = self._reach(self.server)
            addr = self.server_addr or server_host.address
            if self.client is None:
                client = LocalSide(addr)
            else:
                host, agent = self._reach(self.client)
                client = RemoteSide(host, agent, peer=addr, clock=agent.clock_offset())
                client.endpoint.addr = source_address(self.client, client.environment, addr)
            server = RemoteSide(
                server_host, server_agent, peer=client.endpoint.addr, clock=server_agent.clock_offset(), addr=addr
            )
            self.sides = {"client": client, "server": server}
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for host in reversed(self.hosts):
            host.close()
        self.hosts.clear()

    def measure(self, plan: Plan, rundir, on_progress, faults: Faults, on_interval=None):
        opts = plan.options
        cert, key = make_certificate(rundir.path)
        sides = self.sides
        if isinstance(sides["client"], LocalSide):
            sides["client"].files_dir = rundir.path
        where = []
        for role, side in sides.items():
            on = "here" if side.clock is None else f"on {side.name}"
            clock = (
                f"; clock {side.clock.offset_ns / 1e3:+.1f} ± {side.clock.uncertainty_ns / 1e3:.1f} us"
                if side.clock
                else ""
            )
            where.append(f"{role} {on} ({side.endpoint.addr}{clock})")
        on_progress(f"run {rundir.id}: {opts.stack}, {', '.join(where)}, output in {rundir.path}")
        with ExitStack() as undo:
            emulated = self._link(opts, undo, on_progress) if opts.link else None
            topo = HostsTopology(sides)
            ep = Endpoints(plan, OnHosts(sides, topo), topo, rundir.path, cert, key, faults)
            m = measure_endpoints(plan, ep, emulated, on_progress, faults, on_interval, {"absent": HOSTS_FLOOR_ABSENT})
            m.link = emulated.applied if emulated else None
        return m

    def _link(self, opts, undo: ExitStack, on_progress):
        """--link on each --link-dev device, each side's on its host: in
        that host's ledger first (a qprof or agent killed meanwhile leaves
        it to the next reclaim), taken off again on every way out."""
        endpoints = {role: self.sides[role].device(dev) for role, (_, dev) in link_devices(opts).items()}
        for role, ep in endpoints.items():
            self.sides[role].claim_link(ep.ifname)
            undo.callback(self.sides[role].release_link, ep.ifname)
        undo.callback(emulation.remove, endpoints)
        mtus = [(s.environment.get("nic") or {}).get("mtu") for s in self.sides.values()]
        mtu = min([m for m in mtus if m] or [options.BY_NAME["mtu"].default])
        on_progress(f"link {opts.link} on " + ", ".join(f"{e.ifname} ({r})" for r, e in endpoints.items()))
        return emulation.apply(link.parse(opts.link), endpoints, mtu)


def set_up(topo: Topology, opts, features: dict, what: str, run_path: Path, on_progress):
    """The topology made ready: the veths' offload features and the
    --link (its Emulated, or None)."""
    on_progress(f"{what} over {topo.kind}" + (f" {topo.subnet}" if topo.subnet else "") + f", output in {run_path}")
    for ep in (topo.client, topo.server) if topo.kind == "netns" else ():
        devices.set_device_features(ep, features)
    if not opts.link:
        return None
    return emulation.apply(link.parse(opts.link), {"client": topo.client, "server": topo.server}, opts.mtu)


def guest_expected_s(opts, booted: bool = True) -> Optional[float]:
    """About how long a guest run takes (booted: its guest boots first);
    None when its length is the transfer's (--bytes, downloads)."""
    if opts.duration_s is None:
        return None
    return GUEST_OVERHEAD_S - (0.0 if booted else GUEST_BOOT_S) + (opts.warmup_s or 0.0) + opts.duration_s


class Guest:
    """The whole measurement inside a QEMU guest: the guest's qprof runs
    the plan's options as a job (collectors/resident.py), in the started
    guest if it runs this guest kernel and this qprof, else in one booted
    on the first run and kept for the next (a comparison's: runner.run's
    `where`) until close(). Its raw measurement comes back. on_guest(stage,
    seconds since the run began, guest_expected_s) as each stage is
    reached ("boot" first when it boots)."""

    def __init__(self, on_guest=None):
        self.on_guest = on_guest
        self.art = None
        self.vm = None  # resident.Started or resident.Booted, from the first run on

    def prepare(self) -> None:
        self.art = guest.artifacts()  # `make guest` not done: refused, nothing written

    def close(self) -> None:
        if isinstance(self.vm, resident.Booted):
            self.vm.close()

    def _resident(self, faults: Faults, on_progress):
        """The guest for this run. The deadline fault's deadline counts the
        boot: a run under it boots a guest of its own."""
        if faults.guest_deadline:
            return resident.Booted(self.art)
        if self.vm is None:
            self.vm, why = resident.Started.find(self.art)
            if why:
                on_progress(f"{why}, so it is not used; this command boots its own guest")
            self.vm = self.vm or resident.Booted(self.art)
        return self.vm

    def measure(self, plan: Plan, rundir, on_progress, faults: Faults, on_interval=None):
        opts = plan.options
        art = self.art  # prepare()'s
        t0 = time.monotonic()
        vm = self._resident(faults, on_progress)
        expected = guest_expected_s(opts, booted=not vm.ready)

        def stage(name: str, s: float) -> None:
            on_progress(f"guest: {name} after {s:.0f} s")
            if self.on_guest:
                self.on_guest(name, s, expected)

        served = f"the started guest {vm.id}" if vm.started else "a QEMU guest"
        on_progress(
            f"run {rundir.id}: {'mix' if plan.is_mix else opts.stack} in {served} "
            f"({art.kernel_release}, TCG), output in {rundir.path}"
        )
        console = rundir.path / "console.log"
        since = vm.console_size() if vm.ready else 0
        job_s = opts.warmup_s + (opts.duration_s or GUEST_UNTIMED_S) + GUEST_SLACK_S
        try:
            if faults.guest_deadline:
                deadline = t0 + GUEST_DEADLINE_FAULT_S
                vm.boot(deadline, stage, console)
            else:
                if not vm.ready:
                    vm.boot(time.monotonic() + guest.BOOT_TIMEOUT_S, stage, console)
                deadline = time.monotonic() + job_s
            result = vm.run_job(opts, faults.argv(), rundir.path / "guest", deadline, stage, console, since)
        finally:
            if faults.guest_deadline:
                vm.keep_console(since, console)
                vm.close()
        out = rundir.path / "guest"
        if result["rc"] != 0:
            lines = [l for l in (out / "run.stderr").read_text(errors="replace").splitlines() if l.strip()]
            sentence = lines[-1].removeprefix("qprof: ") if lines else f"qprof exited {result['rc']} in the guest"
            # The files it names are here now.
            raise errors.by_exit_code(result["rc"], f"in the guest: {sentence.replace(result['job'], str(out))}")
        # The guest's run directory, relative to this one: its measurement, logs and stacks.
        guest_run = Path("guest") / "runs" / json.loads((out / "run.stdout").read_text())["id"]
        m = measurement.load((rundir.path / guest_run / measurement.MEASUREMENT).read_text())
        m.options = asdict(opts)
        m.placement = {"guest_run": str(guest_run)}
        if getattr(m, "perf", None):
            m.perf["stacks_dir"] = str(guest_run / m.perf["stacks_dir"])
        m.environment["emulated"] = True
        m.environment["guest"] = {
            "kernel_package": art.package,
            "kernel_release": art.kernel_release,
            "qemu": guest.qemu_version(),
            "accel": "tcg",
            "cpu": "max",
            "cpus": guest.GUEST_CPUS,
            "memory_mb": guest.GUEST_MEMORY_MB,
            **vm.describe(result["runs_before"]),
        }
        m.environment["host"] = environment.describe()
        return m
