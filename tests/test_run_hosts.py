# SPDX-License-Identifier: GPL-2.0-only
"""`qprof run --server HOST` (issue 26) against a host made on this
machine: a namespace running Debian's sshd, reached as root@ADDR with its
own keys, known_hosts and ssh config (tests/sshhosts.py), exactly as a
real host would be. The client runs here, the server there, and each
side's workload, probes and perf run on its own host.

Both "hosts" share this machine's kernel, which gives the run's figures
something to be held to: the measured clock offset must lie within its
own uncertainty of 0, each side's probes (on its own host, for its own
process) must agree with the other instruments of that process, and the
hosts are recognised as one kernel, whose machine-wide counters count once.

The faults a run on another host meets mid-run are provoked for real: the
server killed with -9 there, the SSH connection cut, Ctrl-C here; each
ends in its own code and one sentence, and leaves nothing on either host."""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from qprof import errors, files, remains
from qprof.collectors.topology import TCP_CC_AVAILABLE

from conftest import impossible_figures, leftovers, needs_build, qprof, started, validate_records
from sshhosts import joint_config
from test_bad_input import one_sentence

pytestmark = [pytest.mark.system, needs_build]


def hosts_run(runs_dir, host, *args, timeout=300):
    r = qprof(
        "run", "--json", "--server", host.destination, "--ssh-config", str(host.ssh_config), *args,
        runs_dir=runs_dir, timeout=timeout,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert impossible_figures(rec) == []
    return rec


@pytest.mark.parametrize("stack, extra", [("quic", []), ("tcp-tls", ["--interval", "500ms"])])
def test_a_run_with_its_server_on_another_host(ssh_host, runs_dir, stack, extra):
    rec = hosts_run(runs_dir, ssh_host, "--stack", stack, "-d", "2s", *extra)
    assert rec["status"] == "complete" and rec["verified"] is True and rec["bytes"] > 0
    topo = rec["environment"]["topology"]
    assert topo["kind"] == "hosts"
    assert topo["server"]["host"] == ssh_host.destination and topo["server"]["addr"] == ssh_host.addr
    assert topo["client"]["host"] == "local" and topo["client"]["addr"] == ssh_host.local_addr

    # Each host as it was, and its clock against ours: one kernel, one clock.
    hosts = rec["hosts"]
    assert hosts["same_kernel"] is True
    assert hosts["client"]["clock"] is None
    clock = hosts["server"]["clock"]
    assert clock["rounds"] >= 1 and clock["uncertainty_ns"] * 2 >= clock["rtt_ns"] > 0
    assert abs(clock["offset_ns"]) <= clock["uncertainty_ns"]
    for role in ("client", "server"):
        env = hosts[role]["environment"]
        assert env["kernel_release"] and env["cpu_count"] >= 1 and env["boot_id"]
        assert env["nic"]["device"] == topo[role]["ifname"]
        assert hosts[role]["cpu"]["total_s"] > 0
        # Each side's cycles and instructions where its host has a PMU; perf's own "no" where not.
        hw, why = hosts[role]["hardware_counters"], hosts[role]["hardware_counters_absent_reason"]
        if env["pmu"]:
            assert hw["cycles"] > 0 and hw["instructions"] > 0 and hw["ipc"] > 0, why
        else:
            assert hw is None and "<not supported>" in why, why
    # The same kernel read on both sides of one window: one window, twice.
    assert hosts["skew_s"] < rec["cpu_window_s"] / 2

    # Both sides' probes ran, each on its host for its process, and agree with the others.
    for name, probe in rec["probes"].items():
        assert probe["status"] == "present", (name, probe)
        assert set(probe["hosts"]) == {"client", "server"}
    for side in ("client", "server"):
        cpu = rec["cpu"][side]
        assert cpu["oncpu_schedstat_s"] > 0 and cpu["ns_per_byte"]["oncpu"] > 0
        check = rec["cpu_threads"][side]["oncpu_check"]
        assert 0.9 < check["ratio"] < 1.1, check
        assert rec["syscalls"][side]["by_syscall"], side
    if stack == "quic":
        for side in ("client", "server"):
            calls = rec["crosscheck"][side]["udp_send_calls"]
            assert calls["own"] > 0 and calls["ratio"] == pytest.approx(1.0, abs=0.02), (side, calls)
        assert [b["to"] for b in rec["listen"]["server_binds"]] == [f"[::ffff:{ssh_host.addr}]:4433"]

    # Flame graphs of both sides, each from its own host's perf.
    flame = rec["flame"]
    for side in ("client", "server"):
        assert flame["samples"][side] > 0 and flame["sides"][side]["ns_per_byte"] > 0
    run_dir = runs_dir / rec["id"]
    for role in ("client", "server"):
        assert (run_dir / "stacks" / "hosts" / role / f"{role}.folded").stat().st_size > 0
    assert (run_dir / "stacks" / "server.folded").read_text() == (
        run_dir / "stacks" / "hosts" / "server" / "server.folded"
    ).read_text()
    # The machine counted once: its busy time is both sides' and every other task's, at most.
    busy = rec["cpu"]["system"]["total_s"]
    assert busy <= rec["cpu_window_s"] * hosts["client"]["environment"]["cpu_count"] * 1.05
    if extra:  # each interval's CPU read on each side's host
        samples = rec["intervals"]["samples"]
        assert len(samples) >= 3 and all(s["server_cpus"] > 0 and s["client_cpus"] > 0 for s in samples)
    assert ssh_host.wait_idle() == []
    assert validate_records(runs_dir) == 1


@pytest.mark.parametrize("stack", ["quic", "tcp-tls"])
def test_both_ends_on_other_hosts(ssh_host_factory, runs_dir, tmp_path, stack):
    """--client too: the client on one host, the server on another, the
    data on a link of their own between them (it flows through no other
    namespace), this machine only driving the run. Each side is measured
    on its own host, and the server listens on --server-addr."""
    server, client = ssh_host_factory(), ssh_host_factory()
    server_addr, client_addr = server.join(client)
    config = joint_config(tmp_path / "ssh_config", [server, client])
    r = qprof(
        "run", "--json", "--stack", stack, "-d", "2s", "--server", server.alias, "--client", client.alias,
        "--server-addr", server_addr, "--ssh-config", str(config), runs_dir=runs_dir, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert impossible_figures(rec) == [] and rec["verified"] is True and rec["bytes"] > 0
    topo, hosts = rec["environment"]["topology"], rec["hosts"]
    assert (topo["server"]["host"], topo["server"]["addr"]) == (server.alias, server_addr)
    assert (topo["client"]["host"], topo["client"]["addr"]) == (client.alias, client_addr)
    for role in ("client", "server"):
        assert topo[role]["tcp_congestion_control"] in Path(TCP_CC_AVAILABLE).read_text().split()  # read there
        clock = hosts[role]["clock"]
        assert clock is not None and abs(clock["offset_ns"]) <= clock["uncertainty_ns"]  # one kernel here
        assert rec["cpu"][role]["oncpu_schedstat_s"] > 0 and rec["flame"]["samples"][role] > 0
        assert 0.9 < rec["cpu_threads"][role]["oncpu_check"]["ratio"] < 1.1
    for name, probe in rec["probes"].items():
        assert probe["status"] == "present", (name, probe)
    # The data went over their own link: its veths counted it, in each host.
    devices = {d["role"]: d for d in rec["probes"]["packets"]["window"]["devices"]}
    assert (
        devices["client"]["dev"] == f"{topo['client']['ifname']}@host" and topo["client"]["ifname"] != client.links[1]
    )
    assert devices["client"]["tx"]["wire_packets"] > 0 and devices["server"]["tx"]["wire_packets"] > 0
    assert server.wait_idle() == [] and client.wait_idle() == []


def _root_qdisc(dev: str, netns=None) -> str:
    ns = ["-n", netns] if netns else []
    r = subprocess.run(["tc", *ns, "-j", "qdisc", "show", "dev", dev], capture_output=True, text=True, check=True)
    return next((q["kind"] for q in json.loads(r.stdout) if q.get("root")), "none")


def test_a_link_on_named_devices_of_two_hosts(ssh_host, runs_dir):
    """--link on hosts goes only on the devices --link-dev names, one on
    each side, and comes off again: the rate caps the transfer, both
    directions' qdiscs counted it, and afterwards each device has its own
    root qdisc back."""
    here, there = ssh_host.links
    before = {"here": _root_qdisc(here), "there": _root_qdisc(there, ssh_host.netns)}
    rec = hosts_run(
        runs_dir, ssh_host, "--stack", "tcp", "-d", "2s", "--link", "rate=200mbit",
        "--link-dev", f"local:{here},{ssh_host.destination}:{there}",
    )  # fmt: skip
    assert rec["throughput_gbps"] <= 0.2 * 1.05, rec["throughput_gbps"]  # the shaper's rate, whatever the CPU
    directions = rec["link"]["directions"]
    assert [d["applied"]["kinds"] for d in directions.values()] == [["tbf"], ["tbf"]]  # read back there and here
    assert all(d["window"]["tbf"]["bytes"] > 0 for d in directions.values()), directions
    assert rec["link"]["saturation"]["limited_by"] == "link"
    assert {"here": _root_qdisc(here), "there": _root_qdisc(there, ssh_host.netns)} == before
    assert ssh_host.wait_idle() == []


def test_a_link_left_by_a_killed_qprof_is_taken_off(ssh_host, runs_dir):
    """qprof killed with -9 mid-run, its link on both hosts' devices: the
    agent there takes its side off as its connection ends; this side's is
    in this machine's ledger, and `qprof clean` takes it off."""
    here, there = ssh_host.links
    before = {"here": _root_qdisc(here), "there": _root_qdisc(there, ssh_host.netns)}
    args = ["--stack", "tcp", "-d", "30s", "--link", "rate=200mbit", "--server", ssh_host.destination]
    args += ["--ssh-config", str(ssh_host.ssh_config), "--link-dev", f"local:{here},{ssh_host.destination}:{there}"]
    with started("run", *args, runs_dir=runs_dir) as p:
        _wait_there(ssh_host, runs_dir)
        assert _root_qdisc(here) == "tbf" and _root_qdisc(there, ssh_host.netns) == "tbf"
        p.kill()
        p.communicate(timeout=60)
        # Its children die with it (PR_SET_PDEATHSIG), and are reaped on the init's time.
        deadline = time.monotonic() + 10
        while [x for x in leftovers() if x.startswith("process")] and time.monotonic() < deadline:
            time.sleep(0.1)
    assert ssh_host.wait_idle() == []
    assert _root_qdisc(there, ssh_host.netns) == before["there"]  # the agent's doing, at EOF
    assert _root_qdisc(here) == "tbf"
    r = qprof("clean")
    assert r.returncode == 0 and f"the link (root qdisc) on {here}" in r.stdout, r.stdout
    assert _root_qdisc(here) == before["here"]


def test_compare_and_the_history_take_runs_on_hosts(ssh_host, runs_dir, tmp_path):
    """compare runs each configuration with its server there, and the
    history, export and the report read those runs as any other."""
    host = ["--server", ssh_host.destination, "--ssh-config", str(ssh_host.ssh_config)]
    r = qprof(
        "compare", "--json", "--stack", "tcp", "--vary", "streams=1,2", "--repeat", "1", "-d", "1s",
        "--warmup", "0.5s", *host, runs_dir=runs_dir, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    comp = json.loads(r.stdout)
    assert len(comp["runs"]) == 2
    for run in comp["runs"]:
        rec = files.load(runs_dir, run["id"])
        assert rec["hosts"]["server"]["host"] == ssh_host.destination and rec["verified"] is True
    listed = qprof("ls", runs_dir=runs_dir)
    assert listed.returncode == 0 and listed.stdout.count(f"server on {ssh_host.destination}") == 2, listed.stdout
    exported = qprof("export", comp["runs"][0]["id"], "--format", "openmetrics", runs_dir=runs_dir)
    assert exported.returncode == 0 and "qprof_cpu_nanoseconds_per_byte" in exported.stdout, exported.stderr
    report = qprof("report", comp["runs"][1]["id"], "--output", str(tmp_path / "r.html"), runs_dir=runs_dir)
    assert report.returncode == 0 and (tmp_path / "r.html").stat().st_size > 0, report.stderr
    assert ssh_host.wait_idle() == []


@pytest.mark.parametrize("fault", ["unreachable", "not built"])
def test_a_host_that_cannot_serve_is_refused_before_the_run(ssh_host_factory, runs_dir, tmp_path, fault):
    """What `qprof remote check` refuses, `qprof run --server` refuses the
    same way, before a run directory exists, leaving nothing on either host."""
    if fault == "unreachable":
        host = ssh_host_factory()
        dest, code, words = f"{host.destination}:2222", errors.SshUnreachable.exit_code, ["cannot reach", "2222"]
    else:
        empty = tmp_path / "empty-build"
        empty.mkdir()
        host = ssh_host_factory(env={"QPROF_BUILD_DIR": str(empty)})
        dest, code, words = host.destination, errors.RemoteNotBuilt.exit_code, [f"lacks its build in {empty}"]
    before = leftovers()
    r = qprof("run", "--stack", "quic", "--server", dest, "--ssh-config", str(host.ssh_config), runs_dir=runs_dir)
    assert r.returncode == code, r.stderr
    line = one_sentence(r.stderr)
    assert all(w in line for w in words), line
    assert not runs_dir.exists()
    assert host.wait_idle() == [] and leftovers() == before


def test_the_server_killed_there(ssh_host, runs_dir):
    """qprof-wl killed with -9 on the server's host mid-run: the run says
    the server died there, and nothing is left on either host."""
    before = leftovers()  # the host's own namespace, sshd and ledger
    args = ["--stack", "quic", "-d", "20s", "--server", ssh_host.destination]
    with started("run", *args, "--ssh-config", str(ssh_host.ssh_config), runs_dir=runs_dir) as p:
        pid = _wait_there(ssh_host, runs_dir)
        subprocess.run(["kill", "-9", pid], check=True)
        out, err = p.communicate(timeout=120)
    assert p.returncode == errors.PeerDied.exit_code, err
    line = one_sentence(err)
    assert "server" in line and "SIGKILL" in line and ssh_host.destination in line, line
    assert ssh_host.wait_idle() == [] and leftovers() == before


def test_the_agent_killed_there(ssh_host, runs_dir):
    """qprof's agent (the remote qprof) killed with -9 mid-run: the run
    says it lost it there. The agent's directory (with the run's key in
    it) stays there, in that host's ledger, until `qprof clean --host`
    removes it (or the next run's agent does, when it starts); nothing
    else is left on either host."""
    before = leftovers()
    args = ["--stack", "quic", "-d", "20s", "--server", ssh_host.destination]
    with started("run", *args, "--ssh-config", str(ssh_host.ssh_config), runs_dir=runs_dir) as p:
        _wait_there(ssh_host, runs_dir)
        agent = [line.split()[0] for line in ssh_host.remote_pids() if "qprof agent" in line]
        assert len(agent) == 1, ssh_host.remote_pids()
        ledger = json.loads((remains.state_dir() / f"{agent[0]}.json").read_text())
        subprocess.run(["kill", "-9", agent[0]], check=True)
        out, err = p.communicate(timeout=120)
    assert p.returncode == errors.RemoteLost.exit_code, err
    line = one_sentence(err)
    assert "agent" in line and ssh_host.destination in line, line
    assert ssh_host.wait_idle() == []
    (scratch,) = [p for p in ledger["paths"] if "qprof-agent-" in p]  # beside it, perf's fifos
    assert Path(scratch, "server-key.pem").exists()
    r = qprof("clean", "--host", ssh_host.destination, "--ssh-config", str(ssh_host.ssh_config))
    assert r.returncode == 0, r.stderr
    for left in ledger["paths"]:
        assert f"{ssh_host.destination}: removed path {left} of qprof pid {agent[0]}" in r.stdout.splitlines()
        assert not Path(left).exists()
    assert ssh_host.wait_idle() == [] and leftovers() == before


def test_the_connection_cut(ssh_host, runs_dir):
    """The host's sshd and every session it serves killed mid-run (the
    link to the host gone): RemoteLost, and nothing left on either host."""
    before = leftovers()  # the host's own namespace, sshd and ledger
    args = ["--stack", "quic", "-d", "20s", "--server", ssh_host.destination]
    with started("run", *args, "--ssh-config", str(ssh_host.ssh_config), runs_dir=runs_dir) as p:
        _wait_there(ssh_host, runs_dir)
        subprocess.run(["ip", "netns", "exec", ssh_host.netns, "pkill", "-9", "sshd"])
        out, err = p.communicate(timeout=120)
    assert p.returncode in (errors.RemoteLost.exit_code, errors.PeerDied.exit_code), err
    line = one_sentence(err)
    assert ssh_host.destination in line, line
    assert ssh_host.wait_idle() == [] and leftovers() == before


def test_ctrl_c_here(ssh_host, runs_dir):
    """Ctrl-C here mid-run: qprof stops as it does on one machine (130),
    and the host is left with nothing running."""
    before = leftovers()  # the host's own namespace, sshd and ledger
    args = ["--stack", "quic", "-d", "20s", "--server", ssh_host.destination]
    with started("run", *args, "--ssh-config", str(ssh_host.ssh_config), runs_dir=runs_dir) as p:
        _wait_there(ssh_host, runs_dir)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert ssh_host.wait_idle() == [] and leftovers() == before


def _wait_there(host, runs_dir, timeout_s: float = 60.0) -> str:
    """The pid of the server's qprof-wl on the host, once the transfer is
    under way there (its last probe attached, the client started here)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = host.remote_pids()
        server = [l.split()[0] for l in lines if l.split()[1].endswith("qprof-wl")]
        probing = any(l.split()[1].endswith("qprof-cputhread") for l in lines)
        if server and probing and list(runs_dir.glob("*/client.log")):
            time.sleep(1.0)  # past the warm-up's start, into the transfer
            return server[0]
        time.sleep(0.1)
    raise AssertionError(f"no transfer on {host.destination} within {timeout_s:.0f} s: {host.remote_pids()}")
