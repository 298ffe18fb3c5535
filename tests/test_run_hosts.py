# SPDX-License-Identifier: GPL-2.0-only
"""`qprof run --server HOST` (issue 26) against a host made on this
machine: a namespace running Debian's sshd, reached as root@ADDR with its
own keys, known_hosts and ssh config (tests/sshhosts.py), exactly as a
real host would be. The client runs here, the server there, and each
side's workload, probes and perf run on its own host.

Both "hosts" share this machine's kernel, which gives the run's figures
something to be held to: the measured clock offset must lie within its
own uncertainty of 0, each side's probes (on its own host, for its own
process) must agree with the other instruments of that process within
what the instants of their readings allow, and the hosts are recognised
as one kernel, whose machine-wide counters count once.

Every pattern runs on a host as it does between namespaces, each held
to what the pattern promises (the local tests' invariants). The tests
that only read share one host (`host`) and one run of each
configuration (`run_there`); a test that breaks or changes a host makes
its own.

The faults a run on another host meets mid-run are provoked for real: the
server killed with -9 there, the SSH connection cut, Ctrl-C here; each
ends in its own code and one sentence, and leaves nothing on either host."""

import json
import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from qprof import errors, files, remains
from qprof.collectors import environment
from qprof.collectors.topology import TCP_CC_AVAILABLE
from qprof.describe import hosts as hosts_figures
from qprof.describe import offload

from conftest import impossible_figures, leftovers, most_at_once, needs_build, qprof, started, validate_records
from sshhosts import SshTestHost, joint_config
from test_bad_input import one_sentence
from test_rr import check_window_schedule, in_flight_at_most
from test_video import check_segments, prebuffer_bound_s

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


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """One host for the module: the tests that only run on it share it
    (each leaves it idle); those that break it make their own."""
    with SshTestHost(tmp_path_factory.mktemp("host")) as h:
        yield h
    assert leftovers() == []


@pytest.fixture
def runs_dir(tmp_path, host):
    """conftest's runs_dir, with the module's host (its namespace, veth,
    sshd and this process's ledger of them) as what is there by design."""
    d = tmp_path / "runs"
    before = leftovers()
    yield d
    assert leftovers() == before
    if d.exists():
        validate_records(d)


@pytest.fixture(scope="module")
def run_there(host, tmp_path_factory):
    """run(*args) -> (record, its measurement.json, its run directory):
    `qprof run --json --server HOST ARGS` on the module's host, run once
    for every test that asserts on it."""
    runs = tmp_path_factory.mktemp("there") / "runs"
    done = {}
    base = leftovers()  # the host itself

    def run(*args):
        if args not in done:
            rec = hosts_run(runs, host, *args)
            assert rec["status"] == "complete" and rec["verified"] is True
            assert host.wait_idle() == [] and leftovers() == base
            path = runs / rec["id"]
            done[args] = (rec, json.loads((path / "measurement.json").read_text()), path)
        return done[args]

    yield run
    assert validate_records(runs) == len(done)


# -- the instants of an edge -------------------------------------------------
#
# Each host reads its part of an edge in its own clock (describe/hosts.py):
# the edge's t_ns is ours, taken before any host was asked; a host's t_ns is
# its own, taken as it began; answered_ns is ours, when its answer came. So
# the host read its process and /proc/stat between its t_ns and answered_ns
# (in its clock: + the offset, ± the offset's uncertainty). A probe read its
# maps between its t_ns and t_ns + read_ns, a workload its counters at its
# mark's t_ns, each in its host's clock. Two instruments of one quantity
# then differ by at most what happened between their readings.


def host_read(m: dict, edge: str, role: str) -> tuple:
    """When the role's host read its part of the edge: (first, last) in
    that host's clock."""
    h = m["window"][edge]["hosts"][role]
    clock = m["hosts"][role]["clock"] or {"offset_ns": 0, "uncertainty_ns": 0}
    return h["t_ns"], h["answered_ns"] + clock["offset_ns"] + clock["uncertainty_ns"]


