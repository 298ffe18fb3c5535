"""Per-side figures derived from the probes' window deltas, and their
cross-checks against msquic's own counters.

"Network" syscalls are the ones that move datagrams or stream bytes
through a socket. read/write/readv/writev are reported but not counted
as network calls here: the workload's control channel and msquic's
eventfd wake-ups use them too.
"""
from typing import Dict, List, Optional

SEND = ("sendmsg", "sendmmsg", "sendto", "sendfile", "splice")
RECV = ("recvmsg", "recvmmsg", "recvfrom")
HIST_FIELDS = ("time_hist_ns",)


def _ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    if num is None or den is None or den == 0:
        return None
    return num / den


def by_syscall(threads: List[dict], tgid: int) -> Dict[str, dict]:
    """The syscall probe's per-thread entries of one process, summed per syscall."""
    out: Dict[str, dict] = {}
    for t in threads:
        if t["tgid"] != tgid:
            continue
        s = out.setdefault(t["sys"], {"calls": 0, "errors": 0, "eagain": 0, "bytes": 0, "msgs_requested": 0,
                                      "msgs_returned": 0, "mmsg_truncated": 0, "time_ns": 0, "time_hist_ns": []})
        for k in ("calls", "errors", "eagain", "bytes", "msgs_requested", "msgs_returned", "mmsg_truncated", "time_ns"):
            s[k] += t[k]
        h = s["time_hist_ns"]
        for i, v in enumerate(t["time_hist_ns"]):
            if i < len(h):
                h[i] += v
            else:
                h.append(v)
    return {k: out[k] for k in sorted(out)}


def _sum(calls: Dict[str, dict], names, field: str) -> int:
    return sum(calls[n][field] for n in names if n in calls)


def syscall_figures(calls: Dict[str, dict], nbytes: int, cpu_s: Optional[float],
                    datagrams_out: Optional[int], datagrams_in: Optional[int]) -> dict:
    """Syscalls per MB, bytes and datagrams per call, time inside per byte,
    share of the side's CPU inside send and receive calls."""
    send_calls, recv_calls = _sum(calls, SEND, "calls"), _sum(calls, RECV, "calls")
    recv_ok = recv_calls - _sum(calls, RECV, "errors")
    send_bytes, recv_bytes = _sum(calls, SEND, "bytes"), _sum(calls, RECV, "bytes")
    send_ns, recv_ns = _sum(calls, SEND, "time_ns"), _sum(calls, RECV, "time_ns")
    mb = nbytes / 1e6
    return {
        "send_calls": send_calls,
        "recv_calls": recv_calls,
        "recv_calls_with_data": recv_ok,
        "recv_eagain": _sum(calls, RECV, "eagain"),
        "send_bytes": send_bytes,
        "recv_bytes": recv_bytes,
        "syscalls_per_mb": _ratio(send_calls + recv_calls, mb),
        "send_calls_per_mb": _ratio(send_calls, mb),
        "recv_calls_per_mb": _ratio(recv_calls, mb),
        "bytes_per_send_call": _ratio(send_bytes, send_calls),
        "bytes_per_recv_call": _ratio(recv_bytes, recv_ok),
        "datagrams_per_send_call": _ratio(datagrams_out, send_calls),
        "datagrams_per_recv_call": _ratio(datagrams_in, recv_ok),
        "in_syscall_ns_per_byte": _ratio(send_ns + recv_ns, nbytes),
        "send_share_of_cpu": _ratio(send_ns / 1e9, cpu_s),
        "recv_share_of_cpu": _ratio(recv_ns / 1e9, cpu_s),
    }


def compare(ebpf: Optional[float], own: Optional[float]) -> dict:
    """One cross-check: the eBPF figure, the workload's own, their ratio."""
    return {"ebpf": ebpf, "msquic": own, "ratio": _ratio(ebpf, own)}
