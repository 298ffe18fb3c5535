# SPDX-License-Identifier: GPL-2.0-only
"""An emulated link between the run's two namespaces, made of the kernel's
own queueing disciplines: netem for delay, jitter and loss, tbf for rate.

A link is given as a preset, as key=value pairs, or as a preset with some
of its values overridden (`lte,loss=1%`). The presets are the four link
profiles of seed 002 (Krinkin & Dronnikov), exactly as that study gives
them. The same qdiscs go on both veths, each on its device's egress, so
each direction carries half the RTT, the whole rate, and its own
independent loss.

netem applies loss and delay to whole queued packets (skbs). A sender's
GSO or TSO super-packet is one skb of up to 64 KiB, so netem alone would
lose or delay tens of wire packets at once. With a rate, tbf is the root
qdisc and netem its child: tbf splits a GSO packet larger than its burst
into wire packets before they reach netem (in the sender's context: a cost
a NIC with segmentation offload would not have), so loss and delay act on
wire packets. A link with loss or jitter and no rate has no tbf to split
them: it turns off GSO (run.json `offload` says so), so every packet the
sender hands netem is a wire packet.

netem orders its queue by each packet's departure time, so jitter alone
reorders packets. A link never reorders: with jitter, netem gets a rate
too (the link's own, or NETEM_ORDER_RATE_BIT without one), under which it
sends each packet no earlier than the one before it.

The queue: a rate limit needs a queue in front of it. Its default is one
bandwidth-delay product of packets (at least QUEUE_MIN_PACKETS), the
rule of thumb for a single flow's buffer; `queue=N` sets it. netem holds
the packets in its delay line in the same queue, so its limit is the
queue plus what is in flight over the delay.

Everything applied is read back from the kernel (`tc -s -j qdisc show`)
into the record, with each qdisc's counters at the window's edges.
"""

import math
import re
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

from qprof.errors import BadLink

# Seed 002: RTT, loss, bandwidth of its four profiles.
PRESETS: Dict[str, dict] = {
    "wifi": {"rtt_s": 0.110, "loss_percent": 0.5, "rate_bit": 2_200_000},
    "lte": {"rtt_s": 0.250, "loss_percent": 0.7, "rate_bit": 2_000_000},
    "3g": {"rtt_s": 0.550, "loss_percent": 0.5, "rate_bit": 1_000_000},
    "2g": {"rtt_s": 0.900, "loss_percent": 2.5, "rate_bit": 200_000},
}
KEYS = ("rtt", "loss", "rate", "jitter", "queue")
KEY_HELP = "rtt=100ms, loss=1%, rate=2.2mbit, jitter=5ms, queue=PACKETS"
QUEUE_MIN_PACKETS = 10
# A rate limit's queue holds at least this long at the rate: a link with no
# RTT of its own (rate only) still has the veths' and the scheduler's, and a
# queue of one BDP of zero is ten packets, which drops most of one GSO packet
# (at 5 ms, 100 Mbit/s still lost the tail of a 64 KiB one: 0.91 of the rate).
QUEUE_FLOOR_S = 0.010
# tbf's bucket holds this long at the rate, at least one wire packet: tc-tbf(8)
# wants a burst of at least rate/HZ to reach the rate; one packet lets tbf send
# one packet per timer wake-up (0.4 of 1 Gbit/s was all it reached).
TBF_BURST_S = 0.001
NETEM_ORDER_RATE_BIT = 100_000_000_000  # keeps netem's jitter in order; far above any veth's speed
NETEM_LIMIT_NO_RATE = 100_000  # packets in the delay line with no rate: ~1 s of a 1 Gbit/s flow
MAX_RTT_S = 60.0
# A direction carrying at least this share of its rate is full (the link's limit).
# CPU this busy (the machine, or one process on its one CPU) is the host's limit.
SATURATED = 0.9
# A bulk window starts once an interval of max(2 RTT, this) carried SATURATED
# of the rate; or once the last STEADY_INTERVALS carried the same within
# STEADY_SPREAD of their largest (the flow is as fast as it gets: a sender
# whose CPU cannot fill the link); or after max(SATURATION_CAP_S, 10 RTT).
SATURATION_INTERVAL_S = 0.25
SATURATION_CAP_S = 5.0
STEADY_INTERVALS = 3
STEADY_SPREAD = 0.05
TBF_BURST_SLACK = 100  # bytes over the MTU: the Ethernet header, and tc's rounding of the burst
TC_TIMEOUT_S = 10.0

