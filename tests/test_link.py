# SPDX-License-Identifier: GPL-2.0-only
"""--link: the spec and its presets, the qdiscs it plans, what the kernel
reads back, and runs through it. A rate alone needs only tbf, which this
host has; netem (delay, loss, jitter) runs in the guest (test_guest_link.py)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from qprof import errors
from qprof.collectors import compare
from qprof.describe import link, options

from conftest import in_flight, leftovers, needs_build, run_json
from refusals import refused

BAD_LINK = 29
DATA = Path(__file__).parent / "data" / "link"


# --- the spec ------------------------------------------------------------------


@pytest.mark.unit
def test_presets_are_seed_002s():
    """Krinkin & Dronnikov's four profiles: RTT, loss, bandwidth."""
    want = {
        "wifi": (0.110, 0.5, 2_200_000),
        "lte": (0.250, 0.7, 2_000_000),
        "3g": (0.550, 0.5, 1_000_000),
        "2g": (0.900, 2.5, 200_000),
    }
    for name, (rtt, loss, rate) in want.items():
        l = link.parse(name)
        assert (l.rtt_s, l.loss_percent, l.rate_bit, l.preset) == (rtt, loss, rate, name)
        assert l.jitter_s == 0 and l.queue_packets is None


@pytest.mark.unit
def test_keys_and_overrides():
    l = link.parse("rtt=100ms,loss=1%,rate=2.2mbit")
    assert (l.rtt_s, l.loss_percent, l.rate_bit, l.preset) == (0.1, 1.0, 2_200_000, None)
    l = link.parse("LTE,loss=1%,jitter=5ms,queue=40")
    assert (l.rtt_s, l.loss_percent, l.rate_bit, l.jitter_s, l.queue_packets) == (0.25, 1.0, 2_000_000, 0.005, 40)
    assert link.parse("rate=500kbit").rate_bit == 500_000 and link.parse("rtt=1s").rtt_s == 1.0
    assert link.parse("rtt=250us").rtt_s == pytest.approx(250e-6)
    # --vary rtt=... on top of --link: the last value of a key wins.
    assert link.parse(link.with_key("loss=0.5%,rate=2.2mbit", "rtt", "750ms")).rtt_s == 0.75
    assert link.with_key(None, "rtt", "10ms") == "rtt=10ms"


@pytest.mark.unit
@pytest.mark.parametrize(
    "spec, words",
    [
        ("5g", ["unknown link preset '5g'", "wifi, lte, 3g, 2g"]),
        ("rtt=-1ms", ["rtt is a duration", "not negative"]),
        ("loss=101%", ["loses 101%"]),
        ("loss=100%", ["loses 100%"]),
        ("loss=1", ["percentage", "% sign"]),
        ("rate=0mbit", ["at least 8kbit"]),
        ("rate=0", ["bits per second"]),
        ("rate=10MB", ["bits per second"]),
        ("rtt=10ms,jitter=6ms", ["more than half the RTT"]),
        ("queue=0", ["queue is a whole number"]),
        ("delay=10ms", ["unknown --link key 'delay'", "rtt="]),
        ("rtt=10ms,rtt=20ms", ["gives rtt twice"]),
        ("rtt=10ms,lte", ["a preset comes first"]),
        ("rtt=10ms,,loss=1%", ["empty item"]),
        ("", ["--link is empty"]),
        ("queue=5", ["emulates nothing"]),
    ],
)
def test_bad_specs(spec, words):
    with pytest.raises(errors.BadLink) as e:
        link.parse(spec)
    for w in words:
        assert w in e.value.sentence, e.value.sentence
    assert e.value.sentence.endswith(".") and "\n" not in e.value.sentence


# --- the plan ------------------------------------------------------------------


@pytest.mark.unit
def test_rate_alone_is_tbf_with_a_bdp_queue():
    l = link.parse("rate=10mbit,rtt=0ms")
    assert l.qdisc_kinds == ["tbf"] and not l.needs_netem
    p = link.plan(l, 1500)
    (tbf,) = p.commands("v0")
    assert tbf[:6] == ["qdisc", "add", "dev", "v0", "root", "handle"] and "tbf" in tbf
    assert tbf[tbf.index("rate") + 1] == "10000000bit"
    # At 10 Mbit/s a millisecond is less than a packet: the burst is one
    # packet and a little, so every GSO packet is split.
    assert 1514 < p.tbf_burst_bytes < 2 * 1448
    assert p.queue_packets == link.QUEUE_MIN_PACKETS and p.queue_source == "bdp"


