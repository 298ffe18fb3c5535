# SPDX-License-Identifier: GPL-2.0-only
"""What a qprof process owns on this machine, kept on disk so that nothing
outlives it, even `kill -9`.

Each qprof process that measures keeps a ledger, STATE_DIR/<pid>.json: its
pid and start time, and every resource it has made and not yet removed
(network namespaces, child processes, temporary paths, run records still
"running"). Owners claim a resource when they make it and release it once
it is gone, so a ledger is empty when its process ends normally and is
deleted then. A ledger whose process is dead is a crashed run's remains:
`reclaim()` kills its processes, deletes its namespaces and paths, marks
its runs "abandoned" and deletes the ledger. `qprof run` and `compare` do
that before they measure, `qprof clean` on demand, `qprof doctor` reports.

One measurement at a time: whole-machine CPU per byte is meaningless while
another run shares the CPUs, so `run` and `compare` hold an exclusive lock
(STATE_DIR/lock, flock: the kernel releases it when its holder dies) and a
second one is refused with who holds it.

Child processes also die with qprof through PR_SET_PDEATHSIG; the ledger
is for what the kernel does not remove by itself.
"""

import ctypes
import fcntl
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, List, Optional

from . import errors, interrupts
from .files import write_json_atomic

KINDS = ("netns", "pids", "paths", "runs", "qdiscs")


def state_dir() -> Path:
    return Path(os.environ.get("QPROF_STATE_DIR", "/run/qprof"))


def start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (/proc/PID/stat
    field 22): a pid and its start time name one process, even after the
    pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def alive(pid: int, started: Optional[int]) -> bool:
    return started is not None and start_time(pid) == started


