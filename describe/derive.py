# SPDX-License-Identifier: GPL-2.0-only
"""Per-side figures derived from the probes' window deltas, and their
cross-checks against msquic's own counters.

"Network" syscalls are the ones that move datagrams or stream bytes
through a socket. For QUIC, read/write/readv/writev are reported but not
counted (msquic's eventfd wake-ups use them); for TCP they carry the
data (OpenSSL writes records with write()), so they count. The
workload's control thread (wl-control) is left out either way.
"""

from typing import Dict, List, Optional

from qprof.describe import transports

SEND = ("sendmsg", "sendmmsg", "sendto", "sendfile", "splice")
RECV = ("recvmsg", "recvmmsg", "recvfrom")
SEND_RW = SEND + ("write", "writev")
RECV_RW = RECV + ("read", "readv")
CONTROL_THREAD = "wl-control"


def jain_index(xs) -> Optional[float]:
    """Jain's fairness index: (sum x)^2 / (n sum x^2); 1 when all are equal,
    1/n when one takes everything."""
    xs = list(xs)
    sq = sum(x * x for x in xs)
    return sum(xs) ** 2 / (len(xs) * sq) if xs and sq else None


def _ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    if num is None or den is None or den == 0:
        return None
    return num / den


# Why the per-call time figures are null: the syscalls probe times calls only when asked.
CALL_TIME_ABSENT = (
    "not measured: the syscalls probe times calls only with --syscall-time, which costs a sys_enter "
    "program and two clock reads a call (RESULTS.md, 'What the default instruments cost')"
)
COUNTS = ("calls", "errors", "eagain", "bytes", "msgs_requested", "msgs_returned", "mmsg_truncated")
# Why the figures from a device's receive side are null: the packets probe counts them only when asked.
RX_ABSENT = (
    "not measured: the packets probe counts what a device receives only with --packets-rx (on by itself where "
    "the run sets the veths' GRO, which only the receive side shows), which costs a netif_receive_skb program "
    "(and two napi_gro_receive ones) on every received packet; over veth each skb arrives as the peer's "
    "transmit sent it (its tx), unless the receiving end runs GRO (RESULTS.md, 'What the default instruments cost')"
)
# Why a UDP side's received datagrams are null though the receive side was counted.
DATAGRAMS_ABSENT = (
    "not measured: the syscalls probe counts the datagrams each receive call took (from its UDP_GRO control "
    "message) with bpf_loop, which this kernel lacks (Linux 5.17 has it)"
)
# Why the softirq figures are null: the cputhread probe times softirqs only when asked.
SOFTIRQ_TIME_ABSENT = (
    "not measured: the cputhread probe times softirqs only with --softirq-time, which costs softirq_entry and "
    "softirq_exit programs and two clock reads on every softirq of the machine (RESULTS.md, 'What the default "
    "instruments cost')"
)


def by_syscall(threads: List[dict], tgid: int) -> Dict[str, dict]:
    """The syscall probe's per-thread entries of one process, summed per
    syscall. An untimed probe's time_ns and time_hist_ns are None, and stay
    None in the sum: not measured, not zero; so are the datagrams of a probe
    that did not count them (datagrams_most: the most one call took)."""
    out: Dict[str, dict] = {}
    for t in threads:
        if t["tgid"] != tgid or t.get("comm") == CONTROL_THREAD:
            continue
        timed = t.get("time_ns") is not None
        counted = t.get("datagrams") is not None
        s = out.setdefault(
            t["sys"],
            {
                **{k: 0 for k in COUNTS},
                "datagrams": 0 if counted else None,
                "datagrams_most": 0 if counted else None,
                "time_ns": 0 if timed else None,
                "time_hist_ns": [] if timed else None,
            },
        )
        for k in COUNTS:
            s[k] += t[k]
        if counted and s["datagrams"] is not None:
            s["datagrams"] += t["datagrams"]
            s["datagrams_most"] = max(s["datagrams_most"], t["datagrams_most"])
        if not timed or s["time_ns"] is None:
            s["time_ns"] = s["time_hist_ns"] = None
            continue
        s["time_ns"] += t["time_ns"]
        h = s["time_hist_ns"]
        for i, v in enumerate(t["time_hist_ns"]):
            if i < len(h):
                h[i] += v
            else:
                h.append(v)
    return {k: out[k] for k in sorted(out)}


def _sum(calls: Dict[str, dict], names, field: str) -> Optional[int]:
    """The field summed over the named calls; None if any of them lacks it (not measured)."""
    values = [calls[n].get(field) for n in names if n in calls]
    return None if any(v is None for v in values) else sum(values)


def socket_datagrams(calls: Dict[str, dict]) -> Optional[int]:
    """The datagrams a side's receive calls took from its sockets (a GRO'd
    message's segments each); None where the probe did not count them."""
    return _sum(calls, RECV, "datagrams")


