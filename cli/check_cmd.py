# SPDX-License-Identifier: GPL-2.0-only
"""`qprof check`: a run (or a comparison's configuration) against a
baseline; exit 40 when it regressed (describe/check.py says how)."""

import json
from pathlib import Path
from typing import List, Optional

import click
from rich.console import Console
from rich.table import Table

from qprof import errors, files
from qprof.cli.run_options import runs_dir_option
from qprof.describe import check

ABSENT = "—"


def parse_share(text: str) -> float:
    """5% or 0.05."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise errors.BadValue(f"--max-regression takes a share such as 5% or 0.05, not '{text}'.")
    if not 0 <= value < 10:
        raise errors.BadValue(f"--max-regression {text} is not a share from 0% up; write it like 5%.")
    return value


def records(root: Path, ident: str, config: Optional[int]) -> List[dict]:
    """The run's record, or the records of a comparison's configuration,
    each whole (files.load: a damaged one is corrupt, exit 33)."""
    if (root / files.COMPARISONS_SUBDIR / ident / files.COMPARISON_RECORD).exists():
        comp = files.load(root, ident, kind="comparison", whole=True)
        labels = [c.get("label") if isinstance(c, dict) else None for c in comp["configs"]]
        if not labels:
            raise files.corrupt(ident, "it has no configurations", "comparison")
        index = 0 if config is None else config
        if not 0 <= index < len(labels):
            raise errors.BadValue(
                f"comparison {ident} has configurations 0 to {len(labels) - 1} "
                f"({', '.join(map(str, labels))}); pick one with --config."
            )
        runs = [r for r in comp["runs"] if isinstance(r, dict) and r.get("config") == index]
        if not all(isinstance(r.get("id"), str) for r in runs):
            raise files.corrupt(ident, f"a run of configuration {index} has no id", "comparison")
        return [files.load(root, r["id"], whole=True) for r in runs]  # a failed run's figures are absent
    if config is not None:
        raise errors.BadValue(f"--config picks a comparison's configuration, and {ident} is a run; drop it.")
    return [complete(root, ident)]


def complete(root: Path, ident: str) -> dict:
    """A run's record, whole and complete: only such a run has figures."""
    rec = files.load(root, ident, whole=True)
    if rec["status"] != "complete":
        raise errors.IncompleteRecord(
            f"run {ident} is {rec['status']}, so it has no figures to check; "
            "pick a complete run (`qprof ls --status complete`)."
        )
    return rec


@click.command("check")
@click.argument("run_id")
@click.option("--baseline", "base_id", required=True, help="The run or comparison to hold RUN_ID to.")
@click.option("--config", type=int, default=None, help="RUN_ID is a comparison: which configuration (0 first).")
@click.option("--baseline-config", type=int, default=None, help="The baseline is a comparison: which configuration.")
@click.option(
    "--max-regression",
    default="5%",
    show_default=True,
    help="How much worse a figure's median may be before it counts (if also beyond the baseline's range).",
)
@click.option(
    "--allow-differences",
    is_flag=True,
    help="Compare a baseline measured with other options anyway (the verdict names them).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Compare a baseline of another stack, pattern or machine anyway, whatever differs (warns).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON on stdout.")
@runs_dir_option
def check_cmd(run_id, base_id, config, baseline_config, max_regression, allow_differences, force, as_json, runs_dir):
    """Exit non-zero when RUN_ID's CPU per byte regressed against a baseline.

    Each side's ns/B, the machine's, the throughput, and each side's ns/B
    per category of work: a figure regressed when its median is worse than
    the baseline's by more than --max-regression AND worse than every
    baseline value (beyond its run-to-run spread; give a comparison with
    --repeat for a spread). Exit 40 names the figures that grew. A
    baseline of another stack, pattern or machine is refused (exit 24)
    unless --force; one measured with other options (--conns, --gso,
    --payload, ...: all but --duration, --warmup, --count, --interval,
    --port and where things go) is refused (exit 24), naming them, unless
    --allow-differences.

    \b
    EXAMPLES:
      qprof check latest --baseline 20261123-101500-ab12cd
      qprof check NEW_COMPARISON --baseline OLD_COMPARISON --max-regression 3%
      qprof check RUN --baseline BASE --json | jq '.rows[] | select(.regressed)'
    """
    threshold = parse_share(max_regression)
    root = Path(runs_dir)
    run = records(root, run_id, config)
    base = records(root, base_id, baseline_config)
    warnings = check.comparable(run, base, force, allow_differences)
    differences = check.differences(run, base)
    rows = check.verdict(run, base, threshold)
    regressed = [r for r in rows if r["regressed"]]
    if as_json:
        verdict = {"run": run_id, "baseline": base_id, "max_regression": threshold, "differences": differences}
        click.echo(json.dumps({**verdict, "rows": rows}, indent=2))
    else:
        console = Console(highlight=False)
        for w in warnings:
            console.print(f"[yellow]warning: {w}[/]")
        console.print(table(rows, run_id, base_id, threshold))
    if regressed:
        what = ", ".join(grew(r) for r in regressed)
        unlike = f" (the runs differ: {check.differ_text(differences)})" if differences else ""
        raise errors.Regression(
            f"{run_id} regressed against {base_id}{unlike} beyond the baseline's spread and "
            f"{threshold * 100:g}%: {what}."
        )


def grew(row: dict) -> str:
    """client ns/B +12.5%, or from nothing: server send syscalls ns/B from 0 to 0.075."""
    return f"{row['figure']} {change_text(row)}"


def change_text(row: dict) -> str:
    """+12.5%; from a baseline of nothing, where it went (from 0 to 0.075); none: unchanged 0."""
    if row["change"] is not None:
        return f"{row['change'] * 100:+.1f}%"
    return f"from 0 to {row['median']:.3f}" if row["median"] != row["baseline_median"] else ABSENT


def table(rows: List[dict], run_id: str, base_id: str, threshold: float) -> Table:
    t = Table(title=f"{run_id} against {base_id} (regressed: worse by > {threshold * 100:g}% and beyond the range)")
    for col in ("FIGURE", "MEDIAN", "BASELINE (min-max)", "CHANGE", "REGRESSED"):
        t.add_column(col, justify="left" if col == "FIGURE" else "right")
    for r in rows:
        t.add_row(
            r["figure"],
            f"{r['median']:.3f}",
            f"{r['baseline_median']:.3f} ({r['baseline_min']:.3f}-{r['baseline_max']:.3f})",
            change_text(r),
            "[red]yes[/]" if r["regressed"] else "no",
        )
    return t
