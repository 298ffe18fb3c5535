# SPDX-License-Identifier: GPL-2.0-only
"""GSO and GRO: what a run asks for, how each stack is made to honour it,
and what the instruments saw.

The knobs are where each stack decides:
- quic: msquic probes UDP_SEGMENT/UDP_GRO once at start-up and falls back
  on failure. An LD_PRELOAD interposer (workloads/preload/) makes that
  probe fail for the workload process only; msquic is never patched.
  msquic 2.5.1 tests GRO only after its GSO send succeeded, so GSO off
  means GRO off too (its row's gro_needs_gso).
- quinn, ngtcp2, quiche, tquic: each probes UDP_SEGMENT and sets UDP_GRO on its
  sockets, so the same interposer steers them; GSO and GRO are
  independent there. quinn and ngtcp2 take UDP_GRO's setsockopt at its
  word, which the interposer gives while leaving GRO off: under --gro off
  their own report of GRO is not evidence (their rows' gro_word), the
  probes' view of what the receiver got is.
- quic-go: Go makes its system calls itself, past any interposer, so
  --gso off is quic-go's own QUIC_GO_DISABLE_GSO, set by its transport
  from the interposer's setting; quic-go never asks for GRO (its row's
  gro_word "none"), so --gro on is refused.
- udp: the workload's own send mode (gso, or sendmmsg of single
  datagrams) and the receiver's UDP_GRO socket option.
- tcp stacks: TSO/GSO and GRO of the run's veth pair (ethtool in each
  namespace); the host's loopback is not ours to change.

Observed state comes from the probes and the stacks' own counters, and a
run whose observation contradicts its request is an error, not a result.
"""

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

from qprof import errors
from qprof.describe import derive, direction, options, patterns, transports

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
    if udp_only and not transports.datagram(stack_name):
        raise errors.StackCannot(f"--{udp_only[0]} applies to --stack udp only; drop it or use --stack udp.")
    p = OffloadPlan(requested={"gso": gso, "gro": gro}, effective={"gso": gso, "gro": gro})
    if is_quic(stack_name):
        _plan_quic(p, transports.STACKS[stack_name], gso, gro)
    elif transports.datagram(stack_name):
        _plan_udp(p, gso, gro, send_mode, batch, dgram_size)
    else:
        _plan_tcp(p, topology, gso, gro)
    return p


def _plan_quic(p: OffloadPlan, stack: transports.Stack, gso, gro) -> None:
    if stack.gro_word == "none" and gro == "on":
        raise errors.StackCannot(
            f"{stack.library} never asks the kernel for GRO (each datagram is a receive of its own), so "
            f"{stack.name} cannot run with --gro on; drop it (--gro off is what {stack.name} does anyway)."
        )
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


def _roles(rec: dict) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """The sides that send the measured bytes and those that receive them
    (describe/direction.py), from the record's config."""
    cfg = rec.get("config") or {}
    said = SimpleNamespace(pattern=cfg.get("pattern") or "bulk", direction=cfg.get("direction"))
    return direction.senders(said), direction.receivers(said)