def apart_ns(a: tuple, b: tuple) -> int:
    """The farthest two readings could be, one in interval a, one in b."""
    return max(abs(a[1] - b[0]), abs(b[1] - a[0]))


def probe_read(rec: dict, probe: str, role: str, edge: str) -> tuple:
    e = rec["probes"][probe]["hosts"][role]["edges"][edge]
    return e["t_ns"], e["t_ns"] + e["read_ns"]


def check_edges_in_time(rec: dict, m: dict) -> None:
    """Each host read its part of each edge after we asked (our t_ns) and
    before its answer came, placed in our time by its clock's offset (the
    one kernel here: 0 ± what it claims). So its window's length is ours
    but for the edges' round trips: skew_s at most the longer one, plus
    the offset's uncertainty at each edge."""
    for role in ("client", "server"):
        clock = m["hosts"][role]["clock"] or {"offset_ns": 0, "uncertainty_ns": 0}
        u, longest = clock["uncertainty_ns"], 0
        for edge in ("start", "end"):
            ours, h = m["window"][edge]["t_ns"], m["window"][edge]["hosts"][role]
            there = h["t_ns"] - clock["offset_ns"]
            assert ours - u <= there <= h["answered_ns"] + u, (role, edge, ours, there, h["answered_ns"], u)
            longest = max(longest, h["answered_ns"] - ours)
        assert abs(rec["hosts"][role]["window_s"] - rec["cpu_window_s"]) <= (longest + 2 * u) / 1e9, (role, rec)
    assert rec["hosts"]["skew_s"] == max(
        abs(rec["hosts"][r]["window_s"] - rec["cpu_window_s"]) for r in ("client", "server")
    )


def check_oncpu(rec: dict, m: dict, role: str) -> None:
    """The side's on-CPU time by sched_switch (the cputhread probe on its
    host) against the kernel's schedstat of it (its host's edge reads):
    between on-CPU less the machine's steal and on-CPU plus the time its
    threads waited woken (schedstat's clock starts at the wake-up that
    preempts idle), each widened by what the process could run between the
    two instruments' readings at each edge (all of its host's CPUs)."""
    check = rec["cpu_threads"][role]["oncpu_check"]
    assert check["schedstat"] == rec["cpu"][role]["oncpu_schedstat_s"] > 0
    gap_ns = sum(apart_ns(probe_read(rec, "cputhread", role, e), host_read(m, e, role)) for e in ("start", "end"))
    slack_s = gap_ns / 1e9 * rec["hosts"][role]["environment"]["cpu_count"]
    steal_s = rec["cpu"]["system"]["steal_s"]
    assert check["ebpf"] - steal_s - slack_s <= check["schedstat"] <= check["ebpf_plus_runq"] + slack_s, (
        role,
        check,
        steal_s,
        slack_s,
    )


# The UDP send syscalls msquic's UDP_SEND_CALLS counts, one a call.
SEND_SYSCALLS = ("sendmsg", "sendmmsg", "sendto")


def check_send_calls(rec: dict, m: dict, role: str) -> None:
    """The side's UDP send calls by msquic's own count (its marks) lie in
    what its host's syscalls probe counted between its reads around those
    marks (the probe's bracket: least, from its read after the start
    marks to its read before the end marks; most, from before to after),
    but for a call torn at each edge (offload.EDGE_TORN_CALLS). The
    bracket holds whatever the calls' rate near an edge: a rate over the
    window spread over the reads' gap did not (CI saw 14 calls in the
    3.2 ms between a host's start read and its mark, at 1,618 a second)."""
    calls = rec["crosscheck"][role]["udp_send_calls"]
    assert calls["own"] > 0
    pid = m["pids"][role]
    bracket = rec["probes"]["syscalls"]["hosts"][role]["bracket"]
    least, most = (
        sum(t["calls"] for t in bracket[k]["threads"] if t["tgid"] == pid and t["sys"] in SEND_SYSCALLS)
        for k in ("least", "most")
    )
    assert least - offload.EDGE_TORN_CALLS <= calls["own"] <= most + offload.EDGE_TORN_CALLS, (role, calls, least, most)
    assert least <= calls["ebpf"] <= most, (role, calls, least, most)


