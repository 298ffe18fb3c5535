# SPDX-License-Identifier: GPL-2.0-only
"""`qprof check`: a real regression (QUIC without GSO against QUIC with
it, compared on purpose) fails the check and names what grew; a repeat of the baseline's
configuration passes; a baseline of another stack or pattern is refused,
and one measured with other options is refused naming them, unless
--allow-differences."""

import json
import shutil
import statistics
from pathlib import Path

import pytest

from qprof import errors, figures
from qprof.cli.check_cmd import parse_share
from qprof.describe import check, cpu, options

from conftest import needs_build, qprof_here
from test_bad_input import one_sentence
from test_run_offload import QUIC_GSO, compared

REGRESSION = errors.Regression.exit_code


def _rec(client, server=1.0, gbps=5.0, crypto=None, stack="quic", cpu_model="X"):
    rec = {
        "stack": stack,
        "environment": {"cpu_model": cpu_model, "cpu_count": 2},
        "throughput_gbps": gbps,
        "cpu": {side: {"ns_per_byte": {"total": v}} for side, v in (("client", client), ("server", server))},
    }
    if crypto is not None:
        rec["flame"] = {"sides": {"client": {"categories_ns_per_byte": {"crypto": crypto}}}}
    return rec


@pytest.mark.unit
def test_a_regression_must_be_beyond_the_spread_and_the_threshold():
    base = [_rec(1.0, crypto=0.2), _rec(1.2, crypto=0.2), _rec(1.1, crypto=0.2)]
    rows = {r["figure"]: r for r in check.verdict([_rec(1.3, crypto=0.3)], base, 0.05)}
    assert rows["client ns/B"]["regressed"] and rows["client ns/B"]["change"] == pytest.approx(0.2 / 1.1)
    # crypto grew by 0.1 ns/B, more than 5% of the client's 1.1.
    assert rows["client crypto ns/B"]["regressed"]
    small = {r["figure"]: r for r in check.verdict([_rec(1.3, crypto=0.24)], base, 0.05)}
    assert not small["client crypto ns/B"]["regressed"]  # +20%, but 0.04 ns/B of 1.1
    assert not rows["server ns/B"]["regressed"] and not rows["throughput"]["regressed"]
    # Inside the baseline's range: not a regression, however large the threshold's excess.
    assert not {r["figure"]: r for r in check.verdict([_rec(1.19)], base, 0.05)}["client ns/B"]["regressed"]
    # Beyond the range but within the threshold: not either.
    assert not {r["figure"]: r for r in check.verdict([_rec(1.21)], base, 0.2)}["client ns/B"]["regressed"]
    # Throughput regresses downwards.
    assert {r["figure"]: r for r in check.verdict([_rec(1.1, gbps=3.0)], base, 0.05)}["throughput"]["regressed"]


@pytest.mark.unit
def test_a_category_grown_from_nothing_regresses():
    """A category the baseline's samples never hit (0 ns/B in every run)
    that now costs more than the threshold's share of its side has grown
    by more than any share: a real run's server send syscalls went from
    0.0 to 0.075 ns/B of 0.99 and was not flagged."""
    base = [_rec(1.0, crypto=0.0), _rec(1.0, crypto=0.0)]
    rows = {r["figure"]: r for r in check.verdict([_rec(1.0, crypto=0.1)], base, 0.05)}
    assert rows["client crypto ns/B"]["regressed"] and rows["client crypto ns/B"]["change"] is None
    small = {r["figure"]: r for r in check.verdict([_rec(1.0, crypto=0.01)], base, 0.05)}
    assert not small["client crypto ns/B"]["regressed"]  # 1% of the client's 1.0


@pytest.mark.unit
def test_another_stack_or_machine_is_refused_unless_forced():
    with pytest.raises(errors.IncompatibleRuns) as e:
        check.comparable([_rec(1.0)], [_rec(1.0, stack="tcp")], force=False)
    assert "different stacks" in str(e.value) and "--force" in str(e.value)
    warned = check.comparable([_rec(1.0)], [_rec(1.0, cpu_model="Y")], force=True)
    assert len(warned) == 1 and "different machines" in warned[0]


def _configured(**cfg):
    return dict(_rec(1.0), config={"stack": "quic", "pattern": "bulk", **cfg})


