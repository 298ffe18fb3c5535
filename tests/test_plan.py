# SPDX-License-Identifier: GPL-2.0-only
"""Resolve, then run: describe/plan.py's resolve turns options into a
complete plan, filling each default from the option table where the
option applies, checking each rule once, and never changing its input."""

import os
from dataclasses import FrozenInstanceError, asdict, replace

import pytest

from qprof import errors
from qprof.describe import options, plan

from refusals import refused, run_plan

pytestmark = pytest.mark.unit

BASE = options.RunOptions()
FILL = {o.name: o.fill for o in options.OPTIONS if o.fill is not None}


def resolved(**kw) -> options.RunOptions:
    return plan.resolve(replace(BASE, **kw)).options


def test_options_cannot_be_changed_in_place():
    with pytest.raises(FrozenInstanceError):
        BASE.duration_s = 3.0


@pytest.mark.parametrize(
    "kw, filled, unset",
    [
        ({"stack": "quic"}, {"duration_s": FILL["duration"], "warmup_s": FILL["warmup"], "io_size": 64 << 10}, ()),
        ({"stack": "tcp", "bytes": 1 << 20}, {"warmup_s": 0.0, "io_size": 128 << 10}, ("duration_s",)),
        (
            {"stack": "tcp-tls", "pattern": "download"},
            {"size": FILL["size"], "count": FILL["count"], "warmup_s": 0.0},
            ("duration_s", "period_s", "payload"),
        ),
        (
            {"stack": "quic", "pattern": "rr"},
            {"period_s": FILL["period"], "payload": FILL["payload"], "duration_s": FILL["duration"]},
            ("size", "count"),
        ),
    ],
)
def test_defaults_are_the_tables_where_they_apply(kw, filled, unset):
    given = replace(BASE, **kw)
    before = asdict(given)
    got = plan.resolve(given).options
    assert asdict(given) == before  # the input stands
    for field, value in filled.items():
        assert getattr(got, field) == value, field
    for field in unset:
        assert getattr(got, field) is None, field


def test_a_given_value_is_kept():
    got = resolved(stack="quic", duration_s=3.0, warmup_s=0.25, io_size=16 << 10)
    assert (got.duration_s, got.warmup_s, got.io_size) == (3.0, 0.25, 16 << 10)


@pytest.mark.parametrize(
    "kw",
    [
        {"stack": "quic"},
        {"stack": "tcp", "bytes": 1 << 20},
        {"stack": "quic", "pattern": "download", "resume": True},
        {"stack": "tcp", "pattern": "rr", "period_s": 0.002},
        {"stack": "tcp", "link": "rtt=10ms,loss=1%"},
        {"mix": "quic:1,tcp:1:rr", "link": "rate=10mbit"},
    ],
)
def test_resolving_twice_changes_nothing(kw):
    """The guest resolves the host's plan again: the same plan."""
    once = plan.resolve(replace(BASE, **kw), cpus=2)
    twice = plan.resolve(once.options, cpus=2)
    assert twice.options == once.options
    assert [fp.options for fp in twice.flows] == [fp.options for fp in once.flows]


def test_a_run_is_one_flow_and_a_mix_is_n():
    one = plan.resolve(replace(BASE, stack="tcp"))
    assert not one.is_mix and len(one.flows) == 1 and one.flows[0].options == one.options
    many = plan.resolve(replace(BASE, mix="quic:1,tcp:2", link="rate=10mbit"), cpus=2)
    assert many.is_mix and [fp.options.stack for fp in many.flows] == ["quic", "tcp", "tcp"]
    assert len({fp.port for fp in many.flows}) == 3
    # each flow resolved as a run of its stack would be
    assert {fp.options.io_size for fp in many.flows} == {64 << 10, 128 << 10}


def test_a_lossy_link_without_a_rate_turns_gso_off_in_the_plan_only():
    given = replace(BASE, stack="tcp", link="rtt=20ms,loss=1%")
    assert plan.resolve(given).options.gso == "off" and given.gso is None


def test_a_rule_is_refused_with_its_sentence():
    with pytest.raises(errors.StackCannot, match="applies to --pattern download only"):
        resolved(stack="quic", size=1024)


def _chosen(o: options.Option):
    """A value of the option that is someone's choice: not its default, not what the plan fills."""
    if o.kind == "flag":
        return True
    if o.choices:
        return next(c for c in o.choices if c not in (o.default, o.fill))
    if o.kind == "int":
        return o.lo + 1
    return "x"


# What an option needs besides itself to get as far as its row.
NEEDS = {"resume": {"pattern": "download"}, "rr-streams": {"pattern": "rr"}, "tcp-conns": {"pattern": "rr"}}
# What a stack needs to run at all: a program pair, its two programs.
STACK_NEEDS = {"external": {"client_cmd": "c {addr}", "server_cmd": "s {port}"}}


@pytest.mark.parametrize(
    "name, stack",
    [
        (o.name, s)
        for o in options.OPTIONS
        if o.stacks
        for s in options.STACK_NAMES
        # udp and a program pair run bulk only: the pattern such an option needs is refused first.
        if s not in o.stacks and not (s in ("udp", *options.PROGRAM_STACKS) and o.name in NEEDS)
    ],
)
def test_an_option_is_refused_on_a_stack_its_row_does_not_name(name, stack):
    # The row is what passes the value on (workload_stacks): a stack outside
    # it would run without the user's choice and say nothing.
    o = options.BY_NAME[name]
    with pytest.raises(errors.QprofError, match=f"--{name}|{stack}'s (workload|transport)"):
        resolved(stack=stack, **NEEDS.get(name, {}), **STACK_NEEDS.get(stack, {}), **{o.field: _chosen(o)})


