# SPDX-License-Identifier: GPL-2.0-only
"""`qprof remote`: another host, reached over SSH (collectors/ssh.py,
docs/remote.md)."""

import dataclasses
import json
import shlex
import sys
from typing import List

import click

from qprof import errors, paths
from qprof.cli.progress import stage_line
from qprof.cli.run_options import click_option, whole_number
from qprof.collectors import install, ssh
from qprof.describe import plan


@click.group()
def remote():
    """Another host a run can place a side on, reached over SSH."""


@remote.command("check")
@click.argument("host")
@click_option("ssh-config")
@click.option(
    "--rounds",
    type=whole_number("rounds", 1, 1000),
    default=ssh.CLOCK_ROUNDS,
    show_default=True,
    help="Clock round trips; the shortest gives the offset.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was found as one JSON object on stdout.")
def check(host, ssh_config, rounds, as_json):
    """Reach HOST over SSH and check that a run can use it.

    HOST is an SSH destination: user@host, host:port, user@host:port or a
    Host name from your ssh config. qprof logs in with your keys and
    known_hosts (never a password, never a key it has not seen), starts
    `qprof agent` there and checks that it runs as root, is this version
    and commit, and has its build; then it measures the offset between
    the two hosts' clocks. Each fault exits with its own code
    (docs/exit-codes.md); nothing is left on either host.

    \b
    EXAMPLES:
      qprof remote check root@server.lab
      qprof remote check bench2 --ssh-config ~/lab/ssh_config
      qprof remote check root@10.0.0.2:2222 --json | jq .clock
    """
    _given(host, ssh_config)
    with ssh.SshHost(host, ssh_config=ssh_config) as h:
        with h.open_agent() as agent:
            clock = agent.clock_offset(rounds)
            hello = agent.hello
        address = h.address
    found = {
        "host": host,
        "address": address,
        "qprof_version": hello["qprof_version"],
        "qprof_commit": hello["qprof_commit"],
        "euid": hello["euid"],
        "build_dir": hello["build_dir"],
        "missing": hello["missing"],
        "clock": dataclasses.asdict(clock),
    }
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    commit = (hello["qprof_commit"] or "no known commit")[:12]
    rows = [
        ("host", f"{host}, reached at {address}"),
        ("qprof", f"version {hello['qprof_version']} at {commit}, as here"),
        ("user", f"euid {hello['euid']} (root)"),
        ("build", f"{hello['build_dir']}, complete"),
        (
            "clock (us)",
            f"its CLOCK_MONOTONIC is ours {clock.offset_ns / 1e3:+.1f} ± {clock.uncertainty_ns / 1e3:.1f} "
            f"(best round trip {clock.rtt_ns / 1e3:.1f} of {clock.rounds})",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")


@remote.command("setup")
@click.argument("host")
@click_option("ssh-config")
@click.option(
    "--path",
    default=None,
    metavar="DIR",
    help="Where to install it there [default: this checkout's path, where a run starts qprof there].",
)
@click.option("--no-build", is_flag=True, help="Install the commit only; leave `make deps build` there to you.")
def setup(host, ssh_config, path, no_build):
    """Install this qprof on HOST over SSH: this commit, at this path, built.

    This checkout's commit goes to HOST as a git bundle over the SSH
    connection (nothing of qprof's is fetched from anywhere else), is
    cloned there at the same path (or fetched into the unchanged qprof
    checkout already there) and checked out; then the README's set-up
    runs there (`make deps build`: Debian's packages, the venv and the
    build, from the package registries), its lines shown as they come,
    and HOST is checked as `qprof remote check` does. HOST needs git and
    make; log in as root (docs/remote.md).

    \b
    EXAMPLES:
      qprof remote setup root@server.lab
      qprof remote setup bench2 --ssh-config ~/lab/ssh_config
    """
    _given(host, ssh_config)
    with ssh.SshHost(host, ssh_config=ssh_config) as h:
        done = _setup_shown(h, path, not no_build)
        if no_build:
            click.echo(f"{host}: commit {done['commit'][:12]} at {done['path']}; not checked (not built)")
            return
        # Elsewhere than this checkout's path, the qprof there is that path's.
        elsewhere = None if done["path"] == str(paths.REPO_ROOT) else install.qprof_at(done["path"])
        with h.open_agent(qprof=elsewhere) as agent:  # root, this version and commit, its build: each refused
            hello = agent.hello
    click.echo(f"{host}: ready: qprof {hello['qprof_version']} at {hello['qprof_commit'][:12]}, {hello['build_dir']}")
    if elsewhere:
        click.echo(f'{host}: a run starts it as {ssh.REMOTE_QPROF_ENV}="{shlex.join(elsewhere)}" says')


# The build's last lines kept for a terminal, which saw them on one line only.
SHOWN_ON_FAILURE = 25


def _setup_shown(h, path, build: bool) -> dict:
    """install.setup, its steps and the build's lines as they come: on a
    terminal on one line that says the latest (the build takes minutes),
    each step kept; piped, every line. A failed build's last lines are
    printed before its sentence, which points at them."""
    on_terminal = sys.stdout.isatty() and sys.stderr.isatty()
    seen: List[str] = []
    with stage_line(on_terminal, click.echo) as say:

        def shown(line: str) -> None:
            seen.append(line)
            say(line)

        try:
            return install.setup(h, path, build, shown)
        except errors.RemoteNotBuilt:
            if on_terminal:
                click.echo("\n".join(seen[-SHOWN_ON_FAILURE:]), err=True)
            raise


def _given(host: str, ssh_config) -> None:
    """An empty HOST or --ssh-config, refused as `qprof run --server ""` is."""
    plan.not_empty("HOST", host)
    plan.not_empty("--ssh-config", ssh_config)
