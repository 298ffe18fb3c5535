# SPDX-License-Identifier: GPL-2.0-only
"""Shared by the tests: run the real CLI, and check that nothing is left."""

import copy
import functools
import itertools
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Optional

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


@pytest.fixture(autouse=True)
def _unit_state_apart(request, tmp_path_factory, monkeypatch):
    """A unit test's qprof state (the ledger a command in this process
    opens) is its own, never /run/qprof's: as root it would be a ledger
    there that a real run on this machine, or its tests' leftovers check,
    takes for another qprof's."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    from qprof import remains

    monkeypatch.setenv("QPROF_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    monkeypatch.setattr(remains, "_ledger", None)
    yield


def qprof(*args, runs_dir=None, timeout=120, env_extra=None, **kw):
    """`python -m qprof ARGS` in a subprocess, as a user would run it."""
    env = dict(os.environ)
    if runs_dir is not None:
        env["QPROF_RUNS_DIR"] = str(runs_dir)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "qprof", *args], capture_output=True, text=True, timeout=timeout, env=env, **kw
    )


def qprof_here(*args, runs_dir=None, env_extra=None):
    """`qprof ARGS` through cli/main.py's main in this process (no Python
    start-up; for commands that only read and write files: ls, show,
    report, check, flame, export), as a subprocess.CompletedProcess.
    pytest keeps its own signal handlers."""
    from unittest import mock

    from click.testing import CliRunner

    from qprof import interrupts
    from qprof.cli import main

    env = dict(env_extra or {})
    if runs_dir is not None:
        env["QPROF_RUNS_DIR"] = str(runs_dir)
    with mock.patch.object(interrupts, "install", lambda: None), CliRunner().isolation(env=env) as (out, err, _):
        try:
            main.main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return subprocess.CompletedProcess(["qprof", *args], code, out.getvalue().decode(), err.getvalue().decode())


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


def edges_apart_ns(run_dir: Path, rec: dict, probe: str, role: str) -> int:
    """How far apart, in all, a probe and a workload read the window's two
    edges: at each, the probe read somewhere in [t_ns, t_ns + read_ns] and
    the role's mark its own figures in its [t_ns, t_ns + read_ns]
    (measurement.json; a workload built before marks said read_ns read
    them at t_ns). What happened in that gap is in one's window and not
    the other's, so a bound on two counts' difference is the window's rate
    over this, however fast the machine is."""
    marks = json.loads((run_dir / "measurement.json").read_text())["window"]
    apart = 0
    for name, p in rec["probes"][probe]["edges"].items():
        mark = marks[name][f"{role}_mark"]
        m0, p0 = mark["t_ns"], p["t_ns"]
        m1, p1 = m0 + mark.get("read_ns", 0), p0 + p["read_ns"]
        apart += max(abs(p1 - m0), abs(m1 - p0))
    return apart


def in_flight(marks: dict, rec: dict, edge: str, sender: str, key: str = "app_bytes") -> int:
    """At most this much was in flight at an edge (measurement.json's
    window marks): what the sender had counted (its KEY), plus one
    --io-size write it may have handed its stack and not yet counted,
    less what the receiver had read."""
    receiver = "server" if sender == "client" else "client"
    sent = marks[edge][f"{sender}_mark"][key] + rec["config"]["io_size"]
    return sent - marks[edge][f"{receiver}_mark"]["app_bytes"]


def agrees_at_its_edges(check: dict, torn: int = 2) -> bool:
    """A cross-check's two counts agree: the workload's own lies within
    what the probe counted up to its marks, at least and at most (the
    probes read before and after each edge's marks: ebpf_range), but for
    one event torn at each edge. Holds at any speed."""
    lo, hi = check["ebpf_range"]
    return lo <= check["ebpf"] <= hi and lo - torn <= check["own"] <= hi + torn


def received_torn(rec: dict, side: str) -> int:
    """What a receiver's own count of its datagrams may trail the syscalls
    probe's by at an edge: the probe counts a receive call's datagrams as
    the call returns, the workload after; one call's at most (the most one
    took, as the probe saw) at each of the two edges."""
    calls = rec["syscalls"][side]["by_syscall"]
    most = [c["datagrams_most"] for name, c in calls.items() if name.startswith("recv")]
    assert most and None not in most, (side, calls)
    return 2 * max(most)


def most_at_once(spans) -> int:
    """The most (start, end) spans open at one instant; at an end and a
    start at the same instant, the end counts first."""
    level = most = 0
    for _, step in sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans]):
        level += step
        most = max(most, level)
    return most


# Leaf frames of a handshake's public-key work, as a person would spot
# them in OpenSSL, quictls, aws-lc or BoringSSL (X25519, ECDSA and P-256,
# bignums, certificates) and GnuTLS (symbol-less hogweed and GMP).
# Go's crypto names its X25519 field arithmetic edwards25519/field, its
# P-256 nistec, its ML-KEM mlkem and its RSA arithmetic bigmod.
HANDSHAKE_LEAVES = (
    r"(?i)x25519|ecdsa|nistz256|evp_pkey|^bn_|x509|^\[libhogweed\.so|^__gmpn_"
    r"|^crypto/internal/fips140/(edwards25519|nistec|mlkem|bigmod)\b"
)


def category_bracket(run_dir: Path, rec: dict, side: str, frames: str) -> tuple:
    """A category's size on a side, bracketed by a count made apart from
    flamegraphs/categories.py: the side's kept folded stacks read here, the
    samples whose leaf frame matches the regex `frames` (each of those the
    rules' leaf-first pass puts in the category) and those with any frame
    matching it (a sample of the category has its deciding frame among
    them). In ns, as the record's graph counts them: samples x period,
    scaled by the capture's weighting factors where it was weighted: each
    sample by its thread's (a stack's first frame is its thread's name;
    the least and most factor of the threads of that name), not every
    thread's least (CI's control thread, one sample and no CPU time seen,
    factor 0, once made the least of a quiche client's crypto 0).
    Returns (least, most) for the category's ns over the window."""
    pattern = re.compile(frames)
    threads = rec["flame"]["sides"][side].get("weighting", {}).get("threads", [])
    every = [t["factor"] for t in threads] or [1.0]
    by_name = {}
    for t in threads:
        by_name.setdefault(t["comm"], []).append(t["factor"])
    least = most = 0.0
    for line in (run_dir / rec["flame"]["stacks_dir"] / f"{side}.folded").read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        names = stack.split(";")
        if any(pattern.search(f) for f in names):
            factors = by_name.get(names[0], every)
            most += int(count) * max(1.0, *factors)
            if pattern.search(names[-1]):
                least += int(count) * min(1.0, *factors)
    period = rec["flame"]["sample_period_ns"]
    return least * period, most * period


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


