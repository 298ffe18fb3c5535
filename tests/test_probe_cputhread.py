# SPDX-License-Identifier: GPL-2.0-only
"""qprof-cputhread on real msquic transfers on loopback and on a busy loop:
against the kernel's own per-thread figures (schedstat's on-CPU ns and the
context-switch counts in /proc/PID/task/TID/status, read at the same
moments as the probe's marks) and against its bpftrace twin.

What the kernel's figure is worth here. schedstat's on-CPU time is in
ns, but a slice's edges are the runqueue clock's last update, and a
wakeup that asks for a reschedule skips the next update (wakeup_preempt
-> rq_clock_skip_update): the woken task is charged from its wakeup, not
from its switch-in, and whatever ran meanwhile (idle, the thread it
preempts) is not. On this VM a wakeup takes microseconds to turn into a
switch, and msquic's server threads wake each other thousands of times a
second: schedstat moves tens of percent between them, and 1-4% onto the
server process (from idle and from the client), against the switches
the probe times (the bpftrace twin, timing the same switches, agrees
with the probe). A thread gains at most its wakeup-to-run latency, which
the probe measures (runq_ns), so the comparison allows that on top of
the 2%. The other way, this kernel's task clock leaves out time the
hypervisor took the vCPU away (CONFIG_PARAVIRT_TIME_ACCOUNTING: steal),
which the probe's wall-clock slices include; /proc/stat's steal over the
window bounds that.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from qprof.collectors.controlled import ControlledProcess
from qprof.collectors.endpoints import make_certificate
from qprof.collectors.topology import Endpoint
from qprof.collectors.workload import WorkloadProcess

from conftest import REPO, free_port, needs_build
from twin import bpftrace_twin

PROBE = REPO / "build" / "bin" / "qprof-cputhread"
WORKLOAD = REPO / "build" / "bin" / "qprof-wl"
TWIN = REPO / "probes" / "cputhread.bt"
VECTORS = ["HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"]
NCPU = os.cpu_count()
START_TIMEOUT_S = 10
FINISH_TIMEOUT_S = 30
EXIT_NO_PROCESS, EXIT_USAGE = 2, 64

pytestmark = [
    pytest.mark.system,
    needs_build,
    pytest.mark.skipif(not PROBE.exists(), reason="qprof-cputhread is not built; `make probes` builds it"),
]


def our_children():
    ps = subprocess.run(["ps", "-eo", "ppid=,args="], capture_output=True, text=True).stdout
    return [
        line.strip()
        for line in ps.splitlines()
        if int(line.split()[0]) == os.getpid() and any(n in line for n in ("qprof-", "bpftrace", "python"))
    ]


@pytest.fixture
def scratch():
    """A directory for certificates and logs, gone after the test; no
    process of the test's outlives it."""
    with tempfile.TemporaryDirectory(prefix="qp-cputhread-") as d:
        yield Path(d)
    assert our_children() == []


def kernel_threads(pid: int) -> dict:
    """tid -> the kernel's figures for each live thread of pid."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            oncpu = int((task / "schedstat").read_text().split()[0])
            status = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines())
        except (FileNotFoundError, ProcessLookupError):
            continue  # it exited between the listing and the read
        out[int(task.name)] = {
            "oncpu_ns": oncpu,
            "switches": int(status["voluntary_ctxt_switches"]) + int(status["nonvoluntary_ctxt_switches"]),
            "involuntary": int(status["nonvoluntary_ctxt_switches"]),
        }
    return out


@contextmanager
def cputhread(pids, scratch: Path, *options):
    """qprof-cputhread --control on pids, attached when this yields. On a
    clean way out it must leave on "exit" with status 0 and a silent stderr."""
    log = scratch / "probe.log"
    argv = [str(PROBE), "-p", ",".join(map(str, pids)), "--control", *options]
    with ControlledProcess("cputhread probe", argv, log) as probe:
        probe.wait_event("ready", START_TIMEOUT_S)
        yield probe
        probe.send("exit")
        assert probe.proc.wait(timeout=5) == 0
    assert log.read_text() == ""


TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def steal_ns() -> int:
    """The machine's steal time so far (/proc/stat, all CPUs), in whole
    clock ticks: the kernel sums its CPUs' ns, then truncates."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[8]) * TICK_NS


def most_steal(before: dict, after: dict) -> int:
    """The most the machine's steal can have been between two reads of
    edge(): their difference, plus the tick one read's truncation hides."""
    return after["steal_ns"] - before["steal_ns"] + TICK_NS


