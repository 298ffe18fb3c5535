# SPDX-License-Identifier: GPL-2.0-only
"""A run on two hosts, the parts that need no machine: a NIC's readings
(ethtool -S, /proc/interrupts, /proc/softirqs) parsed and turned into the
window's figures, each host's probe windows merged, the clocks' offset
from round trips, a side's hardware counters from perf stat's output, a
lost host as the run's error, and a --link where one side has no netem."""

from pathlib import Path

import pytest

from qprof import errors
from qprof.collectors import emulation, workload
from qprof.collectors.probes import HostProbes, merge_windows
from qprof.collectors.ssh import best_offset
from qprof.collectors.workload import WorkloadExit, WorkloadProcess
from qprof.describe import hosts, link, nic

pytestmark = pytest.mark.unit

INTERRUPTS = """\
           CPU0       CPU1
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 38:          0     142458 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0
 39:      94024          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0
 40:          3          0 PCI-MSIX-0000:00:04.0   0-edge      virtio12-config
 51:          5          6 PCI-MSIX-0000:3b:00.0  4-edge      mlx5_comp0@pci:0000:3b:00.0
NMI:          0          0   Non-maskable interrupts
LOC:    1234567    1234568   Local timer interrupts
"""


def test_a_nics_interrupts_are_its_queues_lines_only():
    got = nic.parse_interrupts(INTERRUPTS, ["eth0", "virtio2"])
    assert got == {"virtio2-input.0": [0, 142458], "virtio2-output.0": [94024, 0]}  # not virtio12, not LOC
    assert nic.parse_interrupts(INTERRUPTS, ["0000:3b:00.0"]) == {"mlx5_comp0@pci:0000:3b:00.0": [5, 6]}
    assert nic.parse_interrupts(INTERRUPTS, ["veth0"]) == {}


def test_ethtool_and_softirqs_parse():
    text = "NIC statistics:\n     rx_drops: 0\n     tx_kicks: 94293\n     rx_queue_0_packets: 12\n"
    assert nic.parse_ethtool_stats(text) == {"rx_drops": 0, "tx_kicks": 94293, "rx_queue_0_packets": 12}
    soft = "                    CPU0       CPU1\n      NET_TX:    4472429    4639698\n      NET_RX:  3625  3723\n"
    soft += "       TIMER:    1226319    1420725\n"
    assert nic.parse_softirqs(soft) == {"NET_TX": [4472429, 4639698], "NET_RX": [3625, 3723]}


def test_the_windows_nic_figures():
    start = {
        "device": "eth0",
        "ethtool": {"tx_kicks": 10, "rx_drops": 1},
        "interrupts": {"virtio2-input.0": [0, 100], "virtio2-output.0": [50, 0]},
        "softirqs": {"NET_RX": [5, 5], "NET_TX": [1, 1]},
        "drops": {"rx_dropped": 2, "tx_dropped": 0},
        "qdisc": {"drops": 0, "overlimits": 0, "requeues": 1},
        "absent_reason": {},
    }
    end = {
        **start,
        "ethtool": {"tx_kicks": 30, "rx_drops": 1},
        "interrupts": {"virtio2-input.0": [0, 400], "virtio2-output.0": [150, 0]},
        "softirqs": {"NET_RX": [5, 9], "NET_TX": [3, 1]},
        "drops": {"rx_dropped": 5, "tx_dropped": 0},
    }
    f = nic.figures(start, end, 2_000_000)
    assert f["ethtool_stats"] == {"tx_kicks": 20}  # what moved only
    irq = f["interrupts"]
    assert irq["total"] == 400 and irq["per_mb"] == 200.0
    assert irq["by_cpu"] == {"0": 100, "1": 300}
    assert irq["by_queue"] == {"virtio2-input.0": 300, "virtio2-output.0": 100}
    assert f["softirqs_by_cpu"] == {"NET_RX": {"1": 4}, "NET_TX": {"0": 2}}
    assert f["drops"]["device"] == {"rx_dropped": 3, "tx_dropped": 0}
    assert f["drops"]["qdisc"] == {"drops": 0, "overlimits": 0, "requeues": 0}
    # A virtual device has no interrupt line: zero interrupts, and the reason why.
    virtual = nic.figures({**start, "interrupts": {}}, {**end, "interrupts": {}}, 1)
    assert virtual["interrupts"]["total"] == 0 and "interrupts" in virtual["absent_reason"]
    # ethtool unreadable: absent, not zero.
    none = nic.figures({**start, "ethtool": None}, end, 1)
    assert none["ethtool_stats"] is None


