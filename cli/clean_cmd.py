# SPDX-License-Identifier: GPL-2.0-only
"""`qprof clean`: remove what qprof processes that died (kill -9, a
machine stop) left behind, and say what was removed."""

import os

import click

from qprof import errors, remains
from qprof.cli.run_options import click_option
from qprof.collectors import resident, ssh
from qprof.describe import plan

CLEAN_TIMEOUT_S = 120.0


@click.command()
@click.option("--dry-run", "-n", is_flag=True, help="Say what would be removed, remove nothing.")
@click.option(
    "--host",
    default=None,
    metavar="HOST",
    help="Clean another host instead, over SSH as `qprof run --server` reaches it: `qprof clean` runs there.",
)
@click_option("ssh-config")
def clean(dry_run, host, ssh_config):
    """Remove a dead qprof's namespaces, processes and temporary paths.

    Every qprof that measures keeps a ledger of what it made
    (QPROF_STATE_DIR, default /run/qprof); a ledger whose process is dead
    is a crashed run's remains. Its processes are killed, its namespaces
    and paths removed, and its runs marked "abandoned". `qprof run` and
    `qprof compare` do this by themselves before they measure; a running
    qprof's ledger is never touched. A started guest (`qprof guest
    start`) whose QEMU died has its state removed; a live one is yours
    until `qprof guest stop`, and is left as it is (a job a killed qprof
    left in it is cancelled there, as its ledger's path goes).

    \b
    On another host (--host) the same is done there: what a qprof that
    died there left (an agent killed with -9 leaves its directory, with
    a run's key in it). A run's agent also does it when it starts there.

    \b
    EXAMPLES:
      qprof clean            # remove, and list what was removed
      qprof clean -n         # only list
      qprof clean --host root@10.0.0.2
    """
    plan.not_empty("--host", host)
    plan.not_empty("--ssh-config", ssh_config)
    if host is not None:
        return _clean_there(host, ssh_config, dry_run)
    if os.geteuid() != 0:
        raise errors.NotRoot("qprof clean needs root (it kills processes and deletes namespaces); run it as root.")
    if dry_run:
        items = [f"{i} (qprof pid {d.get('pid')})" for d in remains.dead_ledgers() for i in remains.describe(d)]
    else:
        items = remains.reclaim()
    items += resident.reclaim(dry_run)
    if not items:
        click.echo("nothing to clean: no qprof that died left anything.")
        return
    verb = "would remove" if dry_run else "removed"
    for item in items:
        click.echo(f"{verb} {item}")


def _clean_there(host: str, ssh_config, dry_run: bool) -> None:
    """`qprof clean` on HOST, its lines prefixed with where; its failure as its own."""
    with ssh.SshHost(host, ssh_config=ssh_config) as h:
        r = h.run(h.qprof_argv("clean", *(["-n"] if dry_run else [])), CLEAN_TIMEOUT_S)
    if r.returncode != 0:
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        sentence = lines[-1].removeprefix("qprof: ") if lines else f"qprof clean exited {r.returncode} there"
        raise errors.by_exit_code(r.returncode, f"on {host}: {sentence}")
    for line in r.stdout.splitlines():
        click.echo(f"{host}: {line}")