# ASCII digits only, and at most MAX_DIGITS before the point: no value
# that long is a link, and float() makes infinity of more.
MAX_DIGITS = 12
_NUMBER = rf"(\d{{1,{MAX_DIGITS}}}(?:\.\d+)?)"
_DURATION = re.compile(rf"{_NUMBER}(us|ms|s)", re.ASCII)
_DURATION_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_RATE = re.compile(rf"{_NUMBER}(bit|kbit|mbit|gbit)", re.ASCII)
_RATE_BIT = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_PERCENT = re.compile(rf"{_NUMBER}%", re.ASCII)
_QUEUE = re.compile(rf"\d{{1,{MAX_DIGITS}}}", re.ASCII)


@dataclass(frozen=True)
class Link:
    """What a user asked for; None is a property the link does not have."""

    rtt_s: float = 0.0
    loss_percent: float = 0.0
    rate_bit: Optional[int] = None
    jitter_s: float = 0.0
    queue_packets: Optional[int] = None  # None: one bandwidth-delay product
    preset: Optional[str] = None

    @property
    def needs_netem(self) -> bool:
        return bool(self.rtt_s or self.loss_percent or self.jitter_s)

    @property
    def qdisc_kinds(self) -> List[str]:
        return (["tbf"] if self.rate_bit else []) + (["netem"] if self.needs_netem else [])

    @property
    def needs_wire_packets(self) -> bool:
        """Loss or jitter with no tbf to split GSO packets: GSO goes off."""
        return not self.rate_bit and bool(self.loss_percent or self.jitter_s)


def parse(text: str) -> Link:
    """`lte`, `rtt=100ms,loss=1%,rate=2.2mbit` or `lte,loss=1%`; BadLink
    with one sentence for anything else."""
    fields: dict = {}
    preset = None
    items = [i.strip() for i in str(text).split(",")]
    if not any(items):
        raise BadLink(f"--link is empty; give a preset ({', '.join(PRESETS)}) or keys such as {KEY_HELP}.")
    seen = set()
    for n, item in enumerate(items):
        if not item:
            raise BadLink(f"--link '{text}' has an empty item; separate presets and keys with single commas.")
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep:
            if key not in PRESETS:
                raise BadLink(f"unknown link preset '{item}'; the presets are: {', '.join(PRESETS)} (seed 002's).")
            if n != 0:
                raise BadLink(f"--link '{text}': a preset comes first, then the keys that override it.")
            preset = key
            fields.update(PRESETS[key])
            continue
        if key not in KEYS:
            raise BadLink(f"unknown --link key '{key}'; the keys are: {KEY_HELP}.")
        if key in seen:
            raise BadLink(f"--link '{text}' gives {key} twice; give it once.")
        seen.add(key)
        fields.update(_parse_key(key, value.strip().lower(), item))
    link = Link(preset=preset, **fields)
    if link.jitter_s > link.rtt_s / 2:
        raise BadLink(
            f"--link jitter {_ms(link.jitter_s)} is more than half the RTT ({_ms(link.rtt_s / 2)} each way), "
            "so a packet would leave before it was sent; lower the jitter or raise the RTT."
        )
    if not (link.rtt_s or link.loss_percent or link.rate_bit):
        raise BadLink(f"--link '{text}' sets no rtt, loss or rate, so it emulates nothing; give at least one.")
    return link