def syscall_figures(
    calls: Dict[str, dict],
    nbytes: int,
    cpu_s: Optional[float],
    datagrams_out: Optional[int],
    datagrams_in: Optional[int],
    rw_is_network: bool = False,
    timed: bool = True,
    rx_absent: Optional[str] = None,
) -> dict:
    """Syscalls per MB, bytes and datagrams per call (sent: wire packets;
    received: what a UDP side's calls took from its socket, else wire
    packets), time
    inside per byte, and wall seconds inside send and receive calls per
    second of the side's CPU: a call's time is wall time (blocked time
    included), so this is no share of CPU and may exceed 1. The time
    figures are None, with time_absent_reason, when the probe did not time
    the calls (`timed`: the probe's own call_time); datagrams per receive
    call is None, with rx_absent_reason, when the receive side was not
    counted (`rx_absent`: why)."""
    if rx_absent:
        datagrams_in = None
    send, recv = (SEND_RW, RECV_RW) if rw_is_network else (SEND, RECV)
    send_calls, recv_calls = _sum(calls, send, "calls"), _sum(calls, recv, "calls")
    recv_ok = recv_calls - _sum(calls, recv, "errors")
    send_bytes, recv_bytes = _sum(calls, send, "bytes"), _sum(calls, recv, "bytes")
    send_ns, recv_ns = (_sum(calls, send, "time_ns"), _sum(calls, recv, "time_ns")) if timed else (None, None)
    timed = send_ns is not None and recv_ns is not None
    mb = nbytes / 1e6
    return {
        "send_calls": send_calls,
        "recv_calls": recv_calls,
        "recv_calls_with_data": recv_ok,
        "recv_eagain": _sum(calls, recv, "eagain"),
        "send_bytes": send_bytes,
        "recv_bytes": recv_bytes,
        "syscalls_per_mb": _ratio(send_calls + recv_calls, mb),
        "send_calls_per_mb": _ratio(send_calls, mb),
        "recv_calls_per_mb": _ratio(recv_calls, mb),
        "bytes_per_send_call": _ratio(send_bytes, send_calls),
        "bytes_per_recv_call": _ratio(recv_bytes, recv_ok),
        "datagrams_per_send_call": _ratio(datagrams_out, send_calls),
        "datagrams_per_recv_call": _ratio(datagrams_in, recv_ok),
        "in_syscall_ns_per_byte": _ratio(send_ns + recv_ns, nbytes) if timed else None,
        "send_wall_s_per_cpu_s": _ratio(send_ns / 1e9, cpu_s) if timed else None,
        "recv_wall_s_per_cpu_s": _ratio(recv_ns / 1e9, cpu_s) if timed else None,
        "time_absent_reason": None if timed else CALL_TIME_ABSENT,
        "rx_absent_reason": rx_absent,
    }


def agreement(ebpf: Optional[float], other: Optional[float], other_name: str = "own") -> dict:
    """One cross-check: the eBPF figure, the other instrument's, their ratio."""
    return {"ebpf": ebpf, other_name: other, "ratio": _ratio(ebpf, other)}


def compare(ebpf: Optional[float], own: Optional[float]) -> dict:
    """eBPF against the workload's own count of the same thing."""
    return agreement(ebpf, own)


def bracket_checks(checks: dict, least: dict, most: dict) -> None:
    """Each cross-check's eBPF figure at its least and most over the
    workload's own edges (ebpf_range): the workload's count lies in it,
    but for an event torn at each edge. A check whose bracket was not
    measured has none."""
    for name, check in checks.items():
        if not isinstance(check, dict) or check.get("ebpf") is None:
            continue
        lo, hi = least.get(name, {}).get("ebpf"), most.get(name, {}).get("ebpf")
        if lo is not None and hi is not None:
            check["ebpf_range"] = [lo, hi]


