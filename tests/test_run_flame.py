# SPDX-License-Identifier: GPL-2.0-only
"""Stacks sampled by a real `qprof run`, drawn by `qprof flame`."""

import json
import os
import re
import xml.etree.ElementTree as ET

import pytest

from qprof.describe.record import SAMPLE_COVERAGE_MIN, SAMPLED_SIGMAS
from qprof.flamegraphs import categories, folded

from conftest import needs_build, qprof, run_json
from test_run_probes import SAMPLED, assert_oncpu

pytestmark = [pytest.mark.system, needs_build]
# Short runs sampled alone (no probes), each asserted on by several tests:
# quic drawn, a tcp-tls one whose perf.data is kept, and quic unsampled
# and uncut (no --interval).
DRAWN = ("--stack", "quic", "--duration", "1s", "--warmup", "0.3s", "--probes", "none", "--sample-hz", "1000")
KEPT = ("--stack", "tcp-tls", *DRAWN[2:], "--keep-perf-data")
QUICK_ALONE = ("--duration", "0.5s", "--warmup", "0.3s", "--probes", "none", "--sample-hz", "0", "--interval", "0")
# The share of workload samples whose walk reaches a thread entry, at least.
STACK_QUALITY = 0.95


def test_flame_per_byte_matches_collectors(shared):
    """Every side's graph against the collectors, whatever perf lost: a
    complete capture as sampled, one that lost samples as weighted by its
    threads' on-CPU time (flamegraphs/weighting.py), so that this VM's CPU
    1, which intermittently delivers a fraction of its cpu-clock samples,
    can never leave the agreement unchecked."""
    runs_dir, rec = shared("run", "--stack", "quic", *SAMPLED)
    run_dir = runs_dir / rec["id"]
    flame = rec["flame"]
    assert flame["event"] == "cpu-clock" and flame["sample_period_ns"] == 1_000_000
    period = flame["sample_period_ns"]
    # The flag is consistent: complete only when every CPU recorded its
    # share of window x rate and each side's samples its threads' on-CPU
    # time (describe/record.py sides_sampled); an incomplete one says
    # which fell short, and is weighted.
    cpus_whole = min(flame["coverage_per_cpu"].values()) >= SAMPLE_COVERAGE_MIN
    assert flame["complete"] <= cpus_whole, flame
    if cpus_whole and not flame["complete"]:
        assert "samples came to" in flame["incomplete_reason"], flame
    assert (flame["incomplete_reason"] is None) == flame["complete"], flame
    assert flame.get("weighting") == (None if flame["complete"] else "cputhread"), flame
    assert set(flame["sampled_share"]) == {"client", "server"}, flame
    # The sides' samples are some of all the CPUs' (idle is in no side).
    assert sum(flame["samples"].values()) <= sum(flame["samples_per_cpu"].values())
    for side in ("client", "server"):
        f = flame["sides"][side]
        # samples x period / bytes: what the graph sampled...
        assert f["samples"] == flame["samples"][side]
        sampled = f.get("sampled_ns_per_byte", f["ns_per_byte"])
        assert sampled == pytest.approx(f["samples"] * period / rec["bytes"])
        # ...set against the collectors' measured CPU per byte, and the gap between.
        assert f["measured_ns_per_byte"] == pytest.approx(rec["cpu"][side]["ns_per_byte"]["total"])
        gap = 100 * (f["ns_per_byte"] - f["measured_ns_per_byte"]) / f["measured_ns_per_byte"]
        assert f["gap_percent"] == pytest.approx(gap)
        # Categories split the graph's total exactly; msquic's work is mostly crypto and protocol.
        cats = f["categories_ns_per_byte"]
        assert sum(cats.values()) == pytest.approx(f["ns_per_byte"])
        assert cats["crypto"] > 0 and cats["protocol"] > 0, cats
        # The graph is the side's on-CPU time as the cputhread probe timed it...
        oncpu_ns = rec["cpu_threads"][side]["oncpu_s"] * 1e9
        graph_ns = f["ns_per_byte"] * rec["bytes"]
        assert flame["complete"] or "weighting" in f, (side, flame["incomplete_reason"])
        if "weighting" in f:
            # ...exactly, where weighted: each sampled thread's samples scaled
            # to its on-CPU time, a thread the probe did not see as sampled,
            # and a probed thread with no sample nowhere (unsampled_oncpu_s).
            w = f["weighting"]
            assert flame["complete"] is False
            assert sum(t["samples"] for t in w["threads"]) == f["samples"]
            placed_ns = sum(t["samples"] * period * t["factor"] for t in w["threads"])
            assert graph_ns == pytest.approx(placed_ns)
            unprobed_ns = sum(t["samples"] * period for t in w["threads"] if t["oncpu_s"] is None)
            assert graph_ns == pytest.approx(oncpu_ns - w["unsampled_oncpu_s"] * 1e9 + unprobed_ns)
        else:
            # ...within what a complete capture may miss or gain: less than a
            # CPU may lose and stay complete (SAMPLE_COVERAGE_MIN), or a count's
            # sampling error (SAMPLED_SIGMAS sigma), whichever is more.
            expected = oncpu_ns / period
            noise = max((1 - SAMPLE_COVERAGE_MIN) * expected, SAMPLED_SIGMAS * expected**0.5)
            assert abs(f["samples"] - expected) <= noise, (side, f["samples"], expected, noise)
        # ...and that time is the collectors': schedstat's and /proc's ticks
        # within what the run's steal, reads and edges part them by.
        assert_oncpu(rec, run_dir, side, rec["cpu_threads"][side])
    # perf.data is gone unless asked for; the folded stacks stay.
    assert not (run_dir / "perf.data").exists()
    names = {p.name for p in (run_dir / "stacks").iterdir()}
    assert names == {"client.folded", "server.folded", "others.folded", "threads.folded"}


