# SPDX-License-Identifier: GPL-2.0-only
"""The `qprof` command: a click group whose subcommands live one a module.

Logs and errors go to stderr, data to stdout. Every failure is a
QprofError: one sentence on stderr and its own exit code.
"""

import os
import signal
import sys


def _early_interrupt(signum, frame):
    # Before main() takes the signals over nothing has been made: say so, no traceback.
    sys.stderr.write("qprof: interrupted while starting; nothing was made.\n")
    os._exit(130)


for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(_sig) is not signal.SIG_IGN:
        signal.signal(_sig, _early_interrupt)

import click  # noqa: E402  (after the handlers: importing takes most of start-up)

from qprof import __version__, interrupts, remains  # noqa: E402
from qprof.errors import Interrupted, QprofError  # noqa: E402


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="qprof")
def cli():
    """Where the CPU goes when bulk data moves over QUIC and TCP with kernel TLS.

    \b
    EXAMPLES:
      qprof doctor                      what this kernel and machine allow
      qprof run --stack quic            10 s msquic upload between two netns
      qprof run --stack quic -d 5s -n 4 --json
      qprof run --stack tcp-ktls --guest          kernel TLS, in a QEMU guest
      qprof flame                       flame graphs of the latest run, ns/B
      qprof flame --diff RUN_A RUN_B    what costs more per byte in B
      qprof compare --stack quic --vary gso=on,off --repeat 5
      qprof compare --stacks quic,tcp-tls,tcp
      qprof run --mix quic:1,tcp:2 --link rate=10mbit   flows sharing a bottleneck
      qprof ls --stack quic --since 7d  the run history
      qprof show RUN_ID                 a run's tables again, from its record
      qprof check RUN --baseline BASE   exit 40 if CPU per byte regressed
      qprof export RUN --format pprof   also folded, perf-script, openmetrics
      qprof report RUN --open           a self-contained HTML report
      qprof clean                       remove what a killed run left behind
      qprof remote check root@HOST      can a run use that host over SSH?
    """


def _register():
    from qprof.cli import (
        agent_cmd,
        check_cmd,
        clean_cmd,
        compare_cmd,
        doctor_cmd,
        export_cmd,
        flame_cmd,
        ls_cmd,
        remote_cmd,
        report_cmd,
        run_cmd,
        show_cmd,
    )

    cli.add_command(run_cmd.run)
    cli.add_command(doctor_cmd.doctor)
    cli.add_command(flame_cmd.flame)
    cli.add_command(compare_cmd.compare_cmd, name="compare")
    cli.add_command(ls_cmd.ls)
    cli.add_command(show_cmd.show)
    cli.add_command(report_cmd.report_cmd, name="report")
    cli.add_command(check_cmd.check_cmd)
    cli.add_command(export_cmd.export_cmd)
    cli.add_command(clean_cmd.clean)
    cli.add_command(agent_cmd.agent_cmd, name="agent")
    cli.add_command(remote_cmd.remote)


def _interrupted_sentence() -> str:
    """True to what is left: the ledger is empty when every owner removed
    what it made."""
    left = remains.ledger().held()
    if not left:
        return Interrupted.default_sentence
    what = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in left.items())
    return f"interrupted; these could not be removed ({what}): `qprof clean` removes them."


def main(argv=None):
    _register()
    interrupts.install()
    try:
        rv = cli.main(args=argv, prog_name="qprof", standalone_mode=False)
    except QprofError as e:
        click.echo(f"qprof: {e.sentence}", err=True)
        sys.exit(e.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo(f"qprof: {_interrupted_sentence()}", err=True)
        sys.exit(Interrupted.exit_code)
    except click.UsageError as e:
        # One sentence, as every other failure (exit 2).
        cmd = e.ctx.command_path if e.ctx is not None else "qprof"
        msg = " ".join(e.format_message().split()).rstrip(".")
        click.echo(f"qprof: {msg}; see `{cmd} --help`.", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