def observe(rec: dict, max_datagram: int) -> dict:
    """What the instruments saw, from a record with probes and derived
    syscall figures: GSO from each sender's transmitted super-packets, GRO
    from each receiver's received sizes (UDP) or GRO entries (TCP). The
    senders are whoever sends the measured bytes (the client, the server
    for downloads and --direction down, both for --direction both), each
    side's view in sides; gso and gro say "on" where any side saw it, "off"
    where every side counted saw none. Evidence keys name the side, but for
    the syscall figures of a run one way (its one sender and receiver). A
    state no instrument saw is None, never "off"; a TCP receiver's GRO is
    None, with gro_absent_reason, where the packets probe did not count
    what its veth received (--packets-rx)."""
    transport = "quic" if is_quic(rec["stack"]) else "udp" if transports.datagram(rec["stack"]) else "tcp"
    senders, receivers = _roles(rec)
    one_way = len(senders) == 1 and len(receivers) == 1

    def key(side: str, name: str) -> str:
        return name if one_way else f"{side}_{name}"

    dev = derive.packets_devices(rec)
    syscalls = rec.get("syscalls") or {}
    reports = _library_reports(rec) if transport == "quic" else None
    ev: dict = {}
    sides = {
        role: {
            "sends": role in senders,
            "receives": role in receivers,
            "gso": None,
            "gro": None,
            "gro_applies": None,
            "gso_applies": None,
            "stack_reports": None,
        }
        for role in direction.ROLES
    }
    proto_skbs = "udp_skbs" if transport in ("quic", "udp") else "tcp_skbs"
    for s in senders:
        tx = dev[s]["tx"] if dev.get(s) else None
        if tx is not None:
            ev[f"{s}_tx_skbs"] = tx.get(proto_skbs)
            ev[f"{s}_tx_gso_skbs"] = tx.get("gso_skbs")
            ev[f"{s}_tx_gso_share"] = _share(tx.get("gso_skbs"), tx.get(proto_skbs))
            ev[f"{s}_tx_wire_packets"] = tx.get("wire_packets")
            sides[s]["gso"] = "on" if tx.get("gso_skbs") else "off"
        sides[s]["gso_applies"] = _has_a_backlog(rec, s, max_datagram)
        if syscalls.get(s) is not None:
            ev[key(s, "datagrams_per_send_call")] = syscalls[s].get("datagrams_per_send_call")
            ev[key(s, "bytes_per_send_call")] = syscalls[s].get("bytes_per_send_call")
    gro_absent = None
    for r in receivers:
        if transport in ("quic", "udp"):
            if syscalls.get(r) is not None:
                nbytes, msgs, most = _recv_bytes_and_messages(syscalls[r]["by_syscall"])
                per_msg = nbytes / msgs if msgs else None
                ev[key(r, "recv_bytes_per_message")] = per_msg
                ev["max_datagram_bytes"] = max_datagram
                if per_msg is not None:
                    # Coalesced: more bytes than a datagram per message, past
                    # what the edges can tear (EDGE_TORN_CALLS, each a call's datagrams).
                    torn = EDGE_TORN_CALLS * most
                    sides[r]["gro"] = "on" if nbytes > (msgs + torn) * max_datagram else "off"
        elif dev.get(r) and dev[r].get("rx") is not None:
            ev[f"{r}_rx_gro_entries"] = dev[r]["rx"].get("gro_entry")
            ev[f"{r}_rx_gso_skbs"] = dev[r]["rx"].get("gso_skbs")
            sides[r]["gro"] = "on" if dev[r]["rx"].get("gro_entry") else "off"
        elif dev.get(r):
            gro_absent = derive.RX_ABSENT
        # Whether GRO had anything to do: a UDP socket's GRO keeps super-packets
        # whole (the veth's own GRO is off), while a veth's GRO merges only
        # packets that were not super-packets already (veth passes TSO skbs
        # straight through).
        peer_gso = sides[direction.other(r)]["gso"]
        if peer_gso is not None:
            sides[r]["gro_applies"] = peer_gso == ("on" if transport in ("quic", "udp") else "off")
    if transport == "udp":
        own = ((rec.get("workload") or {}).get("server") or {}).get("window") or {}
        if own.get("gro_segments") is not None:
            ev["receiver_coalesced_messages"] = own["gro_segments"]
    own_view = None
    if reports is not None:
        for role in direction.ROLES:
            sides[role]["stack_reports"] = {
                "gso": reports["gso"].get(role) if role in senders else None,
                "gro": reports["gro"].get(role) if role in receivers else None,
            }
        own_view = {
            "library": reports["library"],
            "gso": _any_on(sides[s]["stack_reports"]["gso"] for s in senders),
            "gro": _any_on(sides[r]["stack_reports"]["gro"] for r in receivers),
        }
    return {
        "gso": _any_on(sides[s]["gso"] for s in senders),
        "gro": _any_on(sides[r]["gro"] for r in receivers),
        "gro_absent_reason": gro_absent,
        "gro_applies": _any_on(sides[r]["gro_applies"] for r in receivers),
        "evidence": ev,
        "stack_reports": own_view,
        "sides": sides,
    }


def _has_a_backlog(rec: dict, role: str, max_datagram: int) -> bool:
    """Whether the role ever had more than a datagram to send at once, so
    that GSO on must show as super-packets: its pattern's row says
    (a bulk or download sender always; handshakes never)."""
    cfg = rec.get("config") or {}
    return patterns.row(SimpleNamespace(**cfg)).backlog(cfg, role, max_datagram)


def _any_on(states):
    """One state for several sides: on (True) where any side saw it, off
    (False) where every side counted saw none, None where none was counted."""
    seen = [x for x in states if x is not None]
    if not seen:
        return None
    return next((x for x in seen if x in ("on", True)), seen[0])


