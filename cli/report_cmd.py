# SPDX-License-Identifier: GPL-2.0-only
"""`qprof report`: a run or comparison as one self-contained HTML file."""

from pathlib import Path
from typing import Dict, List, Optional

import click

from qprof import errors, history
from qprof.cli.run_options import runs_dir_option
from qprof.files import RECORD, write_text_atomic
from qprof.present import html as html_report
from qprof.present import tables as report

REPORT = "report.html"


@click.command()
@click.argument("run_id", default="latest", metavar="[RUN_ID|COMPARISON_ID|latest]")
@click.option("--open", "open_html", is_flag=True, help="Open the report with xdg-open (else say where it is).")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"Write the report here instead of beside the record (RUNS_DIR/<id>/{REPORT}).",
)
@runs_dir_option
def report_cmd(run_id, open_html, output, runs_dir):
    """Write a run's or comparison's report: one HTML file, no network.

    First a summary card (what `qprof run` or `qprof compare` ends with:
    the rate, each side's CPU and its floor multiple, the largest
    categories, a comparison's ratios marked where the ranges part);
    then CPU ns/B per flame category as stacked bars per side; the flame
    graphs (inferno's
    interactive SVGs; a run's are drawn now if `qprof flame` has not);
    the probes' histograms (time per system call, packet length, GSO
    segments); for downloads and rr runs each download's times and the
    delays' CDF; for a comparison each metric against what its
    configurations vary, with the runs' range and the ratio to the first
    configuration, and the delay or download-time CDFs per configuration;
    last, every table `qprof show --all` prints, as HTML tables.
    Scripts and data are inlined, so the file opens offline and can be
    mailed. A record that is incomplete (the run failed, was abandoned or
    still runs) or corrupt is reported as far as it can be read, marked at
    the top, and said so on stderr with exit code 33.

    \b
    EXAMPLES:
      qprof report                        # the latest run -> runs/<id>/report.html
      qprof report 20261123-162245-3f9c1a --open
      qprof report COMPARISON_ID -o /tmp/gso.html
    """
    root = Path(runs_dir)
    found = history.locate(root, run_id)
    if found is None:
        raise errors.RunNotFound(history.not_found(root, run_id))
    kind, rid, rel, path = found
    rec, problem = history.read_record(path)
    row = history.entry(kind, rel, rid, rec, problem)
    problems = marks(row)
    if kind == "comparison":
        page = html_report.comparison_page(
            rec, path.parent, rid, problems, report.print_comparison, run_records(path, rec)
        )
    else:
        printer = report.print_mix if (rec or {}).get("stack") == "mix" else report.print_run
        page = html_report.run_page(rec, path.parent, rid, problems, printer)
    out = Path(output) if output else path.parent / REPORT
    text = html_report.html(page)
    write_text_atomic(out, text)
    drawn = sum(1 for f in page.flames if f.svg)
    click.echo(
        f"{kind} {rid}: {out} ({len(text.encode()) / 1e6:.1f} MB; {len(page.charts)} charts, {drawn} flame graphs)"
    )
    if open_html:
        html_report.open_in_browser([out], click.echo)
    if page.problems:
        said = not_whole(row, page.problems)
        raise errors.IncompleteRecord(f"{said}; {out} shows what could be read, marked at its top.")


def marks(row: dict) -> List[str]:
    """What is wrong with a record, as the report marks it."""
    out = []
    if row["problem"]:
        out.append(f"the record is corrupt: {row['problem']}")
    elif row["status"] != "complete":
        out.append(f"the {row['kind']} is {row['status']}" + (f": {row['error']}" if row["error"] else ""))
    return out


def not_whole(row: dict, problems: List[str]) -> str:
    """What is wrong with the record: a run that did not complete (and its
    error), or a corrupt record by its first problem, as `qprof show` says
    it (the report lists them all at its top)."""
    what = f"{row['kind']} {row['id']}'s record"
    if row["problem"] is None and row["status"] != "complete":
        return f"{what} is {row['status']}" + (f" ({row['error'].rstrip('.')})" if row["error"] else "")
    first, more = (row["problem"] or problems[0]), len(problems) - 1
    return f"{what} is corrupt: {first}" + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")


def run_records(path: Path, rec: Optional[dict]) -> Dict[str, dict]:
    """The comparison's runs' records, from where comparison.json points
    (a run whose directory is gone or unreadable is left out)."""
    out = {}
    runs = (rec or {}).get("runs")
    for r in runs if isinstance(runs, list) else ():
        if (
            not isinstance(r, dict)
            or not isinstance(r.get("id"), str)
            or not isinstance(r.get("path"), (str, type(None)))
        ):
            continue
        got, _ = history.read_record(path.parent / (r.get("path") or f"../../{r['id']}") / RECORD)
        if got is not None:
            out[r["id"]] = got
    return out