# -- bulk ------------------------------------------------------------------

BULK = {
    "quic": ("--stack", "quic", "-d", "1s", "--warmup", "0.3s"),
    "tcp-tls": ("--stack", "tcp-tls", "-d", "1.5s", "--warmup", "0.3s", "--interval", "500ms"),
}


@pytest.mark.parametrize("stack", BULK)
def test_a_run_with_its_server_on_another_host(host, run_there, stack):
    rec, m, _ = run_there(*BULK[stack])
    assert rec["bytes"] > 0
    topo = rec["environment"]["topology"]
    assert topo["kind"] == "hosts"
    assert topo["server"]["host"] == host.destination and topo["server"]["addr"] == host.addr
    assert topo["client"]["host"] == "local" and topo["client"]["addr"] == host.local_addr

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
    check_edges_in_time(rec, m)
    # The machine counted once: its busy time is both sides' and every other task's, at most.
    busy = rec["cpu"]["system"]["total_s"]
    assert busy <= rec["cpu_window_s"] * hosts["client"]["environment"]["cpu_count"] * 1.05
    if stack == "tcp-tls":  # each interval's CPU read on each side's host
        samples = rec["intervals"]["samples"]
        assert len(samples) >= 3 and all(s["server_cpus"] > 0 and s["client_cpus"] > 0 for s in samples)


@pytest.mark.parametrize("stack", BULK)
def test_each_sides_hardware_counters_or_perfs_own_no(run_there, stack):
    """Each side's cycles and instructions from perf stat on its host; a
    host without a PMU (this VM has none) gets perf's own words for why,
    as the PMU-less path of describe/hosts.py words them."""
    rec, m, _ = run_there(*BULK[stack])
    for role in ("client", "server"):
        h = rec["hosts"][role]
        hw, why = h["hardware_counters"], h["hardware_counters_absent_reason"]
        assert h["environment"]["pmu"] == environment.pmu()  # one machine's, read on each host
        if environment.pmu() is not None:
            assert why is None and hw["cycles"] > 0 and hw["instructions"] > 0, why
            assert hw["ipc"] == hw["instructions"] / hw["cycles"]
        else:
            assert hw is None
            assert why == (
                "perf stat could not count them (cycles <not supported>; instructions <not supported>): "
                "no hardware PMU on this host (no /sys/bus/event_source/devices/cpu)"
            )
            # As perf wrote it on that side's host, kept in the measurement.
            counted = hosts_figures.parse_perf_stat(m["hosts"][role]["perf_stat"]["output"])["counts"]
            assert counted == {"cycles": None, "instructions": None}


@pytest.mark.parametrize("stack", BULK)
def test_each_sides_probes_agree_with_its_other_instruments(host, run_there, stack):
    """Both sides' probes ran, each on its host for its process, and agree
    with that process's other instruments within what the instants of
    their readings allow."""
    rec, m, _ = run_there(*BULK[stack])
    for name, probe in rec["probes"].items():
        assert probe["status"] == "present", (name, probe)
        assert set(probe["hosts"]) == {"client", "server"}
    for side in ("client", "server"):
        cpu = rec["cpu"][side]
        assert cpu["oncpu_schedstat_s"] > 0 and cpu["ns_per_byte"]["oncpu"] > 0
        check_oncpu(rec, m, side)
        assert rec["syscalls"][side]["by_syscall"], side
    if stack == "quic":
        for side in ("client", "server"):
            check_send_calls(rec, m, side)
        assert [b["to"] for b in rec["listen"]["server_binds"]] == [f"[::ffff:{host.addr}]:4433"]