def test_each_hosts_probe_window_merged():
    client = {
        "threads": [{"tgid": 7, "tid": 7, "oncpu_ns": 5}],
        "softirq": [{"vec": "NET_RX", "count": 3, "time_ns": 30, "in_target_ns": {"7": 4}}],
        "hardirq_ns": 2,
        "bpf_stats_on_ns": 100,
        "progs": [{"name": "sys_exit", "run_time_ns": 10, "run_cnt": 2}],
    }
    server = {
        "threads": [{"tgid": 9, "tid": 9, "oncpu_ns": 6}],
        "softirq": [{"vec": "NET_RX", "count": 1, "time_ns": 10, "in_target_ns": {"9": 2}}],
        "hardirq_ns": 3,
        "bpf_stats_on_ns": 90,
        "progs": [{"name": "sys_exit", "run_time_ns": 20, "run_cnt": 4}],
    }
    two = merge_windows({"client": client, "server": server}, same_kernel=False)
    assert [(t["tgid"], t["role"]) for t in two["threads"]] == [(7, "client"), (9, "server")]
    assert [(p["name"], p["role"], p["run_time_ns"]) for p in two["progs"]] == [
        ("sys_exit", "client", 10),
        ("sys_exit", "server", 20),
    ]
    assert two["softirq"] == [{"vec": "NET_RX", "count": 4, "time_ns": 40, "in_target_ns": {"7": 4, "9": 2}}]
    assert two["hardirq_ns"] == 5 and two["bpf_stats_on_ns"] == 100  # a count summed; a clock's span not
    # One kernel: each host's probe saw the whole machine's softirqs; counted once.
    one = merge_windows({"client": client, "server": server}, same_kernel=True)
    assert one["softirq"] == client["softirq"] and one["hardirq_ns"] == 2


def test_what_a_tool_did_holds_for_the_run_only_where_every_host_did_it():
    """A syscalls probe that counted datagrams on one host and could not
    on the other (a kernel without bpf_loop): the run's record says not
    counted, and each host's says its own."""

    class Set:
        def __init__(self, datagrams):
            self.rec = {"status": "present", "call_time": False, "datagrams": datagrams, "window": {"threads": []}}

        def records(self):
            return {"syscalls": self.rec}

    rec = HostProbes({"client": Set(True), "server": Set(False)}, same_kernel=False).records()["syscalls"]
    assert rec["datagrams"] is False and rec["call_time"] is False
    assert rec["hosts"]["client"]["datagrams"] is True and rec["hosts"]["server"]["datagrams"] is False
    both = HostProbes({"client": Set(True), "server": Set(True)}, same_kernel=False).records()["syscalls"]
    assert both["datagrams"] is True


def test_the_clock_offset_is_the_shortest_round_trips():
    # (send, remote reading, receive): the remote clock runs 1000 ns ahead.
    samples = [(0, 1200, 400), (1000, 2100, 1200), (5000, 6300, 5600)]
    off = best_offset(samples)
    assert (off.offset_ns, off.uncertainty_ns, off.rtt_ns, off.rounds) == (1000, 100, 200, 3)


def test_hardware_counters_per_byte_or_perfs_own_words():
    counted = (
        "# started on Tue Nov 24 15:36:19 2026\n\n3000000,,cycles,1000,100.00,,\n4500000,,instructions,1000,100.00,,\n"
    )
    got, why = hosts.hardware_figures({"output": counted}, {"pmu": "cpu"}, 1_000_000)
    assert why is None
    assert (got["cycles_per_byte"], got["instructions_per_byte"], got["ipc"]) == (3.0, 4.5, 1.5)
    none = "<not supported>,,cycles,0,100.00,,\n<not supported>,,instructions,0,100.00,,\n"
    got, why = hosts.hardware_figures({"output": none}, {"pmu": None}, 1_000_000)
    assert got is None and "cycles <not supported>" in why and "no hardware PMU" in why
    got, why = hosts.hardware_figures({"output": ""}, {"pmu": "cpu"}, 1)
    assert got is None and "not in perf stat's output" in why
    assert hosts.hardware_figures(None, {}, 1) == (None, "not measured: this side's perf stat did not run")