def _parse_key(key: str, value: str, item: str) -> dict:
    if key in ("rtt", "jitter"):
        m = _DURATION.fullmatch(value)
        if not m:
            raise BadLink(f"--link {item}: {key} is a duration such as 100ms, 1s or 500us (not negative).")
        s = float(m.group(1)) * _DURATION_S[m.group(2)]
        if s > MAX_RTT_S:
            raise BadLink(f"--link {item}: {key} above {MAX_RTT_S:g} s is not a link; give a shorter one.")
        return {"rtt_s" if key == "rtt" else "jitter_s": s}
    if key == "loss":
        m = _PERCENT.fullmatch(value)
        if not m:
            raise BadLink(f"--link {item}: loss is a percentage such as 0.5% (with the % sign).")
        p = float(m.group(1))
        if p >= 100:
            raise BadLink(f"--link {item}: a link that loses {p:g}% of packets carries nothing; give less than 100%.")
        return {"loss_percent": p}
    if key == "rate":
        m = _RATE.fullmatch(value)
        if not m:
            raise BadLink(f"--link {item}: rate is bits per second such as 2.2mbit, 500kbit or 1gbit.")
        bit = int(round(float(m.group(1)) * _RATE_BIT[m.group(2)]))
        if bit < 8000:
            raise BadLink(f"--link {item}: rate must be at least 8kbit (one byte per millisecond); raise it.")
        return {"rate_bit": bit}
    if not _QUEUE.fullmatch(value) or int(value) < 1:
        raise BadLink(f"--link {item}: queue is a whole number of packets, at least 1.")
    return {"queue_packets": int(value)}


def with_key(text: Optional[str], key: str, value: str) -> str:
    """A link spec with one key set (or overridden): `qprof compare
    --vary rtt=...` on top of `--link`."""
    return f"{text},{key}={value}" if text else f"{key}={value}"


def _ms(s: float) -> str:
    return f"{s * 1e3:g}ms"


# --- the qdiscs -------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """The qdiscs of one direction (both directions are alike)."""

    delay_s: float
    jitter_s: float
    loss_percent: float
    rate_bit: Optional[int]
    queue_packets: Optional[int]  # packets queued in front of the rate
    queue_source: Optional[str]  # "bdp" (the default) or "given"
    netem_limit: Optional[int]  # the queue plus the delay line
    netem_rate_bit: Optional[int]  # only to keep jitter in order
    tbf_burst_bytes: Optional[int]

    def commands(self, dev: str) -> List[List[str]]:
        """`tc` argument lists (without `tc -n NS`) that build it on dev."""
        cmds = []
        parent = ["root"]
        if self.rate_bit:
            # A burst of one packet (and a little): tbf splits every GSO
            # packet longer than it, so each of two segments or more. With a child qdisc,
            # tbf's own limit is unused (the child is the queue).
            cmds.append(
                ["qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate", f"{self.rate_bit}bit"]
                + ["burst", str(self.tbf_burst_bytes), "limit", str(self._bytes_limit())]
            )
            parent = ["parent", "1:1"]
        if self.netem_limit is not None:
            netem = ["qdisc", "add", "dev", dev, *parent, "handle", "10:", "netem", "limit", str(self.netem_limit)]
            netem += ["delay", f"{round(self.delay_s * 1e6)}us"]
            if self.jitter_s:
                netem += [f"{round(self.jitter_s * 1e6)}us"]
            if self.loss_percent:
                netem += ["loss", "random", f"{self.loss_percent:g}%"]
            if self.netem_rate_bit:
                netem += ["rate", f"{self.netem_rate_bit}bit"]
            cmds.append(netem)
        return cmds

    def _bytes_limit(self) -> int:
        return (self.queue_packets or QUEUE_MIN_PACKETS) * 1514


def plan(link: Link, mtu: int, delay_s: Optional[float] = None) -> Plan:
    """One direction's qdiscs: half the RTT's delay, or delay_s (a link on
    hosts where only one side's kernel has netem: the whole RTT on that
    side's egress, collectors/emulation.py)."""
    delay = link.rtt_s / 2 if delay_s is None else delay_s
    queue, source = link.queue_packets, "given" if link.queue_packets else None
    if link.rate_bit and queue is None:
        bdp = link.rate_bit * max(link.rtt_s, QUEUE_FLOOR_S) / 8 / mtu
        queue, source = max(QUEUE_MIN_PACKETS, math.ceil(bdp)), "bdp"
    netem_limit = None
    if link.needs_netem:
        if link.rate_bit:
            in_flight = math.ceil(link.rate_bit * delay / 8 / mtu)
            netem_limit = queue + in_flight + QUEUE_MIN_PACKETS
        else:
            netem_limit = link.queue_packets or NETEM_LIMIT_NO_RATE
    netem_rate = None
    if link.jitter_s:
        netem_rate = link.rate_bit or NETEM_ORDER_RATE_BIT
    return Plan(
        delay_s=delay,
        jitter_s=link.jitter_s,
        loss_percent=link.loss_percent,
        rate_bit=link.rate_bit,
        queue_packets=queue,
        queue_source=source,
        netem_limit=netem_limit,
        netem_rate_bit=netem_rate,
        tbf_burst_bytes=tbf_burst(link, mtu),
    )


