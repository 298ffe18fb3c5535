# SPDX-License-Identifier: GPL-2.0-only
"""Shared by the tests: run the real CLI, and check that nothing is left."""

import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# pytest.ini registers them; `make check` runs the unit tier, `make test` all.
TIERS = ("unit", "system", "guest", "network")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every test in exactly one tier, before -m deselects any: a test
    without one would fall out of every tier's run unseen."""
    bad = []
    for item in items:
        tiers = [m.name for m in item.iter_markers() if m.name in TIERS]
        if len(tiers) != 1:
            bad.append(f"{item.nodeid}: {', '.join(tiers) or 'no tier'}")
    if bad:
        raise pytest.UsageError(
            f"each test needs exactly one of the markers {', '.join(TIERS)} (pytest.ini):\n  " + "\n  ".join(bad)
        )


def qprof(*args, runs_dir=None, timeout=120, env_extra=None, **kw):
    """`python -m qprof ARGS` in a subprocess, as a user would run it."""
    env = dict(os.environ)
    if runs_dir is not None:
        env["QPROF_RUNS_DIR"] = str(runs_dir)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "qprof", *args], capture_output=True, text=True, timeout=timeout, env=env, **kw
    )


def impossible_figures(obj, path=""):
    """Figures no measurement can give: a share outside [0, 1], negative
    CPU time or CPU per byte. Every real run's record is checked."""
    bad = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            bad += impossible_figures(v, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            bad += impossible_figures(v, f"{path}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        leaf = path.rsplit(".", 1)[-1]
        if "share" in leaf and not 0 <= obj <= 1:
            bad.append(f"{path} = {obj}")
        cpu = path.startswith(("cpu.", "cpu_threads.")) or "ns_per_byte" in path
        if cpu and (leaf.endswith("_s") or "ns_per_byte" in path) and obj < 0:
            bad.append(f"{path} = {obj}")
    return bad


def run_json(runs_dir, *args, timeout=120, allow=()):
    """allow: regexes of the warnings a run may print (each stderr line must
    match one); none by default."""
    r = qprof("run", "--json", *args, runs_dir=runs_dir, timeout=timeout)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert all(any(re.search(a, line) for a in allow) for line in lines), r.stderr
    rec = json.loads(r.stdout)
    assert impossible_figures(rec) == []
    return rec


def _default_signals():
    # A suite launched in the background of a non-interactive shell hands
    # its children SIGINT ignored; a qprof that is to be interrupted must
    # start with the default disposition, as from a terminal.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@contextmanager
def started(*args, runs_dir=None, env_extra=None):
    """`python -m qprof ARGS` running in its own session with default signal
    dispositions. On leaving, a qprof still running is killed with its whole
    session, and `qprof clean` removes what it made, so a test that gives up
    leaves nothing for the next."""
    env = dict(os.environ)
    if runs_dir is not None:
        env["QPROF_RUNS_DIR"] = str(runs_dir)
    env.update(env_extra or {})
    p = subprocess.Popen(
        [sys.executable, "-m", "qprof", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_default_signals,
        start_new_session=True,
    )
    try:
        yield p
    finally:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.communicate()
            subprocess.run([sys.executable, "-m", "qprof", "clean"], capture_output=True, env=env, timeout=60)


def wait_for_transfer(runs_dir, timeout_s=30.0):
    """Until a run under runs_dir has both workload processes going."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if list(runs_dir.glob("*/client.log")) and any("qprof-wl" in l for l in leftovers()):
            return
        time.sleep(0.1)
    raise AssertionError(f"no transfer started under {runs_dir} within {timeout_s:.0f} s")


def leftovers():
    """Namespaces, links, processes, ledgers and temporary paths a run could
    have left behind."""
    found = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {line.split()[0]}" for line in ns.splitlines() if line.startswith("qp-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(": ")[1].split("@")[0]
        if name.startswith("qp"):
            found.append(f"link {name}")
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    found += [
        f"process {line.strip()}"
        for line in ps.splitlines()
        if "qprof-wl" in line
        or "perf record" in line
        or "qemu-system" in line
        # ssh's master and clients (their control socket's directory is in
        # their argv), `qprof agent` on a test host, a test host's sshd
        or "qprof-ssh-" in line
        or "qprof agent" in line
        or "qp-sshd.conf" in line
    ]
    state = Path(os.environ.get("QPROF_STATE_DIR", "/run/qprof"))
    found += [f"ledger {p}" for p in state.glob("*.json")]
    found += [f"path {p}" for p in Path("/tmp").glob("qprof-perf-*")]
    found += [f"path {p}" for p in Path(tempfile.gettempdir()).glob("qprof-ssh-*")]
    return found


SCHEMAS = {
    "run.json": REPO / "describe" / "schema" / "run.schema.json",
    "comparison.json": REPO / "describe" / "schema" / "comparison.schema.json",
}


def validate_records(root: Path) -> int:
    """Every run.json and comparison.json under root against its JSON Schema
    (a guest's own records included); how many were checked."""
    import jsonschema

    n = 0
    for name, schema_path in SCHEMAS.items():
        schema = json.loads(schema_path.read_text())
        for p in sorted(Path(root).rglob(name)):
            if "latest" in p.parts:
                continue
            jsonschema.validate(json.loads(p.read_text()), schema)
            n += 1
    return n


@pytest.fixture
def runs_dir(tmp_path):
    d = tmp_path / "runs"
    yield d
    assert leftovers() == []
    if d.exists():
        validate_records(d)


@pytest.fixture
def ssh_host_factory(runs_dir, tmp_path):
    """Other hosts made on demand (tests/sshhosts.py), each a namespace with
    its own sshd: make(env=None) -> a running SshTestHost (env: what its
    sshd hands every session, over this test's PYTHONPATH and
    QPROF_BUILD_DIR). All are torn down after the test, before runs_dir
    checks that nothing is left."""
    from sshhosts import SshTestHost

    with ExitStack() as stack:
        count = itertools.count()

        def make(env=None):
            return stack.enter_context(SshTestHost(tmp_path / f"host{next(count)}", env=env))

        yield make


@pytest.fixture
def guest_ssh_host(runs_dir, tmp_path):
    """A host with its own kernel reached over SSH: the QEMU guest on a tap
    device (tests/sshhosts.py GuestSshHost), torn down before runs_dir
    checks that nothing is left."""
    from sshhosts import GuestSshHost

    with GuestSshHost(tmp_path / "guest-host") as host:
        yield host


@pytest.fixture
def ssh_host(ssh_host_factory):
    """One other host reached over SSH: qprof gets `ssh_host.ssh_config`
    (ssh -F) and `ssh_host.destination` (root@ADDR) or `ssh_host.alias`."""
    return ssh_host_factory()


@pytest.fixture(scope="session")
def cert(tmp_path_factory):
    """qprof-wl's --cert and --key arguments: a self-signed pair, made once."""
    from qprof.collectors import endpoints

    cert, key = endpoints.make_certificate(tmp_path_factory.mktemp("cert"))
    return ["--cert", str(cert), "--key", str(key)]


def free_port() -> int:
    """A port free for both TCP and UDP on 127.0.0.1 (QUIC listens on UDP)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind(("127.0.0.1", 0))
            port = u.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                try:
                    t.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port


needs_build = pytest.mark.skipif(
    not (REPO / "build" / "bin" / "qprof-wl").exists(),
    reason="the workload is not built; `make test` builds it first",
)


@pytest.fixture
def tracefs():
    """tracefs for bpftrace's tracepoint probes, left as it was found."""
    from qprof.collectors import tracefs as t

    with t.mounted() as path:
        yield path