def wait_for_intervals(p, n=1, timeout_s=60.0) -> str:
    """Until a `qprof run` that started() without --json has printed n
    interval lines on stdout ("[...", one per --interval, 1 s by default):
    its window is open and has run n intervals. What stdout said by then,
    since communicate() gives only the rest."""
    fd, said = p.stdout.fileno(), b""
    deadline = time.monotonic() + timeout_s
    while sum(line.startswith(b"[") for line in said.split(b"\n")[:-1]) < n:
        left = deadline - time.monotonic()
        if left <= 0 or p.poll() is not None and not select.select([fd], [], [], 0)[0]:
            raise AssertionError(f"no interval line {n} within {timeout_s:.0f} s (exit {p.poll()}): {said!r}")
        if select.select([fd], [], [], min(left, 0.5))[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"stdout closed before interval line {n} (exit {p.wait()}): {said!r}")
            said += chunk
    return said.decode()


# `make test` runs the unit tier and the tests marked beside (the downloads
# from empty caches, the reports in Chromium, `remote setup` with its
# build) beside the guest tier (its emulator keeps one CPU of two busy),
# each session named here. What the other session made is its own: its
# processes carry its name in their environment (a test host's sessions
# too: sshhosts.PASSED_ENV), what it claims is in their ledgers, and the
# session beside checks no namespace or link (its test hosts' go with
# their claims, in a ledger this session's leftovers() does not pass).
SESSION = os.environ.get("QPROF_TEST_SESSION")


def _session_of(pid: str) -> Optional[str]:
    """The test session a live process says it is (or was started by), if any."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    tags = [e.split(b"=", 1)[1].decode() for e in raw.split(b"\0") if e.startswith(b"QPROF_TEST_SESSION=")]
    return tags[0] if tags else None


def another_sessions(pid: str) -> bool:
    """The process is (or was started by) the test session beside this one."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        # Linux 6.18 answers ESRCH for a zombie's environment, where older
        # kernels gave an empty one. (CI on 8738247: a tquic client of the session
        # beside, exited and not yet waited for, counted as this one's.)
        raw = b""
    if not raw:
        # A zombie shows no environment (a guest's QEMU killed under a run,
        # a workload its parent has yet to wait for): it is its parent's,
        # and this session's only if its parent says so. (ci44: a qprof-wl
        # zombie whose parent could not be told the other session's.)
        try:
            ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            return False
        return ppid not in ("0", "1", pid) and _session_of(ppid) != SESSION
    tags = [e.split(b"=", 1)[1].decode() for e in raw.split(b"\0") if e.startswith(b"QPROF_TEST_SESSION=")]
    return bool(tags) and tags[0] != SESSION