PERF_STAT = Path(__file__).parent / "data" / "perf-stat"


def test_hardware_counters_from_stored_perf_stat_output():
    """perf stat's own output (tests/data/perf-stat): counted where the
    host has a PMU, perf's "<not supported>" where it has none (as this
    VM's perf wrote it), each to its figures or its reason."""
    got, why = hosts.hardware_figures({"output": (PERF_STAT / "counted.csv").read_text()}, {"pmu": "cpu"}, 10**9)
    assert why is None
    assert (got["cycles"], got["instructions"]) == (2871553012, 4137392211)
    assert got["cycles_per_byte"] == 2.871553012 and got["instructions_per_byte"] == 4.137392211
    assert got["ipc"] == pytest.approx(1.44, abs=0.005)  # perf's own metric column
    got, why = hosts.hardware_figures({"output": (PERF_STAT / "no-pmu.csv").read_text()}, {"pmu": None}, 10**9)
    assert got is None and why == (
        "perf stat could not count them (cycles <not supported>; instructions <not supported>): "
        "no hardware PMU on this host (no /sys/bus/event_source/devices/cpu)"
    )


class _Ended:
    """A process's end as Popen gives it: code, or None while it runs."""

    def __init__(self, code, running=False):
        self.code, self.running = code, running

    def poll(self):
        return None if self.running else self.code

    def wait(self, timeout=None):
        return self.code


class _Host:
    def __init__(self, alive: bool):
        self.name, self._alive = "root@h", alive

    def alive(self) -> bool:
        return self._alive

    def lost(self, what: str, detail: str = "") -> errors.RemoteLost:
        return errors.RemoteLost(f"lost {what} on {self.name} ({detail}); check the host and the network to it.")


def _side(role, proc, host, tmp_path) -> WorkloadProcess:
    """A WorkloadProcess as it is once its process has ended (none started)."""
    p = WorkloadProcess.__new__(WorkloadProcess)
    p.role, p.proc, p.host, p.done, p.peer = role, proc, host, None, None
    p.log_path = tmp_path / f"{role}.log"
    p.log_path.write_text(f"qprof-wl: the {role}'s connection ended\n")
    return p


@pytest.mark.parametrize("server_gone", [True, False], ids=["ssh exited", "ssh not yet"])
def test_a_client_here_ended_by_its_servers_lost_host_is_a_lost_host(tmp_path, monkeypatch, server_gone):
    """The connection to the server's host cut: the server there ends and
    the client here ends with a lost connection, which may be seen first;
    the run's error is the lost host (RemoteLost, 58), not a peer that
    died (9), whether ssh there has exited yet or not."""
    monkeypatch.setattr(workload, "PEER_GRACE_S", 0.05)
    client = _side("client", _Ended(WorkloadExit.CONN_LOST), None, tmp_path)
    server = _side("server", _Ended(workload.SSH_FAILED, running=not server_gone), _Host(alive=False), tmp_path)
    client.peer, server.peer = server, client
    with pytest.raises(errors.RemoteLost) as e:
        client.raise_exit()
    assert e.value.exit_code == 58 and "lost the server on root@h" in e.value.sentence


def test_a_client_here_ended_beside_a_live_host_is_its_own_end(tmp_path, monkeypatch):
    monkeypatch.setattr(workload, "PEER_GRACE_S", 0.05)
    client = _side("client", _Ended(WorkloadExit.CONN_LOST), None, tmp_path)
    server = _side("server", _Ended(None, running=True), _Host(alive=True), tmp_path)
    client.peer, server.peer = server, client
    with pytest.raises(errors.PeerDied) as e:
        client.raise_exit()
    assert "the client ended mid-run (exit 7" in e.value.sentence


class _Device:
    """A device on a host whose kernel has netem or not: `tc` there as
    collectors/emulation.py runs it (through the endpoint's command), each
    call kept."""

    netns = None

    def __init__(self, ifname, host, netem: bool):
        self.ifname, self.host, self.netem, self.calls = ifname, host, netem, []

    def command(self, argv):
        self.calls.append(argv[1:])
        if "netem" in argv and not self.netem:
            return ["sh", "-c", "echo 'Error: Specified qdisc kind is unknown.' >&2; exit 2"]
        return ["echo", "[]"] if "-j" in argv else ["true"]