@pytest.mark.unit
def test_another_pattern_is_refused_like_another_stack():
    with pytest.raises(errors.IncompatibleRuns) as e:
        check.comparable([_configured(pattern="rr")], [_configured()], force=False, allow_differences=True)
    assert "different patterns (bulk, rr)" in str(e.value) and "--force" in str(e.value)
    warned = check.comparable([_configured(pattern="rr")], [_configured()], force=True)
    assert warned[0] == "the runs are of different patterns (bulk, rr); compared anyway (--force)"


@pytest.mark.unit
@pytest.mark.parametrize("o", options.OPTIONS, ids=lambda o: o.name)
def test_every_option_of_the_table_is_held_equal_but_the_free_ones(o):
    """Each option of the table but stack and pattern (refused on their
    own) and the few that say how long, where to or how reported: a
    baseline measured with another value of it alone is refused, the
    sentence naming it with both values; --allow-differences compares."""
    if o.name in check.OWN:
        return
    base = _configured(**{o.field: "other"})
    if o.name in check.FREE:
        assert check.differences([_configured()], [base]) == []
        return
    assert [d["option"] for d in check.differences([_configured()], [base])] == [o.name]
    with pytest.raises(errors.IncompatibleRuns) as e:
        check.comparable([_configured()], [base], force=False)
    said = str(e.value)
    assert f"different options ({o.flag} " in said and " against other)" in said and "--allow-differences" in said
    warned = check.comparable([_configured()], [base], force=False, allow_differences=True)
    assert warned == [
        f"the runs differ in {check.differ_text(check.differences([_configured()], [base]))}; "
        "compared anyway (--allow-differences)"
    ]


@pytest.mark.unit
def test_free_and_held_options_are_the_tables():
    assert set(check.FREE + check.OWN) <= set(options.BY_NAME)


@pytest.mark.unit
def test_an_unset_option_is_its_filled_default():
    """A record from before a default was filled in (conns null) is not
    unlike one that says the default (conns 1); one of 32 is."""
    assert check.differences([_configured(conns=None)], [_configured(conns=1)]) == []
    assert check.differences([_configured()], [_configured(conns=1)]) == []
    diffs = check.differences([_configured(conns=None, gso="off")], [_configured(conns=32)])
    assert diffs == [
        {"option": "conns", "run": [1], "baseline": [32]},
        {"option": "gso", "run": ["off"], "baseline": [None]},
    ]
    assert check.differ_text(diffs) == "--conns 1 against 32, --gso off against default"
    periods = check.differences([_configured(period_s=0.01, payload=256)], [_configured(period_s=0.02, payload=1024)])
    assert check.differ_text(periods) == "--period 10ms against 20ms, --payload 256 against 1K"


STORED = Path(__file__).parent / "data" / "report" / "runs"
RR_RUN = "20261123-215324-0ceaeb"  # qprof run --stack quic --pattern rr (tests/data/report/README.md)


def stored(root: Path, rid: str, **cfg) -> str:
    """The stored quic rr run copied in as rid, its config changed by cfg."""
    shutil.copytree(STORED / RR_RUN, root / rid)
    rec = json.loads((root / rid / "run.json").read_text())
    rec["id"] = rid
    rec["config"].update(cfg)
    (root / rid / "run.json").write_text(json.dumps(rec))
    return rid


