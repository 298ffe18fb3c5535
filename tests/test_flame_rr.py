# SPDX-License-Identifier: GPL-2.0-only
"""`qprof flame` on request/response runs (`--pattern rr`): the graphs are
CPU per request answered (samples x period / requests), not per byte; a
per-request run never shares a differential graph with a per-byte one."""

import json
import re
from pathlib import Path

import pytest

from qprof.errors import BadStacks, IncompatibleRuns
from qprof.flamegraphs import normalize, sides

from conftest import needs_build, qprof, run_json
from test_flame_cli import DATA, INCOMPATIBLE, SIDES, add_run, needs_inferno, one_sentence, svg_title

REQUESTS = 400
CPU_S = {"client": 120e-6, "server": 45e-6}  # the record's rr.per_request.cpu_s

RR_LINE = re.compile(
    r"^(client|server|others): graph (\d+\.\d{3}) us/request, measured (\d+\.\d{3}|—) us/request, "
    r"gap ([+-]\d+\.\d%|—), stack quality (\d+\.\d%|—), ([\d,]+) samples -> (.+)$",
    re.M,
)
DIFF_LINE = re.compile(
    r"^(client|server|others): A (\d+\.\d{3}) us/request -> B (\d+\.\d{3}) us/request .* -> (.+)$", re.M
)
ROOT_FRAME = re.compile(r"<title>all \(([\d,]+) ns/request, 100(?:\.0+)?%\)</title>")


def as_rr(requests=REQUESTS, cpu_s=CPU_S):
    """A golden run's record as `qprof run --pattern rr` would have it: the
    pattern, and the parts of `rr` that `qprof flame` reads."""

    def edit(rec):
        rec["config"]["pattern"] = "rr"
        rec["rr"] = {
            "period_s": 0.005,
            "payload": 256,
            "requests_due": requests,
            "responses": requests,
            "per_request": {"cpu_s": dict(cpu_s)} if requests else None,
        }

    return edit