def test_a_round_trip_goes_on_the_side_whose_kernel_has_netem():
    """On hosts one side's kernel may lack netem: the whole RTT goes on the
    other side's egress (a round trip crosses both), the side without it
    keeps the rate, and the record says so; loss and jitter, each
    direction's own, and a link where no side has netem are refused with
    the kernel-feature code, naming who lacks it."""
    here, there = _Device("tap0", None, netem=False), _Device("eth0", _Host(alive=True), netem=True)
    got = emulation.apply(link.parse("rtt=40ms,rate=10mbit"), {"client": here, "server": there}, 1500)
    plans = got.applied["plans"]
    assert (plans["server"]["delay_s"], plans["client"]["delay_s"]) == (0.04, 0.0)
    assert plans["client"]["netem_limit"] is None and plans["client"]["rate_bit"] == plans["server"]["rate_bit"]
    assert (
        got.applied["one_sided"]["netem_on"] == "server" and "tap0 (this machine)" in got.applied["one_sided"]["reason"]
    )
    built = [c for c in there.calls if c[0] == "qdisc" and c[1] == "add"]
    assert [c[c.index("handle") + 2] for c in built[-2:]] == ["tbf", "netem"] and "40000us" in built[-1]
    assert [c[c.index("handle") + 2] for c in here.calls if c[:2] == ["qdisc", "add"]][-1] == "tbf"
    rec = link.describe("rtt=40ms,rate=10mbit", link.parse("rtt=40ms,rate=10mbit"), got.applied, {})
    assert rec["one_sided"] == got.applied["one_sided"]
    assert rec["directions"]["server_to_client"]["plan"]["delay_s"] == 0.04
    for spec in ("rtt=40ms,loss=1%,rate=10mbit", "rtt=40ms,jitter=5ms,rate=10mbit"):
        with pytest.raises(errors.LinkUnsupported) as e:
            emulation.apply(link.parse(spec), {"client": here, "server": there}, 1500)
        assert e.value.exit_code == 30 and "the client's kernel (this machine) has no sch_netem" in e.value.sentence
    neither = _Device("eth0", _Host(alive=True), netem=False)
    with pytest.raises(errors.LinkUnsupported) as e:
        emulation.apply(link.parse("rtt=40ms"), {"client": here, "server": neither}, 1500)
    assert "no side's kernel has sch_netem" in e.value.sentence and "root@h: " in e.value.sentence


@pytest.mark.parametrize(
    "rates, saturated, steady, intervals",
    [
        ([0.2, 0.5, 0.95], True, False, 3),  # a flow that fills the link
        ([0.2, 0.5, 0.70, 0.71, 0.72], False, True, 5),  # one that settles under it
        ([0.2, 0.4, 0.6, 0.8, 0.83, 0.84], False, True, 6),  # climbing, then settled within 5%
        ([0.3, 0.6, 0.3, 0.6, 0.3, 0.6], False, False, 6),  # neither: the cap
    ],
)
def test_a_bulk_window_waits_for_a_full_or_a_settled_link(monkeypatch, rates, saturated, steady, intervals):
    """wait_saturated opens the window at the first interval at 90% of the
    rate, or once three intervals in a row agree within 5% (the flow will
    not fill the link), or at the cap; and says which."""
    clock = [0.0]
    lk = link.parse("rate=100mbit")
    interval = link.SATURATION_INTERVAL_S
    sent = iter([0] + [int(sum(rates[: i + 1]) * lk.rate_bit / 8 * interval) for i in range(len(rates))])

    def sleep(s):
        clock[0] += s

    monkeypatch.setattr(emulation, "SATURATION_CAP_S", len(rates) * interval)
    got = emulation.wait_saturated(None, lk, sleep, root_bytes=lambda ep: next(sent), clock=lambda: clock[0])
    assert (got["saturated"], got["steady"]) == (saturated, steady)
    assert got["waited_s"] == pytest.approx(intervals * interval)
    assert got["utilisation"] == pytest.approx(rates[intervals - 1], rel=1e-6)
