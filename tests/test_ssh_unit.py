# SPDX-License-Identifier: GPL-2.0-only
"""The pure parts of the SSH layer (collectors/ssh.py): destinations,
ssh's failures told apart from its stderr (as OpenSSH 9.2 wrote them
here, tests/test_remote.py provokes each for real), the clock offset from
round trips, the remote command line, and the exit codes of the faults."""

import shlex
import sys

import pytest

from qprof import errors
from qprof.collectors import ssh

from conftest import REPO

pytestmark = pytest.mark.unit

CODES = {
    50: errors.SshUnreachable,
    51: errors.SshAuthFailed,
    52: errors.SshHostKeyUnknown,
    53: errors.SshHostKeyChanged,
    54: errors.SshFailed,
    55: errors.RemoteNotRoot,
    56: errors.RemoteNotBuilt,
    57: errors.RemoteVersion,
    58: errors.RemoteLost,
}


@pytest.mark.parametrize("code", sorted(CODES))
def test_each_code_is_declared_once_and_documented(code):
    assert CODES[code].exit_code == code
    assert [c for c in errors.QprofError.__subclasses__() if c.exit_code == code] == [CODES[code]]
    assert f"\n| {code} | " in (REPO / "docs" / "exit-codes.md").read_text()
    assert type(errors.by_exit_code(code, "x")) is CODES[code]


@pytest.mark.parametrize(
    "text, target, port",
    [
        ("bench2", "bench2", None),
        ("root@10.0.0.2", "root@10.0.0.2", None),
        ("10.0.0.2:2222", "10.0.0.2", 2222),
        ("root@server.lab:22", "root@server.lab", 22),
        ("ssh://root@server.lab:2200", "root@server.lab", 2200),
        ("fe80::1", "fe80::1", None),
        ("root@[2001:db8::2]:2222", "root@2001:db8::2", 2222),
        ("[2001:db8::2]", "2001:db8::2", None),
        ("a.b@c@host", "a.b@c@host", None),  # ssh splits at the last '@'
    ],
)
def test_destinations(text, target, port):
    d = ssh.parse_destination(text)
    assert (d.target, d.port, d.text) == (target, port, text)


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "empty"),
        ("root@", "no host"),
        ("@host", "no user"),
        ("host:", "port ''"),
        ("host:ssh", "port 'ssh'"),
        ("host:0", "port '0'"),
        ("host:65536", "port '65536'"),
        ("-oProxyCommand=x", "starts with '-'"),
        ("root@host name", "space"),
        ("host/x", "slash"),
        ("[host]:22", "IPv6"),
    ],
)
def test_what_is_not_a_destination(text, why):
    with pytest.raises(errors.BadValue) as e:
        ssh.parse_destination(text)
    assert why in e.value.sentence and repr(text) in e.value.sentence


CHANGED = """\
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Someone could be eavesdropping on you right now (man-in-the-middle attack)!
It is also possible that a host key has just been changed.
The fingerprint for the ED25519 key sent by the remote host is
SHA256:bKkg19+QpgBqF2Twgba+bBB0TMZkQwW0eRPaw3VA+UY.
Please contact your system administrator.
Add correct host key in /tmp/h/known_hosts to get rid of this message.
Offending ED25519 key in /tmp/h/known_hosts:1
  remove with:
  ssh-keygen -f "/tmp/h/known_hosts" -R "10.219.0.2"
Host key for 10.219.0.2 has changed and you have requested strict checking.
Host key verification failed.
"""