def gone(pid: str) -> bool:
    """The process has exited (and been reaped) since `ps` listed it: it
    leaves nothing behind. (ci55: a qprof-wl of the session beside, listed
    by `ps` and gone before its environment could be read, so that it was
    no session's and counted as this one's.)"""
    return not Path(f"/proc/{pid}").exists()


def init_reaps(pid: str) -> bool:
    """An exited process that only init has left to reap: its parent died
    first (a guest's QEMU whose launcher went before it), so it holds
    nothing but its pid, and is no session's to clean up."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] == "Z" and fields[1] == "1"


def others_netns() -> set:
    """The namespaces the other session's live processes claim in their
    ledgers (core/remains.py): its test hosts', which are not this
    session's leftovers. A dead process's ledger is nobody's."""
    from qprof import remains

    names = set()
    for p in remains.state_dir().glob("*.json"):
        if another_sessions(p.stem):
            try:
                names.update(json.loads(p.read_text()).get("netns", []))
            except (OSError, ValueError):
                continue  # released and rewritten as it was read
    return names


def leftovers():
    """Namespaces, links, processes, ledgers and temporary paths a run could
    have left behind."""
    from sshhosts import LINK_PREFIX as HOST_LINK
    from sshhosts import NETNS_PREFIX as HOST_NETNS

    found = []
    system_wide = SESSION != "beside"
    theirs = others_netns()
    # A test host's veth here carries its namespace's tag (sshhosts.py).
    their_links = tuple(HOST_LINK + n[len(HOST_NETNS) :] for n in theirs if n.startswith(HOST_NETNS))
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in ns.splitlines():
        if line.startswith("qp-") and system_wide and line.split()[0] not in theirs:
            found.append(f"netns {line.split()[0]}")
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(": ")[1].split("@")[0]
        if name.startswith("qp") and system_wide and not (their_links and name.startswith(their_links)):
            found.append(f"link {name}")
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout

    def a_runs(line: str) -> bool:
        return (
            "qprof-wl" in line
            or "perf record" in line
            # the session's started guest (session_guest) is the session's, not a run's
            or "qemu-system" in line
            and line.split()[0] != str(SESSION_GUEST.get("pid"))
            # ssh's master and clients (their control socket's directory is in
            # their argv), `qprof agent` on a test host
            or "qprof-ssh-" in line
            or "qprof agent" in line
        )

    found += [
        f"process {line.strip()}"
        for line in ps.splitlines()
        if a_runs(line)
        and not another_sessions(line.split()[0])
        and not init_reaps(line.split()[0])
        # asked last: a process gone while the others were asked is no leftover
        and not gone(line.split()[0])
    ]
    found += netns_processes(theirs) if system_wide else []
    state = Path(os.environ.get("QPROF_STATE_DIR", "/run/qprof"))
    found += [f"ledger {p}" for p in state.glob("*.json") if not another_sessions(p.stem)]
    # A guest booted for a command (collectors/resident.py), a started guest
    # the session did not start, a job the session's guest holds.
    found += [f"guest {p}" for p in state.glob("guest-*") if system_wide]
    if (state / "guest").exists() and not SESSION_GUEST and system_wide:
        found.append(f"started guest {state / 'guest'}")
    found += [f"guest job {p}" for p in (state / "guest" / "spool" / "jobs").glob("*") if SESSION_GUEST]
    found += [f"path {p}" for p in Path(tempfile.gettempdir()).glob("qprof-perf-*")]
    found += [f"path {p}" for p in Path(tempfile.gettempdir()).glob("qprof-ssh-*")]
    return found


def netns_processes(theirs=frozenset()):
    """Each process started into a qp- namespace from outside it (a test
    host's sshd, a run's workloads), by pid and comm: sshd rewrites its
    argv as its title, cut to the room its argv and environment had, so
    its `ps` line neither names its config nor stays the same. What those
    started there (an SSH session's processes, which end on sshd's time)
    is theirs: a host's own wait_idle() waits for them."""
    from qprof import remains

    found = []
    for ns in Path(remains.NETNS_DIR).glob("qp-*"):
        if ns.name in theirs:
            continue
        pids = set(remains.netns_pids(ns.name))
        for pid in pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()  # PID (COMM) STATE PPID ...
            except OSError:
                continue  # ended as it was read
            comm, rest = stat.split("(", 1)[1].rsplit(")", 1)
            if int(rest.split()[1]) not in pids:
                found.append((pid, f"process {pid} {comm} in {ns.name}"))
    return [line for _, line in sorted(found)]