@pytest.mark.unit
@pytest.mark.parametrize("rate_bit", [100_000_000, 1_000_000_000, 10_000_000_000, 40_000_000_000])
def test_a_fast_rate_gets_a_bucket_and_a_queue_that_can_carry_it(rate_bit):
    """tc-tbf(8): a burst of at least rate/HZ, or the rate is not reached;
    with one packet, tbf reached 0.4 of 1 Gbit/s. The bucket holds
    TBF_BURST_S at the rate, and the queue QUEUE_FLOOR_S, at least a whole
    64 KiB GSO packet, with no RTT of the link's own."""
    l = link.parse(f"rate={rate_bit}bit")
    p = link.plan(l, 1500)
    assert p.tbf_burst_bytes >= rate_bit * link.TBF_BURST_S / 8 and p.tbf_burst_bytes >= 1514
    limit = p.queue_packets * 1514
    assert limit >= rate_bit * link.QUEUE_FLOOR_S / 8 and limit >= 65536
    (tbf,) = p.commands("v0")
    assert tbf[tbf.index("burst") + 1] == str(p.tbf_burst_bytes) and tbf[tbf.index("limit") + 1] == str(limit)
    # The burst grows with the rate, and a longer RTT's BDP still sets the queue.
    assert link.plan(link.parse(f"rate={rate_bit * 2}bit"), 1500).tbf_burst_bytes > p.tbf_burst_bytes
    assert link.plan(link.parse(f"rate={rate_bit}bit,rtt=100ms"), 1500).queue_packets > p.queue_packets


@pytest.mark.unit
def test_a_lossy_link_keeps_wire_packets_at_any_rate():
    """netem under tbf loses and jitters what tbf hands it: tbf must split
    GSO packets, so its burst stays one wire packet whatever the rate."""
    for spec in ("rate=1gbit,loss=1%", "rate=10gbit,rtt=10ms,jitter=1ms", "rate=2.2mbit,loss=0.5%"):
        assert 1514 < link.plan(link.parse(spec), 1500).tbf_burst_bytes < 2 * 1448, spec


@pytest.mark.unit
def test_netem_under_tbf_holds_queue_and_delay_line():
    l = link.parse("lte")  # 250 ms, 0.7 %, 2 Mbit/s
    p = link.plan(l, 1500)
    tbf, netem = p.commands("v0")
    assert netem[netem.index("parent") + 1] == "1:1" and "netem" in netem
    assert netem[netem.index("delay") + 1] == "125000us"  # half the RTT each way
    assert netem[netem.index("loss") + 1 : netem.index("loss") + 3] == ["random", "0.7%"]
    bdp = 2_000_000 * 0.25 / 8 / 1500  # 41.7 packets
    assert p.queue_packets == 42 and p.queue_source == "bdp"
    assert p.netem_limit == 42 + 21 + link.QUEUE_MIN_PACKETS > bdp
    assert "rate" not in netem  # no jitter: netem keeps order by itself


@pytest.mark.unit
def test_jitter_keeps_order_and_loss_without_rate_needs_wire_packets():
    l = link.parse("rtt=20ms,jitter=2ms")
    assert l.qdisc_kinds == ["netem"] and l.needs_wire_packets
    (netem,) = link.plan(l, 1500).commands("v0")
    assert netem[0:5] == ["qdisc", "add", "dev", "v0", "root"]
    assert netem[netem.index("delay") + 1 : netem.index("delay") + 3] == ["10000us", "2000us"]
    assert netem[netem.index("rate") + 1] == f"{link.NETEM_ORDER_RATE_BIT}bit"
    assert not link.parse("rtt=20ms").needs_wire_packets  # delay alone delays a GSO packet whole, rightly
    assert not link.parse("rtt=20ms,loss=1%,rate=5mbit").needs_wire_packets  # tbf splits them
    l = link.parse("rtt=20ms,jitter=2ms,rate=5mbit")
    assert link.plan(l, 1500).netem_rate_bit == 5_000_000