def test_the_content_check_is_its_own_category(shared):
    """Issue 25: the receiver's check of every byte (wl_pattern_check,
    built with target_clones) is "verification", apart from the rest of
    the workload's code in "other", so that a reader can subtract it. What
    is asserted holds whatever samples CPU 1 loses."""
    runs_dir, rec = shared("run", "--stack", "tcp", *SAMPLED)
    flame = rec["flame"]
    stacks_dir = runs_dir / rec["id"] / "stacks"
    classifier = categories.Classifier()
    for side in ("client", "server", "others"):
        cats = flame["sides"][side]["categories_ns_per_byte"]
        # Every side has the category, counted once: the categories still
        # split the side's total.
        assert list(cats) == list(categories.CATEGORIES), (side, list(cats))
        assert sum(cats.values()) == pytest.approx(flame["sides"][side]["ns_per_byte"]), (side, cats)
    # The sender checks nothing.
    assert flame["sides"]["client"]["categories_ns_per_byte"]["verification"] == 0
    # Each sample taken in a clone of the check (the leaf) is verification, none "other".
    server = folded.read(stacks_dir / "server.folded", warn=pytest.fail).stacks
    in_check = {s: n for s, n in server.items() if re.fullmatch(r"wl_pattern_check\.\w+", folded.frames(s)[-1])}
    assert {classifier.stack_category(s) for s in in_check} <= {"verification"}, in_check
    # The receiver checks every byte it gets, ~15% of its CPU here: a
    # 2 s window at 1000 Hz holds some of those samples even where CPU 1
    # lost most of its own.
    assert sum(in_check.values()) > 0, sorted(server.items(), key=lambda kv: -kv[1])[:10]
    sampled = categories.categorize(server, classifier)["verification"]
    assert sampled >= sum(in_check.values())
    verification = flame["sides"]["server"]["categories_ns_per_byte"]["verification"]
    if "weighting" in flame["sides"]["server"]:
        # Weighting scales a thread's samples by its on-CPU time; it cannot make them none.
        assert verification > 0
    else:
        assert verification == pytest.approx(sampled * flame["sample_period_ns"] / rec["bytes"])


def test_flame_draws_the_run(shared):
    runs_dir, rec = shared("run", *DRAWN)
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


def test_a_run_without_probes_has_no_observers(shared):
    """What probes cost is in every run with probes (test_run_probes), none without."""
    _, rec = shared("run", *DRAWN)
    assert rec["config"]["probes"] == [] and rec["observers"] is None


def test_no_stacks_with_sample_hz_zero(shared):
    runs_dir, rec = shared("run", *QUICK_ALONE)
    assert rec["flame"] is None
    r = qprof("flame", rec["id"], runs_dir=runs_dir)
    assert r.returncode == 22, r.stderr
    assert "no stack samples" in r.stderr


def test_keep_perf_data(shared):
    runs_dir, rec = shared("run", *KEPT)
    assert rec["config"]["keep_perf_data"] is True
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


@pytest.mark.parametrize("args", [DRAWN, KEPT, ("--stack", "quinn", *DRAWN[2:])], ids=["quic", "tcp-tls", "quinn"])
def test_stack_quality_of_workload_threads(shared, args):
    """The default walk (dwarf) reaches a thread entry for nearly every
    workload sample, through msquic's AES assembly and Debian's OpenSSL,
    neither of which keeps frame pointers, and through quinn's deep async
    stacks (a larger copy of the stack for that stack)."""
    _, rec = shared("run", *args)
    flame = rec["flame"]
    assert flame["call_graph"] == "dwarf"
    for side in ("client", "server"):
        n, quality = flame["sides"][side]["samples"], flame["sides"][side]["stack_quality"]
        # Nearly every: 95%, less the sampling error of a share of n samples
        # (SAMPLED_SIGMAS sigma), however few a slow machine's window holds.
        assert n > 0 and quality >= STACK_QUALITY - SAMPLED_SIGMAS * (STACK_QUALITY * (1 - STACK_QUALITY) / n) ** 0.5, (
            side,
            n,
            quality,
        )


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


def test_a_comparison_shows_where_the_cpu_goes_for_every_stack(runs_dir):
    """Issue 25: a capture that missed samples is weighted by its threads'
    on-CPU time (the cputhread probe, on by default) instead of dropped, so
    every stack's client and server have category rows, each from a
    complete capture or a weighted one, and marked as such."""
    r = qprof(
        "compare", "--stacks", "quic,tcp", "-d", "1s", "--warmup", "0.3s", "--repeat", "1", "--json", runs_dir=runs_dir
    )
    assert r.returncode == 0, r.stderr
    comp = json.loads(r.stdout)
    assert comp["incomplete_captures"] == []  # none left out
    runs = {run["id"]: run for run in comp["runs"]}
    assert len(runs) == 2
    for side in ("client", "server"):
        rows = {k: v for k, v in comp["metrics"].items() if k.startswith(f"{side}_") and "_ns_per_byte" in k}
        cats = {k: v for k, v in rows.items() if k != f"{side}_ns_per_byte"}
        assert cats, (side, list(comp["metrics"]))
        for config in range(2):
            # every stack measured its side's categories (one run each), summing to something
            got = [v[config] for v in cats.values()]
            assert all(g["n"] == 1 for g in got), (side, config, got)
            assert sum(g["median"] for g in got) > 0
