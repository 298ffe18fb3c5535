# SPDX-License-Identifier: GPL-2.0-only
"""What a person sees first (issue 43): `qprof run` and `qprof show` end
with a summary that fits a screen and says the record's own figures;
every table they printed before is `qprof show RUN --all`, unchanged;
each dash's reason is `--why`."""

import fcntl
import io
import json
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time

import pyte
import pytest
from rich.console import Console

from qprof.present import summary, tables

from conftest import REPO, needs_build, qprof_here

DATA = REPO / "tests" / "data"
RUNS = DATA / "report" / "runs"
RR_RUN = "20261123-215324-0ceaeb"
COMPARISON = "20261123-215335-e67b1b"
# The stored records, by the name of their old output in tests/data/show/.
RECORDS = {
    **{n: DATA / "record" / n / "expected.json" for n in ("quic", "quic-download", "tcp-link", "tcp-tls", "udp")},
    "rr": RUNS / RR_RUN / "run.json",
}


def stored(name: str) -> dict:
    rec = json.loads(RECORDS.get(name, DATA / "record" / name / "expected.json").read_text())
    rec.setdefault("id", f"RUN-{name}")
    return rec


def drawn(printer, rec: dict, width: int) -> str:
    buf = io.StringIO()
    printer(rec, Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False))
    return buf.getvalue()


@pytest.mark.unit
@pytest.mark.parametrize("name", RECORDS)
def test_the_summary_fits_a_screen_and_says_the_records_figures(name):
    rec = stored(name)
    text = drawn(summary.print_summary, rec, 80)
    lines = text.splitlines()
    assert len(lines) <= summary.MAX_LINES, text
    assert all(len(line) <= 80 for line in lines)
    s = summary.findings(rec)
    # The CPU row is the record's: each side by schedstat, the machine by its ticks (bulk: ns/B).
    if s.unit == "ns/B":
        want = [rec["cpu"][side]["ns_per_byte"]["oncpu"] for side in ("client", "server")]
        want.append(rec["cpu"]["system"]["ns_per_byte"]["total"])
    else:
        per = rec["rr"]["per_request"]["cpu_s"]
        want = [None if per.get(k) is None else per[k] * 1e6 for k in ("client", "server", "machine")]
    row = next(line for line in lines if line.strip().startswith("on CPU")).split()[2:]
    fmt = "{:.3f}" if s.unit == "ns/B" else "{:,.1f}"
    assert row == ["—" if v is None else fmt.format(v) for v in want], (row, want)
    gbps = rec["throughput_gbps"]
    shown = f"{gbps:.2f} Gbit/s" if gbps >= 1 else f"{gbps * 1e3:.3g} Mbit/s"
    assert shown in lines[2], lines[2]
    # Each side's largest categories, as shares of its graph, largest first.
    for side, cats in s.top.items():
        figs = rec["flame"]["sides"][side]["categories_ns_per_byte"]
        total = sum(figs.values())
        best = sorted(figs, key=lambda c: -figs[c])[: len(cats)]
        assert [c for c, _, _ in cats] == best and all(share == figs[c] / total for c, _, share in cats)
        line = next(line for line in lines if line.strip().startswith(side + ":"))
        assert all(f"{c} {share * 100:.0f}%" in line for c, _, share in cats), line
    # A dash is said once, and --why names a reason for each.
    assert text.count("not measured") == (1 if s.dashes else 0)
    why = drawn(summary.print_why, rec, 100)
    for what, place in s.dashes:
        assert f"{what} ({place})" in why


@pytest.mark.unit
@pytest.mark.parametrize("name", [*RECORDS, "mix-link"])
def test_show_all_is_every_table_as_before(name):
    """`qprof show RUN --all` (and `qprof run --detail`) print what `qprof
    run` printed before the summary: the same text, byte for byte, as
    stored from the printer that made it (tests/data/show/)."""
    old = (DATA / "show" / f"{name}.txt").read_text()
    assert drawn(tables.record_printer("run", stored(name), every=True), stored(name), 100) == old


