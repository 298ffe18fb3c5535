# SPDX-License-Identifier: GPL-2.0-only
"""--interval: the window cut into pieces as iperf3 -i does, each with its
goodput, CPU and transport state per side; the pieces add up to the
window."""

import pytest

from qprof.describe import cpu, state, transports, window
from qprof.present.tables import interval_text

from conftest import needs_build
from refusals import refused
from test_run_flame import QUICK_ALONE


def _sample(t_s, nbytes, client_s, server_s, busy_s, idle_s):
    system = {"user_s": busy_s, "nice_s": 0, "system_s": 0, "idle_s": idle_s, "iowait_s": 0}
    system.update(irq_s=0, softirq_s=0, steal_s=0)
    return {
        "t_ns": int(t_s * 1e9),
        "system": system,
        "client_oncpu_s": client_s,
        "server_oncpu_s": server_s,
        "receiver_app_bytes": nbytes,
        "receiver_t_ns": int(t_s * 1e9) + 1000,
    }


@pytest.mark.unit
def test_interval_figures():
    a, b = _sample(1.0, 1_000, 2.0, 3.0, 10.0, 10.0), _sample(1.5, 126_001_000, 2.4, 3.1, 10.75, 10.25)
    f = window.interval_figures(a, b)
    assert f["bytes"] == 126_000_000 and f["seconds"] == pytest.approx(0.5)
    assert f["gbps"] == pytest.approx(126e6 * 8 / 0.5 / 1e9)
    assert (f["client_cpus"], f["server_cpus"]) == (pytest.approx(0.8), pytest.approx(0.2))
    assert f["client_ns_per_byte"] == pytest.approx(0.4e9 / 126e6)
    assert f["system_utilisation"] == pytest.approx(0.75)


# tcp for 2 s cut every 0.5 s, as a person reads it: a line per interval.
CUT = ("--stack", "tcp", "--duration", "2s", "--interval", "0.5s", "--probes", "none")


@pytest.mark.system
@needs_build
def test_intervals_add_up_to_the_window(shared):
    _, (_, rec) = shared("run", *CUT, text=True)
    iv = rec["intervals"]
    assert iv["interval_s"] == 0.5
    s = iv["samples"]
    # A sample falls due every interval from the window's start (a fixed
    # grid, not a chain), but for one due within a quarter interval of the
    # end (collectors/edges.py); the end edge closes the last interval.
    due = [k * 0.5 for k in range(1, 4)]
    assert len(s) == len(due) + 1
    # Contiguous, from the window's start to its end, and every verified byte in one of them.
    assert s[0]["start_s"] == 0
    assert all(x["end_s"] == pytest.approx(y["start_s"]) for x, y in zip(s, s[1:]))
    assert s[-1]["end_s"] == pytest.approx(rec["cpu_window_s"], abs=1e-6)
    assert sum(x["bytes"] for x in s) == rec["bytes"]
    assert sum(x["seconds"] for x in s) == pytest.approx(rec["window_s"], rel=1e-6)
    # Each sample is read once its due time has passed, never before (late
    # by however long this machine took to wake: no bound on that here).
    for x, t in zip(s, due):
        assert x["end_s"] >= t - 1e-9, (x, t)
    for x in s[:-1]:
        assert x["gbps"] > 0 and x["client_cpus"] > 0 and x["server_cpus"] > 0
        # The machine's share comes from /proc/stat's ticks: a number only
        # over an interval long enough for them (0.5 s is at the line).
        if cpu.ticks_absent_reason(x["end_s"] - x["start_s"]) is None:
            assert 0 < x["system_utilisation"] <= 1
        else:
            assert x["system_utilisation"] is None
    assert iv["gbps_cv"] >= 0


@pytest.mark.system
@needs_build
def test_a_line_per_interval_on_stdout_and_none_with_interval_0(shared):
    _, (out, rec) = shared("run", *CUT, text=True)
    lines = [line for line in out.splitlines() if line.startswith("[")]
    assert len(lines) == len(rec["intervals"]["samples"])
    assert "Gbit/s" in lines[0] and "ns/B client" in lines[0]
    # --interval 0: no intervals (test_run_flame's run alone has it).
    _, rec = shared("run", *QUICK_ALONE)
    assert rec["config"]["interval_s"] == 0 and rec["intervals"] is None


@pytest.mark.unit
def test_an_interval_finer_than_the_marks_is_refused():
    refused(["--interval", "10ms"], 4, ["--interval 10ms is below 100ms"])


@pytest.mark.unit
def test_every_library_row_names_each_state_value_once():
    """Each library gives a value from its marks or says why not; never both, never neither."""
    for name, stack in transports.STACKS.items():
        src = state.source(name)
        if stack.programs:
            assert src is None and len(state.absent(src, name)) == len(state.FIELDS)
            continue
        assert src is not None, f"{name}'s row has no state (describe/transports.py)"
        assert set(src.given) | set(src.absent) == set(state.FIELDS), name
        assert not set(src.given) & set(src.absent), name
        assert all(why for why in src.absent.values()), name
        assert all(where.split(".")[0] in state.GROUPS for where in src.given.values()), name
        assert set(src.sometimes) <= set(src.given), name


