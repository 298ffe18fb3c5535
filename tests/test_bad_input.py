# SPDX-License-Identifier: GPL-2.0-only
"""Each bad input or failure: one sentence on stderr, its own exit code,
nothing left behind, and a run directory that does not look complete."""

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from conftest import leftovers, needs_build, qprof, qprof_here, started, wait_for_intervals
from refusals import refused, run_plan

# The exit codes are qprof's interface (docs/exit-codes.md, core/errors.py).
UNKNOWN_STACK, BAD_VALUE, NOT_ROOT, PORT_IN_USE = 3, 4, 5, 6
TRANSPORT_OPEN, HANDSHAKE, PEER_DIED, INTERRUPTED = 7, 8, 9, 130


def one_sentence(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("qprof: ") and lines[0].rstrip().endswith("."), lines[0]
    return lines[0]


def refused_run(runs_dir, args, code, words):
    """`qprof run ARGS` stops before anything runs: its exit code, one
    sentence holding each of words, no run directory, nothing left behind."""
    r = qprof("run", *args, runs_dir=runs_dir)
    assert r.returncode == code, r.stderr
    line = one_sentence(r.stderr)
    for w in words:
        assert w in line, line
    assert not runs_dir.exists() and leftovers() == []


def run_statuses(runs_dir):
    if not runs_dir.exists():
        return []
    return [json.loads(p.read_text())["status"] for p in runs_dir.glob("*/run.json") if p.parent.name != "latest"]


# Refused by parsing and the plan: in this process (tests/refusals.py);
# test_exit_codes holds one `qprof run` per code end to end.
@pytest.mark.unit
def test_unknown_stack():
    refused(["--stack", "sctp"], UNKNOWN_STACK, ["sctp", "quic"])


@pytest.mark.unit
@pytest.mark.parametrize(
    "args",
    [["--duration", "ten"], ["--warmup", "5 parsecs"], ["--bytes", "12Q"], ["--io-size", "1000"], ["--duration", "0s"]],
)
def test_malformed_values(args):
    refused(args, BAD_VALUE, [])


@pytest.mark.system
def test_not_root(runs_dir, tmp_path):
    os.chmod(tmp_path, 0o777)
    r = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "qprof",
            "run",
            "--duration",
            "1s",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "QPROF_RUNS_DIR": str(runs_dir), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert r.returncode == NOT_ROOT, r.stderr
    assert "root" in one_sentence(r.stderr)
    assert not runs_dir.exists()


@pytest.mark.system
@needs_build
@pytest.mark.parametrize(
    "stack, kind", [("quic", socket.SOCK_DGRAM), ("udp", socket.SOCK_DGRAM), ("tcp", socket.SOCK_STREAM)]
)
def test_port_in_use(runs_dir, stack, kind):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        r = qprof(
            "run",
            "--stack",
            stack,
            "--topology",
            "loopback",
            "--port",
            str(port),
            "--duration",
            "1s",
            runs_dir=runs_dir,
        )
    assert r.returncode == PORT_IN_USE, r.stderr
    assert str(port) in one_sentence(r.stderr)
    assert run_statuses(runs_dir) == ["incomplete"]


@pytest.mark.system
@needs_build
def test_handshake_failure_names_status(runs_dir):
    r = qprof("run", "--duration", "1s", "--inject-fault", "handshake", runs_dir=runs_dir)
    assert r.returncode == HANDSHAKE, r.stderr
    assert "QUIC_STATUS_" in one_sentence(r.stderr)
    assert run_statuses(runs_dir) == ["incomplete"]


@pytest.mark.system
@needs_build
def test_msquic_credential_failure_names_status(runs_dir):
    r = qprof("run", "--duration", "1s", "--inject-fault", "bad-cert", runs_dir=runs_dir)
    assert r.returncode == TRANSPORT_OPEN, r.stderr
    assert "QUIC_STATUS_" in one_sentence(r.stderr)
    assert run_statuses(runs_dir) == ["incomplete"]


@pytest.mark.system
@needs_build
def test_server_dies_mid_run(runs_dir):
    r = qprof("run", "--duration", "2s", "--warmup", "0.2s", "--inject-fault", "kill-server", runs_dir=runs_dir)
    assert r.returncode == PEER_DIED, r.stderr
    assert "server" in one_sentence(r.stderr)
    assert run_statuses(runs_dir) == ["incomplete"]


@pytest.mark.system
@needs_build
def test_ctrl_c(runs_dir):
    with started("run", "--duration", "30s", "--interval", "0.25s", runs_dir=runs_dir) as p:
        # Interrupt mid-measurement: the window is open once a line for its
        # first interval is out.
        wait_for_intervals(p)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    assert p.returncode == INTERRUPTED, err
    assert "interrupted" in one_sentence(err)
    statuses = run_statuses(runs_dir)
    assert statuses == ["incomplete"]
    rec = json.loads(next(runs_dir.glob("*/run.json")).read_text())
    assert "interrupted" in rec["error"]


# Issue 39: what a hostile new user found. Each case in this process
# (tests/refusals.py for `qprof run`, conftest's qprof_here for the rest).
STACK_CANNOT, BAD_MIX, CORRUPT, NO_STACKS = 38, 31, 33, 22
EMPTY_HOST = "is empty; give an SSH destination (user@host"


@pytest.mark.unit
@pytest.mark.parametrize(
    "args, flag",
    [
        (["--server", ""], "--server"),
        (["--server", "", "--client", "b"], "--server"),
        (["--server", " "], "--server"),
        # Once refused as if a host were named (--cpus is not for hosts).
        (["--server", "", "--cpus", "client=0"], "--server"),
        (["--server", "b", "--client", ""], "--client"),
        (["--server", "b", "--ssh-config", ""], "--ssh-config"),
        (["--server", "b", "--server-addr", ""], "--server-addr"),
    ],
)
def test_an_empty_destination_is_refused_not_run_here(args, flag):
    """Defect 3: `--server ""` ran a local measurement (exit 0)."""
    sentence = refused(args, BAD_VALUE, [f"{flag} '", "is empty; give", f"or drop {flag}."])
    if flag != "--ssh-config" and flag != "--server-addr":
        assert EMPTY_HOST in sentence


@pytest.mark.unit
@pytest.mark.parametrize(
    "args", [["remote", "check", ""], ["remote", "setup", ""], ["clean", "--host", ""], ["remote", "check", "  "]]
)
def test_an_empty_host_is_refused_in_the_same_sentence_by_every_command(args):
    r = qprof_here(*args)
    assert r.returncode == BAD_VALUE, r.stderr
    assert EMPTY_HOST in one_sentence(r.stderr)


@pytest.mark.unit
def test_an_empty_ssh_config_is_named_not_invisible():
    r = qprof_here("remote", "check", "bench2", "--ssh-config", "")
    assert r.returncode == BAD_VALUE and "--ssh-config '' is empty; give an ssh config file" in one_sentence(r.stderr)


@pytest.mark.unit
def test_an_empty_msquic_is_named_not_invisible():
    """Defect 8: it said "--msquic  is not a file", the name invisible."""
    refused(["--msquic", ""], BAD_VALUE, ["--msquic '' is empty; give the path of a built libmsquic.so"])


@pytest.mark.unit
def test_guest_cpus_refused_and_guest_mix_planned():
    """Defect 13: the guest's vCPUs are one host thread, so --cpus has
    nothing to hold a side to there; a mix in the guest is planned as here."""
    refused(["--guest", "--cpus", "client=0"], BAD_VALUE, ["--guest runs both sides in a QEMU guest", "drop --cpus"])
    assert run_plan("--guest", "--mix", "quic:1,tcp:1", "--link", "rate=10mbit").is_mix
