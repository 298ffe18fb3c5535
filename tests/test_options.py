# SPDX-License-Identifier: GPL-2.0-only
"""The option table (describe/options.py) is the one place options are
declared: RunOptions, the click options of run and compare, the --vary
keys and the guest hand-over all come from it."""

import json
from dataclasses import asdict, fields, replace

import pytest

from qprof import errors
from qprof.collectors import compare
from qprof.describe import options, plan, transports

import refusals
from conftest import qprof

pytestmark = pytest.mark.unit


def test_run_options_are_the_table():
    assert [f.name for f in fields(options.RunOptions)] == [o.field for o in options.OPTIONS]
    assert options.RunOptions is options.RunOptions
    assert options.STACK_NAMES == tuple(transports.STACKS)


def test_every_cli_option_is_on_run_and_compare():
    for cmd in ("run", "compare"):
        r = qprof(cmd, "--help")
        assert r.returncode == 0, r.stderr
        for o in options.OPTIONS:
            if o.cli:
                assert o.flag in r.stdout, (cmd, o.flag)


def test_vary_keys_parse_with_their_option():
    # Each option marked vary, and the link's keys, which set that key of --link.
    assert set(compare.VARY_KEYS) == {o.name for o in options.OPTIONS if o.vary} | set(options.LINK_PARTS)
    assert options.BY_NAME["io-size"].parse("128K") == 131072
    with pytest.raises(errors.BadValue):
        options.BY_NAME["io-size"].parse("96K")  # not a power of two
    with pytest.raises(errors.BadValue):
        options.BY_NAME["streams"].parse("0")


def test_guest_hand_over_round_trips():
    opts = replace(
        options.RunOptions(),
        stack="tcp-tls",
        tls_version="1.2",
        duration_s=2.5,
        probes=("syscalls",),
        io_size=65536,
        sample_hz=0,
    )
    back = options.from_json(options.to_json(opts))
    assert back == opts


def test_guest_hand_over_refuses_unknown_fields_and_bad_values():
    data = json.loads(options.to_json(options.RunOptions()))
    with pytest.raises(errors.BadValue, match="unknown fields"):
        options.from_json(json.dumps({**data, "fault": "handshake"}))
    with pytest.raises(errors.BadValue, match="--streams"):
        options.from_json(json.dumps({**data, "streams": 1001}))


def test_faults_are_not_options():
    assert "fault" not in asdict(options.RunOptions())


def test_workload_gets_only_its_stacks_options():
    quic = options.RunOptions(stack="quic", io_size=65536, bytes=1 << 20)
    tcp = options.RunOptions(stack="tcp", io_size=131072)
    assert options.workload_args(quic, "client") == [
        "--pattern",
        "bulk",
        "--bytes",
        "1048576",
        "--streams",
        "1",
        "--io-size",
        "65536",
        "--exec-profile",
        "lowlat",
    ]
    # --bytes to both roles: the sender of --direction down is the server.
    assert options.workload_args(quic, "server") == [
        *("--pattern", "bulk", "--bytes", "1048576", "--streams", "1", "--io-size", "65536"),
        *("--exec-profile", "lowlat"),
    ]
    down = options.RunOptions(stack="tcp", io_size=131072, direction="down")
    assert options.workload_args(down, "server") == [
        *("--pattern", "bulk", "--streams", "1", "--direction", "down", "--io-size", "131072")
    ]
    assert options.workload_args(tcp, "client") == ["--pattern", "bulk", "--streams", "1", "--io-size", "131072"]
    # A download: its size and count to both roles, --resume as a bare flag where the stack resumes.
    dl = options.RunOptions(stack="tcp-tls", io_size=131072, pattern="download", size=4096, count=3, resume=True)
    assert options.workload_args(dl, "server") == [
        *("--pattern", "download", "--size", "4096", "--count", "3", "--resume", "--streams", "1"),
        *("--io-size", "131072"),
    ]


def test_usage_errors_are_one_sentence():
    # The line cli/main.py prints around it (its `see ... --help`) is test_exit_codes', end to end.
    refusals.refused(["--no-such-flag"], 2, ["--no-such-flag"])
    refusals.refused(["--duration"], 2, ["--duration", "requires an argument"])


@pytest.mark.parametrize(
    "args, sentence",
    [
        (["--topology", "x"], "--topology takes netns or loopback, not 'x'."),
        (["--streams", "1001"], "--streams 1001 is not from 1 to 1000."),
        (["--conns", "0"], "--conns 0 is not from 1 to 64."),
        (["--pattern", "rr", "--payload", "8"], "--payload 8 is not from 16 to 16M."),
        (["--pattern", "video", "--bitrate", "1kbit"], "--bitrate 1kbit is not from 8kbit to 256mbit."),
        (["--port", "70000"], "--port 70000 is not from 1 to 65535."),
    ],
)
def test_a_value_out_of_range_is_a_bad_value_whatever_its_kind(args, sentence):
    """Issue 39 (9): --payload and --bitrate out of range were 4 and --conns
    2; every range is the table's, checked by it (Option.check) on the
    command line as in --vary, with its one code."""
    assert refusals.refused(args, errors.BadValue.exit_code, []) == sentence


@pytest.mark.parametrize("period, refused", [("100us", False), ("0.1ms", False), ("99us", True), ("50us", True)])
def test_the_rr_period_floor_is_inclusive(period, refused):
    """100us is the floor itself (qprof-wl's --period-us minimum), though it
    parses to 9.999999999999999e-05 s."""
    from qprof.units import parse_duration_s

    opts = replace(options.RunOptions(), stack="tcp", pattern="rr", period_s=parse_duration_s(period))
    if refused:
        with pytest.raises(errors.BadValue, match="below 100us"):
            plan.resolve(opts)
    else:
        plan.resolve(opts)


def test_ls_names_an_unknown_stack_as_run_does(tmp_path):
    """`qprof ls --stack nosuch` is a typo, not an empty history: exit 3 and
    the stacks, as `qprof run --stack nosuch`; mix is a stack to ls."""
    r = qprof("ls", "--stack", "nosuch", "--runs-dir", str(tmp_path))
    assert r.returncode == errors.UnknownStack.exit_code and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert "nosuch" in line and "quic" in line and "mix" in line
    r = qprof("ls", "--stack", "mix", "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr


def test_the_help_gives_each_range_the_table_checks():
    """click's IntRange showed its range in --help; the table's check says it instead."""
    from conftest import qprof_here

    text = " ".join(qprof_here("run", "--help").stdout.split())
    for o in options.OPTIONS:
        if o.cli and o.kind in ("int", "size", "rate") and (o.lo, o.hi) != (None, None):
            assert o.range_text() in text, o.name
    assert "Range: from 1 to 64." in text  # --conns