def tbf_burst(link: Link, mtu: int) -> Optional[int]:
    """The bucket: TBF_BURST_S at the rate, at least one wire packet. tbf
    splits a GSO packet longer than its burst into wire packets, which a
    netem under it needs for per-packet loss and jitter: there the burst
    stays one wire packet."""
    if not link.rate_bit:
        return None
    one_packet = mtu + TBF_BURST_SLACK
    if link.loss_percent or link.jitter_s:
        return one_packet
    return max(one_packet, math.ceil(link.rate_bit * TBF_BURST_S / 8))


COUNTERS = ("bytes", "packets", "drops", "overlimits", "requeues")


# --- reading it back ---------------------------------------------------------------


def observed(qdiscs: List[dict]) -> dict:
    """One direction as the kernel reports it, in the record's units."""
    out: dict = {"kinds": [q["kind"] for q in qdiscs]}
    for q in qdiscs:
        o = q.get("options") or {}
        if q["kind"] == "tbf":
            out["rate_bit"] = int(o["rate"]) * 8 if "rate" in o else None
            out["tbf_burst_bytes"] = o.get("burst")
        elif q["kind"] == "netem":
            out["netem_limit"] = o.get("limit")
            delay = o.get("delay") or {}
            out["delay_s"] = delay.get("delay", 0.0)
            out["jitter_s"] = delay.get("jitter", 0.0)
            loss = o.get("loss-random") or {}
            out["loss_percent"] = loss.get("loss", 0.0) * 100
            rate = o.get("rate") or {}
            out["netem_rate_bit"] = int(rate["rate"]) * 8 if rate.get("rate") else None
    return out


def matches(p: dict, obs: dict) -> List[str]:
    """Where the kernel's settings differ from the plan (each a phrase);
    tc rounds delays to its clock and rates to bytes, so within 1%."""
    diffs = []
    wanted = {"delay_s": p["delay_s"], "jitter_s": p["jitter_s"], "loss_percent": p["loss_percent"]}
    if p["netem_limit"] is None:
        wanted = {}
    else:
        wanted["netem_limit"] = p["netem_limit"]
    if p["rate_bit"]:
        wanted["rate_bit"] = p["rate_bit"]
    for k, want in wanted.items():
        got = obs.get(k)
        if got is None or abs(got - want) > 0.01 * abs(want) + 1e-6:
            diffs.append(f"{k} {got} (asked {want})")
    return diffs


def describe(spec: str, link: Link, applied: dict, edges: Dict[str, dict]) -> dict:
    """The record's `link`: what was asked, what the kernel has, and each
    direction's qdisc counters over the window."""
    p = applied["plan"]
    directions = {"client": "client_to_server", "server": "server_to_client"}
    out = {
        "spec": spec,
        "preset": link.preset,
        "requested": {k: v for k, v in asdict(link).items() if k != "preset"},
        "plan": p,
        "before_window": applied.get("before_window"),
        "directions": {},
    }
    plans = applied.get("plans")  # one plan per direction: netem on one side only
    if plans:
        out["one_sided"] = applied["one_sided"]
    for side, name in directions.items():
        qds = applied["qdiscs"].get(side)
        obs = observed(qds) if qds is not None else None
        mine = plans[side] if plans else p
        start, end = (edges.get("start") or {}).get(side), (edges.get("end") or {}).get(side)
        window = window_s = None
        if start is not None and end is not None:
            window = {kind: {k: end[kind][k] - start[kind][k] for k in COUNTERS} for kind in end if kind in start}
            # The counters' own interval (collectors/emulation.read_counters);
            # None where a measurement predates it.
            read = [(start[k].get("t_ns"), end[k].get("t_ns")) for k in window]
            if read and all(a is not None and b is not None for a, b in read):
                window_s = (read[0][1] - read[0][0]) / 1e9
        out["directions"][name] = {
            "egress_of": side,
            "applied": obs,
            "differs": matches(mine, obs) if obs is not None else None,
            "window": window,
            "window_s": window_s,
        }
        if plans:
            out["directions"][name]["plan"] = mine
    return out


