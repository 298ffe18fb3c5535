# SPDX-License-Identifier: GPL-2.0-only
"""The `qprof` command: a click group whose subcommands live one a module.

Logs and errors go to stderr, data to stdout. Every failure is a
QprofError: one sentence on stderr and its own exit code.
"""

import importlib
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

# name -> (module under qprof.cli, its click command): each imported only
# when its command runs (`qprof --help` imports them all), so a command
# does not pay for the others' imports: a tenth of a second here, and
# seconds inside the TCG guest, on every start.
COMMANDS = {
    "run": ("run_cmd", "run"),
    "doctor": ("doctor_cmd", "doctor"),
    "flame": ("flame_cmd", "flame"),
    "compare": ("compare_cmd", "compare_cmd"),
    "ls": ("ls_cmd", "ls"),
    "show": ("show_cmd", "show"),
    "report": ("report_cmd", "report_cmd"),
    "check": ("check_cmd", "check_cmd"),
    "export": ("export_cmd", "export_cmd"),
    "clean": ("clean_cmd", "clean"),
    "agent": ("agent_cmd", "agent_cmd"),
    "remote": ("remote_cmd", "remote"),
    "guest": ("guest_cmd", "guest"),
}


class LazyGroup(click.Group):
    """click's lazily loading group (click's docs, "Lazily Loading Subcommands")."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name]
        return getattr(importlib.import_module(f"qprof.cli.{module}"), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="qprof")
def cli():
    """Where the CPU goes when bulk data moves over QUIC and TCP with kernel TLS.

    \b
    EXAMPLES:
      qprof doctor                      what this kernel and machine allow
      qprof run --stack quic            10 s msquic upload between two netns
      qprof run --stack quic -d 5s -n 4 --json
      qprof run --stack tcp-ktls --guest          kernel TLS, in a QEMU guest
      qprof guest start                 keep a guest running: --guest runs skip the boot
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


def _interrupted_sentence() -> str:
    """True to what is left: the ledger is empty when every owner removed
    what it made."""
    left = remains.ledger().held()
    if not left:
        return Interrupted.default_sentence
    what = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in left.items())
    return f"interrupted; these could not be removed ({what}): `qprof clean` removes them."


def main(argv=None):
    # The command's module is imported here, under _early_interrupt: an
    # interrupt while it loads has made nothing, and says so (an import cut
    # by KeyboardInterrupt once took the interpreter down with SIGINT).
    args = sys.argv[1:] if argv is None else list(argv)
    name = next((a for a in args if not a.startswith("-")), None)
    if name in COMMANDS:
        importlib.import_module(f"qprof.cli.{COMMANDS[name][0]}")
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
