# SPDX-License-Identifier: GPL-2.0-only
"""`qprof compare`: configurations side by side, interleaved and repeated."""

import json
import sys
from pathlib import Path

import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from qprof.cli import report
from qprof.cli.run_options import to_run_options, transfer_options
from qprof.collectors import compare, options, runner
from qprof.errors import BadValue

ABSENT = "—"


@click.command()
@click.option(
    "--stack",
    "-s",
    default=None,
    help=f"The stack whose configurations vary [default: quic]; one of {', '.join(options.STACK_NAMES)}.",
)
@click.option(
    "--stacks",
    "stack_list",
    default=None,
    metavar="S1,S2,...",
    help="Compare stacks side by side (each with the same --vary, if any).",
)
@click.option(
    "--vary",
    "vary_items",
    multiple=True,
    metavar="KEY=V1,V2",
    help=f"A setting to vary; repeat for a product. Keys: {', '.join(compare.VARY_KEYS)}.",
)
@click.option(
    "--repeat",
    "-r",
    type=click.IntRange(1, 100),
    default=3,
    show_default=True,
    help="Runs per configuration, interleaved A B A B ....",
)
@transfer_options
@click.option("--json", "as_json", is_flag=True, help="Print the comparison record on stdout instead of the table.")
@click.pass_context
def compare_cmd(ctx, stack, stack_list, vary_items, repeat, as_json, **kwargs):
    """Run configurations interleaved and repeated, and show them side by side.

    Each configuration runs --repeat times in the order A B C A B C ...,
    so the machine's drift falls on all alike. The table gives each one's
    median and spread (min-max) for throughput, CPU ns/B per side,
    syscalls per MB, bytes and packets per call and ns/B per flame
    category; a ratio against the first configuration, marked * where the
    two ranges do not overlap (the difference is beyond the run-to-run
    spread). The record goes to RUNS_DIR/comparisons/<id>/comparison.json
    with the differential flame graphs (per byte, B against A) between
    the first two configurations' median runs.

    \b
    EXAMPLES:
      qprof compare --stack quic --vary gso=on,off --repeat 5
      qprof compare --stack udp --vary gso=on,off
      qprof compare --stack udp --vary send-mode=sendmsg,sendmmsg,gso --vary gro=on,off
      qprof compare --stacks quic,tcp-tls,tcp --repeat 3 -d 5s
    """
    if stack and stack_list:
        raise BadValue("give --stack (one stack, with --vary) or --stacks (several), not both.")
    stack_names = compare.parse_stacks(stack_list) if stack_list else [stack or "quic"]
    vary = compare.parse_vary(list(vary_items))
    fixed = [
        key
        for key in compare.VARY_KEYS
        if key in options.BY_NAME
        and ctx.get_parameter_source(options.BY_NAME[key].field) == ParameterSource.COMMANDLINE
    ]
    base = to_run_options(stack_names[0], kwargs)
    configs = compare.build_matrix(base, stack_names, vary, fixed)
    runner.preflight(configs[0].opts)  # root and the build, before the first run
    copts = compare.CompareOptions(configs=configs, repeat=repeat, runs_dir=base.runs_dir, vary=vary)
    record = _run_with_progress(copts)
    if as_json:
        click.echo(json.dumps(record, indent=2))
    else:
        print_comparison(record)


def _run_with_progress(copts: compare.CompareOptions) -> dict:
    err = Console(stderr=True)
    if not sys.stderr.isatty():
        return compare.run(
            copts, on_run=lambda i, n, cfg: None, on_done=lambda entry: report.warn_record(entry["record"])
        )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("comparing", total=copts.repeat * len(copts.configs))

        def on_run(i, n, cfg):
            rep = (i - 1) // len(copts.configs) + 1
            progress.update(task, description=f"repetition {rep}/{copts.repeat}, run {i}/{n}: {cfg.label}")

        def on_done(entry):
            rec = entry["record"]
            progress.console.print(
                f"{copts.configs[entry['config']].label}: {_fmt(rec['throughput_gbps'], 'Gbit/s')} Gbit/s, "
                f"system {_fmt(rec['cpu']['system']['ns_per_byte']['total'], 'ns/B')} ns/B (run {rec['id']})"
            )
            for w in report.record_warnings(rec):
                progress.console.print(f"[yellow]warning: run {rec['id']}: {w}[/]")
            progress.advance(task)

        return compare.run(copts, on_run, on_done)


