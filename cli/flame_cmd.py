# SPDX-License-Identifier: GPL-2.0-only
"""`qprof flame`: a run's stack samples as flame graphs in CPU time per
byte, or per request for a request/response run."""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import click

from qprof.cli.run_options import runs_dir_option
from qprof.errors import BadValue
from qprof.flamegraphs import categories, diff, draw, export, normalize, sides
from qprof.present import tables
from qprof.present.html import open_in_browser


@dataclass
class FlameOptions:
    run_id: str = "latest"
    sides: Tuple[str, ...] = sides.SIDES
    open_svg: bool = False
    print_folded: bool = False
    diff: Optional[Tuple[str, str]] = None
    runs_dir: Path = Path("runs")


@click.command()
@click.argument("run_id", required=False)
@click.option(
    "--side",
    type=click.Choice(sides.SIDES + ("all",)),
    default="all",
    show_default=True,
    help="Which side's samples: the client or server process, every other task but idle (others), or all three.",
)
@click.option("--open", "open_svg", is_flag=True, help="Open the graphs with xdg-open (else say where they are).")
@click.option(
    "--folded",
    "print_folded",
    is_flag=True,
    help="Print the folded stacks (sample counts) on stdout instead of drawing; with --side all "
    "each stack gets its side as an extra root frame.",
)
@click.option(
    "--diff",
    nargs=2,
    metavar="RUN_A RUN_B",
    default=None,
    help="Draw B against A per byte (per request for two rr runs): RUNS_DIR/<B>/flame-diff-<A>-<side>.svg, "
    "red where B costs more.",
)
@runs_dir_option
def flame(run_id, side, open_svg, print_folded, diff, runs_dir):
    """Flame graphs of a run, in CPU time per byte (per request for rr runs).

    `qprof run` samples stacks (perf, cpu-clock) over exactly its window;
    each sample is one period of CPU time, so a side's graph totals
    samples x period / bytes, in ns per byte like the collectors' figures.
    Per side, qprof writes RUNS_DIR/<id>/flame-<side>.svg (frames in ps/B)
    and prints the graph's ns/B, the collectors' measured ns/B, the gap
    between them, the stack quality (share of samples whose stack reaches
    a thread or kernel entry) and ns/B per category of work (rules in
    flamegraphs/categories.rules). The `others` side is every other task
    but idle; its measured figure is the record's cpu.others.

    A request/response run (`qprof run --pattern rr`) is drawn per request
    instead: samples x period / requests answered in the window, printed
    in us/request (frames in ns/request), measured against the record's
    rr.per_request.cpu_s (schedstat). --diff takes two rr runs or two of
    the others, never one of each: per byte and per request are different
    units. --folded prints sample counts either way.

    \b
    EXAMPLES:
      qprof flame                              # latest run, all sides -> runs/<id>/flame-*.svg
      qprof flame 20261122-053241-ca63f1 --side client --open
      qprof flame --side server --folded | grep Quic
      qprof flame --diff RUN_A RUN_B           # runs/<B>/flame-diff-<A>-<side>.svg: red = B costs more per byte
      qprof flame RR_RUN --side server         # a --pattern rr run: us/request, against rr.per_request.cpu_s
    """
    if diff and run_id:
        raise BadValue("give either RUN_ID or --diff RUN_A RUN_B, not both; --diff names both runs itself.")
    if diff and print_folded:
        raise BadValue("--folded prints one run's stacks and --diff draws two runs; use one of them.")
    opts = FlameOptions(
        run_id=run_id or "latest",
        sides=sides.SIDES if side == "all" else (side,),
        open_svg=open_svg,
        print_folded=print_folded,
        diff=tuple(diff) if diff else None,
        runs_dir=Path(runs_dir),
    )
    if opts.print_folded:
        print_stacks(opts)
        return
    svgs = draw_diff(opts) if opts.diff else draw_run(opts)
    if opts.open_svg:
        open_in_browser(svgs, click.echo)


def print_stacks(opts: FlameOptions) -> None:
    run = sides.load_run(opts.runs_dir, opts.run_id)
    loaded = {side: sides.load_side(run, side).stacks for side in opts.sides}  # all checked before any output
    sys.stdout.write(export.folded_text(loaded))


def draw_run(opts: FlameOptions) -> List[Path]:
    run = sides.load_run(opts.runs_dir, opts.run_id)
    classifier = categories.for_run(run.path)
    incomplete = sides.incomplete_reason(run)
    loaded = {side: sides.load_side(run, side).stacks for side in opts.sides}  # all checked before drawing
    figs, svgs = {}, []
    unit = run.unit
    for side, stacks in loaded.items():
        divisor = run.divisor(side)
        fig = figs[side] = normalize.figures(stacks, run.period_ns, divisor, classifier, unit)
        measured = run.measured_ns_per_unit(side)
        gap = normalize.gap_percent(fig.ns_per_unit, measured, normalize.base_samples(measured, divisor, run.period_ns))
        svg = run.path / f"flame-{side}.svg"
        scaled = normalize.scaled(stacks, run.period_ns, divisor, unit)
        if scaled:
            draw.render(
                scaled,
                svg,
                draw.side_title(run.record, side, fig),
                draw.side_subtitle(run.id, fig, measured, gap, incomplete),
                unit,
            )
            svgs.append(svg)
        click.echo(tables.flame_side_line(side, fig, measured, gap, svg if scaled else None))
    tables.print_flame_categories(figs, unit, incomplete)
    return svgs


def draw_diff(opts: FlameOptions) -> List[Path]:
    run_a = sides.load_run(opts.runs_dir, opts.diff[0])
    run_b = sides.load_run(opts.runs_dir, opts.diff[1])
    svgs = []
    for d in diff.render(run_a, run_b, opts.sides, lambda side: run_b.path / f"flame-diff-{run_a.id}-{side}.svg"):
        click.echo(tables.flame_diff_line(d, run_b.id))
        if d.svg is not None:
            svgs.append(d.svg)
    return svgs