def _library_reports(rec: dict) -> Optional[dict]:
    """A QUIC library's own word on GSO and GRO, per side, where it is
    evidence: a library whose word on GRO is UDP_GRO's setsockopt (its
    row's gro_word) says nothing under --gro off, which the interposer
    carries out by taking that setsockopt and ignoring it."""
    env = rec.get("environment") or {}
    stack = transports.STACKS[rec["stack"]]
    if "quic_library" in env:
        gso, gro = env["quic_library"]["send_segmentation"], env["quic_library"]["recv_coalescing"]
    elif "msquic_send_segmentation" in env:  # records before quic_library
        gso, gro = env["msquic_send_segmentation"], env["msquic_recv_coalescing"]
    else:
        return None
    if stack.gro_word == "setsockopt" and (rec.get("config") or {}).get("gro") == "off":
        gro = {}
    return {
        "library": stack.library,
        "gso": {role: onoff(gso.get(role)) for role in direction.ROLES},
        "gro": {role: onoff(gro.get(role)) for role in direction.ROLES},
    }


def onoff(v: Optional[bool]) -> Optional[str]:
    """True/False as on/off; None (not seen) stays None."""
    return None if v is None else ("on" if v else "off")


# The syscalls probe adds a call's messages and then its bytes, and an
# edge reads the two apart: a call that ends as an edge is read can be in
# one and not the other, once at each edge. A CI run with GRO off read
# 1472 bytes per message, one datagram more than its messages, and was
# refused; another, msquic's recvmmsg, 53 datagrams' bytes (one call's)
# more, so a torn call is as many datagrams as one call takes.
EDGE_TORN_CALLS = 2


def _recv_bytes_and_messages(calls: dict) -> Tuple[int, int, int]:
    """The receive calls' bytes and messages, and the most messages one
    call asks for (recvmmsg's vector, by the probe's mean; else one)."""
    msgs = nbytes = 0
    most = 1
    for name in ("recvmmsg", "recvmsg", "recvfrom"):
        c = calls.get(name)
        if not c:
            continue
        nbytes += c["bytes"]
        msgs += c["msgs_returned"] if name == "recvmmsg" else c["calls"] - c["errors"]
        done = c["calls"] - c["errors"]
        if name == "recvmmsg" and done and c.get("msgs_requested"):
            most = max(most, math.ceil(c["msgs_requested"] / done))
    return nbytes, msgs, most


def contradictions(effective: Dict[str, Optional[str]], observed: dict) -> List[str]:
    """Sentences for each way the observation contradicts the request,
    each naming the side that showed it and, for its own report, the library."""
    out = []
    ev = observed["evidence"]
    gso, gro = effective.get("gso"), effective.get("gro")
    sides = observed.get("sides") or _sides_before(observed)
    library = (observed.get("stack_reports") or {}).get("library", "msquic")  # records before it: msquic's
    for role, seen in sides.items():
        if seen["sends"] and gso == "off" and seen["gso"] == "on":
            out.append(f"GSO was set off but the {role} sent {ev.get(f'{role}_tx_gso_skbs')} super-packets")
        if seen["sends"] and gso == "on" and seen["gso"] == "off" and seen.get("gso_applies", True):
            out.append(f"GSO was set on but the {role} sent no super-packets")
        if seen["receives"] and gro == "off" and seen["gro"] == "on":
            per_msg = ev.get("recv_bytes_per_message", ev.get(f"{role}_recv_bytes_per_message"))
            what = (
                f"the {role} received {per_msg:.0f} bytes per message, more than one datagram"
                if per_msg is not None
                else f"the {role}'s veth ran GRO {ev.get(f'{role}_rx_gro_entries')} times"
            )
            out.append(f"GRO was set off but {what}")
        if seen["receives"] and gro == "on" and seen["gro"] == "off" and seen["gro_applies"]:
            out.append(f"GRO was set on but the {role} saw no coalesced receive")
        for k in ("gso", "gro"):
            want, said = effective.get(k), (seen.get("stack_reports") or {}).get(k)
            if want and said and want != said:
                out.append(f"{k.upper()} was set {want} but the {role}'s {library} reports it {said}")
    if ev.get("receiver_coalesced_messages") and gro == "off":
        out.append(f"GRO was set off but the receiver counted {ev['receiver_coalesced_messages']} coalesced messages")
    return out


def _sides_before(observed: dict) -> dict:
    """An observation without sides (before 2026-11-28): the client's
    sends and the server's receives."""
    said = observed.get("stack_reports") or {}
    return {
        "client": {"sends": True, "receives": False, "gso": observed["gso"], "stack_reports": {"gso": said.get("gso")}},
        "server": {
            "sends": False,
            "receives": True,
            "gro": observed["gro"],
            "gro_applies": observed.get("gro_applies"),
            "stack_reports": {"gro": said.get("gro")},
        },
    }


def verify(effective: Dict[str, Optional[str]], observed: dict) -> None:
    found = contradictions(effective, observed)
    if found:
        raise errors.OffloadContradiction(
            f"the run's observed offload state contradicts its request: {'; '.join(found)}; "
            "the record keeps both (offload) and the run is not a result."
        )
