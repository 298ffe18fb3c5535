# SPDX-License-Identifier: GPL-2.0-only
"""`qprof flame` as a user runs it, on run directories assembled in
tmp_path from the golden captures (tests/data/flame/<case>/)."""

import json
import re
import shutil
import stat
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import REPO, qprof

DATA = Path(__file__).resolve().parent / "data" / "flame"
SIDES = ("client", "server", "others")
SVG = "{http://www.w3.org/2000/svg}"
# Exit codes: qprof's interface (core/errors.py).
BAD_VALUE, NOT_BUILT, RUN_NOT_FOUND, NO_STACKS, BAD_STACKS, INCOMPATIBLE, CORRUPT = 4, 11, 15, 22, 23, 24, 33

needs_inferno = pytest.mark.skipif(
    not (REPO / "build" / "tools" / "bin" / "inferno-flamegraph").exists(),
    reason="inferno is not built; `make inferno`",
)

SIDE_LINE = re.compile(
    r"^(client|server|others): graph (\d+\.\d{3}) ns/B, measured (-?\d+\.\d{3}|—) ns/B, "
    r"gap ([+-]\d+\.\d%|—), stack quality (\d+\.\d%|—), ([\d,]+) samples -> (.+)$",
    re.M,
)


def one_sentence(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("qprof: ") and lines[0].rstrip().endswith("."), lines[0]
    return lines[0]


def add_run(runs, case, latest=True, edit=None, version=2):
    """Copy a golden case in as runs/<its id>/ (run.json + stacks/). The
    captures were made under record version 1, whose `others` side was
    named `system`; version=2 renames it as today's `qprof run` writes it,
    version=1 leaves the directory as it was made."""
    rec = json.loads((DATA / case / "run.json").read_text())
    path = runs / rec["id"]
    shutil.copytree(DATA / case / "stacks", path / "stacks")
    if version == 2:
        rec["schema_version"] = 2
        rec["flame"]["samples"]["others"] = rec["flame"]["samples"].pop("system")
        (path / "stacks" / "system.folded").rename(path / "stacks" / "others.folded")
    if edit:
        edit(rec)
    (path / "run.json").write_text(json.dumps(rec))
    if latest:
        (runs / "latest").unlink(missing_ok=True)
        (runs / "latest").symlink_to(rec["id"])
    return rec["id"], path


@pytest.fixture
def runs(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    return d


def expected_figures(case, side):
    return json.loads((DATA / case / "expected" / f"{side}.figures.json").read_text())


def svg_title(path):
    root = ET.parse(path).getroot()  # raises if not well-formed XML
    texts = {t.get("id"): "".join(t.itertext()) for t in root.iter(f"{SVG}text") if t.get("id")}
    return texts.get("title", ""), texts.get("subtitle", "")


def svg_frames(path):
    """(function, count text, delta %, fill) of every drawn frame."""
    out = []
    for g in ET.parse(path).getroot().iter(f"{SVG}g"):
        title, rect = g.find(f"{SVG}title"), g.find(f"{SVG}rect")
        if title is None or rect is None:
            continue
        m = re.match(r"^(.*) \(([\d,]+) ps/B, [\d.]+%(?:; ([+-]?[\d.]+)%)?\)$", title.text)
        if m:
            out.append(
                (
                    m.group(1),
                    int(m.group(2).replace(",", "")),
                    None if m.group(3) is None else float(m.group(3)),
                    rect.get("fill"),
                )
            )
    return out


@pytest.mark.system
@needs_inferno
@pytest.mark.parametrize("version", (1, 2))
def test_latest_run_all_sides(runs, version):
    """Today's run directories and those of record version 1 (`system`
    side) draw the same three sides under today's names."""
    rid, path = add_run(runs, "quic", version=version)
    r = qprof("flame", runs_dir=runs)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    lines = {m.group(1): m for m in SIDE_LINE.finditer(r.stdout)}
    assert set(lines) == set(SIDES), r.stdout
    rec = json.loads((path / "run.json").read_text())
    for side in SIDES:
        fig = expected_figures("quic", side)
        m = lines[side]
        assert m.group(2) == f"{fig['ns_per_byte']:.3f}"
        key = "system" if version == 1 and side == "others" else side
        assert int(m.group(6).replace(",", "")) == rec["flame"]["samples"][key]
        svg = Path(m.group(7))
        assert svg == (path / f"flame-{side}.svg").resolve()
        title, subtitle = svg_title(svg)
        assert f"{side} {fig['ns_per_byte']:.3f} ns/B" in title and "quic (GSO on)" in title, title
        assert "measured" in subtitle and "stack quality" in subtitle and rid in subtitle, subtitle
        # The root frame ("all") is the side's total, in ps/B.
        frames = svg_frames(svg)
        total_ps = max(n for _, n, _, _ in frames)
        assert total_ps == pytest.approx(fig["ns_per_byte"] * 1000, abs=1.0)
    client = expected_figures("quic", "client")
    assert f"{client['categories_ns_per_byte']['crypto']:.3f}" in r.stdout  # the category table


@pytest.mark.system
@needs_inferno
def test_one_side_of_a_named_run(runs):
    rid, path = add_run(runs, "tcp-tls", latest=False)
    add_run(runs, "quic")
    r = qprof("flame", rid, "--side", "server", runs_dir=runs)
    assert r.returncode == 0, r.stderr
    assert [m.group(1) for m in SIDE_LINE.finditer(r.stdout)] == ["server"]
    assert (path / "flame-server.svg").exists() and not (path / "flame-client.svg").exists()
    title, _ = svg_title(path / "flame-server.svg")
    assert title.startswith("tcp-tls, ") and "GSO" not in title


@pytest.mark.system
@needs_inferno
def test_an_undercounting_capture_says_so(runs):
    def short(rec):
        rec["flame"]["complete"] = False
        rec["flame"]["incomplete_reason"] = "CPU 1 recorded 75% of its expected samples"

    _, path = add_run(runs, "quic", edit=short)
    r = qprof("flame", "--side", "client", runs_dir=runs)
    assert r.returncode == 0, r.stderr
    assert "undercounts: CPU 1 recorded 75%" in r.stdout
    assert "UNDERCOUNTS: CPU 1 recorded 75%" in svg_title(path / "flame-client.svg")[1]


@pytest.mark.unit
def test_folded_prints_the_stacks(runs):
    rid, path = add_run(runs, "quic")
    r = qprof("flame", "--side", "client", "--folded", runs_dir=runs)
    assert r.returncode == 0 and r.stderr == ""
    got = r.stdout.splitlines()
    want = sorted((path / "stacks" / "client.folded").read_text().splitlines())
    assert got == want
    r = qprof("flame", "--folded", runs_dir=runs)
    roots = {line.split(";", 1)[0] for line in r.stdout.splitlines()}
    assert roots == set(SIDES)
    total = sum(int(line.rpartition(" ")[2]) for line in r.stdout.splitlines())
    assert total == sum(json.loads((path / "run.json").read_text())["flame"]["samples"].values())


@pytest.mark.system
@needs_inferno
def test_diff(runs):
    a, _ = add_run(runs, "tcp-tls", latest=False)
    b, path_b = add_run(runs, "quic")
    r = qprof("flame", "--diff", a, b, "--side", "client", runs_dir=runs)
    assert r.returncode == 0, r.stderr
    svg = path_b / f"flame-diff-{a}-client.svg"
    assert svg.exists() and f"/flame-diff-{a}-client.svg" in r.stdout
    title, subtitle = svg_title(svg)
    ns_a, ns_b = (expected_figures(c, "client")["ns_per_byte"] for c in ("tcp-tls", "quic"))
    assert f"A tcp-tls {ns_a:.3f} ns/B" in title and f"B quic {ns_b:.3f} ns/B" in title, title
    assert a in subtitle and b in subtitle and "red: B costs more" in subtitle
    # Colours mean what the subtitle says: red where B costs more per byte, blue where less.
    frames = [f for f in svg_frames(svg) if f[2]]
    assert any(d > 0 for _, _, d, _ in frames) and any(d < 0 for _, _, d, _ in frames)
    for func, _, delta, fill in frames:
        r_, g_, b_ = map(int, re.match(r"rgb\((\d+),(\d+),(\d+)\)", fill).groups())
        if delta > 0:
            assert r_ == 255 and b_ < 255, (func, delta, fill)
        else:
            assert b_ == 255 and r_ < 255, (func, delta, fill)
    # msquic's code exists only in B: more per byte, so red.
    assert any(func.startswith("Quic") and d > 0 for func, _, d, _ in frames)


@pytest.mark.system
@needs_inferno
def test_open(runs, tmp_path):
    add_run(runs, "quic")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "opened.txt"
    opener = bin_dir / "xdg-open"
    opener.write_text(f'#!/bin/sh\necho "$1" >> {log}\n')
    opener.chmod(opener.stat().st_mode | stat.S_IEXEC)
    r = qprof("flame", "--side", "client", "--open", runs_dir=runs, env_extra={"PATH": str(bin_dir)})
    assert r.returncode == 0, r.stderr
    for _ in range(50):
        if log.exists():
            break
        time.sleep(0.1)
    assert log.read_text().strip().endswith("flame-client.svg")
    empty = tmp_path / "empty"
    empty.mkdir()
    r = qprof("flame", "--side", "client", "--open", runs_dir=runs, env_extra={"PATH": str(empty)})
    assert r.returncode == 0 and "xdg-open is not installed" in r.stdout


@pytest.mark.system
@needs_inferno
def test_some_bad_lines_give_one_warning(runs):
    _, path = add_run(runs, "quic")
    f = path / "stacks" / "server.folded"
    lines = f.read_text().splitlines(keepends=True)
    lines[3:3] = ["this line is not folded\n", "qprof-wl;x;y twelve\n"]
    f.write_text("".join(lines))
    r = qprof("flame", "--side", "server", runs_dir=runs)
    assert r.returncode == 0, r.stderr
    warning = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(warning) == 1 and "skipped 2 malformed line(s)" in warning[0], r.stderr
    assert (path / "flame-server.svg").exists()


@pytest.mark.unit
def test_unknown_run(runs):
    add_run(runs, "quic")
    r = qprof("flame", "20000101-000000-000000", runs_dir=runs)
    assert r.returncode == RUN_NOT_FOUND
    assert "20000101-000000-000000" in one_sentence(r.stderr)
    r = qprof("flame", runs_dir=runs / "nowhere")
    assert r.returncode == RUN_NOT_FOUND
    one_sentence(r.stderr)


@pytest.mark.unit
def test_run_without_stacks(runs):
    def no_flame(rec):
        rec["flame"] = None

    rid, path = add_run(runs, "quic", edit=no_flame)
    r = qprof("flame", runs_dir=runs)
    assert r.returncode == NO_STACKS
    assert "--sample-hz 0" in one_sentence(r.stderr)

    rid, path = add_run(runs, "tcp-tls")
    shutil.rmtree(path / "stacks")
    r = qprof("flame", runs_dir=runs)
    assert r.returncode == NO_STACKS
    one_sentence(r.stderr)


@pytest.mark.unit
def test_incomplete_run(runs):
    def incomplete(rec):
        rec["status"] = "incomplete"
        rec["error"] = "interrupted; everything the run created was removed."

    add_run(runs, "quic", edit=incomplete)
    r = qprof("flame", runs_dir=runs)
    assert r.returncode == NO_STACKS
    assert "incomplete" in one_sentence(r.stderr)


@pytest.mark.unit
def test_truncated_folded_file(runs):
    _, path = add_run(runs, "quic")
    f = path / "stacks" / "client.folded"
    text = f.read_text()
    f.write_text(text[: len(text) // 2])  # cut mid-line, as a full disk would
    r = qprof("flame", "--side", "client", runs_dir=runs)
    assert r.returncode == BAD_STACKS
    assert "truncated" in one_sentence(r.stderr)


@pytest.mark.unit
def test_folded_file_missing_lines(runs):
    _, path = add_run(runs, "quic")
    f = path / "stacks" / "server.folded"
    f.write_text("".join(f.read_text().splitlines(keepends=True)[:-5]))  # whole lines gone
    r = qprof("flame", "--folded", runs_dir=runs)  # all sides: the client is fine, the server not
    assert r.returncode == BAD_STACKS
    assert "run.json recorded" in one_sentence(r.stderr)
    assert r.stdout == ""


@pytest.mark.unit
def test_unreadable_capture(runs):
    _, path = add_run(runs, "quic")
    (path / "stacks" / "client.folded").write_bytes(b"PERFILE2\x00\xff\xfe\x00" * 64)
    r = qprof("flame", runs_dir=runs)
    assert r.returncode == BAD_STACKS
    assert "client.folded" in one_sentence(r.stderr)
    (path / "stacks" / "client.folded").write_text("nothing\nfolded\nhere\n")
    r = qprof("flame", runs_dir=runs)
    assert r.returncode == BAD_STACKS
    assert "no folded stacks" in one_sentence(r.stderr)
    (path / "stacks" / "client.folded").unlink()
    r = qprof("flame", runs_dir=runs)
    assert r.returncode == BAD_STACKS
    assert "missing" in one_sentence(r.stderr)


@pytest.mark.unit
def test_bad_run_json(runs):
    path = runs / "20261122-000000-badbad"
    path.mkdir()
    (path / "run.json").write_text('{"id": "20261122-000000-badbad", "status": "comp')
    r = qprof("flame", "20261122-000000-badbad", runs_dir=runs)
    assert r.returncode == CORRUPT  # as `qprof show` says of it
    assert "record is corrupt: run.json is not valid JSON" in one_sentence(r.stderr)


@pytest.mark.unit
def test_diff_refusals(runs):
    a, _ = add_run(runs, "tcp-tls", latest=False)

    def emulated(rec):
        rec["environment"]["emulated"] = True

    b, _ = add_run(runs, "quic", edit=emulated)
    r = qprof("flame", "--diff", a, b, runs_dir=runs)
    assert r.returncode == INCOMPATIBLE
    assert "emulated" in one_sentence(r.stderr)
    r = qprof("flame", "--diff", b, "latest", runs_dir=runs)
    assert r.returncode == BAD_VALUE
    assert "two different runs" in one_sentence(r.stderr)
    r = qprof("flame", a, "--diff", a, b, runs_dir=runs)
    assert r.returncode == BAD_VALUE
    one_sentence(r.stderr)
    r = qprof("flame", "--diff", a, "20000101-000000-000000", runs_dir=runs)
    assert r.returncode == RUN_NOT_FOUND


@pytest.mark.unit
def test_inferno_missing(runs, tmp_path):
    add_run(runs, "quic")
    r = qprof("flame", runs_dir=runs, env_extra={"QPROF_BUILD_DIR": str(tmp_path / "nobuild")})
    assert r.returncode == NOT_BUILT
    assert "make inferno" in one_sentence(r.stderr)


@pytest.mark.unit
def test_help_ends_with_examples():
    r = qprof("flame", "--help")
    assert r.returncode == 0
    assert "EXAMPLES:" in r.stdout and "qprof flame --diff" in r.stdout
