# SPDX-License-Identifier: GPL-2.0-only
"""`qprof clean`: remove what qprof processes that died (kill -9, a
machine stop) left behind, and say what was removed."""

import os

import click

from qprof import errors, remains


@click.command()
@click.option("--dry-run", "-n", is_flag=True, help="Say what would be removed, remove nothing.")
def clean(dry_run):
    """Remove a dead qprof's namespaces, processes and temporary paths.

    Every qprof that measures keeps a ledger of what it made
    (QPROF_STATE_DIR, default /run/qprof); a ledger whose process is dead
    is a crashed run's remains. Its processes are killed, its namespaces
    and paths removed, and its runs marked "abandoned". `qprof run` and
    `qprof compare` do this by themselves before they measure; a running
    qprof's ledger is never touched.

    \b
    EXAMPLES:
      qprof clean            # remove, and list what was removed
      qprof clean -n         # only list
    """
    if os.geteuid() != 0:
        raise errors.NotRoot("qprof clean needs root (it kills processes and deletes namespaces); run it as root.")
    if dry_run:
        items = [f"{i} (qprof pid {d.get('pid')})" for d in remains.dead_ledgers() for i in remains.describe(d)]
    else:
        items = remains.reclaim()
    if not items:
        click.echo("nothing to clean: no qprof that died left anything.")
        return
    verb = "would remove" if dry_run else "removed"
    for item in items:
        click.echo(f"{verb} {item}")
