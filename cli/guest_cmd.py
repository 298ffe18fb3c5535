# SPDX-License-Identifier: GPL-2.0-only
"""`qprof guest`: a started guest (collectors/resident.py), kept running
so that every `--guest` run after it is served without a boot."""

import json
import os
import sys
import time
from pathlib import Path

import click

from qprof import errors, remains
from qprof.cli.progress import stage_line
from qprof.collectors import guest as guest_vm
from qprof.collectors import resident


@click.group()
def guest():
    """A QEMU guest kept running, serving every `--guest` run.

    `qprof run --guest` and `qprof compare --guest` boot a guest for
    themselves (a comparison's runs share its boot) unless one was started
    here that runs the same guest kernel and the same qprof (its files and
    build as they were when it started); then their runs go to it as jobs,
    and neither the boot nor qprof's start in the emulator is paid per
    run. Between runs it is paused: it takes no CPU from what this machine
    measures meanwhile. The record says which guest served a run
    (environment.guest: id, started, booted_at, runs_before).

    \b
    EXAMPLES:
      qprof guest start                 boot it and keep it (its id, its kernel)
      qprof run --stack tcp-ktls --guest          served by it
      qprof compare --stack tcp-ktls --vary tls=1.3,1.2 --guest
      qprof guest status                what runs, runs served, paused or not
      qprof guest stop                  power it off, its state removed
    """


def _root(what: str) -> None:
    if os.geteuid() != 0:
        raise errors.NotRoot(
            f"qprof guest {what} needs root (QEMU, and its state in {remains.state_dir()}); run it as root."
        )


@guest.command("start")
def start():
    """Boot a guest and keep it running for the runs that follow.

    It takes the machine while it boots (one measurement at a time), then
    waits, paused, for runs. It is yours until `qprof guest stop`: `qprof
    clean` removes it only once its QEMU has died. A run it cannot finish
    by its deadline, or whose cancel it does not answer, kills it (exit 19).

    \b
    EXAMPLES:
      qprof guest start && qprof run --stack tcp-ktls --guest
    """
    _root("start")
    art = guest_vm.artifacts()  # `make guest` not done: refused, nothing made
    # Its boot takes a minute or more (TCG): a terminal sees each stage as it comes.
    with remains.exclusive("guest start"), stage_line(sys.stderr.isatty(), lambda msg: None) as say:
        g = resident.start(art, lambda stage, s: say(f"guest: {stage}"))
    click.echo(
        f"started guest {g.id} ({art.kernel_release}, TCG) in {g.boot_s:.0f} s, paused until a run; "
        "`qprof run --guest` and `qprof compare --guest` use it until `qprof guest stop`."
    )


@guest.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the guest's state as one JSON object on stdout.")
def status(as_json):
    """What the started guest runs, and what it has served.

    \b
    EXAMPLES:
      qprof guest status
      qprof guest status --json | jq .served
    """
    _root("status")
    info = resident.status()
    if as_json:
        click.echo(json.dumps(info, indent=2))  # null: none started
        return
    if info is None:
        click.echo("no guest is started; `qprof guest start` starts one.")
        return
    if not info["alive"]:
        click.echo(f"guest {info['id']} is not running (its QEMU died); `qprof clean` removes its state.")
        return
    doing = f"running a job ({info['job']})" if info["job"] else f"idle, {info['vm']}"
    use = (
        "runs with --guest use it"
        if info["current"]
        else "runs with --guest boot their own (this qprof or guest kernel is not the one it started with: "
        "`qprof guest stop`, then `qprof guest start`)"
    )
    up_s = time.time() - time.mktime(time.strptime(info["booted_at"], "%Y-%m-%dT%H:%M:%S%z"))
    click.echo(
        f"guest {info['id']}: QEMU pid {info['qemu']['pid']}, {info['kernel_release']} under TCG, booted "
        f"{info['booted_at']} (in {info['boot_s']:.0f} s, up {up_s / 60:.0f} min); {info['served']} runs served; "
        f"{doing}; {use}."
    )


@guest.command("stop")
def stop():
    """Power the started guest off and remove its state.

    Refused while a measurement holds the machine (the guest may be
    serving it): wait for it to end, or stop it.

    \b
    EXAMPLES:
      qprof guest stop
    """
    _root("stop")
    with remains.exclusive("guest stop"):
        info = resident.stop()
    if info is None:
        click.echo("no guest is started; nothing to stop.")
    elif not info["alive"]:
        click.echo(f"guest {info['id']} had died; its state was removed.")
    else:
        click.echo(f"stopped guest {info['id']} after {info['served']} runs.")


@guest.command("serve", hidden=True)
@click.argument("spool", type=click.Path(path_type=Path))
def serve(spool):
    """Inside the guest: take runs as jobs from SPOOL (collectors/resident.py)."""
    from qprof.cli import main as entry

    entry.cli.get_command(None, "run")  # imported once, now, not for each job

    def run(argv) -> int:
        try:
            entry.main(argv)
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else int(e.code is not None)
        return 0

    resident.serve(spool, run)
