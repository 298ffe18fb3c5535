# SPDX-License-Identifier: GPL-2.0-only
"""`qprof show`: a run's or comparison's tables again, from its record."""

import io
import json
from pathlib import Path
from typing import Callable, Optional

import click
from rich.console import Console

from qprof import history
from qprof.cli.run_options import runs_dir_option
from qprof.errors import IncompleteRecord, RunNotFound
from qprof.present import tables as report
from qprof.present.format import ABSENT


@click.command()
@click.argument("run_id", default="latest", metavar="[RUN_ID|COMPARISON_ID|latest]")
@runs_dir_option
def show(run_id, runs_dir):
    """Print a run's or a comparison's tables from its record.

    The same tables `qprof run` and `qprof compare` print when they end,
    made again from RUNS_DIR/<id>/run.json or
    RUNS_DIR/comparisons/<id>/comparison.json; nothing is measured. A
    record that is incomplete (the run failed, was abandoned or still
    runs) or corrupt is shown as far as it can be read, and said so on
    stderr with exit code 33.

    \b
    EXAMPLES:
      qprof show                          # the latest run
      qprof show 20261123-162245-3f9c1a
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
        printer = report.print_comparison if kind == "comparison" else _run_printer(rec)
        if kind == "comparison":
            rec = {**rec, "path": str(path.parent)}  # where it is now
        text, failure = _rendered(printer, rec)
        if failure is None:
            click.echo(text, nl=False)
            return
        row["problem"] = f"its record cannot be shown whole ({failure})"
    print_partial(row, rec, path.parent)
    raise IncompleteRecord(_sentence(row))


def _run_printer(rec: dict) -> Callable:
    return report.print_mix if rec.get("stack") == "mix" or "mix" in rec else report.print_run


def _rendered(printer: Callable, rec: dict):
    """(text, None) as printer draws rec for stdout, or (None, why not):
    drawn aside first, so a record that breaks it leaves no half table."""
    out = Console()
    buf = io.StringIO()
    console = Console(
        file=buf,
        force_terminal=out.is_terminal,
        color_system=out.color_system,
        width=out.width,
        highlight=False,
    )
    try:
        printer(rec, console)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as e:
        return None, f"{type(e).__name__}: {e}"
    return buf.getvalue(), None


def _sentence(row: dict) -> str:
    what = f"{row['kind']} {row['id']}"
    if row["problem"]:
        return f"{what}'s record is corrupt: {row['problem']}; above is what could be read of it."
    said = f"{what} is {row['status']}"
    if row["error"]:
        said += f" ({row['error'].rstrip('.')})"
    return f"{said}; above is what its record holds."


def _fmt(v) -> str:
    if v is None:
        return ABSENT
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def print_partial(row: dict, rec: Optional[dict], where: Path, console: Console = None) -> None:
    """What an incomplete or corrupt record holds, marked as such: its
    state, options, environment and whichever figures it has, the
    comparison's runs, and the files in its directory. One line a field,
    never wrapped, so each can be grepped."""
    console = console or Console(highlight=False)
    state = "CORRUPT" if row["problem"] else row["status"].upper()
    lines = []
    for key in ("problem", "error", "time", "stack", "pattern"):
        if row[key] is not None:
            lines.append((key, str(row[key])))
    opts = {k: v for k, v in (row["options"] or {}).items() if v not in (None, False, [], ())}
    if opts:
        lines.append(("options", " ".join(f"{k}={_fmt(v)}" for k, v in opts.items())))
    env = [row[k] for k in ("hostname", "cpu_model", "kernel_release") if row[k]]
    if env:
        lines.append(("machine", ", ".join(map(str, env))))
    for key in ("qprof_version", "qprof_commit", "msquic_version"):
        if row[key]:
            lines.append((key, str(row[key])))
    for key in history.NAMES[history.NAMES.index("throughput_gbps") : history.NAMES.index("record_size")]:
        if row[key] is not None:
            lines.append((key, _fmt(row[key])))
    for c in row["configs"] or ():
        medians = ", ".join(f"{k} {_fmt(v)}" for k, v in c["medians"].items() if v is not None)
        lines.append(("configuration", f"{c.get('label')}" + (f": {medians}" if medians else "")))
    if isinstance(rec, dict) and isinstance(rec.get("runs"), list):
        done = [r.get("id") for r in rec["runs"] if isinstance(r, dict)]
        lines.append(("runs done", ", ".join(map(str, done)) or "none"))
    try:
        files = sorted(p.name + ("/" if p.is_dir() else "") for p in where.iterdir())
    except OSError:
        files = []
    lines.append(("directory", str(where)))
    lines.append(("files", ", ".join(files) or "none"))
    console.print(f"[bold]{row['kind']} {row['id']}[/]: [red]{state}[/]", soft_wrap=True)
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        console.print(f"  {key:<{width}}  ", style="dim", end="", soft_wrap=True)
        console.print(value, markup=False, soft_wrap=True)
