# SPDX-License-Identifier: GPL-2.0-only
"""`qprof remote check` and the SSH layer under two-host runs (issue 26),
against hosts made on this machine: a namespace each, running Debian's
sshd with keys, known_hosts and an ssh config made for the test
(tests/sshhosts.py). Each fault is provoked for real: nothing listening,
a key the host does not take, a host key that is not the recorded one or
not recorded at all, a host whose environment lacks the build, a copy of
qprof at another version or commit, a qprof run as nobody. Each gives
its code, one sentence naming the cause, and leaves nothing on either
side: no ssh process or control directory here, no agent or session
there. The clock's offset is checked by what holds on one kernel: both
"hosts" read the same CLOCK_MONOTONIC, so the true offset is 0 and the
measured one must lie within its own uncertainty."""

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from qprof import __version__, errors, paths
from qprof.collectors import ssh

from conftest import REPO, leftovers, qprof
from sshhosts import keygen, public
from test_bad_input import one_sentence

pytestmark = pytest.mark.system

# The exit codes are qprof's interface (docs/exit-codes.md, core/errors.py).
UNREACHABLE, AUTH = errors.SshUnreachable.exit_code, errors.SshAuthFailed.exit_code
KEY_UNKNOWN, KEY_CHANGED = errors.SshHostKeyUnknown.exit_code, errors.SshHostKeyChanged.exit_code
NOT_ROOT, NOT_BUILT = errors.RemoteNotRoot.exit_code, errors.RemoteNotBuilt.exit_code
VERSION, LOST = errors.RemoteVersion.exit_code, errors.RemoteLost.exit_code
# A qprof that is not root: nobody, allowed to read and search any
# directory (this interpreter lives under /root) and nothing more.
AS_NOBODY = (
    "setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=+dac_read_search --ambient-caps=+dac_read_search"
)


def check(host, *args, dest=None, env_extra=None, config=None):
    """`qprof remote check DEST --ssh-config FILE ARGS`, which leaves
    nothing on either host, whatever it ends with."""
    before = leftovers()
    cfg = config or host.ssh_config
    r = qprof("remote", "check", dest or host.destination, "--ssh-config", str(cfg), *args, env_extra=env_extra)
    nothing_left(host, before, r.stderr)
    return r


def nothing_left(host, before, said=""):
    """No agent, no session there (sshd ends them on its own time once the
    connection has gone); no ssh master or client, no control directory,
    no ledger here (what leftovers() lists beyond `before`, the host
    itself, whose agents it would list too)."""
    assert host.wait_idle() == [], said
    assert leftovers() == before, said


def refused(host, code, words, **kw):
    r = check(host, **kw)
    assert r.returncode == code, r.stderr
    line = one_sentence(r.stderr)
    for w in words:
        assert w in line, line
    assert r.stdout == ""
    return line


def our_commit():
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("form", ["alias", "user@addr", "user@addr:port"])
def test_check_reports_the_remote_and_the_clock_offset(ssh_host, form):
    dest = {"alias": ssh_host.alias, "user@addr": ssh_host.destination, "user@addr:port": f"{ssh_host.destination}:22"}
    r = check(ssh_host, "--json", "--rounds", "8", dest=dest[form])
    assert r.returncode == 0 and r.stderr == "", r.stderr
    found = json.loads(r.stdout)
    assert found["address"] == ssh_host.addr
    assert found["qprof_version"] == __version__
    assert found["qprof_commit"] == our_commit() != ""
    assert found["euid"] == 0 and found["missing"] == []
    assert found["build_dir"] == str(paths.build_dir())
    clock = found["clock"]
    assert clock["rounds"] == 8
    assert 0 <= clock["uncertainty_ns"] <= clock["rtt_ns"]
    # One kernel, one CLOCK_MONOTONIC: the offset is 0 within what it claims.
    assert abs(clock["offset_ns"]) <= clock["uncertainty_ns"]


def test_check_says_it_in_words(ssh_host):
    r = check(ssh_host, dest=ssh_host.alias)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = r.stdout
    assert f"reached at {ssh_host.addr}" in out and f"at {our_commit()[:12]}, as here" in out
    assert "euid 0 (root)" in out and "complete" in out and "CLOCK_MONOTONIC" in out


def test_nothing_listens_there(ssh_host):
    words = ["cannot reach", "2222", "Connection refused"]
    refused(ssh_host, UNREACHABLE, words, dest=f"{ssh_host.destination}:2222")


def test_a_key_the_host_does_not_take(ssh_host):
    other = keygen(ssh_host.dir / "other_key", "not authorized")
    config = ssh_host.client_config("other_key.config", identity=other)
    words = ["SSH login to", "Permission denied (publickey)", "never asks for a password"]
    refused(ssh_host, AUTH, words, config=config)


