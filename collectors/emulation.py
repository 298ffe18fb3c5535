# SPDX-License-Identifier: GPL-2.0-only
"""A --link in place: the plan of describe/link.py built with `tc` on
each veth's egress (on hosts: each named device's, --link-dev), read back
from the kernel, its counters read at a window's edges, a bulk window's
wait for the link to fill, and (on hosts, where no namespace takes it
away) the link removed."""

import json
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, List, Optional

from qprof.describe.link import (
    COUNTERS,
    SATURATED,
    SATURATION_CAP_S,
    SATURATION_INTERVAL_S,
    STEADY_INTERVALS,
    STEADY_SPREAD,
    TC_TIMEOUT_S,
    Link,
    plan,
)
from qprof.errors import BadLink, LinkUnsupported


def _tc(ep, args: List[str]) -> subprocess.CompletedProcess:
    """tc where the endpoint is: its namespace here, or its host (through its command)."""
    argv = ["tc", "-n", ep.netns, *args] if ep.netns else ep.command(["tc", *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=TC_TIMEOUT_S)


def remove(endpoints: Dict[str, "object"]) -> None:
    """The link taken off each endpoint's device (its root qdisc deleted:
    the device's default comes back); what is already gone is no error."""
    for ep in endpoints.values():
        try:
            _tc(ep, ["qdisc", "del", "dev", ep.ifname, "root"])
        except (OSError, subprocess.TimeoutExpired):
            pass


@dataclass
class Emulated:
    """A link in place on a run's veths: what the window's edges read, and
    what the measurement keeps (`applied`: the plan, the qdiscs read back,
    and how the bulk window waited for the link to fill)."""

    spec: Link
    endpoints: Dict[str, object]  # side -> topology.Endpoint
    applied: dict


def apply(link: Link, endpoints: Dict[str, "object"], mtu: int) -> Emulated:
    """Build the plan on each endpoint's veth (the qdiscs go with the
    namespaces) and read back what the kernel has.

    On hosts each side is its own kernel, and one may lack sch_netem (this
    machine's does). A round trip is the sum of both directions' delays,
    so, as netem is used on one host's egress, the whole RTT then goes on
    the side that has it, and the other direction gets the rate alone; the
    record says so (link.one_sided). Loss and jitter are each direction's
    own, which a direction without netem cannot give: refused."""
    p = plan(link, mtu)
    lacking = {side: why for side, ep in endpoints.items() if (why := _build(ep, side, p)) is not None}
    applied: dict = {"plan": asdict(p)}
    if lacking:
        remove(endpoints)
        plans = _one_sided(link, mtu, endpoints, lacking)
        for side, ep in endpoints.items():
            if _build(ep, side, plans[side]) is not None:
                raise LinkUnsupported(f"the kernel of {_where(ep)} took netem, then refused it; run again.")
        (has,) = [s for s in endpoints if s not in lacking]
        (lacks,) = lacking
        applied["plans"] = {side: asdict(pl) for side, pl in plans.items()}
        applied["one_sided"] = {
            "netem_on": has,
            "delay_s": link.rtt_s,
            "reason": f"the {lacks}'s device {endpoints[lacks].ifname} ({_where(endpoints[lacks])}) has no "
            f"sch_netem ({lacking[lacks]}); the whole round trip's delay is on the {has}'s egress, as the RTT "
            f"asked, and the {lacks}'s egress has the rate alone",
        }
    qdiscs = {side: read_qdiscs(ep) for side, ep in endpoints.items()}
    return Emulated(link, endpoints, {**applied, "qdiscs": qdiscs, "before_window": None})


def _where(ep) -> str:
    host = getattr(ep, "host", None)
    return "this machine" if host is None else host.name


def _build(ep, side: str, p) -> Optional[str]:
    """p's qdiscs on ep's device; why its kernel has no netem (None: built).
    Any other refusal raises, in one sentence."""
    for args in p.commands(ep.ifname):
        r = _tc(ep, args)
        if r.returncode == 0:
            continue
        why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1].removeprefix("Error: ")
        kind = args[args.index("handle") + 2] if "handle" in args else "?"
        if "qdisc kind is unknown" in why and kind == "netem":
            return why.rstrip(".")
        if "qdisc kind is unknown" in why:
            raise LinkUnsupported(
                f"the kernel of {_where(ep)} has no sch_{kind}, which --link needs; load it there "
                f"(modprobe sch_{kind}) or drop --link."
            )
        dev = f"{ep.ifname} on {_where(ep)}" if getattr(ep, "host", None) is not None else f"{side}'s veth"
        raise BadLink(f"the kernel refused the link on {dev}: `tc {' '.join(args)}`: {why}.")
    return None