def crosscheck(
    stack_name: str, sends: bool, f: dict, own: dict, out_dgrams, in_dgrams, rx_absent: Optional[str] = None
) -> dict:
    """eBPF figures against the workload's own count of the same thing.

    QUIC: msquic's UDP_SEND_CALLS (one per sendmsg/sendmmsg), UDP_RECV_EVENTS
    (one per receive call that returned data) and datagram counts: sent
    against the device's packets, received against what the receive calls
    took from the socket (the device's count leads a receiver's by what
    waits in its socket).
    TCP and UDP: the workload counts its own send and receive calls, either
    way (sends: the side sends the measured bytes, whose datagrams are then
    its sent ones, else its received). For plain tcp each is one syscall; under OpenSSL one
    SSL_write may become several write()s (a record is at most 16 KiB), so
    for the TLS stacks the ratio is recorded, not expected to be 1. A
    check of received datagrams the probes did not count has no eBPF
    figure and says why (absent_reason)."""

    def received(theirs) -> dict:
        if rx_absent:
            return {**compare(None, theirs), "absent_reason": rx_absent}
        return compare(in_dgrams, theirs)

    if transports.msquic(stack_name):
        pc = own.get("perf_counters") or {}
        return {
            "source": "msquic perf counters",
            "udp_send_calls": compare(f["send_calls"], pc.get("udp_send_calls")),
            "udp_recv_events": compare(f["recv_calls_with_data"], pc.get("udp_recv_events")),
            "udp_send_datagrams": compare(out_dgrams, pc.get("udp_send")),
            "udp_recv_datagrams": received(pc.get("udp_recv")),
        }
    if transports.has_quic_stats(stack_name):
        library = transports.STACKS[stack_name].library
        qs = own.get("quic_stats") or {}
        out = {
            "source": f"{library}'s own counters (quic_stats)",
            "udp_send_calls": compare(f["send_calls"], qs.get("udp_tx_ios")),
            "udp_send_datagrams": compare(out_dgrams, qs.get("udp_tx_datagrams")),
            "udp_recv_datagrams": received(qs.get("udp_rx_datagrams")),
        }
        # Their I/O (qprof-wl's datapath, wl_udpio.c) counts the receive calls that returned data.
        out["udp_recv_events"] = compare(f["recv_calls_with_data"], qs.get("udp_rx_ios"))
        return out
    # The workload counts each of its calls that sends or receives (both
    # ways: a bulk sender's few reads, an rr side's requests and answers),
    # whichever way the bytes go.
    calls = f["send_calls"] + f["recv_calls"]
    out = {"source": "workload's own call count", "io_calls": compare(calls, own.get("io_calls"))}
    if transports.datagram(stack_name):
        # The datagrams the workload sent (against its device's wire
        # packets) or received (against what its calls took from the socket).
        out["datagrams"] = compare(out_dgrams, own.get("datagrams")) if sends else received(own.get("datagrams"))
    return out


def _by_cpu(threads: list) -> Optional[Dict[str, float]]:
    """The threads' on-CPU seconds on each CPU they ran on, by CPU number;
    None if any thread's entry does not say (the bpftrace probe)."""
    if any("oncpu_ns_by_cpu" not in t for t in threads):
        return None
    out: Dict[str, float] = {}
    for t in threads:
        for c, ns in t["oncpu_ns_by_cpu"].items():
            if ns > 0:
                out[c] = out.get(c, 0.0) + ns / 1e9
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def thread_figures(cpu_window: dict, pids: Dict[str, int], side_bytes: Dict[str, int], nbytes: int) -> dict:
    """From the cputhread probe: each side's on-CPU time by thread, the
    softirq work served on its stack (which /proc cannot separate on this
    kernel), and system-wide softirq time by vector, all per byte too
    (each side per its own bytes, the system per byte delivered). A probe
    that did not time softirqs (--softirq-time) gives its window's softirq
    as None: every figure that needs it is None, with softirq_absent_reason,
    and the on-CPU time stays whole."""
    timed = cpu_window.get("softirq") is not None
    out: Dict[str, dict] = {}
    for side, pid in pids.items():
        side_nbytes = side_bytes[side]
        threads = sorted((t for t in cpu_window["threads"] if t["tgid"] == pid), key=lambda t: -t["oncpu_ns"])
        oncpu_ns = sum(t["oncpu_ns"] for t in threads)
        softirq_ns = sum(v["in_target_ns"].get(str(pid), 0) for v in cpu_window["softirq"]) if timed else None
        out[side] = {
            "oncpu_s": oncpu_ns / 1e9,
            # where its threads ran: seconds on each CPU (None from a probe that did not say)
            "cpus": _by_cpu(threads),
            # woken and waiting for a CPU, from the sched_wakeup to the switch-in
            "runq_s": sum(t["runq_ns"] for t in threads) / 1e9,
            "softirq_in_context_s": softirq_ns / 1e9 if timed else None,
            "ns_per_byte": {
                "oncpu": _ratio(oncpu_ns, side_nbytes),
                "softirq_in_context": _ratio(softirq_ns, side_nbytes),
                "own_work": _ratio(oncpu_ns - softirq_ns, side_nbytes) if timed else None,
            },
            "threads": [
                {
                    "tid": t["tid"],
                    "comm": t["comm"],
                    "oncpu_s": t["oncpu_ns"] / 1e9,
                    "share": _ratio(t["oncpu_ns"], oncpu_ns),
                    "switches": t["switches"],
                    "involuntary": t["involuntary"],
                    "cpus": _by_cpu([t]),
                }
                for t in threads
            ],
        }
    out["softirq"] = (
        {
            v["vec"]: {
                "count": v["count"],
                "time_s": v["time_ns"] / 1e9,
                "in_ksoftirqd_s": v["in_ksoftirqd_ns"] / 1e9,
                "ns_per_byte": _ratio(v["time_ns"], nbytes),
            }
            for v in cpu_window["softirq"]
            if v["count"]
        }
        if timed
        else None
    )
    # The run does not time hardirqs (see qprof-cputhread --hardirqs): absent, not zero.
    hardirq_ns = cpu_window.get("hardirq_ns")
    out["hardirq_s"] = None if hardirq_ns is None else hardirq_ns / 1e9
    out["softirq_includes_hardirqs"] = cpu_window.get("softirq_includes_hardirqs")
    out["softirq_absent_reason"] = None if timed else SOFTIRQ_TIME_ABSENT
    return out