def test_the_host_key_changed(ssh_host):
    """known_hosts holds another key for the address: refused, and the file
    is as it was."""
    impostor = keygen(ssh_host.dir / "impostor_key", "not the host")
    text = f"{ssh_host.addr} {public(impostor)}\n"
    config = ssh_host.client_config("changed.config", known_hosts=text)
    words = ["the host key of", "CHANGED", "Host key verification failed", "ssh-keygen -R"]
    refused(ssh_host, KEY_CHANGED, words, config=config)
    assert (ssh_host.dir / "changed.config.known_hosts").read_text() == text


def test_the_host_key_is_unknown(ssh_host):
    """An empty known_hosts: refused, and no key was added to it."""
    config = ssh_host.client_config("unknown.config", known_hosts="")
    refused(ssh_host, KEY_UNKNOWN, ["is not in your known_hosts", "never adds a key"], config=config)
    assert (ssh_host.dir / "unknown.config.known_hosts").read_text() == ""


def test_the_remote_lacks_the_build(ssh_host_factory, tmp_path):
    """The host's sessions get an empty QPROF_BUILD_DIR (sshd's SetEnv):
    the agent there finds nothing built."""
    empty = tmp_path / "empty-build"
    empty.mkdir()
    host = ssh_host_factory(env={"QPROF_BUILD_DIR": str(empty)})
    refused(host, NOT_BUILT, [f"lacks its build in {empty}", "bin/qprof-wl", "make build"])


def test_no_qprof_there(ssh_host):
    refused(
        ssh_host,
        NOT_BUILT,
        ["qprof is not installed on", "/nonexistent/python", "No such file or directory"],
        env_extra={ssh.REMOTE_QPROF_ENV: "/nonexistent/python -m qprof"},
    )


def package_copy(dest, version=None):
    """This qprof's package, copied file by file into dest/qprof (the
    subpackages from wherever they are installed), its __version__
    changed if asked: real code that reports what it is."""
    root = dest / "qprof"
    root.mkdir(parents=True)
    for f in Path(importlib.import_module("qprof").__path__[0]).glob("*.py"):
        shutil.copy(f, root / f.name)
    for part in ("cli", "present", "collectors", "describe", "probes", "workloads", "flamegraphs"):
        src = importlib.import_module(f"qprof.{part}").__path__[0]
        shutil.copytree(src, root / part, ignore=shutil.ignore_patterns("__pycache__", "target", "*.c", "*.h"))
    if version is not None:
        init = root / "__init__.py"
        text = init.read_text()
        assert f'__version__ = "{__version__}"' in text
        init.write_text(text.replace(f'__version__ = "{__version__}"', f'__version__ = "{version}"'))
    return dest


def copy_runs(copy):
    """QPROF_REMOTE_QPROF for the copy; it answers for itself first."""
    cmd = f"env PYTHONPATH={copy} {sys.executable} -m qprof"
    r = subprocess.run([*cmd.split(), "agent"], input="", capture_output=True, text=True, timeout=60)
    return cmd, json.loads(r.stdout.splitlines()[0])


def test_the_remote_is_another_version(ssh_host, tmp_path):
    copy = package_copy(tmp_path / "other", version=f"{__version__}.post1")
    cmd, hello = copy_runs(copy)
    assert hello["qprof_version"] == f"{__version__}.post1"
    words = [f"version {__version__}.post1 at no known commit", f"this one is version {__version__}"]
    refused(ssh_host, VERSION, words, env_extra={ssh.REMOTE_QPROF_ENV: cmd})


def test_the_remote_is_another_commit(ssh_host, tmp_path):
    """The same version, committed to a repository of its own: its commit
    is not ours."""
    copy = package_copy(tmp_path / "other")
    git = ["git", "-C", str(copy / "qprof"), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "another commit"]):
        subprocess.run(git + args, check=True, capture_output=True)
    cmd, hello = copy_runs(copy)
    theirs = hello["qprof_commit"]
    assert hello["qprof_version"] == __version__ and theirs not in (None, our_commit())
    words = [f"at commit {theirs[:12]}", f"this one is version {__version__} at commit {our_commit()[:12]}"]
    refused(ssh_host, VERSION, words, env_extra={ssh.REMOTE_QPROF_ENV: cmd})


def test_the_remote_is_not_root(ssh_host):
    """qprof there really runs as nobody (setpriv), and says so in its hello."""
    cmd = f"{AS_NOBODY} {sys.executable} -m qprof"
    refused(ssh_host, NOT_ROOT, ["runs as uid 65534, not root"], env_extra={ssh.REMOTE_QPROF_ENV: cmd})


# -- the library under a run ----------------------------------------------


def test_commands_there_get_their_words_stdin_and_exit(ssh_host):
    before = leftovers()
    with ssh.SshHost(ssh_host.destination, ssh_config=ssh_host.ssh_config) as h:
        assert h.address == ssh_host.addr
        words = ["a b", "it's", "$HOME", "*", "-p", "--", ""]
        r = h.run(["printf", "%s|", *words], 30)
        assert (r.returncode, r.stdout) == (0, "|".join(words) + "|")
        r = h.run(["sh", "-c", "cat; echo oops >&2; exit 3"], 30, input="line 1\nline 2\n")
        assert (r.returncode, r.stdout, r.stderr) == (3, "line 1\nline 2\n", "oops\n")
        # Each command a client of the one master: one login in sshd's log.
        assert ssh_host.sshd_log.read_text().count("Accepted publickey") == 1
    nothing_left(ssh_host, before)