@pytest.mark.parametrize("stack", BULK)
def test_flame_graphs_of_both_sides_each_from_its_host(run_there, stack):
    rec, _, run_dir = run_there(*BULK[stack])
    flame = rec["flame"]
    for side in ("client", "server"):
        assert flame["samples"][side] > 0 and flame["sides"][side]["ns_per_byte"] > 0
    for role in ("client", "server"):
        assert (run_dir / "stacks" / "hosts" / role / f"{role}.folded").stat().st_size > 0
    assert (run_dir / "stacks" / "server.folded").read_text() == (
        run_dir / "stacks" / "hosts" / "server" / "server.folded"
    ).read_text()


# -- every other pattern -----------------------------------------------------
#
# Each as tests/test_rr.py, test_download.py, test_handshakes.py and
# test_video.py hold it between namespaces: invariants that hold at any
# speed, from the record and the client's own events (measurement.json).

RR_OPEN = ("--stack", "quic", "--pattern", "rr", "--period", "5ms", "--payload", "256")
RR_CLOSED = ("--stack", "tcp-tls", "--pattern", "rr", "--rr-mode", "closed", "--conns", "2", "--streams", "3")
RR_CLOSED += ("--request", "512", "--response", "4000")
SHORT = ("-d", "0.5s", "--warmup", "0.3s", "--sample-hz", "0")


def test_requests_answered_on_schedule_on_a_host(run_there):
    """--pattern rr, open loop: one request per period of the window by the
    client's clock, every one sent and answered by the server there, each
    crossing the wire with its payload, and what each cost on each host."""
    rec, m, _ = run_there(*RR_OPEN, *SHORT)
    r = rec["rr"]
    assert (r["mode"], r["period_s"], r["payload"]) == ("open", 0.005, 256)
    edges = [m["window"][e]["client_mark"]["t_ns"] for e in ("start", "end")]
    window = check_window_schedule(r, *edges, m["reports"]["client"])
    whole = r["whole_run"]
    assert whole["outstanding"] == 0 and whole["requests_sent"] == whole["requests_due"]
    assert r["responses"] == len(window)
    d = r["delay_ns"]
    assert 0 < d["min"] <= d["p50"] <= d["p99"] <= d["max"] and d["min"] <= d["mean"] <= d["max"]
    per = r["per_request"]
    assert per["cpu_s"]["client"] > 0 and per["cpu_s"]["server"] > 0
    assert per["wire"]["client_to_server"]["bytes"] >= 256 and per["wire"]["server_to_client"]["bytes"] >= 256


def test_a_closed_loop_on_a_host(run_there):
    """--rr-mode closed: each of the conns x streams TCP connections keeps
    one request in flight and sends the next as its answer comes; every
    request answered, every connection used, and the window's round trips
    no longer in sum than its slots were open."""
    rec, m, _ = run_there(*RR_CLOSED, *SHORT)
    r = rec["rr"]
    assert (r["mode"], r["period_s"], r["requests_due"], r["late"]) == ("closed", None, None, None)
    assert r["in_flight"] == 6 and (r["request"], r["response"]) == (512, 4000) and r["connections_opened"] == 6
    events = [e for e in m["reports"]["client"] if e["event"] == "rr"]
    assert events and all(e["due_ns"] == e["sent_ns"] < e["answered_ns"] for e in events)
    assert len({e["seq"] for e in events}) == len(events)
    assert in_flight_at_most(events, 1) == 1
    whole = r["whole_run"]
    assert whole["outstanding"] == 0 and whole["requests_due"] == whole["requests_sent"] == whole["responses"]
    assert whole["responses"] == len(events)
    per = r["connections"]
    assert len(per["responses"]) == 6 and min(per["responses"]) > 0 and sum(per["responses"]) == r["responses"]
    start, end = (m["window"][e]["client_mark"]["t_ns"] for e in ("start", "end"))
    seconds = (end - start) / 1e9
    assert r["requests_per_s"] == pytest.approx(r["responses"] / seconds)
    d = r["delay_ns"]
    assert r["responses"] * d["mean"] <= r["in_flight"] * (seconds * 1e9 + d["max"])
    assert r["per_request"]["cpu_s"]["client"] > 0 and r["per_request"]["cpu_s"]["server"] > 0