@pytest.mark.parametrize("stack", options.STACK_NAMES)
def test_what_the_plan_fills_is_no_ones_choice(stack):
    # Each stack's defaults pass its own rows (bulk: every stack runs it).
    assert resolved(stack=stack, **STACK_NEEDS.get(stack, {})).stack == stack


def test_every_default_in_the_help_comes_from_the_table():
    """No help text writes its own "[default: ...]": the table makes it,
    from `fill` (what resolve fills) or `default_text` (the stack's or the
    workload's own)."""
    for o in options.OPTIONS:
        assert "[default" not in o.help, o.name
        if o.fill is not None:
            assert f"[default: {o.value_text(o.fill)}" in o.help_text, o.name
    assert "[default: 10s" in options.BY_NAME["duration"].help_text
    assert "[default: 10ms" in options.BY_NAME["period"].help_text
    assert "[default: 1M" in options.BY_NAME["size"].help_text


@pytest.mark.parametrize(
    "kw, flag",
    [
        ({"guest": True}, "--guest"),
        ({"mix": "quic:1,tcp:1"}, "--mix"),
        ({"topology": "loopback"}, "--topology"),
        ({"link": "rate=10mbit"}, "--link"),
        ({"gso": "off"}, "--gso/--gro"),
        ({"gro": "on"}, "--gso/--gro"),
    ],
)
def test_a_server_elsewhere_refuses_what_cannot_be_placed_there(kw, flag):
    opts = replace(BASE, server="root@192.0.2.1", **kw)
    with pytest.raises(errors.BadValue) as e:
        plan.resolve(opts)
    assert str(e.value).startswith("--server places the server on another host") and f"drop {flag}" in str(e.value)


@pytest.mark.parametrize(
    "kw, flag",
    [
        ({"ssh_config": "/etc/ssh/ssh_config"}, "--ssh-config"),
        ({"client": "b"}, "--client"),
        ({"server_addr": "10.0.0.2"}, "--server-addr"),
    ],
)
def test_what_goes_with_a_server_elsewhere_needs_one(kw, flag):
    with pytest.raises(errors.BadValue) as e:
        plan.resolve(replace(BASE, **kw))
    assert str(e.value) == f"{flag} goes with a server on another host (--server HOST); add --server or drop {flag}."


def test_an_ssh_config_needs_a_server():
    assert plan.resolve(replace(BASE, server="bench2", ssh_config="/etc/ssh/ssh_config")).options.server == "bench2"


SERVED = replace(BASE, server="root@h:2222", link="rate=10mbit")


def test_a_link_on_hosts_goes_on_the_devices_named_on_each_side():
    got = plan.link_devices(replace(SERVED, link_dev="local:eth1,root@h:2222:eth2"))
    assert got == {"client": ("local", "eth1"), "server": ("root@h:2222", "eth2")}
    both = replace(SERVED, client="b", link_dev="b:ens5,root@h:2222:ens6")
    assert plan.link_devices(both) == {"client": ("b", "ens5"), "server": ("root@h:2222", "ens6")}
    assert plan.resolve(replace(SERVED, link_dev="local:eth1,root@h:2222:eth2")).options.link == "rate=10mbit"


@pytest.mark.parametrize(
    "kw, words",
    [
        ({}, "--link-dev HOST:DEV,HOST:DEV"),  # a link on hosts, no device named: refused (BadValue)
        ({"link_dev": "local:eth1"}, "names no device of the server (root@h:2222)"),
        ({"link_dev": "local:eth1,other:eth2"}, "'other', which is not a host of this run"),
        ({"link_dev": "local:eth1,local:eth2"}, "two devices of the client"),
        ({"link_dev": "eth1,root@h:2222:eth2"}, "is not HOST:DEV"),
        ({"link": None, "link_dev": "local:eth1,root@h:2222:eth2"}, "add --link or drop --link-dev"),
        ({"link": "loss=1%", "link_dev": "local:eth1,root@h:2222:eth2"}, "add a rate to the link"),
    ],
)
def test_a_link_on_hosts_refused_in_one_sentence(kw, words):
    with pytest.raises((errors.BadLink, errors.BadValue)) as e:
        plan.resolve(replace(SERVED, **kw))
    assert words in str(e.value)


def test_a_run_argv_is_resolved_through_the_clis_own_path():
    """tests/refusals.py, which the refusal tables of `qprof run` use, takes
    the CLI's path: click's parsing, the run command's own checks, the
    runner's resolve; and it stops before the machine is asked."""
    got = run_plan("--stack", "tcp", "-d", "5s", "-n", "2")
    want = plan.resolve(replace(BASE, stack="tcp", duration_s=5.0, streams=2), os.cpu_count() or 1)
    assert got.options == want.options and got.flows[0].options == want.flows[0].options
    # A malformed duration is refused by the command's click type, with the CLI's code.
    assert refused(["--duration", "ten"], errors.BadValue.exit_code, ["--duration"]).startswith("malformed")
    # An int out of its range is the table's bad value (4), as a --vary value is; an unknown flag is click's (2).
    refused(["--streams", "1001"], errors.BadValue.exit_code, ["--streams 1001 is not from 1 to 1000"])
    refused(["--no-such-flag"], 2, ["--no-such-flag"])
    # What the run command checks itself, and resolve alone would not.
    assert plan.resolve(replace(BASE, stack="quic", mix="quic:1"), cpus=2).is_mix
    refused(["--mix", "quic:1", "--stack", "quic"], errors.BadMix.exit_code, ["drop --stack"])
    # A question only the machine answers (preflight: this kernel's
    # congestion controls) is not asked: the plan comes back.
    assert run_plan("--stack", "tcp", "--tcp-cc", "qprof_none").options.tcp_cc == "qprof_none"