def test_two_hosts_joined_by_a_link_of_their_own(ssh_host_factory):
    """For data between two hosts (a run with --client and --server): their
    own veth, reached from neither this namespace nor any other."""
    a, b = ssh_host_factory(), ssh_host_factory()
    addr_a, addr_b = a.join(b)
    # A connection from a to b's address there arrives from a's address there.
    serve = "import socket, sys; s = socket.create_server((sys.argv[1], 5001)); print(s.accept()[1][0])"
    connect = (
        "import socket, sys, time\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        socket.create_connection((sys.argv[1], 5001), timeout=5).close(); break\n"
        "    except ConnectionRefusedError:\n"
        "        time.sleep(0.05)\n"
    )
    server = subprocess.Popen(
        ["ip", "netns", "exec", b.netns, sys.executable, "-c", serve, addr_b], stdout=subprocess.PIPE, text=True
    )
    try:
        subprocess.run(["ip", "netns", "exec", a.netns, sys.executable, "-c", connect, addr_b], check=True, timeout=30)
        assert server.communicate(timeout=30)[0].strip() == addr_a
    finally:
        server.kill()
        server.wait()
    route = subprocess.run(["ip", "-j", "route", "get", addr_b], capture_output=True, text=True).stdout
    assert not any(r.get("dev", "").startswith("qps") for r in json.loads(route or "[]"))  # not from here


def agent_pid(host):
    lines = [l for l in host.remote_pids() if "qprof agent" in l]
    assert len(lines) == 1, lines
    return int(lines[0].split()[0])


def test_the_agent_killed_there_is_a_lost_remote(ssh_host):
    before = leftovers()
    with ssh.SshHost(ssh_host.destination, ssh_config=ssh_host.ssh_config) as h:
        agent = h.open_agent()
        assert agent.request("clock")["t_ns"] > 0
        os.kill(agent_pid(ssh_host), signal.SIGKILL)
        with pytest.raises(errors.RemoteLost) as e:
            agent.request("clock")
        assert e.value.exit_code == LOST
        assert f"lost qprof's agent on {ssh_host.destination}" in e.value.sentence
        # The connection itself is still good.
        assert h.run(["true"], 30).returncode == 0
    nothing_left(ssh_host, before)


def test_the_connection_lost_under_an_agent(ssh_host):
    before = leftovers()
    with ssh.SshHost(ssh_host.alias, ssh_config=ssh_host.ssh_config) as h:
        agent = h.open_agent()
        h.proc.kill()
        h.proc.wait()
        with pytest.raises(errors.RemoteLost) as e:
            for _ in range(100):  # until the client has seen its master go
                agent.request("clock")
                time.sleep(0.05)
        assert f"lost qprof's agent on {ssh_host.alias} (the SSH connection ended" in e.value.sentence
        assert "killed by SIGKILL" in e.value.sentence
        with pytest.raises(errors.RemoteLost):
            h.run(["true"], 30)
    nothing_left(ssh_host, before)


def _setup(host, *args, timeout=600):
    before = leftovers()
    r = qprof("remote", "setup", host.destination, "--ssh-config", str(host.ssh_config), *args, timeout=timeout)
    nothing_left(host, before, r.stderr)
    assert not list(Path("/tmp").glob("qprof-setup-*")) and not list(Path(tempfile.gettempdir()).glob("qprof-bundle-*"))
    return r


def test_setup_sends_this_commit_and_nothing_else(ssh_host, tmp_path):
    """`qprof remote setup --path DIR --no-build`: this commit, as a bundle
    over the connection, cloned where nothing was, fetched into a clean
    checkout of another commit, and refused over a checkout with changes.
    With the build: tests/test_remote_setup.py (the network tier)."""
    there = tmp_path / "qprof-there"
    r = _setup(ssh_host, "--path", str(there), "--no-build")
    assert r.returncode == 0, r.stderr
    assert f"cloning into {there}" in r.stdout
    head = lambda: subprocess.run(["git", "-C", str(there), "rev-parse", "HEAD"], capture_output=True, text=True)  # noqa: E731
    assert head().stdout.strip() == our_commit()
    subprocess.run(["git", "-C", str(there), "checkout", "--quiet", "--detach", "HEAD~1"], check=True)
    r = _setup(ssh_host, "--path", str(there), "--no-build")
    assert r.returncode == 0 and f"fetching into {there}" in r.stdout, r.stdout + r.stderr
    assert head().stdout.strip() == our_commit()
    (there / "README.md").write_text("changed there\n")
    r = _setup(ssh_host, "--path", str(there), "--no-build")
    assert r.returncode == NOT_BUILT, r.stderr
    assert "has changed tracked files" in one_sentence(r.stderr)
    assert (there / "README.md").read_text() == "changed there\n"  # refused, not overwritten
