"""`qprof run`: one measured bulk transfer."""
import json

import click

from qprof import report
from qprof.collectors import runner
from qprof.run_options import to_run_options, transfer_options


@click.command()
@click.option("--stack", "-s", default=runner.RunOptions().stack, show_default=True,
              help=f"Transport stack: {', '.join(runner.STACKS)}.")
@transfer_options
@click.option("--json", "as_json", is_flag=True, help="Print the run record on stdout instead of the table.")
@click.option("--inject-fault", "fault", type=click.Choice(runner.FAULTS), default=None, hidden=True)
def run(stack, as_json, fault, **kwargs):
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
    """
    opts = to_run_options(stack, kwargs)
    opts.fault = fault
    record = runner.run(opts)
    if as_json:
        click.echo(json.dumps(record, indent=2))
    else:
        report.print_run(record)