def test_downloads_from_a_host(run_there):
    """--pattern download: a new QUIC connection per download from the
    server there, every byte checked here, each one's times in order and
    its data on the wire server to client."""
    size, count = 200 * 1024, 3
    rec, m, _ = run_there(
        "--stack", "quic", "--pattern", "download", "--size", "200K", "--count", "3", "--sample-hz", "0"
    )
    d = rec["downloads"]
    assert (d["size"], d["count"], d["served"]) == (size, count, count)
    assert rec["bytes"] == rec["bytes_total"] == size * count
    assert [e["i"] for e in d["each"]] == list(range(count))
    for e in d["each"]:
        assert e["bytes"] == size and e["tcp_handshake_s"] is None and e["resumed"] in (None, False)
        assert 0 < e["handshake_s"] <= e["first_byte_s"] <= e["complete_s"], e
        assert e["client"]["packets_received"] >= size / 1500, e
    for name, p in d["percentiles"].items():
        if p is None:
            assert name == "tcp_handshake_s"
            continue
        vals = [p[f"p{q}"] for q in (5, 25, 50, 75, 95)]
        each = [e[name] for e in d["each"]]
        assert vals == sorted(vals) and min(each) <= vals[0] and vals[-1] <= max(each)
    wire = d["wire_per_download"]
    assert wire["server_to_client"]["bytes"] > size > wire["client_to_server"]["bytes"]
    cpu = d["cpu_per_download_s"]
    assert cpu["client"] > 0 and cpu["server"] > 0 and cpu["all"] >= cpu["client"] + cpu["server"]


def test_handshakes_with_a_host(run_there):
    """--pattern handshakes: new TLS connections to the server there, at
    most --conns at once, each a handshake and a checked 8-byte answer; the
    server's count of them is the client's, each time in its order."""
    conns = 3
    rec, m, _ = run_there("--stack", "tcp-tls", "--pattern", "handshakes", "--conns", str(conns), *SHORT)
    h = rec["handshakes"]
    n = h["handshakes"]
    assert (h["conns"], h["resume"]) == (conns, False) and n > 0
    whole = h["whole_run"]
    assert whole["handshakes"] == whole["connections_opened"] >= n
    assert abs(h["counted"]["client"] - n) <= 2 * conns, (h["counted"], n)
    assert m["done"]["server"]["handshakes"] == whole["handshakes"]
    events = [e for e in m["reports"]["client"] if e["event"] == "handshake"]
    assert len(events) == whole["handshakes"] and len({e["i"] for e in events}) == len(events)
    most = most_at_once([(e["t_connect_ns"], e["t_connect_ns"] + e["complete_ns"]) for e in events])
    assert 1 <= most <= conns
    for e in events:
        assert 0 < e["tcp_handshake_ns"] <= e["handshake_ns"] <= e["complete_ns"] and e["bytes"] == 8, e
    start, end = (m["window"][x]["client_mark"]["t_ns"] for x in ("start", "end"))
    assert h["per_s"] == pytest.approx(n / ((end - start) / 1e9))
    assert h["resumed"] == 0 and h["early_data"] == 0
    cpu = h["per_handshake"]["cpu_s"]
    assert cpu["client"] > 0 and cpu["server"] > 0 and cpu["machine"] >= max(cpu["client"], cpu["server"])


def _root_qdisc(dev: str, netns=None) -> str:
    ns = ["-n", netns] if netns else []
    r = subprocess.run(["tc", *ns, "-j", "qdisc", "show", "dev", dev], capture_output=True, text=True, check=True)
    return next((q["kind"] for q in json.loads(r.stdout) if q.get("root")), "none")


