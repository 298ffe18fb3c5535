# SPDX-License-Identifier: GPL-2.0-only
"""`qprof export` as a user runs it, on run directories assembled from the
golden captures (tests/data/flame/<case>/), each format read back by a
reader qprof did not write: Go's pprof for pprof, prometheus_client's
OpenMetrics parser for openmetrics, perf itself for perf-script."""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qprof.flamegraphs import normalize

from conftest import needs_build, qprof, run_json
from test_flame_cli import BAD_STACKS, BAD_VALUE, DATA, RUN_NOT_FOUND, SIDES, add_run, expected_figures, one_sentence
from test_flame_rr import REQUESTS, as_rr

UNKNOWN_FORMAT, NO_PERF_DATA, UNWRITABLE = 32, 34, 27
CASES = ("quic", "tcp-tls")


def go_pprof():
    """Debian's Go (golang-go, which `make test` installs), else a Go on PATH."""
    return "/usr/bin/go" if Path("/usr/bin/go").exists() else shutil.which("go")


needs_go = pytest.mark.skipif(go_pprof() is None, reason="no Go for `go tool pprof`; `make test` installs golang-go")


@pytest.fixture
def runs(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    return d


def golden(case):
    """The case's record (sides as record version 2 names them) and stacks."""
    rec = json.loads((DATA / case / "run.json").read_text())
    rec["flame"]["samples"]["others"] = rec["flame"]["samples"].pop("system")
    stacks = {}
    for side in SIDES:
        name = "system" if side == "others" else side
        for line in (DATA / case / "stacks" / f"{name}.folded").read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            stacks[(side, stack)] = stacks.get((side, stack), 0) + int(n)
    return rec, stacks


# --- pprof, read back by Go's pprof ---------------------------------------------------

RAW_SAMPLE = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\d+): ([\d ]+?)\s*$")
RAW_LABELS = re.compile(r"(\w+):\[([^\]]*)\]")
RAW_LOCATION = re.compile(r"^\s+(\d+): 0x0 M=1 (.*) :0(?::0)? s=0$")  # newer pprof adds the column


