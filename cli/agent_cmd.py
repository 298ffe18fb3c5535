# SPDX-License-Identifier: GPL-2.0-only
"""`qprof agent`: this host's side of a run placed on another host, run
over SSH by the measuring qprof (collectors/agent.py); not for people."""

import sys

import click

from qprof.collectors import agent


@click.command(hidden=True)
def agent_cmd():
    """Answer a measuring qprof's requests on stdin, in JSON lines."""
    sys.exit(agent.serve())
