# SPDX-License-Identifier: GPL-2.0-only
"""A side of a run on another host (collectors/remote.py), against a host
made here (a namespace with its own sshd, tests/sshhosts.py): a QUIC and a
TLS server started there through the SSH master, with the run's
certificate put there by the agent, serve a client here; the bytes are
verified there; the syscalls probe, run there from that host's build for
the server alone, counts at least those bytes received; the agent reads
the server's CPU in that host's clock; and once this side lets go,
nothing is left there, the agent's files included. Both "hosts" share one kernel here, so the agent's reading of
the server can be held to this side's own reading of the same process."""

import subprocess
from pathlib import Path

import pytest

from qprof.collectors import endpoints, listen, procfs, ssh
from qprof.collectors.probes import ProbeSet, Target
from qprof.collectors.remote import RemoteSide
from qprof.collectors.workload import WorkloadExit, WorkloadProcess
from qprof.describe import derive, transports

from conftest import REPO, free_port, leftovers, needs_build

pytestmark = [pytest.mark.system, needs_build]
WL = str(REPO / "build" / "bin" / "qprof-wl")
BYTES = 8 << 20


@pytest.mark.parametrize("stack", ["quic", "tcp-tls"])
def test_a_server_there_serves_a_client_here(ssh_host, tmp_path, stack):
    before = leftovers()
    cert, key = endpoints.make_certificate(tmp_path)
    port = free_port()
    with ssh.SshHost(ssh_host.destination, ssh_host.ssh_config) as host:
        agent = host.open_agent()
        side = RemoteSide(host, agent, peer=ssh_host.local_addr)
        assert side.endpoint.addr == ssh_host.addr and side.endpoint.ifname
        put = side.put({"server-cert.pem": cert.read_text(), "server-key.pem": key.read_text()})
        assert put["server-key.pem"] != str(key)  # the host's copy, not this side's file
        env = listen.server_env(stack, host.address, port, None, side.build_dir)
        argv = [str(side.binary("qprof-wl")), "--stack", stack, "--role", "server", "--addr", host.address]
        argv += ["--port", str(port), "--control", "--cert", put["server-cert.pem"], "--key", put["server-key.pem"]]
        argv = [f"{k}={v}" for k, v in env.items()] + argv
        with WorkloadProcess("server", ["env", *argv], side.endpoint, tmp_path / "server.log") as server:
            pid = server.wait_event("ready", 30)["pid"]
            target = Target(pids={"server": pid}, devices={"server": f"{side.endpoint.ifname}@host"})
            probes = ProbeSet(["syscalls", "packets"], target, tmp_path, side=side)
            stack_ = transports.STACKS[stack]
            with probes:
                there_pids = {line.split()[0] for line in ssh_host.remote_pids()}
                assert {str(p.ready["pid"]) for p in probes.probes} <= there_pids  # started there, by its sshd
                probes.request_mark("start")
                probes.collect_mark("start")
                client = subprocess.run(
                    [WL, "--stack", stack, "--role", "client", "--addr", host.address, "--port", str(port)]
                    + ["--bytes", str(BYTES)],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert client.returncode == WorkloadExit.OK, client.stderr
                done = server.wait_event("done", 30)
                assert done["verified"] is True and done["app_bytes"] == BYTES
                probes.request_mark("end")
                probes.collect_mark("end")
                records = probes.records()
            assert [n for n, r in records.items() if r["status"] != "present"] == [], records
            calls = derive.by_syscall(records["syscalls"]["window"]["threads"], pid)
            got = derive.syscall_figures(calls, BYTES, None, None, None, stack_.rw_is_network, timed=False)
            assert got["recv_bytes"] >= BYTES  # headers and TLS records on top of the verified bytes
            there = side.edge({"server": pid})
            here = procfs.read_process(pid)  # the same process, read after, on the same kernel
            assert 0 < there["processes"]["server"]["oncpu_s"] <= here.oncpu_s
            # The kernel's TLS counters of its namespace, as they are read here (neither stack
            # uses kernel TLS, so they stand still); None exactly where the kernel has no TLS.
            tls = there["tls_stat"]["server"]
            assert tls == procfs.read_tls_stat(pid)
            assert (tls is None) == (not Path(f"/proc/{pid}/net/tls_stat").exists())
            server.finish(30)
        agent.close()
        assert not Path(put["server-key.pem"]).parent.exists()  # the agent took its files with it
    assert ssh_host.wait_idle() == []
    assert leftovers() == before
