# SPDX-License-Identifier: GPL-2.0-only
"""A --link in place: the plan of describe/link.py built with `tc` on
each veth's egress (on hosts: each named device's, --link-dev), read back
from the kernel, its counters read at a window's edges, a bulk window's
wait for the link to fill, and (on hosts, where no namespace takes it
away) the link removed."""

import json
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional

from qprof.describe.link import (
    COUNTERS,
    SATURATED,
    SATURATION_CAP_S,
    SATURATION_INTERVAL_S,
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
    namespaces) and read back what the kernel has."""
    p = plan(link, mtu)
    for side, ep in endpoints.items():
        for args in p.commands(ep.ifname):
            r = _tc(ep, args)
            if r.returncode != 0:
                why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1].removeprefix("Error: ")
                host = getattr(ep, "host", None)
                kind = args[args.index("handle") + 2] if "handle" in args else "?"
                if "qdisc kind is unknown" in why and host is not None:
                    raise LinkUnsupported(
                        f"the kernel of {host.name} has no sch_{kind}, which --link needs; load it there "
                        f"(modprobe sch_{kind}) or drop --link."
                    )
                if "qdisc kind is unknown" in why:
                    raise LinkUnsupported(
                        f"this kernel has no sch_{kind}, which --link needs; "
                        "run it in the guest with --guest (Debian's kernel has it)."
                    )
                dev = f"{ep.ifname} on {host.name}" if host is not None else f"{side}'s veth"
                raise BadLink(f"the kernel refused the link on {dev}: `tc {' '.join(args)}`: {why}.")
    qdiscs = {side: read_qdiscs(ep) for side, ep in endpoints.items()}
    return Emulated(link, endpoints, {"plan": asdict(p), "qdiscs": qdiscs, "before_window": None})


def read_qdiscs(ep) -> Optional[List[dict]]:
    """`tc -s -j qdisc show` of the endpoint's veth, as the kernel gives it."""
    try:
        r = _tc(ep, ["-s", "-j", "qdisc", "show", "dev", ep.ifname])
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return json.loads(r.stdout or "[]")


def wait_saturated(ep, link: Link, sleep: Callable[[float], None]) -> dict:
    """After the warm-up of a bulk run: sample the root qdisc's bytes on
    the data's direction (ep's egress) until one interval carried SATURATED
    of the rate, or give up at the cap (a lossy link may never fill: the
    window then starts anyway, and the record says so)."""
    interval = max(2 * link.rtt_s, SATURATION_INTERVAL_S)
    cap = max(SATURATION_CAP_S, 10 * link.rtt_s)
    t0 = t_last = time.monotonic()
    last = _root_bytes(ep)
    util = None
    while last is not None:
        sleep(interval)
        now, got = time.monotonic(), _root_bytes(ep)
        if got is None:
            break
        util = (got - last) * 8 / (now - t_last) / link.rate_bit
        if util >= SATURATED or now - t0 >= cap:
            return {"saturated": util >= SATURATED, "waited_s": now - t0, "interval_s": interval, "utilisation": util}
        last, t_last = got, now
    return {"saturated": None, "waited_s": time.monotonic() - t0, "interval_s": interval, "utilisation": util}


def _root_bytes(ep) -> Optional[int]:
    qds = read_qdiscs(ep)
    root = next((q for q in qds or () if q.get("root")), None)
    return None if root is None else int(root.get("bytes", 0))


def read_counters(endpoints: Dict[str, "object"]) -> Dict[str, Optional[Dict[str, dict]]]:
    """Per side, per qdisc kind: the counters (a window edge reads them)."""
    out = {}
    for side, ep in endpoints.items():
        qds = read_qdiscs(ep)
        out[side] = None if qds is None else {q["kind"]: _counters(q) for q in qds if q["kind"] in ("tbf", "netem")}
    return out


def _counters(q: dict) -> dict:
    return {k: int(q.get(k, 0)) for k in COUNTERS}