@pytest.mark.unit
def test_read_back_from_the_kernel():
    """A real `tc -s -j qdisc show` of Debian 6.1's tbf + netem (the guest)."""
    qdiscs = json.loads((DATA / "tbf-netem.json").read_text())
    obs = link.observed(qdiscs)
    assert obs["kinds"] == ["tbf", "netem"]
    assert obs["rate_bit"] == 20_000_000 and obs["delay_s"] == 0.02 and obs["loss_percent"] == 1.0
    p = link.plan(link.parse("rtt=40ms,loss=1%,rate=20mbit"), 1500)
    from dataclasses import asdict

    assert link.matches(asdict(p), obs) == []
    assert link.matches(asdict(replace(p, delay_s=0.05)), obs) == ["delay_s 0.02 (asked 0.05)"]


# --- options and compare ---------------------------------------------------------


@pytest.mark.unit
def test_link_is_an_option_and_its_parts_vary():
    assert options.BY_NAME["link"].vary
    assert {"link", "rtt", "loss", "rate", "jitter"} <= set(compare.VARY_KEYS)
    with pytest.raises(errors.BadLink):
        options.check(replace(options.RunOptions(), link="lte,loss=200%"))


@pytest.mark.unit
def test_compare_folds_rtt_into_the_link():
    base = replace(options.RunOptions(), stack="tcp", link="loss=0.5%,rate=2.2mbit", guest=True)
    configs = compare.build_matrix(base, ["tcp"], {"rtt": ["10ms", "1s"]}, [])
    assert [c.opts.link for c in configs] == ["loss=0.5%,rate=2.2mbit,rtt=10ms", "loss=0.5%,rate=2.2mbit,rtt=1s"]
    assert [c.label for c in configs] == ["tcp rtt=10ms", "tcp rtt=1s"]
    configs = compare.build_matrix(replace(base, link=None), ["tcp"], {"link": ["wifi", "2g"]}, [])
    assert [c.opts.link for c in configs] == ["wifi", "2g"]


@pytest.mark.unit
def test_compare_refuses_a_bad_link_before_any_run():
    base = replace(options.RunOptions(), stack="tcp", guest=True)
    with pytest.raises(errors.BadLink, match="configuration 'tcp link=5g'.*unknown link preset"):
        compare.build_matrix(base, ["tcp"], {"link": ["wifi", "5g"]}, [])
    with pytest.raises(errors.BadLink, match="rtt=-5ms"):
        compare.build_matrix(replace(base, link="rate=1mbit"), ["tcp"], {"rtt": ["5ms", "-5ms"]}, [])


# --- runs ----------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    "args, code, words",
    [
        (["--link", "5g"], BAD_LINK, ["unknown link preset", "wifi"]),
        (["--link", "rate=10mbit", "--topology", "loopback"], BAD_LINK, ["loopback"]),
        (["--link", "rtt=10ms,loss=1%", "--gso", "on"], BAD_LINK, ["no rate", "GSO"]),
    ],
)
def test_bad_link_runs(args, code, words):
    refused(["--stack", "tcp", *args], code, words)


