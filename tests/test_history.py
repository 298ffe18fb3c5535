# SPDX-License-Identifier: GPL-2.0-only
"""The run history (core/history.py, `qprof ls`, `qprof show`): the index
built as runs end equals the one rebuilt from the directories, a missing,
corrupt or other-version index is rebuilt, an index that cannot be
written never fails a run or a listing, and every bad input is one
sentence with its exit code. Runs are this project's stored records
(tests/data/record) put in place through RunDir, as `qprof run` does, and
one real short transfer."""

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from qprof import errors, figures, history
from qprof.describe import comparison
from qprof.files import COMPARISON_RECORD, COMPARISONS_SUBDIR
from qprof.rundir import RunDir

from conftest import REPO, needs_build, qprof, qprof_here, run_json, validate_records
from test_bad_input import one_sentence

DATA = Path(__file__).parent / "data"
# Stored records of real runs, by the id each gets here (oldest first).
CASES = {
    "20261123-162245-0000aa": "quic",
    "20261123-162257-0000bb": "tcp-tls",
    "20261123-162259-0000cc": "udp",
    "20261123-173816-0000dd": "tcp-link",
    "20261123-182128-0000ee": "quic-download",
}
FAILED = "20261123-190000-0000ff"
COMPARISON = "20261123-191500-00abcd"
RUN_NOT_FOUND, INCOMPLETE, BAD_VALUE = 15, 33, 4


