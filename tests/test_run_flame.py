# SPDX-License-Identifier: GPL-2.0-only
"""Stacks sampled by a real `qprof run`, drawn by `qprof flame`."""

import json
import os
import xml.etree.ElementTree as ET

import pytest

from conftest import needs_build, qprof, run_json

pytestmark = [pytest.mark.system, needs_build]
GAP_MAX_PERCENT = 5.0
ATTEMPTS = 3


def complete_run(runs_dir):
    """A run whose capture every CPU fully sampled. This VM's CPU 1
    intermittently delivers a fraction of its cpu-clock samples; qprof
    flags such a capture (flame.complete false), and only a complete one
    can be held to the bound."""
    seen = []
    for _ in range(ATTEMPTS):
        # 1000 Hz: ~2000 samples a side in 2 s, so sampling noise stays well
        # inside the bound (the default, 99 Hz, is for longer windows).
        rec = run_json(runs_dir, "--duration", "2s", "--warmup", "0.5s", "--sample-hz", "1000")
        flame = rec["flame"]
        if flame["complete"]:
            return rec
        # The flag is consistent: some CPU really is short of window x rate.
        assert min(flame["coverage_per_cpu"].values()) < 0.95 and flame["incomplete_reason"]
        seen.append(flame["incomplete_reason"])
    pytest.skip(f"no complete capture in {ATTEMPTS} runs on this VM: {seen}")


def test_flame_per_byte_matches_collectors(runs_dir):
    rec = complete_run(runs_dir)
    flame = rec["flame"]
    assert flame["event"] == "cpu-clock" and flame["sample_period_ns"] == 1_000_000
    for side in ("client", "server"):
        f = flame["sides"][side]
        # samples x period / bytes: the graph's CPU per byte...
        assert f["ns_per_byte"] == pytest.approx(f["samples"] * 1e6 / rec["bytes"])
        # ...is the collectors' measured CPU per byte, within the bound.
        assert f["measured_ns_per_byte"] == pytest.approx(rec["cpu"][side]["ns_per_byte"]["total"])
        if abs(f["gap_percent"]) > GAP_MAX_PERCENT:
            # A third instrument decides who is wrong: sched_switch timing
            # (cputhread probe) against /proc. If they agree, the CPU time
            # is right and perf missed samples, which this VM does even on
            # CPUs that sampled in full overall: a known limit (README),
            # recorded as such. If they disagree, the accounting is wrong.
            oncpu_s = rec["cpu_threads"][side]["oncpu_s"]
            assert oncpu_s == pytest.approx(rec["cpu"][side]["total_s"], rel=0.05), (side, oncpu_s)
            pytest.xfail(
                f"perf missed {side} samples on this VM: graph {f['ns_per_byte']:.3f} ns/B, "
                f"measured {f['measured_ns_per_byte']:.3f} (eBPF and /proc agree)"
            )
        # Categories split the total exactly; msquic's work is mostly crypto and protocol.
        cats = f["categories_ns_per_byte"]
        assert sum(cats.values()) == pytest.approx(f["ns_per_byte"])
        assert cats["crypto"] > 0 and cats["protocol"] > 0
    # perf.data is gone unless asked for; the folded stacks stay.
    run_dir = runs_dir / rec["id"]
    assert not (run_dir / "perf.data").exists()
    assert {p.name for p in (run_dir / "stacks").iterdir()} == {"client.folded", "server.folded", "others.folded"}


def test_flame_draws_the_run(runs_dir):
    rec = run_json(runs_dir, "--duration", "1s", "--warmup", "0.3s", "--probes", "none", "--sample-hz", "1000")
    assert rec["flame"]["sample_hz"] == 1000
    r = qprof("flame", rec["id"], runs_dir=runs_dir)
    assert r.returncode == 0, r.stderr
    for side in ("client", "server", "others"):
        svg = runs_dir / rec["id"] / f"flame-{side}.svg"
        root = ET.parse(svg).getroot()  # well-formed XML
        assert root.tag.endswith("svg")
        assert "ns/B" in svg.read_text()
        assert f"{side}: graph" in r.stdout
    # The folded stacks, for other tools, are the run's own.
    r = qprof("flame", rec["id"], "--side", "client", "--folded", runs_dir=runs_dir)
    assert r.returncode == 0 and r.stdout.strip()
    assert sum(int(l.rsplit(" ", 1)[1]) for l in r.stdout.splitlines()) == rec["flame"]["samples"]["client"]


def test_no_stacks_with_sample_hz_zero(runs_dir):
    rec = run_json(runs_dir, "--duration", "1s", "--warmup", "0.3s", "--probes", "none", "--sample-hz", "0")
    assert rec["flame"] is None
    r = qprof("flame", rec["id"], runs_dir=runs_dir)
    assert r.returncode == 22, r.stderr
    assert "no stack samples" in r.stderr


def test_keep_perf_data(runs_dir):
    rec = run_json(runs_dir, "--duration", "1s", "--warmup", "0.3s", "--probes", "none", "--keep-perf-data")
    assert (runs_dir / rec["id"] / "perf.data").stat().st_size > 0


def test_perf_that_cannot_start_is_an_error_not_a_hang(runs_dir, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "perf").write_text("#!/bin/sh\necho 'perf: no such event' >&2\nexit 1\n")
    (fake / "perf").chmod(0o755)
    r = qprof(
        "run",
        "--duration",
        "1s",
        "--probes",
        "none",
        runs_dir=runs_dir,
        timeout=60,
        env_extra={"PATH": f"{fake}:{os.environ['PATH']}"},
    )
    assert r.returncode == 13, r.stderr
    assert "perf record did not start (perf: no such event)" in r.stderr and "--sample-hz 0" in r.stderr
    assert [json.loads(p.read_text())["status"] for p in runs_dir.glob("*/run.json")] == ["incomplete"]


@pytest.mark.parametrize("stack", ["quic", "tcp-tls"])
def test_stack_quality_of_workload_threads(runs_dir, stack):
    """The default walk (dwarf) reaches a thread entry for nearly every
    workload sample, through msquic's AES assembly and Debian's OpenSSL,
    neither of which keeps frame pointers."""
    rec = run_json(
        runs_dir, "--stack", stack, "--duration", "1s", "--warmup", "0.3s", "--probes", "none", "--sample-hz", "1000"
    )
    flame = rec["flame"]
    assert flame["call_graph"] == "dwarf"
    for side in ("client", "server"):
        assert flame["sides"][side]["samples"] > 100, side
        assert flame["sides"][side]["stack_quality"] >= 0.95, (side, flame["sides"][side]["stack_quality"])


def test_frame_pointer_walk_on_request(runs_dir):
    rec = run_json(
        runs_dir,
        "--stack",
        "tcp-tls",
        "--duration",
        "1s",
        "--warmup",
        "0.3s",
        "--probes",
        "none",
        "--sample-hz",
        "1000",
        "--call-graph",
        "fp",
    )
    flame = rec["flame"]
    assert flame["call_graph"] == "fp"
    # Debian's OpenSSL has no frame pointers: the fp walk loses most workload stacks.
    assert flame["sides"]["client"]["stack_quality"] < 0.5
