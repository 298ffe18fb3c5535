# SPDX-License-Identifier: GPL-2.0-only
"""`qprof report` as a user runs it, and each report loaded in a real
browser with the network off.

The run directories are assembled in a temporary runs directory from the
golden records (tests/data/record/<case>/expected.json, with their stacks
where they have them; tests/data/report/<case>/ for captures kept for the
report alone), and a comparison of the two golden flame runs
(tests/data/flame/) is built with collectors/compare.py's own table and
flame-diff functions, as `qprof compare` would record it.

The browser is Debian's chromium driven by its chromium-driver through
selenium (both installed by `make test-tools`). The network is off:
every host name resolves to nothing and every proxied request goes to a
closed port, and the test asserts that no request left for anything but
file:, data: or the browser's own pages. A report fails on any console
error, on a chart that failed, is missing or has zero size or no drawn
SVG, and on a flame graph whose SVG has zero size or no frames. A
screenshot of each whole report is kept in build/test-artifacts/report/.

The summary card is held to the first screen of a 1280x800 window, and
each figure it shows (its data-key and data-value, read from the DOM)
to the record's as present/summary.py's findings compute them, and so
to what the terminal prints.
"""

import functools
import html as _html
import io
import json
import os
import re
import shutil
import signal
import statistics
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

import pytest
from rich.console import Console

from qprof.present import html as report_html
from qprof.present import summary, tables
from qprof.present.format import ABSENT, compact

from conftest import REPO, qprof, validate_records

DATA = Path(__file__).resolve().parent / "data"
ARTIFACTS = REPO / "build" / "test-artifacts" / "report"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Exit codes: qprof's interface (core/errors.py).
RUN_NOT_FOUND, INCOMPLETE_RECORD = 15, 33

# id -> (golden record directory, what it stands for)
RUNS = {
    "20261122-000001-000b01": (DATA / "record" / "quic", "bulk"),
    "20261122-000002-000d01": (DATA / "record" / "quic-download", "download"),
    "20261122-000003-000e01": (DATA / "record" / "tcp-link", "link"),
    "20261122-000004-000f01": (DATA / "record" / "tcp-intervals", "intervals with the transport's state"),
}
STATE_RUN = "20261122-000004-000f01"
# Real captures kept for the report (tests/data/report/README.md): a
# request/response run, a mix, and a `--stacks tcp,udp` comparison with its runs.
CAPTURED = DATA / "report" / "runs"
RR_RUN = "20261123-215324-0ceaeb"
MIX_RUN = "20261123-215557-e73689"
INTERVAL_RUN = "20261123-215335-de60ea"  # the comparison's tcp run: --interval 1s
REAL_COMPARISON = "20261123-215335-e67b1b"
COMPARISON = "20261122-000009-00c001"
INCOMPLETE = "20261122-000006-00fa11"
CORRUPT = "20261122-000007-00bad0"
WIDTH, MAX_SHOT_HEIGHT = 1400, 16000
FIRST_SCREEN = (1280, 800)  # the window the summary card must fit in, unscrolled
SIDES = ("client", "server", "system")
SPECS_TAG = '<script type="application/json" id="qp-specs">'
SCHEMES_ALLOWED = {"file", "data", "about", "chrome", "chrome-untrusted", "devtools", "blob"}

needs_inferno = pytest.mark.skipif(
    not (REPO / "build" / "tools" / "bin" / "inferno-flamegraph").exists(),
    reason="inferno is not built; `make inferno`",
)


def _run_dir(root: Path, rid: str, src: Path) -> dict:
    d = root / rid
    d.mkdir(parents=True)
    rec = json.loads((src / ("expected.json" if (src / "expected.json").exists() else "run.json")).read_text())
    rec = {"schema_version": 2, **rec, "id": rid, "status": rec.get("status", "complete")}
    (d / "run.json").write_text(json.dumps(rec))
    if (src / "stacks").is_dir():
        shutil.copytree(src / "stacks", d / "stacks")
    return rec