def edge(probe, pids, name):
    """A mark, with the kernel's figures read just before and just after
    it: the kernel's value at the mark lies between the two."""
    before = {p: kernel_threads(p) for p in pids}
    before["steal_ns"] = steal_ns()
    mark = probe.mark(name, timeout_s=10)
    after = {p: kernel_threads(p) for p in pids}
    after["steal_ns"] = steal_ns()
    return mark, before, after


@contextmanager
def loopback_pair(scratch: Path):
    """An msquic server and a client that connects on "start", both on
    127.0.0.1 and both answering marks until told to exit."""
    cert, key = make_certificate(scratch)
    here = Endpoint(None, "127.0.0.1", "lo")
    common = [str(WORKLOAD), "--stack", "quic", "--addr", "127.0.0.1", "--port", str(free_port()), "--control"]
    with WorkloadProcess(
        "server", common + ["--role", "server", "--cert", str(cert), "--key", str(key)], here, scratch / "server.log"
    ) as server:
        server.wait_event("ready", START_TIMEOUT_S)
        with WorkloadProcess(
            "client",
            common + ["--role", "client", "--duration-ms", "2000", "--wait-start"],
            here,
            scratch / "client.log",
        ) as client:
            yield server, client


def run_transfer(server, client):
    """Both ends' done reports, client first."""
    client.send("start")
    dones = [w.wait_event("done", FINISH_TIMEOUT_S) for w in (client, server)]
    for done in dones:
        assert done["exit_code"] == 0, done
    return dones


def least_net_rx(dones) -> float:
    """The fewest NET_RX softirqs that can have delivered a loopback
    transfer: each send call is one skb through lo (a GSO one whole),
    netif_rx'd to the backlog, and one NET_RX run takes at most
    net.core.netdev_budget of them."""
    budget = int(Path("/proc/sys/net/core/netdev_budget").read_text())
    return sum(d["perf_counters"]["udp_send_calls"] for d in dones) / budget


def by_tid(mark, pid):
    return {t["tid"]: t for t in mark["threads"] if t["tgid"] == pid}


def delta(end: dict, start: dict, tid: int, field: str) -> int:
    """A thread's change between two marks; one that never ran since
    attach is in neither."""
    return end.get(tid, {}).get(field, 0) - start.get(tid, {}).get(field, 0)


def vectors(mark) -> dict:
    return {v["vec"]: v for v in mark["softirq"]}


