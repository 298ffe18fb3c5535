# SPDX-License-Identifier: GPL-2.0-only
"""A capture that missed samples, weighted by each thread's on-CPU time
(flamegraphs/weighting.py): a complete stored capture thinned on purpose
gives back its categories within the sampling error, and compare and
check read a weighted side's categories, marked, while an incomplete
capture that nothing weighted stays left out."""

import math
import random
from pathlib import Path

import pytest

from qprof import figures
from qprof.describe import check, comparison, record
from qprof.flamegraphs import categories, folded, summary, weighting

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parent / "data" / "flame"
PERIOD_NS = 1_000_000  # tests/data/flame/quic: 1000 Hz
PID = 317
KEEP = 0.5  # the share of the thinned thread's samples kept


def _threads(side_stacks: dict) -> dict:
    """The side's stacks as two threads, stack by stack in turn (so each
    does a mix of the side's work, as a workload's worker threads do)."""
    by_tid = {101: {}, 102: {}}
    for i, (stack, n) in enumerate(sorted(side_stacks.items())):
        by_tid[101 + i % 2][stack] = n
    return by_tid


def _thin(stacks: dict, keep: float, rng: random.Random) -> dict:
    """Each sample kept with probability keep: a binomial thinning, as a
    timer that drops samples without regard to the frame."""
    out = {}
    for stack, n in stacks.items():
        k = sum(rng.random() < keep for _ in range(n))
        if k:
            out[stack] = k
    return out


def _incomplete_record(full: dict) -> dict:
    """An incomplete capture whose probe timed each thread at its full
    capture's samples' worth (the complete capture is the truth here)."""
    return {
        "flame": {"complete": False, "sample_period_ns": PERIOD_NS},
        "probes": {
            "cputhread": {
                "status": "present",
                "window": {
                    "threads": [
                        {"tgid": PID, "tid": tid, "comm": "qprof-wl", "oncpu_ns": sum(s.values()) * PERIOD_NS}
                        for tid, s in full.items()
                    ]
                },
            }
        },
    }


def _write_threads(path: Path, side: str, by_tid: dict) -> None:
    folded.write(
        {f"{side}/{tid};{stack}": n for tid, stacks in by_tid.items() for stack, n in stacks.items()},
        path / weighting.THREADS_FILE,
    )


def test_weighted_categories_of_a_thinned_capture_match_the_full_one(tmp_path):
    """Half of one thread's samples dropped at random: weighted by its
    on-CPU time, each category of the side is within 4 binomial standard
    errors of the full capture's (the error is that of scaling the kept
    samples of the thinned thread back: n_c (1-keep)/keep); the side's
    total is the threads' on-CPU time exactly. Unweighted, the largest
    category is far outside that bound, so the bound has teeth."""
    full_side = folded.read(DATA / "quic" / "stacks" / "server.folded").stacks
    full = _threads(full_side)
    thinned = {101: _thin(full[101], KEEP, random.Random(25)), 102: full[102]}
    _write_threads(tmp_path, "server", thinned)
    got = weighting.side_weights(_incomplete_record(full), tmp_path, "server", PID)
    assert got is not None
    stacks, weights = got
    by_thread = {t["tid"]: t for t in weights["threads"]}
    assert by_thread[102]["factor"] == 1.0 and by_thread[101]["factor"] > 1.0  # per thread, not per side
    assert math.isclose(sum(stacks.values()), sum(full_side.values()))

    c = categories.Classifier()
    want = categories.categorize(full_side, c)
    weighted = categories.categorize(stacks, c)
    plain = categories.categorize(_merge(thinned[101], thinned[102]), c)
    thinned_full = categories.categorize(full[101], c)  # what the thinned thread held, per category
    for cat in categories.CATEGORIES:
        se = math.sqrt(thinned_full[cat] * (1 - KEEP) / KEEP)
        assert abs(weighted[cat] - want[cat]) <= 4 * se + 1e-9, (cat, weighted[cat], want[cat], se)
    top = max(categories.CATEGORIES, key=lambda k: thinned_full[k])
    assert abs(plain[top] - want[top]) > 4 * math.sqrt(thinned_full[top] * (1 - KEEP) / KEEP)


def _merge(a: dict, b: dict) -> dict:
    return {s: a.get(s, 0) + b.get(s, 0) for s in set(a) | set(b)}