def test_video_from_a_host_over_a_link_on_named_devices(host, runs_dir):
    """--pattern video from the server there, through a 20 Mbit/s link
    that --link-dev puts on one device of each host: the player never
    stalls (each 2 s segment of 2.5 Mbit/s comes in a quarter of a
    second), no segment came faster than the link, the startup is at
    least the prebuffer's bytes at its rate; both directions' qdiscs
    counted the run, and each device has its own root qdisc back."""
    here, there = host.links
    before = {"here": _root_qdisc(here), "there": _root_qdisc(there, host.netns)}
    rec = hosts_run(
        runs_dir, host, "--stack", "quic", "--pattern", "video", "--bitrate", "2.5mbit", "--duration", "4s",
        "--prebuffer", "2s", "--sample-hz", "0", "--link", "rate=20mbit",
        "--link-dev", f"local:{here},{host.destination}:{there}",
    )  # fmt: skip
    v = check_segments(rec)
    assert v["stalls"] == 0 and v["stall_s"] == 0
    assert v["startup_delay_s"] >= prebuffer_bound_s(v, 20e6)
    # tbf lets a burst through on top of its rate, once per segment at most.
    burst = rec["link"]["plan"]["tbf_burst_bytes"]
    assert v["segment_rate_bit"]["max"] <= 20e6 * (1 + burst / v["segment_bytes"]), (v, burst)
    directions = rec["link"]["directions"]
    assert [d["applied"]["kinds"] for d in directions.values()] == [["tbf"], ["tbf"]]  # read back there and here
    assert all(d["window"]["tbf"]["bytes"] > 0 for d in directions.values()), directions
    assert directions["server_to_client"]["window"]["tbf"]["bytes"] >= v["segment_bytes"]
    assert {"here": _root_qdisc(here), "there": _root_qdisc(there, host.netns)} == before
    assert host.wait_idle() == []


def test_a_round_trip_needs_netem_on_a_side(host, runs_dir):
    """A round trip between hosts goes on whichever side's kernel has
    netem; where neither has (both hosts are this kernel, which has no
    sch_netem), the run is refused in one sentence with the kernel-feature
    code, naming each side's lack, before anything runs there, and each
    device keeps its own qdisc."""
    here, there = host.links
    before = {"here": _root_qdisc(here), "there": _root_qdisc(there, host.netns)}
    r = qprof(
        "run", "--stack", "tcp", "-d", "1s", "--server", host.destination, "--ssh-config", str(host.ssh_config),
        "--link", "rtt=20ms", "--link-dev", f"local:{here},{host.destination}:{there}", runs_dir=runs_dir,
    )  # fmt: skip
    assert r.returncode == errors.LinkUnsupported.exit_code, r.stderr
    line = one_sentence(r.stderr)
    assert "no side's kernel has sch_netem" in line and "modprobe sch_netem" in line, line
    assert "this machine: " in line and f"{host.destination}: " in line, line
    assert {"here": _root_qdisc(here), "there": _root_qdisc(there, host.netns)} == before
    assert host.wait_idle() == []


# -- two hosts, compare, refusals ---------------------------------------------


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
        "run", "--json", "--stack", stack, "-d", "1s", "--warmup", "0.3s",
        "--server", server.alias, "--client", client.alias, "--server-addr", server_addr,
        "--ssh-config", str(config), runs_dir=runs_dir, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    m = json.loads((runs_dir / rec["id"] / "measurement.json").read_text())
    assert impossible_figures(rec) == [] and rec["verified"] is True and rec["bytes"] > 0
    topo, hosts = rec["environment"]["topology"], rec["hosts"]
    assert (topo["server"]["host"], topo["server"]["addr"]) == (server.alias, server_addr)
    assert (topo["client"]["host"], topo["client"]["addr"]) == (client.alias, client_addr)
    for role in ("client", "server"):
        assert topo[role]["tcp_congestion_control"] in Path(TCP_CC_AVAILABLE).read_text().split()  # read there
        clock = hosts[role]["clock"]
        assert clock is not None and abs(clock["offset_ns"]) <= clock["uncertainty_ns"]  # one kernel here
        assert rec["cpu"][role]["oncpu_schedstat_s"] > 0 and rec["flame"]["samples"][role] > 0
        check_oncpu(rec, m, role)
    check_edges_in_time(rec, m)
    for name, probe in rec["probes"].items():
        assert probe["status"] == "present", (name, probe)
    # The data went over their own link: its veths counted it, in each host.
    devices = {d["role"]: d for d in rec["probes"]["packets"]["window"]["devices"]}
    assert (
        devices["client"]["dev"] == f"{topo['client']['ifname']}@host" and topo["client"]["ifname"] != client.links[1]
    )
    assert devices["client"]["tx"]["wire_packets"] > 0 and devices["server"]["tx"]["wire_packets"] > 0
    assert server.wait_idle() == [] and client.wait_idle() == []


