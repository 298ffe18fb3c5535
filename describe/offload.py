# SPDX-License-Identifier: GPL-2.0-only
"""GSO and GRO: what a run asks for, how each stack is made to honour it,
and what the instruments saw.

The knobs are where each stack decides:
- quic: msquic probes UDP_SEGMENT/UDP_GRO once at start-up and falls back
  on failure. An LD_PRELOAD interposer (workloads/preload/) makes that
  probe fail for the workload process only; msquic is never patched.
  msquic 2.5.1 tests GRO only after its GSO send succeeded, so GSO off
  means GRO off too (its row's gro_needs_gso).
- quinn, ngtcp2, quiche: each probes UDP_SEGMENT and sets UDP_GRO on its
  sockets, so the same interposer steers them; GSO and GRO are
  independent there. quinn and ngtcp2 take UDP_GRO's setsockopt at its
  word, which the interposer gives while leaving GRO off: under --gro off
  their own report of GRO is not evidence (their rows' gro_word), the
  probes' view of what the receiver got is.
- udp: the workload's own send mode (gso, or sendmmsg of single
  datagrams) and the receiver's UDP_GRO socket option.
- tcp stacks: TSO/GSO and GRO of the run's veth pair (ethtool in each
  namespace); the host's loopback is not ours to change.

Observed state comes from the probes and the stacks' own counters, and a
run whose observation contradicts its request is an error, not a result.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from qprof import errors
from qprof.describe import derive, options, transports

ONOFF = ("on", "off")
UDP_SEND_MODES = options.UDP_SEND_MODES
PRELOAD_LIB = "libqprof-offload.so"
REPORT_NAME = "offload-{role}.jsonl"
# ethtool feature names per request, on both veths.
TCP_GSO_FEATURES = ("tso", "gso")
TCP_GRO_FEATURES = ("gro",)


@dataclass
class OffloadPlan:
    """The request, resolved for one stack: per-role environment and
    workload arguments, and the device features to set."""

    requested: Dict[str, Optional[str]]  # gso/gro as asked: "on", "off", None (unset)
    effective: Dict[str, Optional[str]]  # what the run is set up for (None: left to the stack)
    notes: List[str] = field(default_factory=list)
    # per role, the interposer's settings (collectors/devices.py adds the library and its report)
    env: Dict[str, Dict[str, str]] = field(default_factory=lambda: {"client": {}, "server": {}})
    args: Dict[str, List[str]] = field(default_factory=lambda: {"client": [], "server": []})
    devices: Dict[str, str] = field(default_factory=dict)  # ethtool feature -> on/off, both veths

    @property
    def sets_device_gro(self) -> bool:
        """The run sets its veths' GRO, which shows only where they receive."""
        return any(n in self.devices for n in TCP_GRO_FEATURES)

    def describe(self) -> dict:
        return {
            "requested": self.requested,
            "effective": self.effective,
            "notes": self.notes,
            "device_features_set": self.devices or None,
        }


def _checkonoff(name: str, value: Optional[str]) -> None:
    if value is not None and value not in ONOFF:
        raise errors.BadValue(f"--{name} takes on or off, not '{value}'.")


def plan(
    stack_name: str,
    topology: str,
    gso: Optional[str],
    gro: Optional[str],
    send_mode: Optional[str] = None,
    batch: Optional[int] = None,
    dgram_size: Optional[int] = None,
) -> OffloadPlan:
    """Resolve the request for the stack, refusing what it cannot honour
    with the reason and the fix, before anything runs."""
    _checkonoff("gso", gso)
    _checkonoff("gro", gro)
    udp_only = [n for n, v in (("send-mode", send_mode), ("batch", batch), ("dgram-size", dgram_size)) if v is not None]
    if udp_only and stack_name != "udp":
        raise errors.StackCannot(f"--{udp_only[0]} applies to --stack udp only; drop it or use --stack udp.")
    p = OffloadPlan(requested={"gso": gso, "gro": gro}, effective={"gso": gso, "gro": gro})
    if is_quic(stack_name):
        _plan_quic(p, transports.STACKS[stack_name], gso, gro)
    elif stack_name == "udp":
        _plan_udp(p, gso, gro, send_mode, batch, dgram_size)
    else:
        _plan_tcp(p, topology, gso, gro)
    return p


def _plan_quic(p: OffloadPlan, stack: transports.Stack, gso, gro) -> None:
    if stack.gro_needs_gso:
        if gso == "off" and gro == "on":
            raise errors.StackCannot(
                f"{stack.library} tests GRO only after its GSO probe send succeeds, so {stack.name} cannot run "
                "with GSO off and GRO on; use --gso off alone (GRO follows) or --gro off alone."
            )
        if gso == "off":
            p.effective["gro"] = "off"
            if gro is None:
                why = f"{stack.library} tests GRO only after its GSO probe send succeeds"
                p.notes.append(f"GRO off follows GSO off: {why}")
    _interpose(p)