def _write(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


class Ledger:
    """This process's ledger; created on the first claim."""

    def __init__(self):
        self.pid = os.getpid()
        self.path = state_dir() / f"{self.pid}.json"
        self.data = {"pid": self.pid, "start_time": start_time(self.pid), "argv": None, **{k: [] for k in KINDS}}

    # Each change and its save in one block no signal cuts (interrupts.deferred):
    # an interrupt between a release and its save left a ledger whose process
    # had removed all it named (CI, Ctrl-C 0.15 s into a run's start-up).
    def claim(self, kind: str, value) -> None:
        with interrupts.deferred():
            if value not in self.data[kind]:
                self.data[kind].append(value)
                self._save()

    def release(self, kind: str, value) -> None:
        with interrupts.deferred():
            if value in self.data[kind]:
                self.data[kind].remove(value)
                self._save()

    def claim_pid(self, pid: int) -> dict:
        entry = {"pid": pid, "start_time": start_time(pid)}
        self.claim("pids", entry)
        return entry

    def held(self) -> Dict[str, list]:
        return {k: list(self.data[k]) for k in KINDS if self.data[k]}

    def _save(self) -> None:
        if not any(self.data[k] for k in KINDS):
            self.path.unlink(missing_ok=True)
            return
        self.data["argv"] = self.data["argv"] or _argv()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _write(self.path, self.data)
        except OSError as e:
            raise errors.RunsDirUnwritable(
                f"qprof cannot keep its ledger in {self.path.parent} ({e.strerror}); "
                "set QPROF_STATE_DIR to a writable directory."
            )


def _argv() -> List[str]:
    try:
        return Path("/proc/self/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


_ledger: Optional[Ledger] = None


def ledger() -> Ledger:
    global _ledger
    if _ledger is None or _ledger.pid != os.getpid():
        _ledger = Ledger()
    return _ledger


# -- one measurement at a time -------------------------------------------

_lock_fd: Optional[int] = None
_lock_depth = 0


@contextmanager
def exclusive(what: str):
    """Hold the machine for one measurement (re-entrant within a process:
    a comparison's runs are one measurement). Refused, not waited for,
    when another process holds it. Taking it removes what dead qprof
    processes left, and says so on stderr."""
    global _lock_fd, _lock_depth
    if _lock_depth:
        _lock_depth += 1
        try:
            yield
        finally:
            _lock_depth -= 1
        return
    d = state_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise errors.RunsDirUnwritable(
            f"qprof cannot open its lock in {d} ({e.strerror}); set QPROF_STATE_DIR to a writable directory."
        )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
        os.close(fd)
        raise errors.Busy(
            f"another qprof measurement holds this machine ({holder or 'pid unknown'}), and "
            "whole-machine CPU per byte would include its work; wait for it to end or stop it."
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()}: qprof {what}, since {time.strftime('%H:%M:%S')}".encode(), 0)
    _lock_fd, _lock_depth = fd, 1
    try:
        for item in reclaim():
            print(f"qprof: removed what an earlier qprof left: {item}", file=sys.stderr, flush=True)
        yield
    finally:
        _lock_depth = 0
        _lock_fd = None
        os.ftruncate(fd, 0)
        os.close(fd)


# -- remains of dead processes -------------------------------------------


def dead_ledgers() -> List[dict]:
    """The ledgers whose process is no longer running."""
    out = []
    d = state_dir()
    try:
        names = sorted(os.listdir(d))  # OSError (not root) is the caller's to say
    except FileNotFoundError:
        return out
    for p in (d / n for n in names if n.endswith(".json")):
        try:
            data = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            data = {"pid": None, "start_time": None}
        if data.get("pid") == os.getpid() or alive(data.get("pid") or 0, data.get("start_time")):
            continue
        data["_path"] = str(p)
        out.append(data)
    return out


def describe(data: dict) -> List[str]:
    """What a dead process left, one item a line."""
    items = [f"namespace {ns}" for ns in data.get("netns", [])]
    items += [f"process {e['pid']}" for e in data.get("pids", []) if alive(e["pid"], e.get("start_time"))]
    items += [f"path {p}" for p in data.get("paths", []) if os.path.lexists(p)]
    items += [f"the link (root qdisc) on {dev}" for dev in data.get("qdiscs", [])]
    items += [f"run {Path(r).parent.name} (marked abandoned)" for r in data.get("runs", []) if _running(r)]
    return items


def _running(record_path: str) -> bool:
    try:
        return json.loads(Path(record_path).read_text()).get("status") == "running"
    except (OSError, json.JSONDecodeError):
        return False


def reclaim() -> List[str]:
    """Remove what dead qprof processes left; what was removed, one item a
    line (what could not be is said too)."""
    removed = []
    for data in dead_ledgers():
        owner = f"qprof pid {data.get('pid')}"
        for e in data.get("pids", []):
            if alive(e["pid"], e.get("start_time")):
                try:
                    os.kill(e["pid"], signal.SIGKILL)
                    removed.append(f"process {e['pid']} ({_comm(e['pid'])}) of {owner}")
                except ProcessLookupError:
                    pass
        for ns in data.get("netns", []):
            if delete_netns(ns):
                removed.append(f"namespace {ns} of {owner}")
            elif ns in _netns_list():
                removed.append(f"namespace {ns} of {owner} could NOT be removed")
        for dev in data.get("qdiscs", []):
            # A --link on a real device (--link-dev): its root qdisc, whose
            # deletion brings the device's default back.
            r = subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True, text=True)
            if r.returncode == 0:
                removed.append(f"the link (root qdisc) on {dev} of {owner}")
        for p in data.get("paths", []):
            if os.path.lexists(p):
                shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else Path(p).unlink(missing_ok=True)
                removed.append(f"path {p} of {owner}")
        for r in data.get("runs", []):
            marked = _mark_abandoned(Path(r), data)
            if marked is not None:
                how = "marked abandoned" if marked else "could NOT be marked abandoned (its directory is not writable)"
                removed.append(f"run {Path(r).parent.name} of {owner}, {how}")
        Path(data["_path"]).unlink(missing_ok=True)
    return removed


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _netns_list() -> List[str]:
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [l.split()[0] for l in r.stdout.splitlines() if l.strip()]


def _mark_abandoned(record_path: Path, data: dict) -> Optional[bool]:
    """True once a running record is marked abandoned; False when it could
    not be written (the reclaim goes on: the ledger must still go, or every
    later run would stop here); None when there was nothing to mark."""
    try:
        rec = json.loads(record_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if rec.get("status") != "running":
        return None
    rec["status"] = "abandoned"
    rec["error"] = (
        f"qprof (pid {data.get('pid')}) ended without finishing this run (killed outright, or "
        f"the machine stopped); its remains were removed at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}."
    )
    try:
        write_json_atomic(record_path, rec)
    except (OSError, errors.RunsDirUnwritable):  # write_json_atomic says unwritable as RunsDirUnwritable
        return False
    return True


NETNS_DIR = "/run/netns"
MNT_DETACH = 2


def delete_netns(ns: str) -> bool:
    """Kill what runs in namespace ns and delete it; True once it is gone.
    As `ip netns del` does it (its name's bind mount detached, the file
    removed), without its process: ~0.1 s each in the guest's TCG."""
    kill_netns_processes(ns)
    path = os.path.join(NETNS_DIR, ns)
    libc().umount2(path.encode(), MNT_DETACH)
    try:
        os.unlink(path)
    except OSError:
        pass
    return not os.path.exists(path)


def netns_pids(ns: str) -> List[int]:
    """The processes in namespace ns (whose /proc/PID/ns/net is it), as `ip netns pids` finds them."""
    try:
        named = os.stat(os.path.join(NETNS_DIR, ns))
    except OSError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                st = os.stat(f"/proc/{entry}/ns/net")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (named.st_dev, named.st_ino):
                pids.append(int(entry))
    return pids


def kill_netns_processes(ns: str) -> None:
    for pid in netns_pids(ns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@functools.lru_cache(maxsize=None)
def libc():
    """The C library, for the namespace calls Python has no wrapper for (umount2, setns)."""
    return ctypes.CDLL(None, use_errno=True)