def pprof_raw(path: Path, *args) -> dict:
    """`go tool pprof -raw`: the sample types, comments, and each sample's
    values, labels and frames (root first, as folded)."""
    r = subprocess.run(
        [go_pprof(), "tool", "pprof", "-raw", *args, str(path)],
        capture_output=True,
        text=True,
        cwd=path.parent,
        env={**os.environ, "GOTOOLCHAIN": "local"},  # no toolchain download for a newer Go
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    types = lines[lines.index("Samples:") + 1].split()
    samples, locations = [], {}
    section = None
    for line in lines:
        if line in ("Samples:", "Locations", "Mappings"):
            section = line
            continue
        if section == "Samples:" and (m := RAW_SAMPLE.match(line)):
            samples.append({"values": tuple(int(v) for v in m.group(1, 2, 3)), "ids": m.group(4).split()})
        elif section == "Samples:" and samples and RAW_LABELS.search(line):
            samples[-1]["labels"] = dict(RAW_LABELS.findall(line))
        elif section == "Locations" and (m := RAW_LOCATION.match(line)):
            locations[m.group(1)] = m.group(2)
    for s in samples:
        s["stack"] = ";".join(locations[i] for i in reversed(s.pop("ids")))
    comments = [l.removeprefix("Comment: ") for l in lines if l.startswith("Comment: ")]
    return {"types": types, "samples": samples, "comments": comments, "text": r.stdout}


@pytest.mark.system
@needs_go
@pytest.mark.parametrize("case", CASES)
def test_pprof_round_trips_through_go_pprof(case, runs):
    rid, path = add_run(runs, case)
    r = qprof("export", "--format", "pprof", runs_dir=runs)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = path / "profile.pb.gz"
    assert r.stdout == f"pprof: 3 sides, {sum(golden(case)[1].values()):,} samples -> {out}\n"
    raw = pprof_raw(out)
    assert raw["types"] == [
        "samples/count",
        "cpu/nanoseconds",
        "cpu_per_byte/fs/B[dflt]",
    ]  # [dflt]: the default sample type
    rec, folded = golden(case)
    period = rec["flame"]["sample_period_ns"]
    # Every folded line is one sample, with its samples and samples x period exactly.
    got = {(s["labels"]["side"], s["stack"]): s["values"] for s in raw["samples"]}
    assert len(got) == len(raw["samples"]) == len(folded)
    assert {k: v[:2] for k, v in got.items()} == {k: (n, n * period) for k, n in folded.items()}
    # ... and its CPU per byte in whole fs/B.
    assert all(v[2] == round(v[1] * 10**6 / rec["bytes"]) for v in got.values())
    for side in SIDES:
        values = [v for (s, _), v in got.items() if s == side]
        assert sum(v[0] for v in values) == rec["flame"]["samples"][side]
        assert sum(v[1] for v in values) == rec["flame"]["samples"][side] * period
        # The side's total, as `qprof flame` has it, give or take half a fs/B a stack.
        fs = expected_figures(case, side)["ns_per_byte"] * 10**6
        assert abs(sum(v[2] for v in values) - fs) <= 0.5 * len(values) + 1
    # Every sample is labelled with its run and transport stack.
    assert {(s["labels"]["run"], s["labels"]["stack"]) for s in raw["samples"]} == {(rid, rec["stack"])}
    assert any(c.startswith(f"qprof run {rid}: stack {rec['stack']}") for c in raw["comments"])
    assert "PeriodType: cpu nanoseconds" in raw["text"] and f"Period: {period}\n" in raw["text"]


@pytest.mark.system
@needs_go
def test_pprof_top_totals_are_the_graphs(runs):
    """pprof's own total in each sample type, as its report prints it."""
    _, path = add_run(runs, "quic")
    assert qprof("export", "--format", "pprof", "--side", "client", runs_dir=runs).returncode == 0
    out = path / "profile-client.pb.gz"
    samples = golden("quic")[0]["flame"]["samples"]["client"]
    r = subprocess.run(
        [go_pprof(), "tool", "pprof", "-top", "-sample_index=cpu", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "GOTOOLCHAIN": "local"},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    total = re.search(r"Total samples = ([\d.]+)(ms|s) ", r.stdout)
    assert total, r.stdout
    assert float(total.group(1)) * {"ms": 1e6, "s": 1e9}[total.group(2)] == samples * 1_000_000  # 1 ms a sample
    assert "Type: cpu\n" in r.stdout
    assert {s["labels"]["side"] for s in pprof_raw(out)["samples"]} == {"client"}


@pytest.mark.system
@needs_go
def test_pprof_of_an_rr_run_is_per_request(runs):
    _, path = add_run(runs, "tcp-tls", edit=as_rr())
    assert qprof("export", "--format", "pprof", runs_dir=runs).returncode == 0
    raw = pprof_raw(path / "profile.pb.gz")
    assert raw["types"] == ["samples/count", "cpu/nanoseconds", "cpu_per_request/ps/request[dflt]"]
    assert all(s["values"][2] == round(s["values"][1] * 1000 / REQUESTS) for s in raw["samples"])


@pytest.mark.unit
def test_pprof_to_stdout_and_elsewhere(runs, tmp_path):
    _, path = add_run(runs, "quic")
    r = subprocess.run(
        [sys.executable, "-m", "qprof", "export", "--format", "pprof", "-o", "-"],
        capture_output=True,
        env={**os.environ, "QPROF_RUNS_DIR": str(runs)},
        timeout=120,
    )
    assert r.returncode == 0 and r.stderr == b""
    assert gzip.decompress(r.stdout)  # the profile itself, nothing else
    assert not (path / "profile.pb.gz").exists()
    dest = tmp_path / "p.pb.gz"
    r = qprof("export", "--format", "pprof", "-o", str(dest), runs_dir=runs)
    assert r.returncode == 0 and r.stdout.endswith(f"-> {dest}\n")
    assert dest.read_bytes() == gzip.compress(gzip.decompress(dest.read_bytes()), mtime=0)  # mtime 0: reproducible
    assert list(tmp_path.glob(".p.pb.gz.tmp*")) == []


# --- openmetrics, read back by prometheus_client ----------------------------------------


def metrics(text):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def series(family):
    return {tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("run", "stack"))): s for s in family.samples}


