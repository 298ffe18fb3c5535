# SPDX-License-Identifier: GPL-2.0-only
"""--cpus on real runs: each side's threads ran only on the CPUs asked, as
the cputhread probe timed them on each CPU, and that time is the threads'
whole on-CPU time; a CPU the host cannot run is refused before anything
runs."""

import pytest

from conftest import needs_build, run_json
from test_bad_input import refused_run

pytestmark = [pytest.mark.system, needs_build]
BAD_CPUS = 36
# The per-CPU time is read just after the threads' entries: a slice that
# ends between the two reads counts once more, at most one slice (a
# millisecond is far more than this workload's).
READ_SLACK_S = 0.002


def _held(rec, side, cpus):
    threads = rec["cpu_threads"][side]["threads"]
    for t in threads:
        assert {int(c) for c in t["cpus"]} <= set(cpus), (side, t)
        assert sum(t["cpus"].values()) == pytest.approx(t["oncpu_s"], abs=READ_SLACK_S), (side, t)
    assert rec["placement"]["on_requested_share"][side] == 1.0, rec["placement"]
    by_cpu = rec["cpu_threads"][side]["cpus"]
    assert sum(by_cpu.values()) == pytest.approx(rec["cpu_threads"][side]["oncpu_s"], abs=READ_SLACK_S)


@pytest.mark.parametrize("stack", ["quic", "tcp", "tcp-tls"])
def test_each_side_runs_only_where_asked(runs_dir, stack):
    rec = run_json(runs_dir, "--stack", stack, "--cpus", "client=0,server=1", "--duration", "0.5s", "--warmup", "0.3s")
    assert rec["bytes"] > 0
    assert rec["placement"]["requested"] == {"client": [0], "server": [1]}
    _held(rec, "client", [0])
    _held(rec, "server", [1])


def test_one_side_pinned_and_the_other_free(runs_dir):
    rec = run_json(runs_dir, "--cpus", "server=0", "--duration", "0.5s", "--warmup", "0.3s")
    _held(rec, "server", [0])
    assert rec["placement"]["on_requested_share"]["client"] is None and rec["cpu_threads"]["client"]["cpus"]


# A short quic run as it comes (test_msquic_path asserts on the same run).
UNPINNED = ("--duration", "0.5s", "--warmup", "0.3s")


def test_unpinned_runs_say_where_they_ran(shared):
    _, rec = shared("run", *UNPINNED)
    assert rec["placement"]["requested"] is None
    for side in ("client", "server"):
        assert rec["placement"]["on_requested_share"][side] is None
        by_cpu = rec["cpu_threads"][side]["cpus"]
        assert sum(by_cpu.values()) == pytest.approx(rec["cpu_threads"][side]["oncpu_s"], abs=READ_SLACK_S)


def test_bad_cpus_are_refused_before_anything_runs(runs_dir):
    """A CPU this host cannot run is preflight's to find (its affinity): end
    to end. What needs no host: test_pinning_unit."""
    refused_run(runs_dir, ["--cpus", "client=0,server=4096"], BAD_CPUS, ["CPU 4096", "pick from those"])