def test_nothing_is_weighted_without_the_probe_or_on_a_complete_capture(tmp_path):
    full = _threads(folded.read(DATA / "quic" / "stacks" / "server.folded").stacks)
    _write_threads(tmp_path, "server", full)
    rec = _incomplete_record(full)
    assert weighting.side_weights(rec, tmp_path, "server", PID) is not None
    assert weighting.side_weights({**rec, "flame": {**rec["flame"], "complete": True}}, tmp_path, "server", PID) is None
    assert weighting.side_weights({**rec, "probes": {}}, tmp_path, "server", PID) is None
    assert weighting.side_weights(rec, tmp_path, "others", PID) is None  # no thread of its is probed
    assert weighting.side_weights(rec, tmp_path, "server", None) is None


def test_run_figures_weight_only_the_probed_sides_and_say_so(tmp_path):
    """The record's side figures: the weighted side's total is its
    threads' on-CPU time per byte, the samples and stack quality stay as
    sampled, and the undercount is kept (sampled_ns_per_byte)."""
    src = DATA / "quic" / "stacks"
    stacks = {side: folded.read(src / f"{side}.folded").stacks for side in ("client", "server")}
    full = _threads(stacks["server"])
    thinned = {101: _thin(full[101], KEEP, random.Random(7)), 102: full[102]}
    folded.write(stacks["client"], tmp_path / "client.folded")
    folded.write(_merge(thinned[101], thinned[102]), tmp_path / "server.folded")
    folded.write({}, tmp_path / "others.folded")
    _write_threads(tmp_path, "server", thinned)
    nbytes = 10**9
    rec = {
        **_incomplete_record(full),
        "bytes": nbytes,
        "cpu": {s: {"ns_per_byte": {"total": 1.0}} for s in ("client", "server")},
    }
    rec["flame"]["sample_period_ns"] = PERIOD_NS
    out = summary.run_figures(rec, tmp_path, {"client": 999, "server": PID})
    server, client = out["server"], out["client"]
    assert server["samples"] == sum(thinned[101].values()) + sum(thinned[102].values())
    assert math.isclose(server["ns_per_byte"], sum(stacks["server"].values()) * PERIOD_NS / nbytes)
    assert server["sampled_ns_per_byte"] < server["ns_per_byte"]
    assert math.isclose(sum(server["categories_ns_per_byte"].values()), server["ns_per_byte"])
    assert server["weighting"]["source"] == "cputhread"
    assert server["weighting"]["factor_min"] == 1.0 < server["weighting"]["factor_max"]
    assert "weighting" not in client and "weighting" not in out["others"]  # client: its pid has no probed thread


def _flamed(crypto: float, complete: bool, weighted: bool) -> dict:
    side = {"categories_ns_per_byte": {"crypto": crypto, "protocol": 1.0 - crypto}}
    if weighted:
        side["weighting"] = {"source": "cputhread", "threads": [], "factor_min": 1.2, "factor_max": 1.2}
    return {
        "stack": "quic",
        "environment": {"cpu_model": "X", "cpu_count": 2},
        "throughput_gbps": 5.0,
        "cpu": {s: {"ns_per_byte": {"total": 1.0}} for s in ("client", "server", "system")},
        "flame": {
            "complete": complete,
            "weighting": "cputhread" if weighted else None,
            "sides": {"client": side, "others": {"categories_ns_per_byte": {"crypto": 0.1, "protocol": 0.1}}},
        },
    }


def test_compare_and_check_read_a_weighted_side_and_mark_it():
    """A weighted side counts in compare and check, and its rows say so;
    the same capture's unweighted `others` side, and an incomplete capture
    nothing weighted, stay left out."""
    base = [_flamed(0.30, True, False) for _ in range(3)]
    run = [_flamed(0.60, False, True)]
    runs = [{"id": f"b{i}", "config": 0, "record": r} for i, r in enumerate(base)]
    runs.append({"id": "r", "config": 1, "record": run[0]})
    compared = comparison.record_figures([0, 1], runs)
    crypto = compared["metrics"]["client_crypto_ns_per_byte"]
    assert crypto[1]["median"] == 0.60 and crypto[1]["weighted"] == 1 and "weighted" not in crypto[0]
    assert compared["metrics"]["others_crypto_ns_per_byte"][1]["n"] == 0
    assert compared["incomplete_captures"] == []
    rows = {r["figure"]: r for r in check.verdict(run, base, 0.05)}
    assert rows["client crypto ns/B"]["regressed"] and rows["client crypto ns/B"]["weighted"]
    assert rows["client ns/B"].get("weighted") is None  # a headline figure is no capture's

    unweighted = _flamed(0.60, False, False)
    assert not figures.usable_capture(unweighted, "client")
    runs[-1] = {"id": "r", "config": 1, "record": unweighted}
    compared = comparison.record_figures([0, 1], runs)
    assert compared["metrics"]["client_crypto_ns_per_byte"][1]["n"] == 0
    assert compared["incomplete_captures"] == ["r"]
    assert "client crypto ns/B" not in {r["figure"] for r in check.verdict([unweighted], base, 0.05)}