# What limited a run over an emulated link (the record's link.saturation.limited_by).
LIMITS = {
    "link": "a direction carried at least 90% of the link's rate",
    "cpu": "the machine, or one workload process, was at least 90% busy",
    "workload": "the pattern offers less than the link carries (requests on a schedule, downloads)",
    "transport": "the sender offered less than the link carries, with no CPU saturated: its congestion control, "
    "windows or socket buffers (under the link's loss, or the tbf never held a packet back)",
    "emulation": "a lossless rate below 90%, nothing saturated, and the tbf holding packets back: the emulator, "
    "not the link, held the run back",
}


def add_saturation(
    out: dict, seconds: float, cpu_busy: Optional[float], busiest_process_cpus: Optional[float], fills_link: bool
) -> None:
    """To describe()'s record: each direction's utilisation and netem drops
    over the window, and what limited the run (LIMITS). A run whose CPU
    saturated while its link was not full measured the host, not the link;
    one that filled neither on a lossless rate measured the emulator, and
    says so in a warning. The evidence for that is tbf's own: overlimits
    (a packet held back for want of tokens) on the data's direction; a tbf
    that never held one back did not limit the run (at 100 Gbit/s a tcp
    sender offered 0.2 of the rate, at 0.89 of a CPU, with 0 overlimits).
    busiest_process_cpus: the busiest workload
    process's CPU seconds per second; fills_link: the pattern sends as fast
    as it can (bulk), so it should fill the link."""
    rate_bit = out["requested"]["rate_bit"]
    util, held = {}, {}
    for name, d in out["directions"].items():
        root = (d["window"] or {}).get("tbf")
        # Over the counters' own interval where it was read, not the CPU's:
        # an edge reads tc after the CPU and the marks (6-8 ms later here,
        # more on a loaded machine, and not alike at both edges).
        own_s = d.get("window_s") or seconds
        util[name] = root["bytes"] * 8 / own_s / rate_bit if root and rate_bit and own_s > 0 else None
        held[name] = root.get("overlimits") if root else None
        # netem's drops are its random loss and any packet over its limit
        # (tbf's count its child's again, so they are not added).
        netem = (d["window"] or {}).get("netem")
        offered = netem["packets"] + netem["drops"] if netem else 0
        d["netem_drops_percent"] = 100 * netem["drops"] / offered if offered else None
        d["utilisation"] = util[name]
    link_util = max((u for u in util.values() if u is not None), default=None)
    link_full = link_util is not None and link_util >= SATURATED
    cpu_full = any(x is not None and x >= SATURATED for x in (cpu_busy, busiest_process_cpus))
    req = out["requested"]
    if link_full:
        limited_by = "link"
    elif cpu_full:
        limited_by = "cpu"
    elif not fills_link:
        limited_by = "workload"
    elif req["loss_percent"] or not rate_bit or _never_held(util, held):
        limited_by = "transport"
    else:
        limited_by = "emulation"
    warning = None
    if limited_by == "emulation":
        share = f"{link_util:.0%}" if link_util is not None else "an unmeasured share"
        warning = (
            f"the link carried {share} of its {_rate_text(rate_bit)} with neither it nor the CPU saturated, "
            "so the emulation held the run back and its figures are not those of a full link"
        )
    out["saturation"] = {
        "link_utilisation": link_util,
        "cpu_busy": cpu_busy,
        "busiest_process_cpus": busiest_process_cpus,
        "cpu_saturated": cpu_full,
        "limited_by": limited_by,
        "limited_by_means": LIMITS[limited_by],
        "cpu_saturated_first": cpu_full and not link_full,
        "warning": warning,
    }


def _never_held(util: dict, held: dict) -> bool:
    """The tbf on the data's direction (the busier one) held no packet back."""
    data = max(util, key=lambda n: util[n] or 0.0)
    return held.get(data) == 0


def _rate_text(bit: int) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bit >= scale:
            return f"{bit / scale:g} {unit}"
    return f"{bit} bit/s"