SCHEMAS = {
    "run.json": REPO / "describe" / "schema" / "run.schema.json",
    "comparison.json": REPO / "describe" / "schema" / "comparison.schema.json",
}


@functools.lru_cache(maxsize=None)
def _validator(name: str):
    """The schema's validator, checked and built once a session
    (jsonschema.validate checks the schema itself again on every call)."""
    import jsonschema

    schema = json.loads(SCHEMAS[name].read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_records(root: Path) -> int:
    """Every run.json and comparison.json under root against its JSON Schema
    (a guest's own records included); how many were checked."""
    import jsonschema

    n = 0
    for name in SCHEMAS:
        for p in sorted(Path(root).rglob(name)):
            if "latest" in p.parts:
                continue
            error = jsonschema.exceptions.best_match(_validator(name).iter_errors(json.loads(p.read_text())))
            if error is not None:
                raise error
            n += 1
    return n


@pytest.fixture
def runs_dir(tmp_path):
    d = tmp_path / "runs"
    yield d
    assert leftovers() == []
    if d.exists():
        validate_records(d)


@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    """One real measurement per configuration a session, for every test
    that asserts on it: shared("run", *ARGS) -> (runs_dir, the record of
    `qprof run --json ARGS`); shared("compare", *ARGS) -> (runs_dir, the
    comparison of `qprof compare --json ARGS`); text=True: the command as
    a person reads it, -> (runs_dir, (its stdout, the record of its run)).
    Tests name a configuration by the same ARGS in the same order. Each
    gets a runs directory of its own, held as runs_dir holds a test's as
    soon as it is measured: nothing left behind, every record valid. A
    configuration that failed fails every test that asks for it, with its
    first failure, and is not run again. Each caller gets its own copy."""
    made = {}

    def measure(d, command, args, allow, timeout, text):
        if command == "run" and not text:
            return run_json(d, *args, timeout=timeout, allow=allow)
        r = qprof(command, *args, *(() if text else ("--json",)), runs_dir=d, timeout=timeout)
        assert r.returncode == 0, r.stderr
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert all(any(re.search(a, line) for a in allow) for line in lines), r.stderr
        return (r.stdout, json.loads((d / "latest" / "run.json").read_text())) if text else json.loads(r.stdout)

    def get(command, *args, allow=(), timeout=300, text=False):
        key = (command, args, tuple(allow), text)
        if key not in made:
            d = tmp_path_factory.mktemp(command) / "runs"
            try:
                out = measure(d, command, args, allow, timeout, text)
                assert leftovers() == []
                validate_records(d)
                made[key] = (d, out)
            except Exception as e:
                made[key] = e
                raise
        got = made[key]
        if isinstance(got, Exception):
            pytest.fail(f"qprof {command} {' '.join(args)} failed in an earlier test: {got}")
        return got[0], copy.deepcopy(got[1])

    return get


# The guest the session started (session_guest): its QEMU's pid and id.
SESSION_GUEST = {}


class SessionGuest:
    """The started guest of the guest tier, started by the first test that
    asks (ensure()), again if a test killed it or it no longer runs this
    qprof, and stopped at the session's end. Its QEMU is not a leftover."""

    def status(self, env_extra=None):
        r = qprof("guest", "status", "--json", timeout=60, env_extra=env_extra)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def ensure(self) -> dict:
        """The session's guest, running and current: its status."""
        info = self.status()
        ours = info and info["id"] == SESSION_GUEST.get("id")
        if info and info["alive"] and not ours:
            pytest.fail(f"a started guest this session did not start runs ({info['id']}); `qprof guest stop` it first")
        if ours and info["alive"] and info["current"]:
            return info
        if ours and info["alive"]:  # started before qprof's files changed
            r = qprof("guest", "stop", timeout=120)
            assert r.returncode == 0, r.stderr
        SESSION_GUEST.clear()
        r = qprof("guest", "start", timeout=300)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        info = self.status()
        SESSION_GUEST.update(pid=info["qemu"]["pid"], id=info["id"])
        return info

    def stop(self) -> None:
        """At the session's end: stopped, and nothing of it left."""
        if not SESSION_GUEST:
            return
        r = qprof("guest", "stop", timeout=120)
        SESSION_GUEST.clear()
        assert r.returncode == 0 and r.stdout.startswith("stopped guest "), r.stdout + r.stderr
        assert leftovers() == []


@pytest.fixture(scope="session")
def session_guest():
    """The guest tier's started guest (SessionGuest): a test calls
    session_guest.ensure() before its `qprof run --guest` to be served by it."""
    g = SessionGuest()
    yield g
    g.stop()


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