def test_the_fold_keeps_the_workloads_threads_apart(tmp_path):
    """perf's stacks folded per thread (comm-PID/TID): the side files are
    as before (no pid, no tid); threads.folded holds the client's and
    server's stacks under side/tid, the same samples, others' not at all."""
    from qprof.collectors import perf

    collapsed = (
        "qprof-wl-10/12;clone3;start_thread;worker;f 3\n"
        "qprof-wl-10/13;start_thread;worker;f 2\n"
        "qprof-wl-11/11;main;g 1\n"
        "kworker-5/5;h_[k] 4\n"
        "swapper-0/0;secondary_startup_64_[k] 9\n"
    )
    samples = perf.split_folded(collapsed, {"client": 10, "server": 11}, tmp_path)
    assert samples == {"client": 5, "server": 1, "others": 4}
    assert folded.read(tmp_path / "client.folded").stacks == {"qprof-wl;start_thread;worker;f": 5}
    assert folded.read(tmp_path / "others.folded").stacks == {"kworker;h_[k]": 4}
    by_side = weighting.split_threads(folded.read(tmp_path / weighting.THREADS_FILE).stacks)
    assert by_side == {
        "client": {12: {"qprof-wl;start_thread;worker;f": 3}, 13: {"qprof-wl;start_thread;worker;f": 2}},
        "server": {11: {"qprof-wl;main;g": 1}},
    }


def _capture_of(samples: dict, oncpu_s: dict) -> tuple:
    """A capture whose every CPU recorded its share, and a record whose
    probe timed each side's one thread (pid PID for the client, PID+1 for
    the server) at oncpu_s."""
    flame = {"sample_period_ns": PERIOD_NS, "samples": samples, "complete": True, "incomplete_reason": None}
    threads = [
        {"tgid": PID + i, "tid": 500 + i, "comm": "qprof-wl", "oncpu_ns": int(oncpu_s[side] * 1e9)}
        for i, side in enumerate(("client", "server"))
    ]
    rec = {"probes": {"cputhread": {"status": "present", "window": {"threads": threads}}}}
    return flame, rec


def test_a_side_sampled_short_of_its_on_cpu_time_makes_the_capture_incomplete():
    pids = {"client": PID, "server": PID + 1}
    # Within sampling: 1,500 periods expected, 1,440 sampled (4% and 1.5 sigma short).
    flame, rec = _capture_of({"client": 1980, "server": 1440}, {"client": 1.98, "server": 1.5})
    got = record.sides_sampled(flame, rec, pids)
    assert got == {"sampled_share": {"client": 1.0, "server": pytest.approx(0.96)}}
    # The run this rule was written for: every CPU complete, the server at 84%.
    flame, rec = _capture_of({"client": 1974, "server": 1462}, {"client": 1.955, "server": 1.733})
    got = record.sides_sampled(flame, rec, pids)
    assert got["complete"] is False
    assert got["sampled_share"]["server"] == pytest.approx(1462 / 1733)
    assert got["incomplete_reason"].startswith("the server's samples came to 84% of its threads' on-CPU time")
    # Short by more than 5% but within 3 sigma of a small count is sampling, not loss.
    flame, rec = _capture_of({"client": 90, "server": 90}, {"client": 0.1, "server": 0.1})
    assert "complete" not in record.sides_sampled(flame, rec, pids)
    # A CPU's shortfall and a side's are both said.
    flame, rec = _capture_of({"client": 1000, "server": 500}, {"client": 1.0, "server": 1.0})
    flame.update(complete=False, incomplete_reason="CPU 1 recorded 60% of its expected samples")
    reason = record.sides_sampled(flame, rec, pids)["incomplete_reason"]
    assert reason.startswith("CPU 1 recorded 60%") and "the server's samples came to 50%" in reason
    # Without the probe there is nothing to hold a side to.
    rec["probes"]["cputhread"]["status"] = "absent"
    assert record.sides_sampled(flame, rec, pids) == {"sampled_share": {"client": None, "server": None}}