def _one_sided(link: Link, mtu: int, endpoints: Dict[str, "object"], lacking: Dict[str, str]) -> dict:
    """Each side's plan when only one side's kernel has netem (hosts), or
    the refusal: no side has it, or the link asks for what only netem on
    both directions gives (loss, jitter)."""
    if len(lacking) == len(endpoints):
        if all(getattr(ep, "host", None) is None for ep in endpoints.values()):
            raise LinkUnsupported(
                "this kernel has no sch_netem, which --link needs; "
                "run it in the guest with --guest (Debian's kernel has it)."
            )
        said = "; ".join(f"{_where(endpoints[s])}: {why}" for s, why in lacking.items())
        raise LinkUnsupported(
            f"no side's kernel has sch_netem, which --link's round trip needs on at least one side ({said}); "
            "load it on one (modprobe sch_netem), or give --link a rate alone."
        )
    (lacks,) = lacking
    if link.loss_percent or link.jitter_s:
        raise LinkUnsupported(
            f"the {lacks}'s kernel ({_where(endpoints[lacks])}) has no sch_netem ({lacking[lacks]}), so its "
            "direction cannot lose or jitter packets as --link asks; load it there (modprobe sch_netem), or drop "
            "loss and jitter (a round trip alone goes on the other side's egress, whose kernel has netem)."
        )
    whole = plan(link, mtu, delay_s=link.rtt_s)
    rate_only = replace(whole, delay_s=0.0, jitter_s=0.0, loss_percent=0.0, netem_limit=None, netem_rate_bit=None)
    return {side: rate_only if side == lacks else whole for side in endpoints}


def read_qdiscs(ep) -> Optional[List[dict]]:
    """`tc -s -j qdisc show` of the endpoint's veth, as the kernel gives it."""
    try:
        r = _tc(ep, ["-s", "-j", "qdisc", "show", "dev", ep.ifname])
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return json.loads(r.stdout or "[]")


def wait_saturated(
    ep, link: Link, sleep: Callable[[float], None], root_bytes=None, clock: Callable[[], float] = time.monotonic
) -> dict:
    """After the warm-up of a bulk run: sample the root qdisc's bytes on
    the data's direction (ep's egress) until one interval carried SATURATED
    of the rate, or the last STEADY_INTERVALS carried the same (the flow
    will not fill the link: its sender's CPU, or its congestion control,
    holds it), or give up at the cap (a lossy link's flow may neither fill
    it nor settle: the window then starts anyway). The record says which
    (`saturated`, `steady`). root_bytes and clock: the counter and the
    time (tests stand theirs in)."""
    root_bytes = root_bytes or _root_bytes
    interval = max(2 * link.rtt_s, SATURATION_INTERVAL_S)
    cap = max(SATURATION_CAP_S, 10 * link.rtt_s)
    t0 = t_last = clock()
    last = root_bytes(ep)
    utils: List[float] = []
    while last is not None:
        sleep(interval)
        now, got = clock(), root_bytes(ep)
        if got is None:
            break
        utils.append((got - last) * 8 / (now - t_last) / link.rate_bit)
        recent = utils[-STEADY_INTERVALS:]
        steady = len(recent) == STEADY_INTERVALS and max(recent) - min(recent) <= STEADY_SPREAD * max(recent)
        if utils[-1] >= SATURATED or steady or now - t0 >= cap:
            saturated = utils[-1] >= SATURATED
            return {
                "saturated": saturated,
                "steady": steady and not saturated,
                "waited_s": now - t0,
                "interval_s": interval,
                "utilisation": utils[-1],
            }
        last, t_last = got, now
    return {
        "saturated": None,
        "steady": None,
        "waited_s": clock() - t0,
        "interval_s": interval,
        "utilisation": utils[-1] if utils else None,
    }


def _root_bytes(ep) -> Optional[int]:
    qds = read_qdiscs(ep)
    root = next((q for q in qds or () if q.get("root")), None)
    return None if root is None else int(root.get("bytes", 0))


def read_counters(endpoints: Dict[str, "object"]) -> Dict[str, Optional[Dict[str, dict]]]:
    """Per side, per qdisc kind: the counters (a window edge reads them),
    each with the instant they were read (t_ns, this host's monotonic
    clock: the middle of the `tc` call): an edge reads them after the CPU
    and the marks, tens of ms later on a loaded machine, and more at one
    edge than the other, so a rate over them is over their own interval."""
    out = {}
    for side, ep in endpoints.items():
        t0 = time.monotonic_ns()
        qds = read_qdiscs(ep)
        t_ns = (t0 + time.monotonic_ns()) // 2
        out[side] = (
            None
            if qds is None
            else {q["kind"]: {**_counters(q), "t_ns": t_ns} for q in qds if q["kind"] in ("tbf", "netem")}
        )
    return out


def _counters(q: dict) -> dict:
    return {k: int(q.get(k, 0)) for k in COUNTERS}
