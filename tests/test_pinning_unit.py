# SPDX-License-Identifier: GPL-2.0-only
"""--cpus read as taskset -c reads a list, each side's command wrapped in
taskset, the record's placement made from the probe's per-CPU time, and
the --cpus `qprof run` refuses before it asks the host."""

import pytest

from qprof import errors
from qprof.describe import derive, pinning

from refusals import refused

pytestmark = pytest.mark.unit


def test_lists_and_ranges_per_side():
    assert pinning.parse("client=0,server=1") == {"client": [0], "server": [1]}
    # A comma starts a new side only before a "role=": the rest is the list.
    assert pinning.parse("client=0,2-3,server=1") == {"client": [0, 2, 3], "server": [1]}
    assert pinning.parse("server=4-5") == {"server": [4, 5]}
    assert pinning.parse("client=3,1,3") == {"client": [1, 3]}


@pytest.mark.parametrize(
    "text,words",
    [
        ("peer=0", ["'peer'", "client or server"]),
        ("0,1", ["names no side"]),
        ("client=a", ["'a'", "2-3"]),
        ("client=3-1", ["'3-1'"]),
        ("client=", ["''"]),
        ("client=0,client=1", ["the client twice"]),
    ],
)
def test_a_bad_list_is_one_sentence_with_the_syntax(text, words):
    with pytest.raises(errors.BadCpus) as e:
        pinning.parse(text)
    msg = str(e.value)
    assert all(w in msg for w in words), msg
    assert pinning.SYNTAX in msg and msg.endswith(".")


def test_a_cpu_the_host_cannot_run_is_refused_naming_those_it_can():
    pinning.check_host({"client": [0], "server": [1]}, {0, 1})
    with pytest.raises(errors.BadCpus) as e:
        pinning.check_host({"client": [0], "server": [7, 9]}, {0, 1, 2, 5})
    assert "the server on CPU 7, 9" in str(e.value) and "(it can: 0-2,5)" in str(e.value)
    assert errors.BadCpus.exit_code not in (errors.BadValue.exit_code, errors.SettingUnproven.exit_code)


@pytest.mark.parametrize(
    "args,code,words",
    [
        (["--cpus", "peer=0"], errors.BadCpus.exit_code, ["'peer'", "client or server"]),
        (
            ["--cpus", "client=0", "--server", "example.invalid"],
            errors.BadValue.exit_code,
            ["--cpus", "drop --cpus or --server"],
        ),
    ],
)
def test_bad_cpus_are_refused_before_anything_runs(args, code, words):
    """`qprof run` refuses these before it asks the host (tests/refusals.py)."""
    refused(args, code, words)


def test_the_command_runs_under_taskset_only_when_pinned():
    argv = ["/bin/qprof-wl", "--role", "server"]
    assert pinning.wrapped(argv, None) == argv
    assert pinning.wrapped(argv, [0, 1, 2, 6]) == ["taskset", "-c", "0-2,6", *argv]


def _thread(tid, by_cpu):
    return {
        "tgid": 10,
        "tid": tid,
        "comm": "qprof-wl",
        "oncpu_ns": sum(by_cpu.values()),
        "switches": 1,
        "involuntary": 0,
        "wakeups": 0,
        "runq_ns": 0,
        "oncpu_ns_by_cpu": by_cpu,
    }


def test_placement_is_each_sides_time_by_cpu_and_its_share_where_asked():
    window = {
        "threads": [
            _thread(11, {"0": 900_000_000, "1": 100_000_000}),
            _thread(12, {"0": 500_000_000}),
        ],
        "softirq": None,
    }
    threads = derive.thread_figures(window, {"client": 10}, {"client": 1000}, 1000)
    side = threads["client"]
    assert side["cpus"] == {"0": pytest.approx(1.4), "1": pytest.approx(0.1)}
    assert [t["cpus"] for t in side["threads"]] == [{"0": 0.9, "1": 0.1}, {"0": 0.5}]
    rec = pinning.record("client=0", threads)
    assert rec["requested"] == {"client": [0]}
    assert rec["on_requested_share"]["client"] == pytest.approx(1.4 / 1.5)
    # The server was not pinned, and its time was not given: nothing made up.
    assert "server" not in threads and rec["on_requested_share"]["server"] is None
    # Unpinned: where it ran (cpu_threads), and no share.
    assert pinning.record(None, threads)["on_requested_share"]["client"] is None
    # Pinned, but no probe said where it ran: no share either.
    assert pinning.record("client=0", None)["on_requested_share"]["client"] is None
    # A probe that does not say where (bpftrace's) gives None, not an empty map.
    del window["threads"][1]["oncpu_ns_by_cpu"]
    assert derive.thread_figures(window, {"client": 10}, {"client": 1000}, 1000)["client"]["cpus"] is None