def is_quic(stack_name: str) -> bool:
    stack = transports.STACKS.get(stack_name)
    return stack is not None and stack.is_quic


def _interpose(p: OffloadPlan) -> None:
    """A QUIC library's own probe for GSO and GRO, failed for its process
    where the plan turns them off."""
    env = {}
    if p.effective["gso"] == "off":
        env["QPROF_GSO"] = "off"
    if p.effective["gro"] == "off":
        env["QPROF_GRO"] = "off"
    if env:  # the interposer's settings; collectors/devices.py preloads it
        p.env = {role: dict(env) for role in ("client", "server")}


def _plan_udp(p: OffloadPlan, gso, gro, send_mode, batch, dgram_size) -> None:
    if send_mode is not None and send_mode not in UDP_SEND_MODES:
        raise errors.BadValue(f"unknown --send-mode '{send_mode}'; use one of: {', '.join(UDP_SEND_MODES)}.")
    if send_mode is not None and gso is not None and (send_mode == "gso") != (gso == "on"):
        raise errors.BadValue(f"--send-mode {send_mode} contradicts --gso {gso}; give one of them.")
    if send_mode is None:
        send_mode = "sendmmsg" if gso == "off" else "gso"
    if batch is not None and send_mode == "sendmsg" and batch != 1:
        raise errors.BadValue("--send-mode sendmsg sends one datagram per call, so --batch must be 1 or left out.")
    p.effective["gso"] = "on" if send_mode == "gso" else "off"
    p.effective["gro"] = gro or "on"
    p.args["client"] = ["--send-mode", send_mode]
    if batch is not None:
        p.args["client"] += ["--batch", str(batch)]
    if dgram_size is not None:
        p.args["client"] += ["--dgram-size", str(dgram_size)]
    p.args["server"] = ["--gro", p.effective["gro"]]
    p.effective["send_mode"] = send_mode


def _plan_tcp(p: OffloadPlan, topology, gso, gro) -> None:
    if (gso or gro) and topology != "netns":
        raise errors.BadValue(
            "--gso and --gro set TCP's offloads on the run's veth pair, and the loopback "
            "topology has none (the host's lo is not qprof's to change); use --topology netns."
        )
    for names, v in ((TCP_GSO_FEATURES, gso), (TCP_GRO_FEATURES, gro)):
        if v is not None:
            p.devices.update({n: v for n in names})


def parse_features(text: str) -> Dict[str, str]:
    """`ethtool -k DEV`'s output: feature name -> its state as ethtool
    says it ("on", "off [fixed]", "on [requested off]"); the header has none."""
    out = {}
    for line in text.splitlines():
        name, _, state = line.strip().partition(":")
        if state.strip():
            out[name] = state.strip()
    return out


def argv_with_env(env: Dict[str, str], argv: List[str]) -> List[str]:
    """argv run with env added (through env(1), so the pid stays the workload's)."""
    return ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else list(argv)


# --- device features (tcp) -----------------------------------------------------


# --- observation -----------------------------------------------------------------


def _share(num, den) -> Optional[float]:
    return num / den if num is not None and den else None