@pytest.mark.unit
def test_a_mix_ends_with_its_flows_and_the_bottleneck():
    """A --mix's summary: its flows' table and the bottleneck, the rest behind --all."""
    rec = stored("mix-link")
    text = drawn(tables.record_printer("run", rec, every=False), rec, 80)
    assert len(text.splitlines()) <= summary.MAX_LINES, text
    assert "each flow over the window" in text and "bottleneck (tbf" in text
    assert "bulk flows by stack" not in text and f"qprof show {rec['id']} --all" in text


@pytest.mark.unit
def test_why_names_every_reason_the_record_gives():
    rec = stored("quic-download")
    found = summary.absences(rec)
    reason = rec["cpu"]["system"]["ticks_absent_reason"]
    assert reason in found and "cpu.system" in found[reason]
    why = drawn(summary.print_why, rec, 200)
    assert all(r in why for r in found)


@pytest.mark.unit
def test_show_prints_the_summary_all_and_why(tmp_path):
    """The command itself, on a stored runs directory: the summary by
    default, every table with --all, the reasons with --why; a
    comparison's ratios first, all of it with --all."""
    runs = tmp_path / "runs"
    shutil.copytree(RUNS, runs)
    env = {"COLUMNS": "80"}
    short = qprof_here("show", RR_RUN, "--runs-dir", str(runs), env_extra=env)
    assert short.returncode == 0 and len(short.stdout.splitlines()) <= summary.MAX_LINES, short.stdout
    every = qprof_here("show", RR_RUN, "--all", "--runs-dir", str(runs), env_extra=env)
    assert every.returncode == 0 and len(every.stdout.splitlines()) > 40
    assert f"qprof show {RR_RUN} --all" in short.stdout and "CPU per byte by category" in every.stdout
    why = qprof_here("show", RR_RUN, "--why", "--runs-dir", str(runs), env_extra=env)
    assert why.returncode == 0 and "requests per second (rr.requests_per_s)" in why.stdout
    ratios = qprof_here("show", COMPARISON, "--runs-dir", str(runs), env_extra=env)
    full = qprof_here("show", COMPARISON, "--all", "--runs-dir", str(runs), env_extra=env)
    assert ratios.returncode == 0 and full.returncode == 0
    assert re.search(r"throughput \(Gbit/s\) .* ×", ratios.stdout) and "flame category" not in ratios.stdout
    assert len(ratios.stdout.splitlines()) < len(full.stdout.splitlines())


def on_a_terminal(args, runs_dir, columns=80, rows=200, timeout_s=90) -> pyte.Screen:
    """`qprof ARGS` with a pseudo-terminal for its stdout and stderr, as
    a person runs it: what a VT100 of that size shows once it has ended
    (rows enough that nothing scrolls away)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {**os.environ, "QPROF_RUNS_DIR": str(runs_dir), "TERM": "xterm", "COLUMNS": str(columns)}
    p = subprocess.Popen(
        [sys.executable, "-m", "qprof", *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the pty's other end closed: everything is read
                    break
                if not chunk:
                    break
                stream.feed(chunk)
            elif p.poll() is not None:
                break
        assert p.wait(timeout=max(1, deadline - time.monotonic())) == 0, "\n".join(screen.display)
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
    return screen


@pytest.mark.system
@needs_build
def test_a_run_on_a_terminal_leaves_its_summary_alone(runs_dir):
    """`qprof run --stack quic` on an 80-column terminal, intervals on:
    the stage and interval line is gone, and what stays is the summary,
    at most 25 lines, its figures the record's."""
    args = ("run", "--stack", "quic", "--duration", "1s", "--warmup", "0.3s", "--interval", "0.25s")
    shown = [line.rstrip() for line in on_a_terminal(args, runs_dir).display]
    while shown and not shown[-1]:
        shown.pop()
    rec = json.loads((runs_dir / "latest" / "run.json").read_text())
    assert 0 < len(shown) <= summary.MAX_LINES, "\n".join(shown)
    assert not any(line.startswith("[") for line in shown), "an interval line stayed"
    assert shown[0] == summary.findings(rec).what
    assert f"more: qprof show {rec['id']} --all" in "\n".join(shown)
    row = next(line for line in shown if line.strip().startswith("on CPU")).split()[2:4]
    assert row == [f"{rec['cpu'][s]['ns_per_byte']['oncpu']:.3f}" for s in ("client", "server")]
