# SPDX-License-Identifier: GPL-2.0-only
"""`qprof run`: one measured bulk transfer."""

import json
import sys
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from qprof import errors
from qprof.cli.progress import stage_line
from qprof.cli.run_options import click_option, to_run_options, transfer_options
from qprof.collectors import runner
from qprof.collectors.faults import FAULTS, Faults
from qprof.describe import options
from qprof.present import summary
from qprof.present import tables as report


@click.command()
@click.option(
    "--stack",
    "-s",
    default=options.BY_NAME["stack"].default,
    show_default=True,
    help=f"Transport stack: {', '.join(options.STACK_NAMES)}.",
)
@transfer_options
@click_option("mix")
@click.option("--json", "as_json", is_flag=True, help="Print the run record on stdout instead of the summary.")
@click.option(
    "--detail",
    is_flag=True,
    help="Print every table and each interval's line, as `qprof show RUN --all` does, instead of the summary.",
)
@click.option("--inject-fault", "fault", type=click.Choice(FAULTS), default=None, hidden=True)
@click.option("--options-file", type=click.Path(exists=True, dir_okay=False), default=None, hidden=True)
@click.pass_context
def run(ctx, stack, as_json, detail, fault, options_file, **kwargs):
    """Drive a real bulk transfer and measure its CPU per byte.

    The client sends as fast as the stack allows from one network
    namespace to a server in another; the window starts after the
    handshake and a warm-up. The record goes to RUNS_DIR/<id>/run.json.

    \b
    EXAMPLES:
      qprof run --stack quic                       # 10 s upload, netns -> netns
      qprof run --stack quic -d 5s -n 4 --json     # 4 streams, record on stdout
      qprof run --topology loopback --bytes 1G     # fixed size, host loopback
      qprof run --stack tcp-tls --tls 1.2          # TLS in OpenSSL user space
      qprof run --stack tcp-ktls --guest           # kernel TLS, in a QEMU guest
      qprof run --stack quic --gso off             # msquic without GSO (and so GRO)
      qprof run --stack udp --send-mode sendmmsg --gro off   # raw UDP, the kernel's floor
      qprof run --mix quic:1,tcp:2 --link rate=10mbit -d 30s  # flows sharing a bottleneck
      qprof run --mix tcp:2,quic:1:rr --period 10ms --link rate=10mbit  # a bulk transfer's cost to latency
    """
    # --options-file: the guest's hand-over, every option as JSON (describe/options.py).
    opts = options.from_json(Path(options_file).read_text()) if options_file else to_run_options(stack, kwargs)
    if opts.mix:
        if ctx.get_parameter_source("stack") is not click.core.ParameterSource.DEFAULT:
            raise errors.BadMix("--mix names each flow's stack itself; drop --stack.")
        if fault:
            raise errors.BadMix("faults are injected into single runs; drop --mix or --inject-fault.")
    with (
        guest_progress(opts.guest and sys.stderr.isatty()) as on_guest,
        live(as_json or opts.mix or opts.guest, detail) as shown,
    ):
        on_progress, on_interval = shown
        record = runner.run(
            opts, on_progress=on_progress, faults=Faults(fault), on_interval=on_interval, on_guest=on_guest
        )
    if as_json:
        report.warn_record(record)
        click.echo(json.dumps(record, indent=2))
    elif record["stack"] == "mix":
        report.warn_record(record)
        (report.print_mix if detail else report.print_mix_summary)(record)
    elif detail:
        report.warn_record(record)
        report.print_run(record)
    else:
        summary.print_summary(record)  # its warnings among its lines


@contextmanager
def live(quiet: bool, detail: bool):
    """(on_progress, on_interval) for a run: with --detail, or with
    stdout piped, each stage on stderr (a terminal's) and each interval a
    line on stdout, as iperf3 -i; on a terminal, one line that says the
    stage or the latest interval and is gone when the run ends, so the
    summary is what stays. --json and a mix print no interval."""
    if detail or quiet or not (sys.stdout.isatty() and sys.stderr.isatty()):
        yield runner.log, (None if quiet else report.print_interval)
        return
    with stage_line(True, runner.log) as say:
        yield say, lambda i: say(report.interval_text(i))


class _Left(ProgressColumn):
    """About how long is left, from the expected length and the elapsed time."""

    def render(self, task) -> Text:
        if task.total is None or task.elapsed is None:
            return Text("")
        left = task.total - task.elapsed
        return Text(f"about {left:.0f} s left" if left > 0 else "any moment", style="cyan")


@contextmanager
def guest_progress(show: bool):
    """A bar for a guest run on a terminal: its stage, the time so far and
    about how long is left (placement.guest_expected_s); None otherwise."""
    if not show:
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), _Left())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("guest: starting", total=None)

        def on_guest(stage: str, elapsed_s: float, expected_s) -> None:
            progress.update(task, description=f"guest: {stage}", total=expected_s, completed=elapsed_s)

        yield on_guest