@pytest.mark.unit
def test_state_levels_at_the_end_counts_over_the_interval():
    src = state.source("quic")
    a = {"conn_stats": {"send_congestion_window": 90_000, "rtt_us": 300, "send_suspected_lost_packets": 7}}
    b = {"conn_stats": {"send_congestion_window": 60_000, "rtt_us": 250, "send_suspected_lost_packets": 12}}
    s = state.interval(a, b, src)
    assert (s["cwnd_bytes"], s["rtt_us"], s["lost_packets"]) == (60_000, 250, 5)
    assert all(s[f] is None for f in src.absent)
    # A mark without the group (no connection reported yet): nothing, not zero.
    assert state.interval({}, b, src)["lost_packets"] is None
    assert state.interval(a, {}, src)["cwnd_bytes"] is None


# The same cut over tcp (the tests' run above) and msquic; each other QUIC
# library's state is checked on its bulk run (test_quic_implementations.py).
STATE_STACKS = ("tcp", "quic")
# A running count's place in the window's counters, where it is not its place in the marks.
IN_WINDOW = {"state.retransmitted_packets": "tcp_info.total_retrans"}


def _cut(stack: str) -> tuple:
    return CUT if stack == "tcp" else ("--stack", stack, *CUT[2:])


def assert_state_at_each_interval(rec: dict, stack: str) -> None:
    """Each interval's transport state on both sides, as the stack's row
    says where it is (describe/transports.py): every field given or absent
    with its reason, the levels there, the counts adding up to the
    window's."""
    iv = rec["intervals"]
    src = state.source(stack)
    assert iv["samples"], iv
    for side in ("client", "server"):
        absent = iv["state_absent"][side]
        # The library's reasons, each once; what it gives is missing at no
        # interval, but where its row says why it may be (and that is said).
        assert {f: why for f, why in absent.items() if f not in src.sometimes} == src.absent, absent
        assert all(src.sometimes[f] in why for f, why in absent.items() if f in src.sometimes), absent
        for x in iv["samples"]:
            st = x["state"][side]
            assert set(st) == set(state.FIELDS)
            for f, v in st.items():
                assert v is None if f in src.absent else isinstance(v, int) or f in absent, (side, f, v)
            # Both ends of a connection hold a window and have measured an RTT.
            assert st["cwnd_bytes"] > 0 and st["rtt_us"] > 0, (side, st)
        # Each interval's count is a piece of the window's: together they are the whole.
        for counter in state.COUNTERS & set(src.given):
            group, key = IN_WINDOW.get(src.given[counter], src.given[counter]).split(".")
            window_count = rec["workload"][side]["window"][group][key]
            assert sum(x["state"][side][counter] for x in iv["samples"]) == window_count, (side, counter)
    if stack == "tcp":
        # An upload: the server writes nothing, so has nothing queued, in
        # flight or to resend; the client reads nothing, so queues nothing.
        for x in iv["samples"]:
            server, client = x["state"]["server"], x["state"]["client"]
            assert server["send_queue_bytes"] == server["in_flight_bytes"] == server["retransmitted_packets"] == 0
            assert client["recv_queue_bytes"] == 0
            assert client["pacing_bytes_per_s"] > 0


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("stack", STATE_STACKS)
def test_the_transport_state_at_each_interval(shared, stack):
    _, (out, rec) = shared("run", *_cut(stack), text=True)
    assert_state_at_each_interval(rec, stack)
    # The line shows the sender's (the client's, uploading) state: what it lost, or TCP's resent.
    lines = [line for line in out.splitlines() if line.startswith("[")]
    assert len(lines) == len(rec["intervals"]["samples"]) and all(" client cwnd " in line for line in lines)
    assert all((" retrans " if stack == "tcp" else " lost ") in line for line in lines)


@pytest.mark.unit
def test_the_line_shows_each_senders_state_and_dashes_for_what_it_lacks():
    a, b = _sample(1.0, 1_000, 2.0, 3.0, 10.0, 10.0), _sample(1.5, 126_001_000, 2.4, 3.1, 10.75, 10.25)
    quic = dict.fromkeys(state.FIELDS)
    quic.update(cwnd_bytes=1_234_567, rtt_us=250, lost_packets=3)
    tcp = dict(quic, lost_packets=None, retransmitted_packets=7, in_flight_bytes=500_000)
    line = {"start_s": 0.0, "end_s": 0.5, **window.interval_figures(a, b)}
    text = interval_text({**line, "state": {"client": quic, "server": tcp}, "senders": ("client",)})
    assert text.endswith("  client cwnd 1.23 MB rtt 250 us in flight — MB lost 3"), text
    text = interval_text({**line, "state": {"client": quic, "server": tcp}, "senders": ("client", "server")})
    assert text.endswith("lost 3  server cwnd 1.23 MB rtt 250 us in flight 0.50 MB retrans 7"), text
    # A library that counts neither: what it lost, unknown.
    neither = dict(quic, lost_packets=None)
    text = interval_text({**line, "state": {"client": neither, "server": tcp}, "senders": ("client",)})
    assert text.endswith("in flight — MB lost —"), text
    # A line with no state (a record's sample from before it was kept) is the line it was.
    assert interval_text(line).endswith("busy")
