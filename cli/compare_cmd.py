# SPDX-License-Identifier: GPL-2.0-only
"""`qprof compare`: configurations side by side, interleaved and repeated."""

import json
import sys

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

from qprof.cli.run_options import to_run_options, transfer_options, whole_number
from qprof.collectors import compare
from qprof.describe import options
from qprof.errors import BadValue
from qprof.present import tables as report
from qprof.present.format import compact


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
    type=whole_number("repeat", 1, 100),
    default=3,
    show_default=True,
    help="Runs per configuration, interleaved A B A B ....",
)
@transfer_options
@click.option("--json", "as_json", is_flag=True, help="Print the comparison record on stdout instead of the table.")
@click.option(
    "--detail", is_flag=True, help="Every figure and category, as `qprof show ID --all`, not the ratios alone."
)
@click.pass_context
def compare_cmd(ctx, stack, stack_list, vary_items, repeat, as_json, detail, **kwargs):
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
    compare.check_machine(configs)  # every configuration, before the first run
    copts = compare.CompareOptions(configs=configs, repeat=repeat, runs_dir=base.runs_dir, vary=vary)
    record = _run_with_progress(copts)
    if as_json:
        click.echo(json.dumps(record, indent=2))
    elif detail:
        report.print_comparison(record)
    else:
        report.print_comparison_summary(record)


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
                f"{copts.configs[entry['config']].label}: {compact(rec['throughput_gbps'], 'Gbit/s')} Gbit/s, "
                f"system {compact(rec['cpu']['system']['ns_per_byte']['total'], 'ns/B')} ns/B (run {rec['id']})"
            )
            for w in report.record_warnings(rec):
                progress.console.print(f"[yellow]warning: run {rec['id']}: {w}[/]")
            progress.advance(task)

        return compare.run(copts, on_run, on_done)