@pytest.mark.unit
def test_a_baseline_of_another_pattern_or_options_is_refused_in_one_sentence(tmp_path):
    """Issue 39's: a quic rr run against a quic bulk baseline gave exit 40
    (throughput -100%); --conns 1 against 32, --gso off against the
    default and payload 256 against 128 compared without a word."""
    run = stored(tmp_path, "20261124-000000-a00001")
    bulk = stored(tmp_path, "20261124-000000-a00002", pattern="bulk", period_s=None, payload=None)
    r = qprof_here("check", run, "--baseline", bulk, runs_dir=tmp_path)
    assert r.returncode == errors.IncompatibleRuns.exit_code and r.stdout == "", r.stdout + r.stderr
    line = one_sentence(r.stderr)
    assert "different patterns (bulk, rr)" in line and "--force" in line

    unlike = stored(tmp_path, "20261124-000000-a00003", conns=32, gso="off", payload=128)
    r = qprof_here("check", run, "--baseline", unlike, runs_dir=tmp_path)
    assert r.returncode == errors.IncompatibleRuns.exit_code and r.stdout == "", r.stdout + r.stderr
    line = one_sentence(r.stderr)
    assert "(--payload 256 against 128, --conns 1 against 32, --gso default against off)" in line, line
    assert "--allow-differences" in line

    # Compared on purpose: the same figures, so nothing regressed, and the verdict says what differs.
    r = qprof_here("check", run, "--baseline", unlike, "--allow-differences", runs_dir=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    said = " ".join(r.stdout.split())
    assert "the runs differ in --payload 256 against 128, --conns 1 against 32, --gso default against off; " in said
    assert "compared anyway (--allow-differences)" in said
    r = qprof_here("check", run, "--baseline", unlike, "--allow-differences", "--json", runs_dir=tmp_path)
    assert r.returncode == 0 and [d["option"] for d in json.loads(r.stdout)["differences"]] == [
        "payload",
        "conns",
        "gso",
    ]

    # Another --duration or --warmup is the same measurement, longer or later.
    longer = stored(tmp_path, "20261124-000000-a00004", duration_s=30.0, warmup_s=2.0, conns=1)
    r = qprof_here("check", run, "--baseline", longer, "--json", runs_dir=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["differences"] == [], r.stderr


@pytest.mark.unit
def test_a_regression_against_an_unlike_baseline_names_what_differs(tmp_path):
    run = stored(tmp_path, "20261124-000000-b00001")
    cheaper = stored(tmp_path, "20261124-000000-b00002", conns=32)
    rec = json.loads((tmp_path / cheaper / "run.json").read_text())
    rec["cpu"]["client"]["ns_per_byte"]["total"] /= 2
    (tmp_path / cheaper / "run.json").write_text(json.dumps(rec))
    r = qprof_here("check", run, "--baseline", cheaper, "--allow-differences", runs_dir=tmp_path)
    assert r.returncode == errors.Regression.exit_code, r.stderr
    line = one_sentence(r.stderr)
    assert f"{run} regressed against {cheaper} (the runs differ: --conns 1 against 32)" in line
    assert "client ns/B +100.0%" in line

    # From nothing: a baseline figure of 0 (a category its samples never hit) that grew.
    rec["config"]["conns"] = None
    rec["cpu"]["client"]["ns_per_byte"]["total"] = 0.0
    (tmp_path / cheaper / "run.json").write_text(json.dumps(rec))
    r = qprof_here("check", run, "--baseline", cheaper, runs_dir=tmp_path)
    assert r.returncode == errors.Regression.exit_code, r.stderr
    assert "client ns/B from 0 to 1041.667." in one_sentence(r.stderr)


@pytest.mark.unit
@pytest.mark.parametrize("text, value", [("5%", 0.05), ("0.05", 0.05), ("0%", 0.0), ("150%", 1.5)])
def test_parse_share(text, value):
    assert parse_share(text) == pytest.approx(value)


@pytest.mark.unit
@pytest.mark.parametrize("text", ["five", "-5%"])
def test_parse_share_refuses(text):
    with pytest.raises(errors.BadValue):
        parse_share(text)


@pytest.mark.system
@needs_build
def test_gso_off_regresses_against_gso_on_and_a_repeat_passes(shared):
    # With the default probes every capture is complete or weighted by its
    # threads' on-CPU time, so check holds each one's categories; but for a
    # side that took no sample at all on a CPU whose timer lost them (CI
    # saw a server on a CPU that recorded 4% of its samples get none of
    # them): nothing to weight, which the record says, and check leaves
    # that side's categories out (side_cats below).
    runs_dir, comp = shared("compare", *QUIC_GSO)
    cmp_id = comp["id"]
    on_recs, off_recs = compared(comp)
    assert [r["status"] for r in on_recs + off_recs] == ["complete"] * 4
    for r in on_recs + off_recs:
        for side in ("client", "server"):
            if not figures.usable_capture(r, side):
                f = r["flame"]
                assert f["complete"] is False and f["sides"][side]["samples"] == 0, (side, f)
                assert f"the {side}'s samples came to 0%" in f["incomplete_reason"], f["incomplete_reason"]

    # GSO off against GSO on: measured with another option, so refused
    # unless compared on purpose, and then msquic's per-datagram work makes
    # every side's CPU per byte grow.
    args = ("check", cmp_id, "--config", "1", "--baseline", cmp_id, "--baseline-config", "0")
    r = qprof_here(*args, runs_dir=runs_dir)
    assert r.returncode == errors.IncompatibleRuns.exit_code, r.stderr
    assert "(--gso off against on)" in one_sentence(r.stderr)
    args += ("--allow-differences",)
    r = qprof_here(*args, runs_dir=runs_dir)
    assert r.returncode == REGRESSION, r.stderr
    line = one_sentence(r.stderr)
    assert "client ns/B" in line and "system ns/B" in line and "(the runs differ: --gso off against on)" in line
    verdict = json.loads(qprof_here(*args, "--json", runs_dir=runs_dir).stdout)
    assert verdict["differences"] == [{"option": "gso", "run": ["off"], "baseline": ["on"]}]
    rows = {x["figure"]: x for x in verdict["rows"]}

    # How much more GSO off costs is the CPU's (its per-datagram work against
    # its crypto: 3.9x here), so no size is asserted; the direction is, in
    # every run, beyond each figure's grain (/proc's ticks: under two at each
    # edge, describe/cpu.py): each GSO-off run cost the client more per byte
    # than any GSO-on run, and the row's figures are those runs' own.
    def client(rec, grain):
        return rec["cpu"]["client"]["ns_per_byte"]["total"] + grain * 2e9 / cpu.CLK_TCK / rec["bytes"]

    assert min(client(r, -1) for r in off_recs) > max(client(r, +1) for r in on_recs), (off_recs, on_recs)
    off, on = ([r["cpu"]["client"]["ns_per_byte"]["total"] for r in recs] for recs in (off_recs, on_recs))
    row = rows["client ns/B"]
    assert row["regressed"] and row["beyond_spread"] and (row["n"], row["baseline_n"]) == (2, 2)
    assert (row["median"], row["baseline_median"]) == pytest.approx((statistics.median(off), statistics.median(on)))
    assert row["change"] == pytest.approx(row["median"] / row["baseline_median"] - 1)
    # The categories, in every case: a row for each client and server
    # category the records hold, at its records' medians, regressed exactly
    # where its runs moved beyond the baseline's spread and by more than 5%
    # (the default) of its baseline and of its side's CPU (describe/check.py).
    held = {(side, cat) for r in on_recs + off_recs for side in ("client", "server") for cat in side_cats(r, side)}
    assert {f"{side} {cat} ns/B" for side, cat in held} == {n for n in rows if n.count(" ") > 1}, rows
    for side, cat in held:
        now, was = (
            [side_cats(r, side)[cat] for r in recs if cat in side_cats(r, side)] for recs in (off_recs, on_recs)
        )
        row = rows[f"{side} {cat} ns/B"]
        med_now, med_was = statistics.median(now), statistics.median(was)
        assert (row["median"], row["baseline_median"]) == pytest.approx((med_now, med_was))
        side_was = statistics.median(r["cpu"][side]["ns_per_byte"]["total"] for r in on_recs)
        grew = med_now - med_was
        expected = min(now) > max(was) and grew > 0.05 * med_was and grew > 0.05 * side_was
        assert row["regressed"] == expected, (row, now, was, side_was)
    # ...and the per-datagram work that grew is the client's somewhere.
    assert any(rows[f"client {cat} ns/B"]["regressed"] for side, cat in held if side == "client"), rows

    # A repeat of the baseline's configuration passes, held to the baseline's
    # own spread alone: one of its runs lies inside its range on every
    # figure, so even at a threshold of 0% nothing is beyond the spread.
    repeat = next(x["id"] for x in comp["runs"] if x["config"] == 0)
    r = qprof_here(
        "check",
        repeat,
        "--baseline",
        cmp_id,
        "--baseline-config",
        "0",
        "--max-regression",
        "0%",
        "--json",
        runs_dir=runs_dir,
    )
    assert r.returncode == 0, r.stderr + r.stdout
    assert not any(x["beyond_spread"] for x in json.loads(r.stdout)["rows"])

    r = qprof_here("check", "no-such-run", "--baseline", repeat, runs_dir=runs_dir)
    assert r.returncode == errors.RunNotFound.exit_code and "no-such-run" in one_sentence(r.stderr)
    r = qprof_here("check", repeat, "--baseline", cmp_id, "--baseline-config", "7", runs_dir=runs_dir)
    assert r.returncode == errors.BadValue.exit_code and "configurations 0 to 1" in one_sentence(r.stderr)


def side_cats(rec, side) -> dict:
    """A side's flame categories (ns/B), as check may read them: a complete or weighted capture's."""
    return rec["flame"]["sides"][side]["categories_ns_per_byte"] if figures.usable_capture(rec, side) else {}
