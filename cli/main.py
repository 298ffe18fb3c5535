"""The `qprof` command: a click group whose subcommands live one a module.

Logs and errors go to stderr, data to stdout. Every failure is a
QprofError: one sentence on stderr and its own exit code.
"""
import signal
import sys

import click

from qprof import __version__
from qprof.collectors.errors import Interrupted, QprofError


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
    """


def _register():
    from qprof import compare_cmd, doctor_cmd, flame_cmd, run_cmd

    cli.add_command(run_cmd.run)
    cli.add_command(doctor_cmd.doctor)
    cli.add_command(flame_cmd.flame)
    cli.add_command(compare_cmd.compare_cmd, name="compare")


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    _register()
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        rv = cli.main(args=argv, prog_name="qprof", standalone_mode=False)
    except QprofError as e:
        click.echo(f"qprof: {e.sentence}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo(f"qprof: {Interrupted.default_sentence}", err=True)
        sys.exit(Interrupted.exit_code)
    except KeyboardInterrupt:
        click.echo(f"qprof: {Interrupted.default_sentence}", err=True)
        sys.exit(Interrupted.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
