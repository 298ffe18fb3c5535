# SPDX-License-Identifier: GPL-2.0-only
"""`qprof show`: a run's or comparison's tables again, from its record."""

from pathlib import Path

import click

from qprof import history
from qprof.cli.run_options import runs_dir_option
from qprof.errors import IncompleteRecord, RunNotFound
from qprof.present import summary, tables


@click.command()
@click.argument("run_id", default="latest", metavar="[RUN_ID|COMPARISON_ID|latest]")
@click.option("--all", "--detail", "every", is_flag=True, help="Every table, as `qprof run --detail` prints them.")
@click.option("--why", is_flag=True, help="Why each figure shown as a dash (not measured) is absent.")
@runs_dir_option
def show(run_id, every, why, runs_dir):
    """Print a run's or a comparison's summary (or tables) from its record.

    What `qprof run` and `qprof compare` print when they end, made again
    from RUNS_DIR/<id>/run.json or RUNS_DIR/comparisons/<id>/comparison.json;
    nothing is measured. --all prints every table instead, --why the
    reason for each figure the record does not hold. A record that is
    incomplete (the run failed, was abandoned or still runs) or corrupt
    is shown as far as it can be read, and said so on stderr with exit
    code 33.

    \b
    EXAMPLES:
      qprof show                          # the latest run's summary
      qprof show 20261123-162245-3f9c1a --all
      qprof show latest --why
      qprof show $(qprof ls --kind comparison -n 1 --json | jq -r '.[0].id')
    """
    root = Path(runs_dir)
    found = history.locate(root, run_id)
    if found is None:
        raise RunNotFound(history.not_found(root, run_id))
    kind, rid, rel, path = found
    rec, problem = history.read_record(path)
    row = history.entry(kind, rel, rid, rec, problem)
    if row["problem"] is None and row["status"] == "complete":
        printer = summary.print_why if why else tables.record_printer(kind, rec, every)
        if kind == "comparison":
            rec = {**rec, "path": str(path.parent)}  # where it is now
        text, failure = tables.rendered(printer, rec)
        if failure is None:
            click.echo(text, nl=False)
            return
        row["problem"] = f"its record cannot be shown whole ({failure})"
    tables.print_partial(row, rec, path.parent)
    raise IncompleteRecord(tables.partial_sentence(row))