def _fmt(v, unit: str) -> str:
    if v is None:
        return ABSENT
    if unit == "share":
        return f"{v * 100:.2f}%"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3f}"


def cell(row: dict, unit: str, first: bool) -> str:
    """median ±half the range (as a share of the median), ×ratio to the
    first configuration, * where the ranges do not overlap."""
    if not row["n"]:
        return ABSENT
    text = _fmt(row["median"], unit)
    if row["n"] > 1 and row["median"]:
        text += f" ±{(row['max'] - row['min']) / 2 / abs(row['median']) * 100:.0f}%"
    if not first and row.get("ratio") is not None:
        text += f" ×{row['ratio']:.2f}" + ("*" if row.get("beyond_spread") else "")
    return text


# Category rows whose medians all stay under this are left out of the table (not the record).
CATEGORY_FLOOR_NS_PER_BYTE = 0.005


def print_comparison(rec: dict, console: Console = None) -> None:
    console = console or Console()
    labels = [c["label"] for c in rec["configs"]]
    console.print(
        f"[bold]{len(labels)} configurations × {rec['repeat']} runs, interleaved[/]: "
        "median ±half its range, ×ratio of medians to the first, * where the ranges do not overlap"
    )
    units = rec["metric_units"]
    main = Table(title="figures", title_justify="left")
    cats = Table(title="CPU ns/B by flame category", title_justify="left")
    for t in (main, cats):
        t.add_column("FIGURE", no_wrap=True)
        for label in labels:
            t.add_column(label, justify="right")
    for key, rows in rec["metrics"].items():
        u = units[key]
        name = u["label"] + (f" ({u['unit']})" if u["unit"] and u["unit"] != "share" else "")
        target = cats if ": " in u["label"] else main
        if target is cats and all((r["median"] or 0) < CATEGORY_FLOOR_NS_PER_BYTE for r in rows):
            continue
        target.add_row(name, *(cell(r, u["unit"], i == 0) for i, r in enumerate(rows)))
    console.print(main)
    if cats.row_count:
        console.print(cats)
    skipped = rec.get("incomplete_captures") or []
    if skipped:
        console.print(
            f"[yellow]categories leave out {len(skipped)} of {len(rec['runs'])} runs whose capture "
            f"missed samples on some CPU (flame.complete false): {', '.join(skipped)}[/]"
        )
    fd = rec.get("flame_diff") or {}
    cdir = Path(rec.get("path", ""))
    if fd.get("sides"):
        for side, d in fd["sides"].items():
            where = d["svg"] or "nothing drawn (no samples)"
            # Two rr runs are diffed per request (ns, shown in us), others per byte.
            a, b, unit = (
                (d["a_ns_per_request"] / 1e3, d["b_ns_per_request"] / 1e3, "us/request")
                if "a_ns_per_request" in d
                else (d["a_ns_per_byte"], d["b_ns_per_byte"], "ns/B")
            )
            console.print(
                f"flame diff {side}: {labels[0]} (run {fd['a']}) {a:.3f} {unit} -> "
                f"{labels[1]} (run {fd['b']}) {b:.3f} {unit}: {cdir / where if d['svg'] else where}"
            )
    elif fd:
        console.print(f"flame diff: none ({fd.get('absent')})")
    console.print(f"comparison {rec['id']}: {len(rec['runs'])} runs, record {cdir / compare.COMPARISON_RECORD}")