def test_transfer_against_kernel(scratch):
    with loopback_pair(scratch) as (server, client):
        pids = [server.pid, client.pid]
        with cputhread(pids, scratch, "--hardirqs") as probe:
            m0, k0_before, k0_after = edge(probe, pids, "start")
            dones = run_transfer(server, client)
            m1, k1_before, k1_after = edge(probe, pids, "end")
        for w in (client, server):
            w.finish(FINISH_TIMEOUT_S)

    assert m1["name"] == "end" and m1["threads_lost"] == 0
    wall_ns = m1["t_ns"] - m0["t_ns"]
    runq, oncpu = {}, {}
    for pid in pids:
        start, end = by_tid(m0, pid), by_tid(m1, pid)
        # Threads alive at both reads of the end mark: /proc has no others.
        tids = set(k1_before[pid]) & set(k1_after[pid])
        runq[pid] = sum(delta(end, start, t, "runq_ns") for t in end)
        p = sum(delta(end, start, t, "oncpu_ns") for t in tids)
        lo = sum(k1_before[pid][t]["oncpu_ns"] - k0_after[pid].get(t, {}).get("oncpu_ns", 0) for t in tids)
        hi = sum(k1_after[pid][t]["oncpu_ns"] - k0_before[pid].get(t, {}).get("oncpu_ns", 0) for t in tids)
        k = (lo + hi) / 2
        assert k > 0.3e9, (pid, k)  # the transfer kept both busy
        oncpu[pid] = (p, k, (hi - lo) / 2)

        # Every switch the kernel counted, the probe saw (the marks'
        # own visit to every CPU falls inside both brackets), and as the
        # kernel's involuntary ones those that left the thread runnable:
        # but for a sleep a pending signal called off (the tracepoint then
        # sees TASK_RUNNING, the kernel counts it voluntary), and these
        # processes get no signal in the window.
        for field in ("switches", "involuntary"):
            got = sum(delta(end, start, t, field) for t in tids)
            klo = sum(k1_before[pid][t][field] - k0_after[pid].get(t, {}).get(field, 0) for t in tids)
            khi = sum(k1_after[pid][t][field] - k0_before[pid].get(t, {}).get(field, 0) for t in tids)
            assert klo - 2 <= got <= khi + 2, (pid, field, got, klo, khi)

        # msquic's threads (named after the process: msquic names none)
        # do the transfer; the main thread and the control thread wait, so
        # they ran less than those did, at whatever speed.
        ran = {t: delta(end, start, t, "oncpu_ns") for t in tids if t in end}
        waited = sum(n for t, n in ran.items() if t == pid or end[t]["comm"] == "wl-control")
        assert p - waited > waited, (pid, ran)
        assert p <= wall_ns * NCPU
        for t in end.values():
            assert t["untraced_ns"] <= t["oncpu_ns"] and t["wakeups"] <= t["switches"] + 1, t

    # The machine's steal over the window, at most (module docstring).
    steal = most_steal(k0_before, k1_after)
    for pid, other in (pids, pids[::-1]):
        p, k, half = oncpu[pid]
        # schedstat credits woken threads with up to their wakeup-to-run
        # latency, taken from whatever ran before them (module docstring).
        assert -(0.02 * k + runq[other] + half + steal) <= k - p <= 0.02 * k + runq[pid] + half, (
            pid,
            p,
            k,
            runq[pid],
            runq[other],
            steal,
        )
    # Between the two processes what one loses the other gains; what is
    # left comes from idle (the kernel only adds) and from other tasks.
    p, k, half = (sum(x[i] for x in oncpu.values()) for i in range(3))
    assert -(0.02 * k + half + steal) <= k - p <= 0.02 * k + sum(runq.values()) + half, (p, k, steal)

    v0, v1 = vectors(m0), vectors(m1)
    assert list(v1) == VECTORS
    sirq = {}
    for name in VECTORS:
        d = {f: v1[name][f] - v0[name][f] for f in ("count", "time_ns", "in_ksoftirqd_ns")}
        d["in_target"] = {pid: v1[name]["in_target_ns"][str(pid)] - v0[name]["in_target_ns"][str(pid)] for pid in pids}
        assert 0 <= sum(d["in_target"].values()) <= d["time_ns"], (name, d)
        assert 0 <= d["in_ksoftirqd_ns"] <= d["time_ns"], (name, d)
        sirq[name] = d
    net_rx = sirq["NET_RX"]
    assert net_rx["count"] >= least_net_rx(dones) and net_rx["time_ns"] > 0, (net_rx, least_net_rx(dones))
    # Loopback delivers a datagram in the sender's own softirq, so most
    # NET_RX runs on the two processes' stacks, and inside their on-CPU.
    assert sum(net_rx["in_target"].values()) >= 0.5 * net_rx["time_ns"]
    for pid in pids:
        on_stack = sum(sirq[name]["in_target"][pid] for name in VECTORS)
        assert on_stack <= oncpu[pid][0] * 1.01
    assert m1["softirq_includes_hardirqs"] is False
    assert m1["hardirq_count"] > m0["hardirq_count"] and m1["hardirq_ns"] > m0["hardirq_ns"]
    nested = m1["hardirq_in_softirq_ns"] - m0["hardirq_in_softirq_ns"]
    assert 0 <= nested <= m1["hardirq_ns"] - m0["hardirq_ns"]


@contextmanager
def busy_loop():
    """A process whose one thread never sleeps."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        yield spin.pid
    finally:
        spin.kill()
        spin.wait()


def test_running_slice_counted(scratch):
    """A thread that never sleeps is mid-slice at every mark, and rarely
    switches: the probe must count its slice up to the mark, as schedstat
    does. With few wakeups around it, the kernel's figure is sharp."""
    with busy_loop() as pid, cputhread([pid], scratch) as probe:
        m0, k0_before, k0_after = edge(probe, [pid], "start")
        time.sleep(1.5)
        m1, k1_before, k1_after = edge(probe, [pid], "end")
    p = delta(by_tid(m1, pid), by_tid(m0, pid), pid, "oncpu_ns")
    lo = k1_before[pid][pid]["oncpu_ns"] - k0_after[pid][pid]["oncpu_ns"]
    hi = k1_after[pid][pid]["oncpu_ns"] - k0_before[pid][pid]["oncpu_ns"]
    # 0.5% and 1 ms: what schedstat moves at the few preemptions (the
    # marks' own visits to each CPU among them). Above that, the probe's
    # wall-clock slices hold the time the hypervisor took the vCPU away,
    # which schedstat leaves out (module docstring): at most the steal.
    steal = most_steal(k0_before, k1_after)
    assert lo * 0.995 - 1e6 <= p <= hi * 1.005 + 1e6 + steal, (p, lo, hi, steal)
    # It never slept, whatever share of a CPU this machine gave it: it
    # switched out only when preempted (the marks' visits among them).
    t0, t1 = by_tid(m0, pid)[pid], by_tid(m1, pid)[pid]
    switches = t1["switches"] - t0["switches"]
    assert switches > 0 and t1["involuntary"] - t0["involuntary"] == switches, (t0, t1)


