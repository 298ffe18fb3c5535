# SPDX-License-Identifier: GPL-2.0-only
"""`qprof remote setup` with its build (issue 26): `make deps build` runs
on the host, which reaches the package registries (the venv from PyPI),
so this is the network tier.

A host with nothing installed (a namespace host whose --path is an empty
directory) is set up from scratch: this commit sent and cloned there, the
whole `make deps build` run there, the host checked as a run checks it,
and a run served there from that build. A from-scratch build takes 15
minutes here (msquic with quictls 3.5, the Rust workloads with aws-lc and
BoringSSL 11), so the host's build works from this checkout's build trees
as another checkout on the same machine may (docs/setup.md): msquic's
cmake tree where its source, flags and options are the same
(QPROF_MSQUIC_REUSE), and cargo's target directory under an overlay
that keeps what the build writes apart (QPROF_RS_TARGET_DIR); cmake, ninja and cargo decide what is stale, and
only what differs is compiled (the workspace's own crates, at this
path). Every step of the set-up runs. It measures nothing, so `make
test` runs it beside the guest tier (its test host claimed in its
ledger, tests/conftest.py)."""

import json
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from qprof import __version__
from qprof.collectors import ssh

from conftest import REPO, needs_build, qprof
from sshhosts import SshTestHost
from test_remote import _setup, check, our_commit

pytestmark = [pytest.mark.network, pytest.mark.beside, needs_build]


@pytest.mark.timeout(900)
def test_setup_from_nothing_builds_checks_and_serves_a_run(runs_dir, tmp_path):
    there = tmp_path / "qprof-there"
    there.mkdir()  # nothing installed: an empty directory
    # Its run only shows the host serves one, and `make test` runs it beside
    # the guest tier's: it keeps its own state directory (ledgers and the
    # lock that keeps two measurements' figures apart), here and there.
    state = tmp_path / "state"
    with written_apart(REPO / "build" / "rs", tmp_path / "rs-target") as target:
        reuse = {"QPROF_MSQUIC_REUSE": str(REPO / "build" / "msquic"), "QPROF_RS_TARGET_DIR": str(target)}
        with SshTestHost(tmp_path / "host", env={**reuse, "QPROF_STATE_DIR": str(state)}, registries=True) as host:
            served_from_scratch(host, there, runs_dir, state)
    assert list(state.iterdir()) == [state / "lock"]  # no ledger left


@contextmanager
def written_apart(lower: Path, where: Path):
    """lower as a directory of its own to write in, what is written there
    kept in `where` (an overlay mount, made before the test host starts so
    that its sessions see it): a copy of cargo's target directory that
    copies nothing: the copy took this test from 86 s to 107 here (3.8 GB;
    a fresh checkout's is 1.9 GB)."""
    upper, work, merged = where / "upper", where / "work", where / "merged"
    for d in (upper, work, merged):
        d.mkdir(parents=True)
    layers = f"lowerdir={lower},upperdir={upper},workdir={work}"
    subprocess.run(["mount", "-t", "overlay", "qprof-test", "-o", layers, str(merged)], check=True)
    try:
        yield merged
    finally:
        subprocess.run(["umount", str(merged)], check=True)


def served_from_scratch(host, there, runs_dir, state):
    r = _setup(host, "--path", str(there), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    out = r.stdout.splitlines()
    name = host.destination
    assert f"{name}: cloning into {there}" in out and f"{name}: make -C {there} deps build" in out
    # Every step ran: the venv, msquic (in this build's tree, nothing to do), the workloads, the probes, inferno.
    for step in ("python3 -m venv .venv", f"msquic: building in {REPO / 'build' / 'msquic' / 'cmake'}"):
        assert any(step in line for line in out), step
    for step in ("workloads/rs/build.sh build", "qprof-syscalls", "flamegraphs/inferno/build.sh build/tools"):
        assert any(step in line for line in out), step
    started = f"{there}/.venv/bin/python -m qprof"
    assert out[-2:] == [
        f"{name}: ready: qprof {__version__} at {our_commit()[:12]}, {there / 'build'}",
        f'{name}: a run starts it as {ssh.REMOTE_QPROF_ENV}="{started}" says',
    ]
    # A host serves runs: its venv has qprof's own dependencies, not the test tools.
    assert (there / ".venv" / ".installed").exists() and not (there / ".venv" / "bin" / "pytest").exists()
    status = subprocess.run(["git", "-C", str(there), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""  # the build wrote nothing git tracks or would add

    # The host as a run sees it, started as that line says: the build there, complete.
    env = {ssh.REMOTE_QPROF_ENV: started}
    r = check(host, "--json", env_extra=env)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    assert (found["build_dir"], found["missing"], found["qprof_commit"]) == (str(there / "build"), [], our_commit())
    r = qprof(
        "run", "--json", "--stack", "quic", "-d", "1s", "--sample-hz", "0", "--server", name,
        "--ssh-config", str(host.ssh_config), runs_dir=runs_dir, env_extra={**env, "QPROF_STATE_DIR": str(state)},
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["status"] == "complete" and rec["verified"] is True and rec["bytes"] > 0
    assert host.wait_idle() == []


@pytest.mark.skipif(
    bool(
        subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
    ),
    reason="this checkout has uncommitted changes: setup at its own path (the test host shares it) refuses them; "
    "CI's clean checkout runs it",
)
@pytest.mark.timeout(600)
def test_setup_at_this_path_builds_and_checks(ssh_host):
    """At this checkout's own path (which the test host shares): already at
    the commit, `make deps build` there (its lines shown), then the host
    checked as a run checks it."""
    r = _setup(ssh_host)
    assert r.returncode == 0, r.stderr
    assert f"is already at {our_commit()[:12]}" in r.stdout
    assert f"make -C {REPO} deps build" in r.stdout
    assert r.stdout.splitlines()[-1].startswith(
        f"{ssh_host.destination}: ready: qprof {__version__} at {our_commit()[:12]}"
    )