@pytest.fixture(autouse=True)
def own_state_and_zone(tmp_path, monkeypatch):
    """RunDir's ledger in a directory of the test's own; UTC, as the stored
    records were measured, so the ids' local times fall in order."""
    monkeypatch.setenv("QPROF_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def history_dir(tmp_path):
    """A runs directory of the test's own: these tests make no process or
    namespace (conftest's runs_dir checks for those), only records, each
    held to its schema afterwards."""
    d = tmp_path / "runs"
    yield d
    if d.exists():
        validate_records(d)


def stored(case: str) -> dict:
    return json.loads((DATA / "record" / case / "expected.json").read_text())


def add_runs(root: Path) -> None:
    """The stored records completed through RunDir (which indexes each as
    it ends), a run that fails, and a comparison of the quic and tcp-tls
    runs made by compare's own statistics (describe/comparison.py)."""
    for run_id, case in CASES.items():
        with RunDir(root, run_id) as rd:
            rd.complete(stored(case))
    with pytest.raises(errors.HandshakeFailed):
        with RunDir(root, FAILED) as rd:
            rd.record.update({"stack": "quic", "config": stored("quic")["config"]})
            raise errors.HandshakeFailed("the QUIC handshake failed (QUIC_STATUS_X); check the certificate.")
    add_comparison(root)


def add_comparison(root: Path) -> dict:
    a, b = stored("quic"), stored("tcp-tls")
    runs = [{"id": i, "config": n, "repeat": 0, "record": r} for n, (i, r) in enumerate(zip(CASES, (a, b)))]
    configs = [{"label": r["stack"], "stack": r["stack"], "overrides": {}, "options": r["config"]} for r in (a, b)]
    with RunDir(root / COMPARISONS_SUBDIR, COMPARISON, record_name=COMPARISON_RECORD) as cdir:
        cdir.complete(
            {
                "kind": "comparison",
                "order": "interleaved",
                "repeat": 1,
                "vary": {},
                "configs": configs,
                "runs": [{k: v for k, v in r.items() if k != "record"} for r in runs],
                "path": str(cdir.path),
                "environment": a["environment"],
                "metrics": comparison.table(configs, runs, figures.TABLE),
                "incomplete_captures": [],
                "metric_units": comparison.units(figures.TABLE),
                "flame_diff": {"absent": "no stacks in these records"},
            }
        )
        return cdir.record


def rows(root: Path) -> list:
    db = sqlite3.connect(root / history.INDEX)
    try:
        return db.execute("SELECT * FROM runs ORDER BY id").fetchall()
    finally:
        db.close()


def ls(root: Path, *args) -> list:
    r = qprof_here("ls", "--json", "-n", "0", *args, "--runs-dir", str(root))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return json.loads(r.stdout)


def ids(listed: list) -> list:
    return [row["id"] for row in listed]


NEWEST_FIRST = [COMPARISON, FAILED, *reversed(CASES)]


# --- the index ---------------------------------------------------------------------------


@pytest.mark.unit
def test_index_built_as_runs_end_equals_the_rebuilt_one(history_dir):
    first = next(iter(CASES))
    with RunDir(history_dir, first) as rd:
        rd.complete(stored(CASES[first]))
    assert [r[0] for r in rows(history_dir)] == [first]  # indexed as it completed
    for run_id in list(CASES)[1:]:
        with RunDir(history_dir, run_id) as rd:
            rd.complete(stored(CASES[run_id]))
    with pytest.raises(errors.HandshakeFailed):
        with RunDir(history_dir, FAILED) as rd:
            rd.record.update({"stack": "quic", "config": stored("quic")["config"]})
            raise errors.HandshakeFailed("the QUIC handshake failed (QUIC_STATUS_X); check the certificate.")
    add_comparison(history_dir)
    built = rows(history_dir)
    assert sorted(r[0] for r in built) == sorted([*CASES, FAILED, COMPARISON])
    history.open_index(history_dir, rebuild=True).close()
    assert rows(history_dir) == built
    r = qprof_here("ls", "--reindex", "--json", "--runs-dir", str(history_dir))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert rows(history_dir) == built


@pytest.mark.unit
def test_rows_hold_options_environment_and_headline_figures(history_dir):
    add_runs(history_dir)
    by_id = {row["id"]: row for row in ls(history_dir)}
    for run_id, case in CASES.items():
        rec, row = stored(case), by_id[run_id]
        assert (row["kind"], row["status"], row["problem"]) == ("run", "complete", None)
        assert row["options"] == rec["config"]
        assert row["stack"] == rec["stack"] and row["pattern"] == rec["config"]["pattern"]
        assert row["throughput_gbps"] == rec["throughput_gbps"] and row["window_s"] == rec["window_s"]
        for side in ("client", "server", "system"):
            assert row[f"{side}_ns_per_byte"] == rec["cpu"][side]["ns_per_byte"]["total"]
        env = rec["environment"]
        assert (row["kernel_release"], row["cpu_model"], row["cpu_count"]) == (
            env["kernel_release"],
            env["cpu_model"],
            env["cpu_count"],
        )
        assert row["qprof_version"] == env["qprof_version"] and row["hostname"] == env["hostname"]
        assert row["time"].startswith(rec["measured_at"][:19])
    assert by_id["20261123-162245-0000aa"]["msquic_version"] == "2.5.1"
    download = stored("quic-download")["downloads"]["percentiles"]["complete_s"]["p50"]
    assert by_id["20261123-182128-0000ee"]["download_p50_ms"] == pytest.approx(download * 1e3)
    assert by_id["20261123-173816-0000dd"]["link"] == "rtt=40ms,loss=1%,rate=20mbit"
    failed = by_id[FAILED]
    assert (failed["status"], failed["throughput_gbps"]) == ("incomplete", None)
    assert "handshake failed" in failed["error"]
    comp = by_id[COMPARISON]
    assert (comp["kind"], comp["stack"], comp["repeat"]) == ("comparison", "quic,tcp-tls", 1)
    medians = [c["medians"]["system_ns_per_byte"] for c in comp["configs"]]
    assert medians == [stored(c)["cpu"]["system"]["ns_per_byte"]["total"] for c in ("quic", "tcp-tls")]


@pytest.mark.unit
def test_a_mix_and_an_rr_run_give_their_own_headline():
    mix = {"status": "complete", "stack": "mix", "config": {"stack": "quic", "mix": "quic:1,tcp:2"}}
    mix.update({"throughput_gbps": 0.02, "window_s": 5.0, "mix": {"jain_index": 0.93}})
    row = history.entry("run", "x", "20261123-000000-000001", mix)
    assert (row["stack"], row["jain_index"], row["client_ns_per_byte"]) == ("mix", 0.93, None)
    rr = {"status": "complete", "stack": "tcp", "config": {"stack": "tcp", "pattern": "rr"}}
    rr["rr"] = {"delay_ns": {"p50": 1_250_000}}
    row = history.entry("run", "x", "20261123-000000-000002", rr)
    assert row["rr_delay_p50_ms"] == pytest.approx(1.25) and row["jain_index"] is None
    assert "lacks" in row["problem"]  # complete, yet without the figures a run has


@pytest.mark.unit
def test_a_guest_run_is_marked_and_its_machine_is_the_host():
    rec = stored("tcp-link")  # the guest's own record; the host's adds emulated and host
    host = {k: v for k, v in stored("quic")["environment"].items() if k != "topology"}
    rec["environment"].update(emulated=True, host=host)
    row = history.entry("run", "x", "20261123-173816-0000dd", {"status": "complete", **rec})
    assert (row["guest"], row["problem"]) == (1, None)
    assert row["kernel_release"] == "6.1.0-56-amd64" and row["cpu_model"].startswith("QEMU")
    assert row["hostname"] == "vm" and row["machine_id"] == history.machine_id(host)
    other_kernel = {**host, "kernel_release": "6.1.0"}
    assert history.machine_id(other_kernel) == history.machine_id(host)


@pytest.mark.unit
@pytest.mark.parametrize("damage", ["garbage", "other-version", "missing", "foreign-table"])
def test_a_damaged_index_is_rebuilt_from_the_directories(history_dir, damage):
    add_runs(history_dir)
    good = rows(history_dir)
    path = history_dir / history.INDEX
    if damage == "garbage":
        path.write_bytes(b"this is not a database\n" * 100)
    elif damage == "other-version":
        db = sqlite3.connect(path)
        db.execute(f"PRAGMA user_version = {history.INDEX_VERSION + 1}")
        db.execute("DELETE FROM runs")
        db.commit()
        db.close()
    elif damage == "missing":
        path.unlink()
    else:
        path.unlink()
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE runs (id TEXT)")
        db.execute(f"PRAGMA user_version = {history.INDEX_VERSION}")
        db.commit()
        db.close()
    assert ids(ls(history_dir)) == NEWEST_FIRST
    assert rows(history_dir) == good


@pytest.mark.unit
def test_a_run_ending_on_a_damaged_index_rebuilds_it(history_dir):
    add_runs(history_dir)
    good = rows(history_dir)
    (history_dir / history.INDEX).write_bytes(b"\0garbage" * 512)
    newest = "20261123-200000-000123"
    with RunDir(history_dir, newest) as rd:
        rd.complete(stored("udp"))
    assert [r for r in rows(history_dir) if r[0] != newest] == good
    assert newest in [r[0] for r in rows(history_dir)]


@pytest.mark.unit
def test_an_unwritable_index_never_fails_a_run_or_a_listing(history_dir, capsys):
    history_dir.mkdir()
    (history_dir / history.INDEX).mkdir()  # a directory where the file should be
    run_id = "20261123-162245-0000aa"
    with RunDir(history_dir, run_id) as rd:
        rd.complete(stored("quic"))
    assert json.loads((history_dir / run_id / "run.json").read_text())["status"] == "complete"
    assert (history_dir / "latest").resolve().name == run_id
    err = capsys.readouterr().err
    assert err.startswith("qprof: warning:") and run_id in err and "qprof ls" in err
    r = qprof_here("ls", "--json", "--runs-dir", str(history_dir))
    assert r.returncode == 0, r.stderr
    assert ids(json.loads(r.stdout)) == [run_id]
    assert "warning" in r.stderr and "cannot be written" in r.stderr


@pytest.mark.unit
def test_the_index_follows_the_directories(history_dir):
    """Records written, rewritten or removed behind its back (a run marked
    abandoned by `qprof clean`, a directory deleted or copied in)."""
    add_runs(history_dir)
    assert FAILED in ids(ls(history_dir))
    record = history_dir / FAILED / "run.json"
    rec = json.loads(record.read_text())
    rec.update(status="abandoned", error="qprof (pid 1) ended without finishing this run.")
    record.write_text(json.dumps(rec))
    assert ls(history_dir, "--status", "abandoned")[0]["id"] == FAILED
    for p in (history_dir / FAILED).iterdir():
        p.unlink()
    (history_dir / FAILED).rmdir()
    assert FAILED not in ids(ls(history_dir))


@pytest.mark.unit
def test_a_missing_runs_dir_lists_nothing_and_makes_nothing(tmp_path):
    r = qprof_here("ls", "--runs-dir", str(tmp_path / "none"))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "no runs" in r.stdout
    assert not (tmp_path / "none").exists()


# --- qprof ls -------------------------------------------------------------------------------


@pytest.mark.unit
def test_ls_newest_first_and_its_table(history_dir):
    add_runs(history_dir)
    assert ids(ls(history_dir)) == NEWEST_FIRST
    assert ids(ls(history_dir, "--limit", "2")) == NEWEST_FIRST[:2]
    r = qprof_here("ls", "--runs-dir", str(history_dir))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    at = [next(i for i, l in enumerate(lines) if run_id in l) for run_id in NEWEST_FIRST]
    assert at == sorted(at)
    assert "incomplete" in next(l for l in lines if FAILED in l)
    assert "6.093" in next(l for l in lines if "0000aa" in l)  # quic's Gbit/s


@pytest.mark.unit
@pytest.mark.parametrize(
    "args, expected",
    [
        (["--stack", "quic"], [COMPARISON, FAILED, "20261123-182128-0000ee", "20261123-162245-0000aa"]),
        (["--stack", "tcp"], ["20261123-173816-0000dd"]),
        (["--pattern", "download"], ["20261123-182128-0000ee"]),
        (["--kind", "comparison"], [COMPARISON]),
        (["--status", "incomplete"], [FAILED]),
        (["--machine", "qemu"], ["20261123-173816-0000dd"]),
        (["--option", "link=rtt=40ms,loss=1%,rate=20mbit"], ["20261123-173816-0000dd"]),
        (["--option", "pattern=download", "--option", "duration=2s"], []),
        (["--option", "size=256K"], ["20261123-182128-0000ee"]),
        (["--option", "duration=2s"], [COMPARISON, FAILED, "20261123-162245-0000aa"]),
        (["--option", "stack=tcp-tls", "--option", "io-size=128K"], [COMPARISON, "20261123-162257-0000bb"]),
        (
            ["--since", "2026-11-23T17:00+00:00"],
            [COMPARISON, FAILED, "20261123-182128-0000ee", "20261123-173816-0000dd"],
        ),
        (["--stack", "quic", "--since", "2026-11-23T17:00+00:00", "--kind", "run"], [FAILED, "20261123-182128-0000ee"]),
    ],
)
def test_ls_filters(history_dir, args, expected):
    add_runs(history_dir)
    assert ids(ls(history_dir, *args)) == expected


@pytest.mark.unit
def test_ls_since_a_while_ago(history_dir):
    add_runs(history_dir)
    fresh = "20261123-210000-0000ab"
    rec = stored("udp")
    rec["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with RunDir(history_dir, fresh) as rd:
        rd.complete(rec)
    assert ids(ls(history_dir, "--since", "30m")) == [fresh]
    assert ids(ls(history_dir, "--since", "10000d", "--stack", "udp")) == [fresh, "20261123-162259-0000cc"]


@pytest.mark.unit
def test_parse_since():
    now = 1_000_000.0
    assert history.parse_since("7d", now) == now - 7 * 86400
    assert history.parse_since("24h", now) == now - 86400
    assert history.parse_since("90m", now) == now - 5400
    assert history.parse_since("2026-11-23T00:00+00:00") == 1795392000


@pytest.mark.unit
@pytest.mark.parametrize(
    "args, words",
    [
        (["--since", "yesterday"], "malformed --since"),
        (["--option", "streams"], "KEY=VALUE"),
        (["--option", "streams=many"], "whole number"),
        (["--option", "sendfile=maybe"], "on or off"),
    ],
)
def test_ls_bad_input_is_one_sentence(history_dir, args, words):
    r = qprof_here("ls", *args, "--runs-dir", str(history_dir))
    assert r.returncode == BAD_VALUE, r.stderr
    assert words in one_sentence(r.stderr)


# --- qprof show -----------------------------------------------------------------------------


@pytest.mark.unit
def test_show_a_run_prints_its_tables(history_dir):
    add_runs(history_dir)
    for run_id in ("20261123-162245-0000aa", "latest"):
        r = qprof_here("show", run_id, "--all", "--runs-dir", str(history_dir))
        assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "CPU over the window" in r.stdout and "run 20261123-182128-0000ee" in r.stdout  # latest: the download
    r = qprof_here("show", "20261123-162245-0000aa", "--all", "--runs-dir", str(history_dir))
    assert "6.09 Gbit/s" in r.stdout and r.stdout.rstrip().endswith("run 20261123-162245-0000aa")
    # Without --all, its summary (tests/test_summary.py), which names the run and the way to every table.
    r = qprof_here("show", "latest", "--runs-dir", str(history_dir))
    assert r.returncode == 0 and "qprof show 20261123-182128-0000ee --all" in r.stdout.replace("\n", " ")


@pytest.mark.unit
def test_show_a_comparison_prints_what_compare_printed(history_dir):
    add_runs(history_dir)
    r = qprof_here("show", COMPARISON, "--all", "--runs-dir", str(history_dir))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "2 configurations × 1 runs, interleaved" in r.stdout
    assert f"comparison {COMPARISON}: 2 runs" in r.stdout
    assert str(history_dir / COMPARISONS_SUBDIR / COMPARISON / COMPARISON_RECORD) in r.stdout.replace("\n", "")


@pytest.mark.unit
def test_show_an_incomplete_run_says_so(history_dir):
    add_runs(history_dir)
    r = qprof_here("show", FAILED, "--runs-dir", str(history_dir))
    assert r.returncode == INCOMPLETE, r.stderr
    line = one_sentence(r.stderr)
    assert f"run {FAILED} is incomplete" in line and "handshake failed" in line
    assert "INCOMPLETE" in r.stdout and "QUIC_STATUS_X" in r.stdout and "duration_s=2.000" in r.stdout


@pytest.mark.unit
@pytest.mark.parametrize("damage", ["garbage", "empty", "trimmed", "no-record"])
def test_show_a_corrupt_record_shows_what_it_can(tmp_path, damage):
    """Outside the runs_dir fixture: these records break the schema on purpose."""
    root = tmp_path / "runs"
    add_runs(root)
    run_id = "20261123-162245-0000aa"
    record = root / run_id / "run.json"
    if damage == "garbage":
        record.write_text('{"schema_version": 2, "id": "' + run_id + '", "status": "compl')
    elif damage == "empty":
        record.write_text("")
    elif damage == "trimmed":  # a golden flame run: an old record, trimmed to what `qprof flame` reads
        rec = json.loads((DATA / "flame" / "quic" / "run.json").read_text())
        record.write_text(json.dumps({**rec, "id": run_id}))
    else:
        record.unlink()
    listed = {row["id"]: row for row in ls(root)}
    assert listed[run_id]["problem"]
    assert ids(ls(root, "--status", "corrupt")) == [run_id]
    assert run_id not in ids(ls(root, "--status", "complete"))
    r = qprof_here("show", run_id, "--runs-dir", str(root))
    assert r.returncode == INCOMPLETE, r.stderr
    line = one_sentence(r.stderr)
    assert f"run {run_id}'s record is corrupt" in line
    assert "CORRUPT" in r.stdout and str(root / run_id) in r.stdout.replace("\n", "")
    if damage == "trimmed":
        assert "throughput_gbps" in r.stdout and "7.006" in r.stdout


@pytest.mark.unit
def test_show_an_unknown_id_lists_the_latest(history_dir):
    add_runs(history_dir)
    for bad in ("20261124-000000-000000", "../etc", "comparisons"):
        r = qprof_here("show", bad, "--runs-dir", str(history_dir))
        assert r.returncode == RUN_NOT_FOUND, r.stderr
        line = one_sentence(r.stderr)
        assert f"'{bad}'" in line
        assert line.index(NEWEST_FIRST[0]) < line.index(NEWEST_FIRST[4])
        assert NEWEST_FIRST[5] not in line and "qprof ls" in line


@pytest.mark.unit
def test_show_with_no_runs_says_how_to_make_one(tmp_path):
    r = qprof_here("show", "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode == RUN_NOT_FOUND
    assert "qprof run" in one_sentence(r.stderr)


# --- a real run ---------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_commit_is_the_checkouts_and_none_outside_one(tmp_path, monkeypatch):
    """qprof_commit reads the tree its source lies in: a checkout's HEAD,
    None where there is no checkout or no commit yet (an installed copy)."""
    from qprof.collectors import environment

    def commit_of(tree: Path):
        monkeypatch.setattr(environment, "__file__", str(tree / "collectors" / "environment.py"))
        return environment.qprof_commit()

    assert commit_of(tmp_path) is None
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    assert commit_of(tmp_path) is None  # a checkout with no commit
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert commit_of(tmp_path) == head and len(head) == 40


@pytest.mark.system
@needs_build
def test_a_real_run_is_indexed_as_it_completes(runs_dir):
    rec = run_json(
        runs_dir, "--stack", "tcp", "--duration", "0.5s", "--warmup", "0.3s", "--probes", "none", "--sample-hz", "0"
    )
    (row,) = ls(runs_dir)
    assert (row["id"], row["status"], row["stack"], row["problem"]) == (rec["id"], "complete", "tcp", None)
    assert row["throughput_gbps"] == rec["throughput_gbps"]
    assert row["system_ns_per_byte"] == rec["cpu"]["system"]["ns_per_byte"]["total"]
    # This tree is a git checkout: the run names the commit it was measured with.
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    assert rec["environment"]["qprof_commit"] == head.stdout.strip()
    assert row["qprof_commit"] == rec["environment"]["qprof_commit"]
    built = rows(runs_dir)
    history.open_index(runs_dir, rebuild=True).close()
    assert rows(runs_dir) == built
    r = qprof("show", rec["id"], "--all", "--runs-dir", str(runs_dir))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert f"run {rec['id']}" in r.stdout