@pytest.mark.system
@needs_build
def test_a_rate_limit_is_the_limit(runs_dir):
    """tbf on both veths at 10 Mbit/s: the settings read back equal the
    request, the data direction runs at the rate and not above it, and the
    record says the link, not the CPU, was the limit."""
    rate = 10_000_000
    rec = run_json(
        runs_dir, "--stack", "tcp", "--link", "rate=10mbit", "--duration", "2s", "--warmup", "1s", "--probes", "none"
    )
    assert rec["status"] == "complete" and rec["verified"] is True
    lk = rec["link"]
    assert lk["spec"] == "rate=10mbit" and lk["requested"]["rate_bit"] == rate
    for name, d in lk["directions"].items():
        assert d["applied"]["kinds"] == ["tbf"] and d["applied"]["rate_bit"] == rate, name
        assert d["differs"] == []
    up = lk["directions"]["client_to_server"]
    tbf = up["window"]["tbf"]
    # A token bucket passes at most its rate over the window plus one full
    # bucket; the window opened once the link was full, and it is the limit.
    burst = lk["plan"]["tbf_burst_bytes"]
    # (over the counters' own interval: the edges read tc a moment after the CPU)
    assert 0 < up["window_s"] <= rec["cpu_window_s"] + 1
    assert tbf["bytes"] <= rate / 8 * up["window_s"] + burst + lk["plan"]["queue_packets"] * 1514
    assert lk["saturation"]["limited_by"] == "link" and up["utilisation"] >= link.SATURATED
    assert_goodput_under_the_wire(runs_dir, rec, tbf, rate)
    # At 10 Mbit/s the bucket is one packet: tbf split every GSO packet into wire packets.
    assert tbf["bytes"] / tbf["packets"] <= 1514
    # The ACKs go the other way, a small share of the data.
    assert lk["directions"]["server_to_client"]["window"]["tbf"]["bytes"] < tbf["bytes"] / 5
    assert lk["saturation"]["cpu_saturated_first"] is False and lk["saturation"]["warning"] is None
    # The window opened once an interval had carried 90% of the rate.
    before = lk["before_window"]
    assert before["saturated"] is True and before["utilisation"] >= 0.9 and before["waited_s"] >= before["interval_s"]
    assert leftovers() == []


def assert_goodput_under_the_wire(runs_dir, rec, tbf, rate):
    """Goodput (payload) is under what crossed the wire (headers too), but
    for what crossed it before the window and was verified in it (written
    and not yet verified at the start: a receiver holds what follows a
    lost packet until its retransmission, then reads it at once; CI
    verified 13 kB more than the window's wire bytes at 10 Mbit/s, and
    1.3% more than the wire's rate at 100 Mbit/s) and what the rate
    carried while tc and the receiver's marks read each edge apart."""
    marks = json.loads((runs_dir / rec["id"] / "measurement.json").read_text())["window"]
    flight = in_flight(marks, rec, "start", "client")
    apart_ns = (abs(marks[e]["qdiscs"]["client"]["tbf"]["t_ns"] - marks[e]["server_mark"]["t_ns"]) for e in marks)
    apart_s = sum(apart_ns) / 1e9
    assert rec["bytes"] < tbf["bytes"] + flight + rate / 8 * apart_s, (rec["bytes"], tbf["bytes"], flight, apart_s)


@pytest.mark.system
@needs_build
@pytest.mark.parametrize(
    "stack, rate",
    [(stack, rate) for rate in ("100mbit", "1gbit") for stack in ("tcp", "tcp-tls", "quic", "udp")]
    + [("tcp", "10gbit"), ("quic", "10gbit")],
)
def test_a_rate_only_link_delivers_its_rate_or_says_what_held_it(runs_dir, stack, rate):
    """The record says what held a rate-only link's data direction, and its
    verdict holds on its own figures: the link (it carried at least
    link.SATURATED of its rate), the CPU (saturated first), or else the
    emulation, said in a warning. How much of the rate a machine carries
    is its own: CI carried 0.949 and once 0.90 of 1 Gbit/s with tcp,
    where this machine mostly carries 0.998-1.000; why a tbf on a veth
    holds tcp there under its rate with the CPU not saturated is not yet
    found, so the emulation's verdict is a finding, not a failure."""
    rec = run_json(
        runs_dir,
        *("--stack", stack, "--link", f"rate={rate}", "--duration", "1s", "--warmup", "0.3s"),
        *("--probes", "none", "--sample-hz", "0", "--interval", "0"),
        allow=(r"^qprof: warning: run \S+: the link carried \d+% of its .* so the emulation held the run back",),
    )
    s = rec["link"]["saturation"]
    up = rec["link"]["directions"]["client_to_server"]
    assert s["limited_by"] in ("link", "cpu", "emulation"), s
    assert (s["limited_by"] == "link") == (up["utilisation"] >= link.SATURATED), (up["utilisation"], s)
    assert (s["limited_by"] == "cpu") == (s["cpu_saturated"] and s["limited_by"] != "link"), s
    assert (s["warning"] is not None) == (s["limited_by"] == "emulation"), s
    # What was delivered is what the window's bytes say: goodput under what the wire carried.
    assert_goodput_under_the_wire(runs_dir, rec, up["window"]["tbf"], rec["link"]["requested"]["rate_bit"])