def test_compare_and_the_history_take_runs_on_hosts(host, runs_dir, tmp_path):
    """compare runs each configuration with its server there, and the
    history, export and the report read those runs as any other."""
    there = ["--server", host.destination, "--ssh-config", str(host.ssh_config)]
    r = qprof(
        "compare", "--json", "--stack", "tcp", "--vary", "streams=1,2", "--repeat", "1", "-d", "0.5s",
        "--warmup", "0.3s", *there, runs_dir=runs_dir, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    comp = json.loads(r.stdout)
    assert len(comp["runs"]) == 2
    for run in comp["runs"]:
        rec = files.load(runs_dir, run["id"])
        assert rec["hosts"]["server"]["host"] == host.destination and rec["verified"] is True
    listed = qprof("ls", runs_dir=runs_dir)
    assert listed.returncode == 0 and listed.stdout.count(f"server on {host.destination}") == 2, listed.stdout
    exported = qprof("export", comp["runs"][0]["id"], "--format", "openmetrics", runs_dir=runs_dir)
    assert exported.returncode == 0 and "qprof_cpu_nanoseconds_per_byte" in exported.stdout, exported.stderr
    report = qprof("report", comp["runs"][1]["id"], "--output", str(tmp_path / "r.html"), runs_dir=runs_dir)
    assert report.returncode == 0 and (tmp_path / "r.html").stat().st_size > 0, report.stderr
    assert host.wait_idle() == []


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


# -- mid-run faults: each on a host of its own --------------------------------


# present/tables.py interval_text: "[  0.00-  0.25 s] ...", one an interval.
INTERVAL_LINE = re.compile(r"\[ *\d+\.\d\d- *\d+\.\d\d s\] ")


class Watched:
    """A `qprof run` started by conftest.started, its stdout read as it
    comes (the live interval lines): under_way() waits for the first."""

    def __init__(self, p: subprocess.Popen):
        self.p, self.lines = p, queue.Queue()
        self.out: list = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.out.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def under_way(self, host, timeout_s: float = 60.0) -> str:
        """Once the window has run an interval (its line printed, so the
        transfer there is under way and measured): the pid of the server's
        qprof-wl on the host."""
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no interval within {timeout_s:.0f} s; on {host.destination}: {host.remote_pids()}")
        assert line is not None, f"the run ended before its first interval: {self.p.stderr.read()}"
        assert INTERVAL_LINE.match(line), f"not an interval's line (the run's end?): {line!r}"
        (server,) = [l.split()[0] for l in host.remote_pids() if l.split()[1].endswith("qprof-wl")]
        return server

    def ended(self, timeout_s: float = 120.0) -> tuple:
        """(exit code, stderr) once it ends."""
        err = self.p.stderr.read()
        self.p.wait(timeout=timeout_s)
        self.reader.join(timeout=timeout_s)
        return self.p.returncode, err


def _faulted_run(host, runs_dir, *extra, stack="tcp"):
    """A run long enough to be cut short, its live lines every 250 ms. tcp
    where the stack does not matter: a QUIC server there whose client has
    gone waits out its idle timeout (10 s) before it exits."""
    args = ["--stack", stack, "-d", "20s", "--interval", "250ms", "--server", host.destination, *extra]
    return started("run", *args, "--ssh-config", str(host.ssh_config), runs_dir=runs_dir)


def test_the_server_killed_there(ssh_host, runs_dir):
    """qprof-wl killed with -9 on the server's host mid-run: the run says
    the server died there, and nothing is left on either host."""
    before = leftovers()  # the host's own namespace, sshd and ledger
    with _faulted_run(ssh_host, runs_dir, stack="quic") as p:
        run = Watched(p)
        subprocess.run(["kill", "-9", run.under_way(ssh_host)], check=True)
        code, err = run.ended()
    assert code == errors.PeerDied.exit_code, err
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
    with _faulted_run(ssh_host, runs_dir) as p:
        run = Watched(p)
        run.under_way(ssh_host)
        agent = [line.split()[0] for line in ssh_host.remote_pids() if "qprof agent" in line]
        assert len(agent) == 1, ssh_host.remote_pids()
        ledger = json.loads((remains.state_dir() / f"{agent[0]}.json").read_text())
        subprocess.run(["kill", "-9", agent[0]], check=True)
        code, err = run.ended()
    assert code == errors.RemoteLost.exit_code, err
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
    link to the host gone): RemoteLost (58), whichever side notices first
    (the client here ends too, its peer gone), and nothing left on either
    host."""
    before = leftovers()  # the host's own namespace, sshd and ledger
    with _faulted_run(ssh_host, runs_dir) as p:
        run = Watched(p)
        run.under_way(ssh_host)
        killed = ssh_host.kill_sshd()
        code, err = run.ended()
    assert code == errors.RemoteLost.exit_code, err
    line = one_sentence(err)
    assert f"on {ssh_host.destination} (" in line and "check the host and the network to it" in line, line
    assert killed in before
    assert ssh_host.wait_idle() == [] and leftovers() == [l for l in before if l != killed]


def test_ctrl_c_here(ssh_host, runs_dir):
    """Ctrl-C here mid-run: qprof stops as it does on one machine (130),
    and the host is left with nothing running."""
    before = leftovers()  # the host's own namespace, sshd and ledger
    with _faulted_run(ssh_host, runs_dir) as p:
        run = Watched(p)
        run.under_way(ssh_host)
        p.send_signal(signal.SIGINT)
        code, err = run.ended()
    assert code == 130, err
    assert ssh_host.wait_idle() == [] and leftovers() == before


def test_a_link_left_by_a_killed_qprof_is_taken_off(ssh_host, runs_dir):
    """qprof killed with -9 mid-run, its link on both hosts' devices: the
    agent there takes its side off as its connection ends; this side's is
    in this machine's ledger, and `qprof clean` takes it off."""
    here, there = ssh_host.links
    before = {"here": _root_qdisc(here), "there": _root_qdisc(there, ssh_host.netns)}
    link = ["--link", "rate=200mbit", "--link-dev", f"local:{here},{ssh_host.destination}:{there}"]
    mine = leftovers()  # the hosts', this test's and the module's
    with _faulted_run(ssh_host, runs_dir, *link) as p:
        run = Watched(p)
        run.under_way(ssh_host)
        assert _root_qdisc(here) == "tbf" and _root_qdisc(there, ssh_host.netns) == "tbf"
        p.kill()
        run.ended()
        # Its children die with it (PR_SET_PDEATHSIG), and are reaped on the init's time.
        deadline = time.monotonic() + 10
        while [x for x in leftovers() if x.startswith("process") and x not in mine] and time.monotonic() < deadline:
            time.sleep(0.1)
    assert ssh_host.wait_idle() == []
    assert _root_qdisc(there, ssh_host.netns) == before["there"]  # the agent's doing, at EOF
    assert _root_qdisc(here) == "tbf"
    r = qprof("clean")
    assert r.returncode == 0 and f"the link (root qdisc) on {here}" in r.stdout, r.stdout
    assert _root_qdisc(here) == before["here"]