EBPF_CATEGORY = "eBPF probes"  # flamegraphs/categories.rules


# Probe tools that turn the statistics on in slices (probes/probe_common.c) say
# so with bpf_stats_on_ns; collectors/probes.py scales their window to all of it.
SAMPLED = (
    ", on for a tenth of it in slices and scaled to all of it (probes/probe_common.c); "
    "None where no slice fell in the window"
)


def observer_cost(probes: dict, nbytes: int, flame: Optional[dict]) -> Optional[dict]:
    """What the eBPF probes cost over the window, from the kernel's BPF
    run-time statistics (sampled: on for a tenth of the time, scaled by
    collectors/probes.py): run time
    and runs per probe and program, and ns/B of the window's bytes, beside
    the flame graph's eBPF category per side (which also holds the
    tracepoint dispatch around the programs). None when no probe ran; a
    probe without statistics is None inside (not measured, not zero)."""
    if not any(p.get("status") == "present" for p in probes.values()):
        return None
    out = {}
    for name, p in probes.items():
        progs = (p.get("window") or {}).get("progs")
        if p.get("status") != "present" or not p.get("bpf_stats") or progs is None:
            out[name] = None
            continue
        run_ns, runs = sum(x["run_time_ns"] for x in progs), sum(x["run_cnt"] for x in progs)
        out[name] = {
            "run_time_s": run_ns / 1e9,
            "runs": runs,
            "ns_per_run": _ratio(run_ns, runs),
            "ns_per_byte": _ratio(run_ns, nbytes),
            # On hosts each host's programs, "NAME@ROLE" (collectors/probes.py merge_windows).
            "programs": {
                (f"{x['name']}@{x['role']}" if "role" in x else x["name"]): {
                    "run_time_s": x["run_time_ns"] / 1e9,
                    "runs": x["run_cnt"],
                }
                for x in progs
            },
        }
    measured = [v for v in out.values() if v is not None]
    total_s = sum(v["run_time_s"] for v in measured) if len(measured) == len(out) else None
    sides = (flame or {}).get("sides") or {}
    return {
        "probes": out,
        "run_time_s": total_s,
        "ns_per_byte": _ratio(total_s * 1e9, nbytes) if total_s is not None else None,
        "flame_ebpf_ns_per_byte": {
            side: (f.get("categories_ns_per_byte") or {}).get(EBPF_CATEGORY, 0.0) for side, f in sides.items()
        }
        or None,
        "source": "the kernel's BPF run-time statistics (BPF_ENABLE_STATS) of each probe's programs over "
        "the window"
        + (SAMPLED if any("bpf_stats_scale" in (p.get("window") or {}) for p in probes.values()) else "")
        + "; flame_ebpf_ns_per_byte: the flame graph's eBPF category per side",
    }


def ip_packets(way: Optional[dict]) -> Optional[int]:
    """A device's packets one way that were TCP or UDP over IP (GSO's
    segments each): its wire packets but ARP, neighbour discovery and the
    like (other_skbs, never segmented); None if that way was not counted."""
    if not way or way.get("wire_packets") is None:
        return None
    return way["wire_packets"] - way.get("other_skbs", 0)


def packets_devices(rec: dict, bracket: Optional[str] = None) -> dict:
    """side -> the packets probe's window for that side's device (its veth
    between namespaces; on hosts, its NIC, as its own host's probe saw it)
    with the probe present; {} otherwise. bracket: "least" or "most", that
    window of the probe's bracket instead ({} where it has none)."""
    probe = (rec.get("probes") or {}).get("packets") or {}
    topo = (rec.get("environment") or {}).get("topology") or {}
    if probe.get("status") != "present" or topo.get("kind") not in ("netns", "hosts"):
        return {}
    window = probe["window"] if bracket is None else (probe.get("bracket") or {}).get(bracket, {})
    found = {}
    for side in ("client", "server"):
        name = f"{topo[side]['ifname']}@{topo[side]['netns'] or 'host'}"
        for d in window.get("devices", []):
            if d.get("dev") == name and d.get("role", side) == side:
                found[side] = d
    return found