@pytest.mark.unit
@pytest.mark.parametrize("case", CASES)
def test_openmetrics_parses_and_equals_the_record(case, runs):
    rid, _ = add_run(runs, case)
    r = qprof("export", rid, "--format", "openmetrics", runs_dir=runs)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.endswith("# EOF\n")
    fams = metrics(r.stdout)  # raises on anything OpenMetrics does not allow
    rec, _ = golden(case)
    for f in fams.values():
        assert {(s.labels["run"], s.labels["stack"]) for s in f.samples} == {(rid, rec["stack"])}
    assert fams["qprof_throughput_bits_per_second"].unit == "bits_per_second"
    assert fams["qprof_throughput_bits_per_second"].samples[0].value == pytest.approx(rec["throughput_gbps"] * 1e9)
    assert fams["qprof_window_bytes"].samples[0].value == rec["bytes"]
    assert fams["qprof_window_seconds"].samples[0].value == rec["window_s"]
    cpu = series(fams["qprof_cpu_nanoseconds_per_byte"])
    assert fams["qprof_cpu_nanoseconds_per_byte"].unit == "nanoseconds_per_byte"
    # Every side exported: the whole machine's too (the table's system row).
    for side in ("client", "server", "system"):
        assert cpu[(("side", side),)].value == rec["cpu"][side]["ns_per_byte"]["total"]
    # These captures predate cpu.others: no figure, so no series (never a zero).
    assert (("side", "others"),) not in cpu
    flame = series(fams["qprof_flame_nanoseconds_per_byte"])
    samples = series(fams["qprof_flame_samples"])
    assert fams["qprof_flame_samples"].type == "counter"
    for side in SIDES:
        fig = expected_figures(case, side)
        for cat, ns in fig["categories_ns_per_byte"].items():
            assert flame[(("category", cat), ("side", side))].value == pytest.approx(ns, rel=1e-12, abs=0)
        assert samples[(("side", side),)].value == rec["flame"]["samples"][side]
        assert samples[(("side", side),)].name == "qprof_flame_samples_total"


@pytest.mark.unit
def test_openmetrics_others_and_rr(runs):
    def edit(rec):
        as_rr()(rec)
        rec["cpu"]["others"] = {"oncpu_schedstat_s": 0.25}

    rid, _ = add_run(runs, "tcp-tls", edit=edit)
    r = qprof("export", "--format", "openmetrics", "--side", "others", runs_dir=runs)
    assert r.returncode == 0, r.stderr
    fams = metrics(r.stdout)
    assert "qprof_cpu_nanoseconds_per_byte" not in fams
    rec = json.loads((runs / rid / "run.json").read_text())
    cpu = fams["qprof_cpu_nanoseconds_per_request"]
    assert cpu.unit == "nanoseconds_per_request"
    # cpu.others per byte, times the bytes per request; one side exported
    # and per request, so no system series (the table's is per byte).
    assert [s.value for s in cpu.samples] == [pytest.approx(0.25e9 / REQUESTS)]
    assert {s.labels["side"] for s in fams["qprof_flame_nanoseconds_per_request"].samples} == {"others"}
    total = sum(s.value for s in fams["qprof_flame_nanoseconds_per_request"].samples)
    assert total == pytest.approx(rec["flame"]["samples"]["others"] * rec["flame"]["sample_period_ns"] / REQUESTS)


# --- folded --------------------------------------------------------------------------


@pytest.mark.unit
def test_folded_is_flames(runs):
    add_run(runs, "quic")
    r = qprof("export", "--format", "folded", runs_dir=runs)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == qprof("flame", "--folded", runs_dir=runs).stdout
    r = qprof("export", "--format", "folded", "--side", "server", runs_dir=runs)
    assert (
        sum(int(l.rpartition(" ")[2]) for l in r.stdout.splitlines()) == golden("quic")[0]["flame"]["samples"]["server"]
    )


# --- perf-script ---------------------------------------------------------------------


@pytest.mark.unit
def test_perf_script_without_perf_data_is_refused(runs, tmp_path):
    rid, path = add_run(runs, "quic")
    dest = tmp_path / "out.perf"
    r = qprof("export", "--format", "perf-script", "-o", str(dest), runs_dir=runs)
    assert r.returncode == NO_PERF_DATA and r.stdout == ""
    line = one_sentence(r.stderr)
    assert rid in line and "--keep-perf-data" in line
    assert not dest.exists() and list(tmp_path.glob(".out.perf*")) == []