@pytest.mark.parametrize(
    "stderr, cls, kept",
    [
        (CHANGED, errors.SshHostKeyChanged, "Host key verification failed"),
        (
            "No ED25519 host key is known for 10.219.0.2 and you have requested strict checking.\n"
            "Host key verification failed.\n",
            errors.SshHostKeyUnknown,
            "Host key verification failed",
        ),
        ("root@10.219.0.2: Permission denied (publickey).\n", errors.SshAuthFailed, "Permission denied (publickey)"),
        ("Received disconnect from 10.0.0.2 port 22:2: Too many authentication failures\n", errors.SshAuthFailed, ""),
        (
            "ssh: connect to host 10.219.0.2 port 2222: Connection refused\n",
            errors.SshUnreachable,
            "port 2222: Connection refused",
        ),
        (
            "ssh: Could not resolve hostname nosuch.invalid: Name or service not known\n",
            errors.SshUnreachable,
            "nosuch.invalid",
        ),
        ("ssh: connect to host 192.0.2.1 port 22: Connection timed out\n", errors.SshUnreachable, "timed out"),
        ("ssh: connect to host 10.9.9.9 port 22: No route to host\n", errors.SshUnreachable, "No route"),
        ("kex_exchange_identification: read: Connection reset by peer\n", errors.SshUnreachable, "reset"),
        (
            "Unable to negotiate with 10.0.0.2 port 22: no matching host key type found. Their offer: ssh-dss\n",
            errors.SshFailed,
            "Their offer: ssh-dss",
        ),
        ("", errors.SshFailed, "ssh exit 255, no message"),
    ],
)
def test_ssh_failures_told_apart(stderr, cls, kept):
    e = ssh.ssh_failure("root@h", stderr, 255, "ssh root@h true")
    assert type(e) is cls
    assert "root@h" in e.sentence and kept in e.sentence
    assert "\n" not in e.sentence and e.sentence.endswith(".") and ".)" not in e.sentence


def test_the_offset_of_the_shortest_round_trip():
    # (send, remote, receive), ns: the second has the shortest round trip.
    samples = [(0, 1_000_050, 100), (1000, 1_001_030, 1040), (2000, 1_002_100, 2200)]
    c = ssh.best_offset(samples)
    assert (c.rtt_ns, c.offset_ns, c.uncertainty_ns, c.rounds) == (40, 1_000_010, 20, 3)


@pytest.mark.parametrize("t0, tr, t1", [(0, 0, 1), (0, 1, 1), (10, 10, 13), (10, 13, 13), (10, 11, 13), (5, 5, 5)])
def test_one_clock_gives_no_offset_beyond_its_bound(t0, tr, t1):
    """A remote reading taken between send and receive on the same clock:
    the offset is within its uncertainty, odd round trips included."""
    c = ssh.best_offset([(t0, tr, t1)])
    assert abs(c.offset_ns) <= c.uncertainty_ns <= c.rtt_ns


def test_the_remote_shell_gets_each_word_as_given(tmp_path):
    host = ssh.SshHost("root@10.0.0.2:2222", ssh_config=tmp_path / "cfg")
    host._dir = tmp_path  # as __enter__ makes it
    argv = ["sh", "-c", "echo \"$SSH_CONNECTION\" 'x y'; exit 3", "-p", "--", "it's"]
    cmd = host.command(argv)
    assert cmd[0] == ssh.SSH and ["-p", "2222"] == cmd[cmd.index("-p") : cmd.index("-p") + 2]
    assert cmd[cmd.index("-S") + 1] == str(tmp_path / "ctl") and "-T" in cmd
    assert ["-F", str(tmp_path / "cfg")] == cmd[1:3]
    sep = cmd.index("--")
    assert cmd[sep + 1] == "root@10.0.0.2"
    # ssh joins the words with spaces; the remote's shell splits them back.
    assert shlex.split(" ".join(cmd[sep + 2 :])) == argv
    for o in ("BatchMode=yes", "StrictHostKeyChecking=yes", "ControlMaster=no", "ProxyCommand=false"):
        assert cmd[cmd.index(o) - 1] == "-o"


def test_how_the_remote_qprof_starts(monkeypatch):
    host = ssh.SshHost("h")
    monkeypatch.delenv(ssh.REMOTE_QPROF_ENV, raising=False)
    assert host.qprof_argv("agent") == [sys.executable, "-m", "qprof", "agent"]
    monkeypatch.setenv(ssh.REMOTE_QPROF_ENV, "sudo -n '/opt/q prof/bin/python' -m qprof")
    assert host.qprof_argv("agent") == ["sudo", "-n", "/opt/q prof/bin/python", "-m", "qprof", "agent"]