BURN_ONE_THREAD = """
import sys, threading, time
def burn():
    end = time.thread_time() + 0.3
    while time.thread_time() < end:
        pass
    print(threading.get_native_id(), time.thread_time_ns(), flush=True)
sys.stdin.readline()
t = threading.Thread(target=burn)
t.start()
t.join()
print("joined", flush=True)
sys.stdin.readline()
"""


def test_exited_thread_kept(scratch):
    """A thread that burns 0.3 s of CPU and exits inside the window keeps
    its time, marked exited; the thread's own clock (CLOCK_THREAD_CPUTIME_ID,
    the kernel's sum_exec_runtime), read just before it exits, agrees."""
    proc = subprocess.Popen(
        [sys.executable, "-c", BURN_ONE_THREAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        with cputhread([proc.pid], scratch) as probe:
            steal_before = {"steal_ns": steal_ns()}
            probe.mark("start")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            tid, cpu_ns = map(int, proc.stdout.readline().split())
            assert proc.stdout.readline() == "joined\n"
            end = by_tid(probe.mark("end"), proc.pid)
            steal = most_steal(steal_before, {"steal_ns": steal_ns()})
        proc.stdin.write("exit\n")
        proc.stdin.flush()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    t = end[tid]
    assert t["exited"] is True and t["switches"] >= 1
    # After its last clock read the thread still prints and exits; 1% and
    # 1 ms for what schedstat moves at its few switches (module docstring).
    # Above that, the probe's wall-clock slices hold the steal the thread's
    # own clock leaves out, as in test_running_slice_counted (ci59: 34 ms).
    assert cpu_ns * 0.99 - 1e6 <= t["oncpu_ns"] <= cpu_ns * 1.01 + 5e6 + steal, (t, cpu_ns, steal)
    assert end[proc.pid]["exited"] is False


@contextmanager
def twin(pid: int, scratch: Path):
    """probes/cputhread.bt on one process (see twin.bpftrace_twin)."""
    with bpftrace_twin(TWIN, [pid], scratch, f"twin-{pid}") as stop:
        yield stop


def test_twin_agrees(scratch, tracefs):
    """Both tools time the same switches of the same transfer (and, the
    probe with --softirqs, the same softirqs: the twin always does). The twin
    keeps only slices whose two ends it saw; so does the probe's traced
    time (on-CPU less untraced_ns). They still differ where bpftrace's
    perf-event tracepoints drop a switch that tp_btf delivers: on this VM
    the twin misses up to half of the msquic client's preempted
    switch-outs (the probe's counts match /proc's, see above), which has
    cost it up to 1% of the client's time. Hence 3%."""
    with loopback_pair(scratch) as (server, client):
        pids = [server.pid, client.pid]
        with (
            cputhread(pids, scratch, "--softirqs") as probe,
            twin(pids[0], scratch) as stop0,
            twin(pids[1], scratch) as stop1,
        ):
            m0 = probe.mark("start")
            dones = run_transfer(server, client)
            m1 = probe.mark("end")
            maps = {pids[0]: stop0(), pids[1]: stop1()}
        for w in (client, server):
            w.finish(FINISH_TIMEOUT_S)

    for pid in pids:
        start, end = by_tid(m0, pid), by_tid(m1, pid)
        ours = sum(delta(end, start, t, "oncpu_ns") - delta(end, start, t, "untraced_ns") for t in end)
        theirs = sum(v for k, v in maps[pid]["@oncpu_ns"].items() if k.startswith(f"{pid},"))
        assert ours > 0.3e9
        assert theirs == pytest.approx(ours, rel=0.03), (pid, theirs, ours)
        switches = sum(delta(end, start, t, "switches") for t in end)
        assert sum(maps[pid]["@switches"].values()) <= switches + 2
    # The vectors are numbered alike (3 is NET_RX) and both saw the
    # transfer's; the twin's times include nested hardirqs and it ran a
    # little longer, so only the counts are held close.
    v0, v1 = vectors(m0), vectors(m1)
    net_rx = v1["NET_RX"]["count"] - v0["NET_RX"]["count"]
    assert net_rx >= least_net_rx(dones), (net_rx, least_net_rx(dones))
    for pid in pids:
        assert maps[pid]["@softirq_count"]["3"] == pytest.approx(net_rx, rel=0.05)


def test_twin_compiles(scratch, tracefs):
    """bpftrace 0.17 has no --dry-run; --emit-elf compiles every probe to
    BPF bytecode without loading it."""
    elf = scratch / "cputhread.o"
    r = subprocess.run(["bpftrace", "--emit-elf", str(elf), str(TWIN), "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert elf.stat().st_size > 0


NO_SUCH_PID = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


@pytest.mark.parametrize(
    "arg, code, words",
    [
        ("abc", EXIT_USAGE, ["invalid PID list 'abc'"]),
        ("12x", EXIT_USAGE, ["invalid PID list '12x'"]),
        ("0", EXIT_USAGE, ["invalid PID list '0'"]),
        ("-7", EXIT_USAGE, ["invalid PID list '-7'"]),
        (str(NO_SUCH_PID), EXIT_NO_PROCESS, [f"no process {NO_SUCH_PID}", "ps -e"]),
    ],
)
def test_bad_pid(arg, code, words):
    r = subprocess.run([str(PROBE), "-p", arg, "--control"], capture_output=True, text=True, timeout=30)
    assert r.returncode == code
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1, r.stderr
    for w in words:
        assert w in r.stderr


def test_thread_id_is_refused():
    """The filter is by process: a thread's id would match nothing."""
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        r = subprocess.run([str(PROBE), "-p", str(t.native_id)], capture_output=True, text=True, timeout=30)
    finally:
        stop.set()
        t.join()
    assert r.returncode == EXIT_NO_PROCESS and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"qprof-cputhread: {t.native_id} is a thread of process {os.getpid()}; give the process id"
    ]


def test_interval_table_and_json(scratch):
    """By default the threads alone: no softirq program attached, the
    vectors null (not measured, not zero); with --softirqs the vectors too."""
    with busy_loop() as pid:
        r = subprocess.run([str(PROBE), "-p", str(pid), "1", "1"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and r.stderr == ""
        header, *rows = r.stdout.strip().splitlines()
        assert header.split() == ["PID", "TID", "COMM", "ON-CPU", "(ms)", "SWITCHES", "INVOL"]
        assert [row.split()[:3] for row in rows] == [[str(pid), str(pid), Path(sys.executable).name[:15]]]
        assert 500 <= float(rows[0].split()[3]) <= 1000 * NCPU
        r = subprocess.run(
            [str(PROBE), "-p", str(pid), "--softirqs", "1", "1"], capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 0 and r.stderr == ""
        threads, irqs = r.stdout.strip().split("\n\n")
        assert threads.splitlines()[0].split() == header.split()
        header, *rows = irqs.splitlines()
        for col in ("VECTOR", "COUNT", "TIME (ms)", "IN-TARGET (ms)", "KSOFTIRQD (ms)"):
            assert col in header
        assert [row.split()[0] for row in rows] == VECTORS  # hardirqs only with --hardirqs
        untimed = subprocess.run(
            [str(PROBE), "-p", str(pid), "--json", "1", "1"], capture_output=True, text=True, timeout=30
        )
        r = subprocess.run(
            [str(PROBE), "-p", str(pid), "--softirqs", "--json", "1", "2"], capture_output=True, text=True, timeout=30
        )
        assert r.returncode == untimed.returncode == 0 and r.stderr == untimed.stderr == ""
    (m,) = [json.loads(line) for line in untimed.stdout.splitlines()]
    assert [t["tid"] for t in m["threads"]] == [pid] and m["threads"][0]["oncpu_ns"] > 0
    for k in ("softirq", "softirq_includes_hardirqs", "hardirq_count", "hardirq_ns", "hardirq_in_softirq_ns"):
        assert m[k] is None, k
    assert {p["name"] for p in m["progs"]} == {"sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_process_exit"}
    marks = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(marks) == 2 and all(m["event"] == "mark" and m["name"] == "interval" for m in marks)
    (t0,), (t1,) = marks[0]["threads"], marks[1]["threads"]
    assert t0["tid"] == t1["tid"] == pid and t1["oncpu_ns"] > t0["oncpu_ns"]  # cumulative since attach
    assert [v["vec"] for v in marks[1]["softirq"]] == VECTORS
    assert list(marks[1]["softirq"][0]["in_target_ns"]) == [str(pid)]
    assert {"softirq_entry", "softirq_exit"} <= {p["name"] for p in marks[1]["progs"]}
    # Hardirqs were not timed: absent, not zero, and softirq time says so.
    assert marks[1]["softirq_includes_hardirqs"] is True
    assert marks[1]["hardirq_count"] is None and marks[1]["hardirq_ns"] is None
    r = subprocess.run([str(PROBE), "--help"], capture_output=True, text=True, timeout=30)
    assert r.stdout.rstrip().splitlines()[-6] == "EXAMPLES:"