@pytest.mark.system
def test_perf_script_of_a_damaged_perf_data(runs):
    _, path = add_run(runs, "quic")
    (path / "perf.data").write_bytes(b"not a perf.data file\n" * 10)
    r = qprof("export", "--format", "perf-script", runs_dir=runs)
    assert r.returncode == BAD_STACKS, r.stderr
    assert "perf script" in one_sentence(r.stderr)


PERF_EVENT = re.compile(r"^(\S.*?)\s+(\d+)/(\d+)\s+\[?\d*\]?\s*(\d+\.\d+):\s+(\d+\s+)?cpu-clock(:\w*)?:?\s*$")
PERF_FRAME = re.compile(r"^\s+[0-9a-f]+ .+ \(.+\)$")


@pytest.mark.system
@needs_build
def test_perf_script_of_a_kept_perf_data(runs_dir):
    """A real short run with --keep-perf-data: the export is perf script's
    own text (events, each with its pid/tid, time and frames)."""
    rec = run_json(
        runs_dir, "--stack", "tcp", "--duration", "0.5s", "--warmup", "0.3s", "--keep-perf-data", "--probes", "none"
    )
    data = runs_dir / rec["id"] / "perf.data"
    assert data.is_file()
    r = qprof("export", rec["id"], "--format", "perf-script", runs_dir=runs_dir, timeout=300)
    assert r.returncode == 0, r.stderr
    events = [l for l in r.stdout.splitlines() if l and not l[0].isspace()]
    frames = [l for l in r.stdout.splitlines() if l[:1].isspace()]
    assert events and frames
    assert all(PERF_EVENT.match(l) for l in events), next(l for l in events if not PERF_EVENT.match(l))
    assert all(PERF_FRAME.match(l) for l in frames), next(l for l in frames if not PERF_FRAME.match(l))
    assert any(PERF_EVENT.match(l).group(1) == "qprof-wl" for l in events)
    # perf script itself wrote it.
    own = subprocess.run(
        ["perf", "script", "--no-inline", "-F", "+pid", "-i", str(data)], capture_output=True, text=True, timeout=300
    )
    assert r.stdout == own.stdout


# --- bad input -----------------------------------------------------------------------


@pytest.mark.unit
def test_unknown_format(runs):
    add_run(runs, "quic")
    r = qprof("export", "--format", "svg", runs_dir=runs)
    assert r.returncode == UNKNOWN_FORMAT and r.stdout == ""
    line = one_sentence(r.stderr)
    assert "'svg'" in line and all(f in line for f in ("pprof", "folded", "perf-script", "openmetrics"))


@pytest.mark.unit
def test_unknown_run(runs):
    add_run(runs, "quic")
    r = qprof("export", "20990101-000000-000000", "--format", "pprof", runs_dir=runs)
    assert r.returncode == RUN_NOT_FOUND and r.stdout == ""
    assert "20990101-000000-000000" in one_sentence(r.stderr)


@pytest.mark.unit
def test_perf_script_takes_no_side(runs):
    add_run(runs, "quic")
    r = qprof("export", "--format", "perf-script", "--side", "client", runs_dir=runs)
    assert r.returncode == BAD_VALUE
    assert "--side" in one_sentence(r.stderr)


@pytest.mark.unit
def test_unwritable_output_leaves_nothing(runs, tmp_path):
    add_run(runs, "quic")
    r = qprof("export", "--format", "openmetrics", "-o", str(tmp_path / "no" / "such" / "m.prom"), runs_dir=runs)
    assert r.returncode == UNWRITABLE and r.stdout == ""
    assert "m.prom" in one_sentence(r.stderr)


@pytest.mark.unit
def test_per_unit_values_are_normalize_scaled():
    """pprof's third value is what `qprof flame` draws (normalize.scaled)."""
    from qprof.flamegraphs import pprof

    stacks = {"p;a": 3, "p;b": 1}
    prof = pprof.profile({"client": stacks}, 1_000_000, {"client": 7_000_000}, normalize.BYTE, {"run": "r"})
    scaled = normalize.scaled(stacks, 1_000_000, 7_000_000)
    names = list(prof.string_table)
    got = {";".join(names[prof.function[i - 1].name] for i in reversed(s.location_id)): s.value[2] for s in prof.sample}
    assert got == scaled
    assert names[prof.default_sample_type] == "cpu_per_byte"