def _comparison(root: Path) -> None:
    """The two golden flame runs (quic, tcp-tls) as a --stacks comparison,
    recorded by compare.py's own functions."""
    from qprof.collectors import compare
    from qprof.describe import comparison

    records = []
    for name in ("quic", "tcp-tls"):
        rec = json.loads((DATA / "flame" / name / "run.json").read_text())
        d = root / rec["id"]
        if not d.exists():
            shutil.copytree(DATA / "flame" / name, d, ignore=shutil.ignore_patterns("expected"))
        records.append(rec)
    configs = [{"label": r["stack"], "stack": r["stack"], "overrides": {}, "options": r["config"]} for r in records]
    runs = [{"id": r["id"], "config": i, "repeat": 0, "record": r} for i, r in enumerate(records)]
    cdir = root / "comparisons" / COMPARISON
    cdir.mkdir(parents=True)
    rec = {
        "schema_version": 2,
        "id": COMPARISON,
        "status": "complete",
        "kind": "comparison",
        "order": "interleaved",
        "repeat": 1,
        "vary": {},
        "configs": configs,
        "runs": [{"id": r["id"], "config": r["config"], "repeat": 0, "path": f"../../{r['id']}"} for r in runs],
        "path": str(cdir),
        "environment": records[0]["environment"],
        **comparison.record_figures(configs, runs),
        "flame_diff": compare.flame_diff(root, cdir, records[0], records[1]),
    }
    (cdir / "comparison.json").write_text(json.dumps(rec))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A runs directory of golden runs, a comparison, an incomplete run
    and a corrupt one."""
    root = tmp_path_factory.mktemp("report") / "runs"
    for rid, (src, _) in RUNS.items():
        _run_dir(root, rid, src)
    shutil.copytree(CAPTURED, root, dirs_exist_ok=True)
    rec = _run_dir(root, INCOMPLETE, DATA / "record" / "tcp-tls")
    for key in ("cpu", "syscalls", "throughput_gbps", "measured_at"):
        rec.pop(key, None)
    rec.update(status="incomplete", error="the server died mid-run (exit 9).")
    (root / INCOMPLETE / "run.json").write_text(json.dumps(rec))
    (root / CORRUPT).mkdir()
    (root / CORRUPT / "run.json").write_text('{"schema_version": 2, "id": "' + CORRUPT + '", "status": "compl')
    if (REPO / "build" / "tools" / "bin" / "inferno-flamegraph").exists():
        _comparison(root)
    validate_records(root / "comparisons")
    return root


def report(root: Path, what: str, *extra):
    return qprof(
        "report",
        what,
        *extra,
        runs_dir=root,
        env_extra={"QPROF_STATE_DIR": os.environ.get("QPROF_STATE_DIR", "/tmp/qprof-report-state")},
    )


def one_sentence(stderr: str) -> str:
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("qprof: ") and lines[0].rstrip().endswith("."), lines[0]
    return lines[0]


# --- the command -------------------------------------------------------------------------


@pytest.mark.unit
def test_unknown_id_names_the_latest(root):
    r = report(root, "20990101-000000-abcdef")
    assert r.returncode == RUN_NOT_FOUND
    s = one_sentence(r.stderr)
    assert "'20990101-000000-abcdef'" in s
    listed = s.split("the latest are ", 1)[1].split(" (`qprof ls`", 1)[0].split(", ")
    present = {p.name for p in root.iterdir()} | {p.name for p in root.glob("comparisons/*")}
    assert len(listed) == 5, listed
    assert all(i.removesuffix(" (comparison)") in present for i in listed), listed


@pytest.mark.unit
def test_unknown_id_in_an_empty_runs_dir(tmp_path):
    r = report(tmp_path / "none", "latest")
    assert r.returncode == RUN_NOT_FOUND
    assert "holds none yet" in one_sentence(r.stderr)


@pytest.mark.unit
def test_incomplete_run_is_reported_and_marked(root):
    r = report(root, INCOMPLETE)
    assert r.returncode == INCOMPLETE_RECORD
    s = one_sentence(r.stderr)
    assert INCOMPLETE in s and "incomplete" in s and "report.html" in s
    page = (root / INCOMPLETE / "report.html").read_text()
    assert 'id="qp-problem"' in page and "INCOMPLETE" in page and "the server died mid-run" in page


@pytest.mark.unit
def test_corrupt_record_is_reported_and_marked(root):
    r = report(root, CORRUPT)
    assert r.returncode == INCOMPLETE_RECORD
    assert "corrupt" in one_sentence(r.stderr)
    page = (root / CORRUPT / "report.html").read_text()
    assert 'id="qp-problem"' in page and "not valid JSON" in page


@pytest.mark.unit
def test_a_complete_run_is_not_marked_and_holds_no_url(root):
    rid = next(iter(RUNS))
    out = root / "elsewhere.html"
    r = report(root, rid, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    page = out.read_text()
    assert 'id="qp-problem"' not in page
    # Nothing to fetch: no external script, stylesheet or image.
    for attr in ('src="http', "src='http", 'href="http', "@import"):
        assert attr not in page


@pytest.mark.unit
def test_report_needs_no_root(root, tmp_path, monkeypatch):
    """Nothing on the report's path asks for root: with an unprivileged
    euid the report is written (in process; the venv's interpreter need
    not be executable by another user)."""
    from click.testing import CliRunner

    from qprof.cli import main

    monkeypatch.setattr(os, "geteuid", lambda: 65534)
    monkeypatch.setenv("QPROF_STATE_DIR", str(tmp_path / "state"))
    rid = "20261122-000002-000d01"
    shutil.copytree(root / rid, tmp_path / "runs" / rid)
    r = CliRunner().invoke(main.cli, ["report", rid, "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "runs" / rid / "report.html").stat().st_size > 0


# --- the charts' figures against the records ------------------------------------------------


def chart_data(page: Path) -> dict:
    """chart id -> its Vega-Lite spec's inlined rows, as the page embeds them
    (a layered chart: its layers' rows, in order)."""
    text = page.read_text()
    start = text.index(SPECS_TAG) + len(SPECS_TAG)
    specs = json.loads(text[start : text.index("</script>", start)])  # '<\/' in it is JSON's '</'
    return {
        cid.removeprefix("chart-"): (
            [layer["data"]["values"] for layer in spec["layer"]] if "layer" in spec else spec["data"]["values"]
        )
        for cid, spec in specs.items()
    }


@functools.lru_cache(maxsize=None)
def written(root: Path, rid: str) -> None:
    """`qprof report RID`, once per runs directory: the unit tests read
    the page it writes (the browser tests write theirs again)."""
    r = report(root, rid)
    assert r.returncode == 0, r.stderr


def charts_of(root: Path, rid: str, page: Path = None) -> dict:
    written(root, rid)
    return chart_data(page or root / rid / "report.html")


def record(root: Path, rid: str) -> dict:
    return json.loads((root / rid / "run.json").read_text())


def by(rows, *keys, value):
    """{(k1, k2, ...): value} of chart rows; each key once."""
    out = {}
    for row in rows:
        k = tuple(row[x] for x in keys) if len(keys) > 1 else row[keys[0]]
        assert k not in out, (k, rows)
        out[k] = row[value]
    return out


def assert_cpu_chart(rows, rec):
    """The stacked CPU bars: each side's /proc classes, the record's
    figures, adding up to its total (the machine's less its steal, which
    has no class of its own)."""
    bars = by(rows, "side", "class", value="ns_per_byte")
    for side in SIDES:
        n = rec["cpu"][side]["ns_per_byte"]
        classes = {c: v for c, v in n.items() if c in ("user", "system", "softirq", "irq") and v is not None}
        assert {c: v for (s, c), v in bars.items() if s == side} == classes, side
        steal = rec["cpu"][side].get("steal_s") or 0
        assert sum(classes.values()) + steal * 1e9 / rec["bytes"] == pytest.approx(n["total"]), side


@pytest.mark.unit
def test_bulk_charts_are_the_records_figures(root):
    rid = "20261122-000001-000b01"
    rec, charts = record(root, rid), charts_of(root, rid)
    # Per side, each category's bar is the record's, and the stack is the graph's total.
    bars = by(charts["categories"], "side", "category", value="value")
    want = {
        (side, cat): ns
        for side, f in rec["flame"]["sides"].items()
        for cat, ns in f["categories_ns_per_byte"].items()
        if ns is not None
    }
    assert bars == want
    for side, f in rec["flame"]["sides"].items():
        assert sum(v for (s, _), v in bars.items() if s == side) == pytest.approx(f["ns_per_byte"]), side
    assert_cpu_chart(charts["cpu"], rec)
    # Bytes per call: the syscalls probe's means.
    sizes = by(charts["syscall_size"], "side", "call", value="bytes")
    for side in ("client", "server"):
        s = rec["syscalls"][side]
        assert sizes[(side, "send")] == s["bytes_per_send_call"]
        assert sizes[(side, "receive")] == s["bytes_per_recv_call"]
    # Each syscall's time histogram holds every call of the record.
    calls = {}
    for row in charts["syscall_time"]:
        calls[(row["side"], row["syscall"])] = calls.get((row["side"], row["syscall"]), 0) + row["count"]
    for side in ("client", "server"):
        for name, s in rec["syscalls"][side]["by_syscall"].items():
            if s.get("calls") and s.get("time_hist_ns"):
                assert calls[(side, name)] == s["calls"] == sum(s["time_hist_ns"]), (side, name)


@pytest.mark.unit
def test_download_charts_are_the_records_figures(root):
    rid = "20261122-000002-000d01"
    rec, charts = record(root, rid), charts_of(root, rid)
    each = rec["downloads"]["each"]
    assert len(each) == rec["downloads"]["count"]
    times = by(charts["download_times"], "download", "time", value="ms")
    for d in each:
        for key, what in (("handshake_s", "handshake"), ("first_byte_s", "first byte"), ("complete_s", "complete")):
            assert times[(d["i"], what)] == pytest.approx(d[key] * 1e3), (d["i"], what)
    # The CDF: every download's time once, in order, each a 1/count step.
    cdf = charts["download_cdf"]
    assert [p["x"] for p in cdf] == pytest.approx(sorted(d["complete_s"] * 1e3 for d in each))
    assert [p["fraction"] for p in cdf] == pytest.approx([(i + 1) / len(each) for i in range(len(each))])


@pytest.mark.unit
def test_rr_cdf_is_the_records_delays(root):
    rec, charts = record(root, RR_RUN), charts_of(root, RR_RUN)
    rr = rec["rr"]
    cdf = charts["rr_cdf"]
    xs, fractions = [p["x"] for p in cdf], [p["fraction"] for p in cdf]
    assert xs == sorted(xs) and fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    # Steps of whole responses: the histogram holds the window's responses.
    n = rr["responses"]
    assert all(f * n == pytest.approx(round(f * n)) for f in fractions)
    # Each percentile of the record is where the CDF first reaches it (HDR's
    # rule: the value of the response at rank round(p n), at least the first).
    for p, ns in rr["delay_ns"].items():
        if not p.startswith("p"):
            continue
        rank = max(1, int(float(p[1:]) / 100 * n + 0.5))
        reached = next(x for x, f in zip(xs, fractions) if round(f * n) >= rank)
        assert reached * 1e6 == pytest.approx(ns), p
    # The ends are the fastest and slowest responses' buckets, and the
    # histogram holds the window's responses.
    from hdrh.histogram import HdrHistogram

    h = HdrHistogram.decode(rr["histogram"])
    assert h.get_total_count() == n
    assert xs[0] * 1e6 == h.get_highest_equivalent_value(rr["delay_ns"]["min"])
    assert xs[-1] * 1e6 == h.get_highest_equivalent_value(rr["delay_ns"]["max"])
    # The categories per request, in microseconds.
    bars = by(charts["categories"], "side", "category", value="value")
    for side, f in rr["flame_ns_per_request"].items():
        for cat, ns in f["categories"].items():
            assert bars[(side, cat)] == pytest.approx(ns / 1e3), (side, cat)


@pytest.mark.unit
def test_mix_and_link_charts_are_the_records_figures(root):
    rec, charts = record(root, MIX_RUN), charts_of(root, MIX_RUN)
    goodput = by(charts["mix_goodput"], "flow", value="goodput_mbps")
    assert goodput == {f"{f['flow']} {f['stack']}": f["goodput_mbps"] for f in rec["mix"]["flows"]}
    for rid in (MIX_RUN, "20261122-000003-000e01"):
        rec, charts = record(root, rid), charts_of(root, rid)
        bars = by(charts["link"], "direction", "figure", value="percent")
        for direction, d in rec["link"]["directions"].items():
            assert bars[(direction, "utilisation of the rate")] == pytest.approx(d["utilisation"] * 100), rid
            if d["netem_drops_percent"] is not None:
                assert bars[(direction, "netem drops")] == pytest.approx(d["netem_drops_percent"]), rid
    assert_cpu_chart(charts["cpu"], rec)


@pytest.mark.unit
def test_interval_charts_are_the_records_intervals(root):
    """A bulk run with --interval: each interval's goodput and each side's
    CPU per byte at the interval's end (a run of the stored comparison)."""
    rid = INTERVAL_RUN
    rec, charts = record(root, rid), charts_of(root, rid)
    samples = rec["intervals"]["samples"]
    assert samples
    assert by(charts["intervals_gbps"], "s", value="value") == {x["end_s"]: x["gbps"] for x in samples}
    cpu = by(charts["intervals_cpu"], "s", "series", value="value")
    assert cpu == {(x["end_s"], side): x[f"{side}_ns_per_byte"] for x in samples for side in ("client", "server")}


@pytest.mark.unit
def test_state_charts_are_the_records_state(root):
    """--interval's transport state (a tcp run's): each side's congestion
    window, RTT and bytes in flight at each interval's end, and its
    packets sent again over it; what TCP_INFO does not give (lost
    packets) is left out and the note says why, in the record's words."""
    rec, charts = record(root, STATE_RUN), charts_of(root, STATE_RUN)
    samples = rec["intervals"]["samples"]
    for name, (fields, _, _, scale) in report_html.STATE_CHARTS.items():
        want = {
            (x["end_s"], f"{side} {f.split('_')[0]}" if len(fields) > 1 else side): x["state"][side][f] * scale
            for x in samples
            for side in ("client", "server")
            for f in fields
            if x["state"][side][f] is not None
        }
        assert want and by(charts[name], "s", "series", value="value") == pytest.approx(want), name
    assert "client lost" not in {r["series"] for r in charts["state_losses"]}
    page = (root / STATE_RUN / "report.html").read_text()
    assert rec["intervals"]["state_absent"]["client"]["lost_packets"] in page


def cpu_total(rec: dict, side: str):
    return rec["cpu"][side]["ns_per_byte"]["total"]


@pytest.mark.unit
def test_comparison_charts_are_its_runs_figures(root):
    cdir = root / "comparisons" / REAL_COMPARISON
    comparison = json.loads((cdir / "comparison.json").read_text())
    charts = charts_of(root, REAL_COMPARISON, cdir / "report.html")
    runs = {x["id"]: json.loads((cdir / x["path"] / "run.json").read_text()) for x in comparison["runs"]}
    labels = [c["label"] for c in comparison["configs"]]
    figures = {
        "throughput_gbps": lambda r: r["throughput_gbps"],
        **{f"{side}_ns_per_byte": functools.partial(cpu_total, side=side) for side in SIDES},
    }
    for key, figure in figures.items():
        medians, _, ticks, *_ = charts[f"metric-{key}"]
        for i, label in enumerate(labels):
            mine = [figure(r) for x, r in zip(comparison["runs"], runs.values()) if x["config"] == i]
            # Each run's tick is its own record's figure; the point is their median.
            assert sorted(t["value"] for t in ticks if t["label"] == label) == pytest.approx(sorted(mine)), key
            (median,) = [m["median"] for m in medians if m["label"] == label]
            assert median == pytest.approx(statistics.median(mine)), key
    # Per configuration, side and category: the median of its runs' complete captures.
    bars = by(charts["categories"], "configuration", "side", "category", value="ns_per_byte")
    assert bars
    for (label, side, cat), v in bars.items():
        mine = [
            r["flame"]["sides"][side]["categories_ns_per_byte"][cat]
            for x, r in zip(comparison["runs"], runs.values())
            if labels[x["config"]] == label and r["flame"]["complete"]
        ]
        assert v == pytest.approx(statistics.median(mine)), (label, side, cat)


# --- the summary card and the tables, against the records ----------------------------------------


def run_card_figures(rec: dict) -> dict:
    """key -> (value, text) of every figure a run's card shows: the
    record's, as summary.findings reads it for the terminal."""
    s = summary.findings(rec)
    fmt = "{:.3f}" if s.unit == "ns/B" else "{:,.1f}"

    def shown(v, f):
        return ABSENT if v is None else f.format(v)

    want = {"throughput_gbps": (rec["throughput_gbps"], summary.rate_text(rec["throughput_gbps"]))}
    want.update({k: (v, shown(v, "{:,.3g}")) for k, v in s.headline.items() if k != "throughput_gbps"})
    want.update({f"cpu.{side}": (v, shown(v, fmt)) for side, v in s.cpu.items()})
    if s.unit == "ns/B" and s.floor:
        want.update({f"floor.{side}": (s.floor.get(side), shown(s.floor.get(side), "{:.1f}×")) for side in SIDES})
    for side, cats in s.top.items():
        for cat, per, share in cats:
            want[f"top.{side}.{cat}"] = (share, f"{share * 100:.0f}%")
            want[f"top.{side}.{cat}.{s.unit}"] = (per, f"{per:.3f} {s.unit}")
    want.update({f"absent.{what}": (None, f"{what} ({place})") for what, place in s.dashes})
    return want


def mix_card_figures(rec: dict) -> dict:
    want = {}
    for f in rec["mix"]["flows"]:
        k = f"mix.{f['flow']}"
        want[f"{k}.goodput_mbps"] = (f["goodput_mbps"], f"{f['goodput_mbps']:.3g} Mbit/s")
        want[f"{k}.share"] = (f["share"], f"{f['share'] * 100:.0f}%")
        for side in ("client", "server"):
            want[f"{k}.{side}"] = (f["ns_per_byte"][side], f"{f['ns_per_byte'][side]:.3f} ns/B")
    return want


def comparison_card_figures(rec: dict) -> dict:
    """key -> (value, text, ranges apart) of every figure a comparison's
    card shows: each RATIO_KEYS median and ratio to the first, as `qprof
    show ID` prints them (summary.comparison_findings)."""
    want = {}
    for f in summary.comparison_findings(rec).figures:
        for i, (x, row) in enumerate(zip(f.configs, rec["metrics"][f.key])):
            assert x.median == row["median"]
            want[f"median.{f.key}.{i}"] = (x.median, compact(x.median, f.unit), None)
            if i and x.ratio is not None:
                assert x.ratio == row["ratio"]
                text = f"×{x.ratio:.2f}" + ("*" if row["beyond_spread"] else "")
                want[f"ratio.{f.key}.{i}"] = (x.ratio, text, row["beyond_spread"])
    return want


def card_figures(page: str) -> dict:
    """key -> (value, text, ranges apart) of each figure on a page's card,
    from its HTML (the browser test reads the same from the DOM)."""
    card = page[page.index('id="qp-summary"') : page.index("</section>", page.index('id="qp-summary"'))]
    out = {}
    for key, value, beyond, text in re.findall(
        r'<span class="qp-fig" data-key="([^"]*)" data-value="([^"]*)"(?: data-beyond="(\w+)")?>([^<]*)</span>', card
    ):
        assert key not in out, key
        out[_html.unescape(key)] = (
            float(value) if value else None,
            _html.unescape(text),
            {"true": True, "false": False}.get(beyond),
        )
    return out


def assert_card(got: dict, want: dict) -> None:
    """The card shows exactly the wanted figures, each its value to the
    last digit (repr) and its text as the terminal writes it."""
    assert set(got) == set(want), sorted(set(got) ^ set(want))
    for key, w in want.items():
        value, text, *beyond = w
        assert got[key][0] == value, (key, got[key], w)
        assert got[key][1] == text, (key, got[key], w)
        if beyond:
            assert got[key][2] == beyond[0], (key, got[key], w)


class _Tables(HTMLParser):
    """The page's HTML tables (class qp-table): (title, rows of cell texts)."""

    def __init__(self):
        super().__init__()
        self.tables, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("class") == "qp-table":
            self.tables.append((a.get("data-title"), []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def html_tables(page: str) -> dict:
    parser = _Tables()
    parser.feed(page)
    return {title: rows for title, rows in parser.tables if title}


@pytest.mark.unit
@pytest.mark.parametrize("case", ["bulk", "download", "link", "rr", "mix"])
def test_a_runs_card_holds_the_records_figures(root, case):
    """Every figure on the card is the record's, as findings computes it
    for the terminal; and the CPU row reads as the terminal's."""
    rid = CASES[case][0]
    written(root, rid)
    page, rec = (root / rid / "report.html").read_text(), record(root, rid)
    got = card_figures(page)
    if case == "mix":
        assert_card(got, mix_card_figures(rec))
        return
    assert_card(got, run_card_figures(rec))
    assert got["throughput_gbps"][0] == rec["throughput_gbps"]
    if summary.findings(rec).unit == "ns/B":
        for side in ("client", "server"):
            assert got[f"cpu.{side}"][0] == rec["cpu"][side]["ns_per_byte"]["oncpu"]
        for side, times in rec["floor"].get("times_floor", {}).items():
            assert got[f"floor.{side}"][0] == times
    terminal = io.StringIO()
    summary.print_summary(rec, Console(file=terminal, width=80, color_system=None, highlight=False))
    row = next(line for line in terminal.getvalue().splitlines() if line.strip().startswith("on CPU")).split()[2:]
    assert row == [got[f"cpu.{side}"][1] for side in SIDES]


@pytest.mark.unit
def test_a_comparisons_card_holds_its_ratios(root):
    cdir = root / "comparisons" / REAL_COMPARISON
    written(root, REAL_COMPARISON)
    rec = json.loads((cdir / "comparison.json").read_text())
    got = card_figures((cdir / "report.html").read_text())
    assert_card(got, comparison_card_figures(rec))
    # As the terminal prints them: median, then ×ratio (here one run each: no range).
    terminal = io.StringIO()
    tables.print_comparison_summary(rec, Console(file=terminal, width=200, color_system=None, highlight=False))
    for key, (_, text, _) in got.items():
        if key.startswith("ratio."):
            median = got[key.replace("ratio.", "median.", 1)][1]
            assert f"{median} {text}" in terminal.getvalue(), (key, terminal.getvalue())


@pytest.mark.unit
def test_the_card_marks_ranges_apart_and_overlapping():
    """Three runs a configuration: the ratio is marked * and said apart
    where the ranges do not overlap, and left unmarked where they do."""

    def row(median, low, high, ratio, beyond):
        return {"n": 3, "median": median, "min": low, "max": high, "ratio": ratio, "beyond_spread": beyond}

    rec = {
        "id": "C",
        "repeat": 3,
        "configs": [{"label": "tcp"}, {"label": "quic"}, {"label": "udp"}],
        "runs": [{"id": f"r{i}", "config": i % 3} for i in range(9)],
        "metric_units": {"throughput_gbps": {"label": "throughput", "unit": "Gbit/s", "lower_is_better": False}},
        "metrics": {
            "throughput_gbps": [
                row(2.0, 1.9, 2.1, 1.0, None),
                row(4.0, 3.8, 4.2, 2.0, True),
                row(3.0, 1.5, 4.5, 1.5, False),
            ]
        },
    }
    page = report_html.Page("comparison", "C", "C", "complete", card=report_html.comparison_card(rec))
    text = report_html.card_html(page)
    got = card_figures(text)
    assert_card(got, comparison_card_figures(rec))
    assert got["ratio.throughput_gbps.1"][1:] == ("×2.00*", True)
    assert got["ratio.throughput_gbps.2"][1:] == ("×1.50", False)
    plain = re.sub(r"<[^>]+>", "", text)
    assert "quic 4.000 ±5% ×2.00* (ranges apart); udp 3.000 ±50% ×1.50." in plain
    assert "unmarked, they overlap" in plain


@pytest.mark.unit
def test_the_page_reads_top_down_and_its_tables_are_html_tables(root):
    """The card, then the categories, the flame graphs, the other charts,
    and last every table: HTML tables, no terminal text, their figures
    the record's as the terminal writes them."""
    rid = CASES["bulk"][0]
    written(root, rid)
    page, rec = (root / rid / "report.html").read_text(), record(root, rid)
    marks = ['id="qp-summary"', 'id="qp-categories"', 'id="qp-flames"', 'id="qp-charts"', 'id="qp-tables"']
    at = [page.index(m) for m in marks]
    assert at == sorted(at), dict(zip(marks, at))
    assert "<pre" not in page[at[-1] :]
    cpu = html_tables(page)["CPU over the window"]
    header, *rows = cpu
    assert header[0] == "SIDE" and [r[0] for r in rows] == list(SIDES)
    for r in rows:
        n = rec["cpu"][r[0]]["ns_per_byte"]
        assert r[header.index("TOTAL ns/B")] == f"{n['total']:.3f}"
        assert r[header.index("ON-CPU ns/B")] == (ABSENT if n.get("oncpu") is None else f"{n['oncpu']:.3f}")
    # A comparison's figures: configurations as columns, each cell the terminal's.
    cdir = root / "comparisons" / REAL_COMPARISON
    written(root, REAL_COMPARISON)
    comparison = json.loads((cdir / "comparison.json").read_text())
    header, *rows = html_tables((cdir / "report.html").read_text())["figures"]
    assert header == ["FIGURE"] + [c["label"] for c in comparison["configs"]]
    (throughput,) = [r for r in rows if r[0] == "throughput (Gbit/s)"]
    cells = [tables.cell(x, "Gbit/s", i == 0) for i, x in enumerate(comparison["metrics"]["throughput_gbps"])]
    assert throughput[1:] == cells


# --- in the browser ----------------------------------------------------------------------------


def _ours(profile: str):
    """Pids of the browser processes started with our profile directory."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if profile.encode() in (p / "cmdline").read_bytes():
                    out.append(int(p.name))
            except OSError:
                pass
    return out


@pytest.fixture(scope="module")
def browser():
    """Headless chromium with the network off; quit, and any process
    left with its profile killed by pid, on every path."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("chromium and chromium-driver are not installed; `make test-tools` installs them")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="qprof-report-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for a in (
        "--headless=new",
        "--no-sandbox",  # as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        # The network off: no name resolves, and what would not need one
        # goes to a proxy on a closed port.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--proxy-server=http://127.0.0.1:9",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--window-size={WIDTH},1000",
    ):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = None
    try:
        # Both paths given, so selenium's driver manager never looks online.
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
        yield driver
    finally:
        try:
            if driver is not None:
                driver.quit()
        finally:
            for pid in _ours(profile):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            shutil.rmtree(profile, ignore_errors=True)


def load(driver, page: Path, name: str) -> dict:
    """page in the browser: what the test checks, a screenshot kept."""
    driver.get_log("browser")
    driver.get_log("performance")
    driver.get(page.as_uri())
    deadline = time.monotonic() + 60
    while True:
        state = driver.execute_script(
            "const c=[...document.querySelectorAll('.qp-chart')];"
            "return c.filter(e => !e.dataset.rendered && !e.dataset.failed).length"
        )
        if state == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    charts = driver.execute_script(
        "return [...document.querySelectorAll('.qp-chart')].map(e => {"
        "const r = e.getBoundingClientRect(); const s = e.querySelector('svg');"
        "const b = s ? s.getBoundingClientRect() : {width: 0, height: 0};"
        "return {id: e.id, rendered: e.dataset.rendered || null, failed: e.dataset.failed || null,"
        "width: r.width, height: r.height, svg_width: b.width, svg_height: b.height,"
        "marks: s ? s.querySelectorAll('path, rect, line, circle, text').length : 0}})"
    )
    flames = []
    from selenium.webdriver.common.by import By

    for frame in driver.find_elements(By.CSS_SELECTOR, "iframe.qp-flame"):
        fid, rect = frame.get_attribute("id"), frame.rect
        driver.switch_to.frame(frame)
        try:
            inside = driver.execute_script(
                "const s = document.documentElement; const b = s.getBoundingClientRect();"
                "return {tag: s.tagName, width: b.width, height: b.height,"
                "frames: document.querySelectorAll('#frames > g').length,"
                "rects: document.querySelectorAll('rect').length, scripted: typeof init === 'function'}"
            )
        finally:
            driver.switch_to.default_content()
        flames.append({"id": fid, "width": rect["width"], "height": rect["height"], **inside})
    console = driver.get_log("browser")
    requests = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            requests.append(msg["params"]["request"]["url"])
    # The whole page in one window: a capture beyond the viewport leaves
    # the flame graphs' frames (drawn in processes of their own) blank.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WIDTH, min(height + 40, MAX_SHOT_HEIGHT))
    time.sleep(0.5)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    driver.set_window_size(WIDTH, 1000)
    return {"charts": charts, "flames": flames, "console": console, "requests": requests}


def check(got: dict, charts_at_least: int, flames: int) -> None:
    errors = [e for e in got["console"] if e["level"] == "SEVERE"]
    assert not errors, errors
    left = [u for u in got["requests"] if urlparse(u).scheme not in SCHEMES_ALLOWED]
    assert not left, f"requests left the machine: {left}"
    assert len(got["charts"]) >= charts_at_least, got["charts"]
    for c in got["charts"]:
        assert c["rendered"] and not c["failed"], c
        assert c["width"] > 0 and c["height"] > 0 and c["svg_width"] > 0 and c["svg_height"] > 0, c
        assert c["marks"] > 0, c
    assert len(got["flames"]) == flames, got["flames"]
    for f in got["flames"]:
        assert f["tag"] == "svg" and f["scripted"], f
        assert f["width"] > 0 and f["height"] > 0 and f["frames"] > 0 and f["rects"] > 0, f


# (what, charts at least, flame graphs drawn, chart names it must have)
CASES = {
    "bulk": ("20261122-000001-000b01", 6, 3, {"categories", "syscall_time", "packet_size", "gso_segments"}),
    "download": ("20261122-000002-000d01", 6, 0, {"download_times", "download_cdf", "packet_size"}),
    "link": ("20261122-000003-000e01", 2, 0, {"cpu", "link"}),
    "intervals": (INTERVAL_RUN, 4, 3, {"categories", "cpu", "intervals_gbps", "intervals_cpu"}),
    "state": (STATE_RUN, 6, 0, {"intervals_gbps", "state_cwnd", "state_rtt", "state_in_flight", "state_losses"}),
    "mix": (MIX_RUN, 2, 0, {"mix_goodput", "link"}),
    "rr": (RR_RUN, 4, 3, {"rr_cdf", "categories", "syscall_time", "packet_size"}),
}


@pytest.mark.system
@pytest.mark.beside
@needs_inferno
@pytest.mark.parametrize("case", sorted(CASES))
def test_run_report_in_browser(root, browser, case):
    rid, n_charts, n_flames, names = CASES[case]
    if not (root / rid).exists():
        pytest.skip(f"no golden {case} run")
    r = report(root, rid)
    assert r.returncode == 0, r.stderr
    page = root / rid / "report.html"
    got = load(browser, page, f"run-{case}")
    check(got, n_charts, n_flames)
    assert names <= {c["id"].removeprefix("chart-") for c in got["charts"]}


@pytest.mark.system
@pytest.mark.beside
@needs_inferno
def test_comparison_report_in_browser(root, browser):
    r = report(root, COMPARISON)
    assert r.returncode == 0, r.stderr
    got = load(browser, root / "comparisons" / COMPARISON / "report.html", "comparison")
    check(got, 4, 3)
    ids = {c["id"] for c in got["charts"]}
    assert {"chart-metric-throughput_gbps", "chart-metric-system_ns_per_byte"} <= ids


@pytest.mark.system
@pytest.mark.beside
def test_real_comparison_report_in_browser(root, browser):
    """`qprof compare --stacks tcp,udp --duration 1s --repeat 1 --probes none`
    as it left its directory, flame diffs included."""
    r = report(root, REAL_COMPARISON)
    assert r.returncode == 0, r.stderr
    got = load(browser, root / "comparisons" / REAL_COMPARISON / "report.html", "comparison-tcp-udp")
    check(got, 6, 3)
    ids = {c["id"] for c in got["charts"]}
    assert "chart-categories" in ids and "chart-metric-udp_loss_share" in ids
    # Categories are one stacked chart, not a chart each.
    units = json.loads((root / "comparisons" / REAL_COMPARISON / "comparison.json").read_text())["metric_units"]
    categories = {f"chart-metric-{k}" for k, u in units.items() if ": " in u["label"]}
    assert categories and not ids & categories


@pytest.mark.system
@pytest.mark.beside
def test_incomplete_report_in_browser(root, browser):
    report(root, INCOMPLETE)
    got = load(browser, root / INCOMPLETE / "report.html", "run-incomplete")
    check(got, 0, 0)


FIRST_SCREEN_JS = """
const card = document.getElementById('qp-summary');
if (!card) return null;
const r = card.getBoundingClientRect(), st = getComputedStyle(card);
const hit = document.elementFromPoint(r.left + r.width / 2, r.top + Math.min(r.height / 2, 30));
return {top: r.top, left: r.left, bottom: r.bottom, right: r.right, width: r.width, height: r.height,
  vw: window.innerWidth, vh: window.innerHeight, scrolled: window.scrollY,
  visible: st.visibility === 'visible' && st.display !== 'none' && parseFloat(st.opacity) > 0,
  on_top: card.contains(hit),
  figures: [...card.querySelectorAll('[data-key]')].map(e => {
    const b = e.getBoundingClientRect();
    return {key: e.dataset.key, value: e.dataset.value, beyond: e.dataset.beyond || null, text: e.textContent,
            inside: b.width > 0 && b.height > 0 && b.top >= 0 && b.bottom <= window.innerHeight};
  })};
"""


def first_screen(driver, page: Path, name: str) -> dict:
    """page opened in a FIRST_SCREEN viewport, unscrolled: where its card
    is and what it shows; a screenshot of that screen kept."""
    width, height = FIRST_SCREEN
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    try:
        driver.get(page.as_uri())
        got = driver.execute_script(FIRST_SCREEN_JS)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return got


# case -> (id, its page under the runs directory, the figures its card must show)
CARDS = {
    "bulk": (CASES["bulk"][0], "", run_card_figures),
    "download": (CASES["download"][0], "", run_card_figures),
    "rr": (RR_RUN, "", run_card_figures),
    "mix": (MIX_RUN, "", mix_card_figures),
    "comparison": (REAL_COMPARISON, "comparisons", comparison_card_figures),
}


@pytest.mark.system
@pytest.mark.beside
@pytest.mark.parametrize("case", sorted(CARDS))
def test_the_card_is_on_the_first_screen_with_the_records_figures(root, browser, case):
    """In a 1280x800 window, unscrolled, the summary card is drawn whole
    and on top, and every figure it shows (read from the DOM) is the
    record's as summary.findings computes it."""
    rid, under, want = CARDS[case]
    r = report(root, rid)
    assert r.returncode == 0, r.stderr
    d = root / under / rid
    got = first_screen(browser, d / "report.html", f"first-screen-{case}")
    assert got is not None, "no summary card"
    assert (got["vw"], got["vh"]) == FIRST_SCREEN and got["scrolled"] == 0, got
    assert got["visible"] and got["on_top"] and got["width"] > 0 and got["height"] > 0, got
    assert got["top"] >= 0 and got["left"] >= 0, got
    assert got["bottom"] <= got["vh"] and got["right"] <= got["vw"], got
    assert got["figures"] and all(f["inside"] for f in got["figures"]), got["figures"]
    shown = {}
    for f in got["figures"]:
        assert f["key"] not in shown, f
        shown[f["key"]] = (
            float(f["value"]) if f["value"] else None,
            f["text"],
            {"true": True, "false": False}.get(f["beyond"]),
        )
    rec = json.loads((d / ("comparison.json" if under else "run.json")).read_text())
    assert_card(shown, want(rec))


@pytest.mark.unit
def test_rr_load_curve_is_each_configurations_medians():
    """An rr comparison over the load (here --vary period): per
    configuration, the median of its runs' requests/s and of each delay
    percentile; one configuration alone draws no curve."""
    rec = {
        "configs": [{"label": "period=1ms"}, {"label": "period=200us"}],
        "runs": [{"id": f"r{k}", "config": k % 2} for k in range(6)],
    }

    def rr(k):
        load = 1000 if k % 2 == 0 else 5000
        delays = {"p50": 1e5 * (1 + k), "p99": 1e6 * (1 + k), "p99.9": None}
        return {"rr": {"requests_per_s": load + k, "delay_ns": delays}}

    records = {f"r{k}": rr(k) for k in range(6)}
    points = report_html.rr_load_points(rec, records)
    got = {(p["configuration"], p["percentile"]): (p["requests_per_s"], p["delay_ms"]) for p in points}
    assert got[("period=1ms", "p50")] == (1002, 0.3)  # runs 0, 2, 4: medians of 1000..1004 and 0.1..0.5 ms
    assert got[("period=200us", "p99")] == (5003, 4.0)  # runs 1, 3, 5
    assert ("period=1ms", "p99.9") not in got  # not measured: absent, not zero
    assert report_html.rr_load_chart(points).name == "rr_load"
    one = {"configs": rec["configs"][:1], "runs": [r for r in rec["runs"] if r["config"] == 0]}
    assert report_html.rr_load_points(one, records) == []