@pytest.fixture
def runs(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    return d


def golden_samples(case):
    rec = json.loads((DATA / case / "run.json").read_text())
    samples = dict(rec["flame"]["samples"])
    samples["others"] = samples.pop("system")
    return samples, rec["flame"]["sample_period_ns"]


# --- the arithmetic -----------------------------------------------------------


@pytest.mark.unit
def test_per_request_is_samples_times_period_over_requests():
    stacks = {"p;start_thread;QuicSend": 3, "p;start_thread;aesni_enc": 1, "p;[unknown];x": 2}
    fig = normalize.figures(stacks, 1_000_000, REQUESTS, unit=sides.unit_of({"config": {"pattern": "rr"}}))
    # 6 samples of 1 ms over 400 requests: 15,000 ns = 15 us a request.
    assert fig.ns_per_unit == pytest.approx(6 * 1_000_000 / REQUESTS) == 15_000
    assert fig.shown == pytest.approx(15.0)
    assert sum(fig.categories_ns_per_unit.values()) == pytest.approx(fig.ns_per_unit, rel=1e-12)
    assert fig.stack_quality == pytest.approx(4 / 6)
    # Drawn counts: whole ps per request, each stack its samples x period / requests.
    assert normalize.scaled(stacks, 1_000_000, REQUESTS, sides.unit_of({"config": {"pattern": "rr"}})) == {
        "p;start_thread;QuicSend": 7_500_000,
        "p;start_thread;aesni_enc": 2_500_000,
        "p;[unknown];x": 5_000_000,
    }
    # The figures name their unit, and refuse to be read per byte.
    d = fig.as_dict()
    assert d["requests"] == REQUESTS and d["ns_per_request"] == 15_000 and "ns_per_byte" not in d
    assert set(d["categories_ns_per_request"]) == set(d["categories_samples"])
    with pytest.raises(ValueError, match="per request, not per byte"):
        _ = fig.ns_per_byte


@pytest.mark.unit
def test_per_byte_is_the_same_path():
    stacks = {"p;a": 1, "p;b": 3}
    assert normalize.scaled(stacks, 1_000_000, 2 * 10**9) == normalize.per_byte(stacks, 1_000_000, 2 * 10**9)
    fig = normalize.figures(stacks, 1_000_000, 2 * 10**9)
    assert fig.unit == normalize.BYTE and fig.ns_per_byte == fig.ns_per_unit == fig.shown


@pytest.mark.unit
def test_an_rr_run_is_drawn_per_request(runs):
    _, path = add_run(runs, "tcp-tls", edit=as_rr())
    run = sides.load_run(runs, "latest")
    assert run.unit == sides.unit_of({"config": {"pattern": "rr"}})
    assert all(run.divisor(side) == REQUESTS for side in SIDES)
    assert run.measured_ns_per_unit("client") == pytest.approx(120_000)
    assert run.measured_ns_per_unit("server") == pytest.approx(45_000)
    # No cpu.others in this record: absent, never zero.
    assert run.measured_ns_per_unit("others") is None
    add_run(runs, "quic")
    assert sides.load_run(runs, "latest").unit == normalize.BYTE


@pytest.mark.unit
def test_others_measured_per_request_is_its_per_byte_figure_converted():
    rec = {
        "bytes": 102_400,
        "config": {"pattern": "rr"},
        "cpu": {"others": {"oncpu_schedstat_s": 0.06}},
        "rr": {"responses": REQUESTS, "per_request": {"cpu_s": {"client": None, "server": 4e-5}}},
    }
    per_byte = sides.measured_ns_per_byte(rec, "others")
    assert sides.measured_ns_per_unit_of_work(rec, "others") == pytest.approx(per_byte * 102_400 / REQUESTS)
    assert sides.measured_ns_per_unit_of_work(rec, "others") == pytest.approx(0.06e9 / REQUESTS)
    assert sides.measured_ns_per_unit_of_work(rec, "client") is None  # not measured: absent
    assert sides.measured_ns_per_unit_of_work(rec, "server") == pytest.approx(40_000)


@pytest.mark.unit
def test_an_rr_run_without_answered_requests_is_refused(runs):
    add_run(runs, "tcp-tls", edit=as_rr(requests=0))
    with pytest.raises(BadStacks, match="answered no requests"):
        sides.load_run(runs, "latest")


# --- the command --------------------------------------------------------------


@pytest.mark.system
@needs_inferno
def test_flame_prints_and_draws_per_request(runs):
    rid, path = add_run(runs, "tcp-tls", edit=as_rr())
    r = qprof("flame", runs_dir=runs)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    lines = {m.group(1): m for m in RR_LINE.finditer(r.stdout)}
    assert set(lines) == set(SIDES), r.stdout
    samples, period_ns = golden_samples("tcp-tls")
    for side in SIDES:
        m = lines[side]
        want_ns = samples[side] * period_ns / REQUESTS
        assert m.group(2) == f"{want_ns / 1e3:.3f}"
        assert m.group(3) == (f"{CPU_S[side] * 1e6:.3f}" if side in CPU_S else "—")
        assert int(m.group(6).replace(",", "")) == samples[side]
        svg = Path(m.group(7))
        assert svg == (path / f"flame-{side}.svg").resolve()
        title, subtitle = svg_title(svg)
        assert f"{side} {want_ns / 1e3:.3f} us/request" in title and "256 B request every 5 ms" in title, title
        assert "CPU per request" in subtitle and f"{REQUESTS} requests answered" in subtitle, subtitle
        # The root frame is the side's total, in ns/request.
        root = ROOT_FRAME.search(svg.read_text())
        assert root and int(root.group(1).replace(",", "")) == pytest.approx(want_ns, abs=1.0)
    assert "us/request (share) by category" in r.stdout
    # --folded is unchanged: sample counts.
    r = qprof("flame", "--side", "client", "--folded", runs_dir=runs)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.splitlines() == sorted((path / "stacks" / "client.folded").read_text().splitlines())


@pytest.mark.system
@needs_inferno
def test_diff_of_two_rr_runs_is_per_request(runs):
    a, _ = add_run(runs, "tcp-tls", latest=False, edit=as_rr())
    b, path_b = add_run(runs, "quic", edit=as_rr(requests=2 * REQUESTS))
    r = qprof("flame", "--diff", a, b, "--side", "client", runs_dir=runs)
    assert r.returncode == 0, r.stderr
    m = DIFF_LINE.search(r.stdout)
    assert m, r.stdout
    (sa, period_a), (sb, period_b) = golden_samples("tcp-tls"), golden_samples("quic")
    assert m.group(2) == f"{sa['client'] * period_a / REQUESTS / 1e3:.3f}"
    assert m.group(3) == f"{sb['client'] * period_b / (2 * REQUESTS) / 1e3:.3f}"
    svg = path_b / f"flame-diff-{a}-client.svg"
    assert Path(m.group(4)) == svg.resolve() or Path(m.group(4)) == svg
    title, subtitle = svg_title(svg)
    assert "us/request" in title and "red: B costs more per request" in subtitle, (title, subtitle)
    assert "ns/request" in svg.read_text()


@pytest.mark.unit
@pytest.mark.parametrize("rr_side", ("a", "b"))
def test_diff_of_rr_against_bulk_is_refused(runs, rr_side):
    a, _ = add_run(runs, "tcp-tls", latest=False, edit=as_rr() if rr_side == "a" else None)
    b, path_b = add_run(runs, "quic", edit=as_rr() if rr_side == "b" else None)
    r = qprof("flame", "--diff", a, b, runs_dir=runs)
    assert r.returncode == INCOMPATIBLE == IncompatibleRuns.exit_code
    line = one_sentence(r.stderr)
    assert "per request" in line and "per byte" in line and a in line and b in line, line
    assert r.stdout == "" and not list(path_b.glob("flame-diff-*"))


# --- a real run -----------------------------------------------------------------


@pytest.mark.system
@needs_build
@needs_inferno
def test_flame_of_a_real_rr_run_agrees_with_its_record(runs_dir):
    rec = run_json(
        runs_dir,
        *("--stack", "tcp", "--pattern", "rr", "--period", "5ms", "--payload", "256"),
        *("--duration", "2s", "--warmup", "0.3s", "--probes", "none", "--sample-hz", "999"),
    )
    r = qprof("flame", rec["id"], runs_dir=runs_dir)
    assert r.returncode == 0, r.stderr
    lines = {m.group(1): m for m in RR_LINE.finditer(r.stdout)}
    assert set(lines) == set(SIDES), r.stdout
    rr = rec["rr"]
    n = rr["responses"]
    for side in SIDES:
        m = lines[side]
        # Same samples, same formula as the record's figure per request.
        recorded_us = rr["flame_ns_per_request"][side]["total"] / 1e3
        assert float(m.group(2)) == pytest.approx(recorded_us, abs=0.0005 + 1e-9), (side, m.group(0))
        assert int(m.group(6).replace(",", "")) == rec["flame"]["samples"][side]
        # Measured: schedstat on-CPU per request; for others, cpu.others over the requests.
        if side == "others":
            on = (rec["cpu"].get("others") or {}).get("oncpu_schedstat_s")
            want = None if on is None else on * 1e6 / n
        else:
            on = rr["per_request"]["cpu_s"][side]
            want = None if on is None else on * 1e6
        assert m.group(3) == ("—" if want is None else f"{want:.3f}"), (side, m.group(0))
        svg = Path(m.group(7))
        if rec["flame"]["samples"][side]:
            title, subtitle = svg_title(svg)
            assert "us/request" in title and "CPU per request" in subtitle, (title, subtitle)
    print(
        "graph vs record, us/request: "
        + ", ".join(
            f"{s} {lines[s].group(2)} vs {rr['flame_ns_per_request'][s]['total'] / 1e3:.4f} "
            f"(measured {lines[s].group(3)})"
            for s in SIDES
        )
        + f"; {n} requests"
    )
