# SPDX-License-Identifier: GPL-2.0-only
"""`qprof export`: a run's stack samples and figures for other tools
(pprof, folded, perf-script, openmetrics); the work is flamegraphs/export.py."""

from pathlib import Path

import click

from qprof.cli.run_options import runs_dir_option
from qprof.flamegraphs import export, sides


@click.command("export")
@click.argument("run_id", required=False)
@click.option(
    "--format",
    "fmt",
    required=True,
    metavar="FORMAT",
    help=f"What to write: {', '.join(export.FORMATS)}.",
)
@click.option(
    "--side",
    type=click.Choice(sides.SIDES + ("all",)),
    default="all",
    show_default=True,
    help="Which side's samples (pprof, folded, openmetrics): the client or server process, every other task "
    "but idle (others), or all three.",
)
@click.option(
    "-o",
    "--output",
    default=None,
    metavar="FILE",
    help="Where to write ('-' for stdout). Default: stdout, and for pprof RUNS_DIR/<id>/profile.pb.gz "
    "(profile-<side>.pb.gz for one side).",
)
@runs_dir_option
def export_cmd(run_id, fmt, side, output, runs_dir):
    """Export a run's stack samples or figures for other tools.

    \b
    pprof        gzipped profile.proto: sample types samples/count,
                 cpu/nanoseconds (samples x period) and cpu_per_byte/fs/B
                 (cpu_per_request/ps/request for --pattern rr runs), labels
                 side, stack and run on every sample
    folded       the folded stacks, sample counts (qprof flame --folded)
    perf-script  `perf script` of the run's perf.data, which the Firefox
                 Profiler and speedscope open; only a run made with
                 --keep-perf-data has it (exit 34 otherwise)
    openmetrics  throughput, window, CPU per byte measured and in the
                 graph per side and category, samples: for Prometheus

    When a file is written, its path is printed on stdout.

    \b
    EXAMPLES:
      qprof export --format pprof                    # latest run -> runs/<id>/profile.pb.gz
      go tool pprof -top runs/latest/profile.pb.gz   # CPU per byte by function
      go tool pprof -http=: -tagfocus side=server runs/latest/profile.pb.gz
      qprof export RUN_ID --format openmetrics -o run.prom
      qprof export RUN_ID --format perf-script > run.perf   # for the Firefox Profiler or speedscope
      qprof export --format folded --side client | grep Quic
    """
    opts = export.ExportOptions(
        run_id=run_id or "latest",
        fmt=export.check_format(fmt),
        sides=sides.SIDES if side == "all" else (side,),
        output=output,
        runs_dir=Path(runs_dir),
    )
    done = export.export(opts)
    if done.path is not None:
        click.echo(f"{opts.fmt}: {done.what} -> {done.path}")