def observe(rec: dict, max_datagram: int) -> dict:
    """What the instruments saw, from a record with probes and derived
    syscall figures: GSO from the sender's transmitted super-packets, GRO
    from the receiver's received sizes (UDP) or GRO entries (TCP). The
    sender is the client, or the server for downloads (the evidence's keys
    name the side). A state no instrument saw is None, never "off"; a TCP
    receiver's GRO is None, with gro_absent_reason, where the packets probe
    did not count what its veth received (--packets-rx)."""
    transport = "quic" if is_quic(rec["stack"]) else "udp" if rec["stack"] == "udp" else "tcp"
    sender, receiver = ("server", "client") if rec["config"].get("pattern") == "download" else ("client", "server")
    dev = derive.packets_devices(rec)
    sender_tx = dev[sender]["tx"] if dev.get(sender) else None
    receiver_rx = dev[receiver]["rx"] if dev.get(receiver) else None
    sys_sender = (rec.get("syscalls") or {}).get(sender)
    sys_receiver = (rec.get("syscalls") or {}).get(receiver)
    ev: dict = {}
    gso = gro = gro_absent = None
    proto_skbs = "udp_skbs" if transport in ("quic", "udp") else "tcp_skbs"
    if sender_tx is not None:
        ev[f"{sender}_tx_skbs"] = sender_tx.get(proto_skbs)
        ev[f"{sender}_tx_gso_skbs"] = sender_tx.get("gso_skbs")
        ev[f"{sender}_tx_gso_share"] = _share(sender_tx.get("gso_skbs"), sender_tx.get(proto_skbs))
        ev[f"{sender}_tx_wire_packets"] = sender_tx.get("wire_packets")
        gso = "on" if sender_tx.get("gso_skbs") else "off"
    if sys_sender is not None:
        ev["datagrams_per_send_call"] = sys_sender.get("datagrams_per_send_call")
        ev["bytes_per_send_call"] = sys_sender.get("bytes_per_send_call")
    if transport in ("quic", "udp"):
        if sys_receiver is not None:
            nbytes, msgs = _recv_bytes_and_messages(sys_receiver["by_syscall"])
            per_msg = nbytes / msgs if msgs else None
            ev["recv_bytes_per_message"] = per_msg
            ev["max_datagram_bytes"] = max_datagram
            if per_msg is not None:
                # Coalesced: more bytes than a datagram per message, past
                # what the edges can tear (EDGE_TORN_CALLS).
                gro = "on" if nbytes > (msgs + EDGE_TORN_CALLS) * max_datagram else "off"
        if transport == "udp":
            own = ((rec.get("workload") or {}).get("server") or {}).get("window") or {}
            if own.get("gro_segments") is not None:
                ev["receiver_coalesced_messages"] = own["gro_segments"]
    elif receiver_rx is not None:
        ev[f"{receiver}_rx_gro_entries"] = receiver_rx.get("gro_entry")
        ev[f"{receiver}_rx_gso_skbs"] = receiver_rx.get("gso_skbs")
        gro = "on" if receiver_rx.get("gro_entry") else "off"
    elif dev.get(receiver):
        gro_absent = derive.RX_ABSENT
    env = rec.get("environment") or {}
    own_view = None
    if transport == "quic" and "quic_library" in env:
        own_view = {
            "gso": onoff(env["quic_library"]["send_segmentation"].get(sender)),
            "gro": onoff(env["quic_library"]["recv_coalescing"].get(receiver)),
        }
    elif transport == "quic" and "msquic_send_segmentation" in env:  # records before quic_library
        own_view = {
            "gso": onoff(env["msquic_send_segmentation"].get(sender)),
            "gro": onoff(env["msquic_recv_coalescing"].get(receiver)),
        }
    # Whether GRO had anything to do: a UDP socket's GRO keeps super-packets
    # whole (the veth's own GRO is off), while a veth's GRO merges only
    # packets that were not super-packets already (veth passes TSO skbs
    # straight through).
    if transport in ("quic", "udp"):
        applies = gso == "on" if gso is not None else None
    else:
        applies = gso == "off" if gso is not None else None
    return {
        "gso": gso,
        "gro": gro,
        "gro_absent_reason": gro_absent,
        "gro_applies": applies,
        "evidence": ev,
        "stack_reports": own_view,
    }


def onoff(v: Optional[bool]) -> Optional[str]:
    """True/False as on/off; None (not seen) stays None."""
    return None if v is None else ("on" if v else "off")


# The syscalls probe adds a call's count and then its bytes, and an edge
# reads the two apart: a call that ends as an edge is read can be in one
# and not the other, once at each edge. A CI run with GRO off read 1472
# bytes per message, one datagram more than its messages, and was refused.
EDGE_TORN_CALLS = 2


def _recv_bytes_and_messages(calls: dict) -> Tuple[int, int]:
    msgs = nbytes = 0
    for name in ("recvmmsg", "recvmsg", "recvfrom"):
        c = calls.get(name)
        if not c:
            continue
        nbytes += c["bytes"]
        msgs += c["msgs_returned"] if name == "recvmmsg" else c["calls"] - c["errors"]
    return nbytes, msgs


def contradictions(effective: Dict[str, Optional[str]], observed: dict) -> List[str]:
    """Sentences for each way the observation contradicts the request."""
    out = []
    ev = observed["evidence"]
    gso, gro = effective.get("gso"), effective.get("gro")
    if gso == "off" and observed["gso"] == "on":
        out.append(f"GSO was set off but the client sent {ev.get('client_tx_gso_skbs')} super-packets")
    if gso == "on" and observed["gso"] == "off":
        out.append("GSO was set on but the client sent no super-packets")
    if gro == "off" and observed["gro"] == "on":
        what = (
            f"received {ev.get('recv_bytes_per_message'):.0f} bytes per message, more than one datagram"
            if "recv_bytes_per_message" in ev
            else f"its device ran GRO {ev.get('server_rx_gro_entries')} times"
        )
        out.append(f"GRO was set off but the server {what}")
    if gro == "on" and observed["gro"] == "off" and observed.get("gro_applies"):
        out.append("GRO was set on but the server saw no coalesced receive")
    if observed.get("stack_reports"):
        for k in ("gso", "gro"):
            want, said = effective.get(k), observed["stack_reports"].get(k)
            if want and said and want != said:
                out.append(f"{k.upper()} was set {want} but msquic reports it {said}")
    if ev.get("receiver_coalesced_messages") and gro == "off":
        out.append(f"GRO was set off but the receiver counted {ev['receiver_coalesced_messages']} coalesced messages")
    return out


def verify(effective: Dict[str, Optional[str]], observed: dict) -> None:
    found = contradictions(effective, observed)
    if found:
        raise errors.OffloadContradiction(
            f"the run's observed offload state contradicts its request: {'; '.join(found)}; "
            "the record keeps both (offload) and the run is not a result."
        )
