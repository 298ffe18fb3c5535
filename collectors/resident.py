# SPDX-License-Identifier: GPL-2.0-only
"""A guest that takes qprof's runs as jobs, so neither its boot nor
qprof's import in it is paid per run: one booted for a command (a
`qprof run --guest`, or every run of a `qprof compare --guest`), or one
the user started (`qprof guest start`), which serves every later
command whose guest kernel and qprof are its own, until `qprof guest
stop`.

Inside, `qprof guest serve SPOOL` (the runner) takes one job at a time
from the spool, the directory the guest shares writable over virtio-9p:

    runner.json         the runner's state: its pid, runs served, the job it runs
    stop                asks the runner to end; the guest then powers off
    jobs/ID/            a job, made as jobs/.ID and renamed, so whole when seen:
      job.json          the `qprof run` arguments and this machine's clock
      options.json      the run's options (describe/options.py's hand-over)
      run.stdout, run.stderr, runs/   what `qprof run` writes
      cancel            asks the job to stop, as Ctrl-C stops `qprof run`
      result.json       its exit code and the runs served before it, written last

The runner runs each job as `qprof run` runs in a process of its own:
its signals, its stdout and stderr, its exit code and sentence; a job
that fails leaves the runner as it was. The host waits for result.json,
then moves the job into the run directory where a guest run's output
always went (RUN/guest) with the console's lines of its time
(RUN/console.log).

A started guest's state is STATE_DIR/guest (guest.json: its QEMU's pid
and start time, its artifacts' and qprof's stamps, its boot); it is
paused between jobs (QEMU's vCPUs stopped over its QMP socket), so it
takes no CPU from what this machine measures meanwhile. A guest that
stops answering (QEMU dead, a job past its deadline, a cancel not
answered) is killed and its state removed, and the run says so in one
sentence (exit 18 or 19).
"""

import json
import os
import secrets
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Callable, List, Optional

from qprof import errors, interrupts, remains
from qprof.collectors import guest
from qprof.describe import options
from qprof.files import write_json_atomic

RUNNER = "runner.json"
STOP = "stop"
JOBS = "jobs"
RESULT = "result.json"
CANCEL = "cancel"
STATE = "guest.json"
# How often the runner looks for a job, and for its job's cancel (a stat
# over 9p, inside the measured guest: rare enough to cost it nothing).
POLL_S = 0.1
CANCEL_POLL_S = 0.25
# How long a cancelled job may take to end (an interrupted run's clean-up under TCG).
CANCEL_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
QMP_TIMEOUT_S = 10.0

StageFn = Callable[[str, float], None]


def started_dir() -> Path:
    """The started guest's directory: its state, spool, console and QMP socket."""
    return remains.state_dir() / "guest"


def new_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# --- the guest's side: the runner -------------------------------------------


def serve(spool: Path, run: Callable[[List[str]], int], console: Path = Path("/dev/console")) -> None:
    """Take jobs from the spool one at a time until told to stop: each
    run(argv) with its output in the job's files, its result written last."""
    jobs = spool / JOBS
    served, seen = 0, set()

    def say(job: Optional[str]) -> None:
        write_json_atomic(spool / RUNNER, {"pid": os.getpid(), "served": served, "job": job})

    say(None)
    _stage(console, "ready")
    while not (spool / STOP).exists():
        job = next((j for j in sorted(jobs.iterdir()) if not j.name.startswith(".") and j.name not in seen), None)
        if job is None:
            time.sleep(POLL_S)
            continue
        seen.add(job.name)
        try:
            spec = json.loads((job / "job.json").read_text())
        except (OSError, ValueError):
            continue  # taken back by this machine's qprof (it died) before it began
        # A started guest's clock stood still while it was paused.
        try:
            time.clock_settime(time.CLOCK_REALTIME, spec["host_time"])
        except OSError:
            pass
        say(job.name)
        _stage(console, f"job {job.name}")
        t0 = time.monotonic()
        try:
            rc = _run_job(job, spec["argv"], run)
        except KeyboardInterrupt:  # a cancel that came as the job ended
            rc = errors.Interrupted.exit_code
        except OSError:  # its directory went before it began: taken back
            say(None)
            continue
        result = {"rc": rc, "runs_before": served, "took_s": round(time.monotonic() - t0, 3)}
        served += 1
        # Idle before the result: whoever sees the result sees the runner
        # done with it (`qprof guest status` just after a run).
        say(None)
        try:
            write_json_atomic(job / RESULT, result)
        except (OSError, errors.RunsDirUnwritable):
            pass  # taken back by this machine's qprof (it died): nobody waits for it
        _stage(console, f"job {job.name} ended {rc}")


def stage_name(stage: str) -> str:
    """A stage as a person watching is told it: a job's id left out."""
    words = stage.split()
    return "running" if words[0] == "job" and len(words) == 2 else "ended" if words[0] == "job" else stage


def _stage(console: Path, what: str) -> None:
    try:
        with open(console, "a") as f:
            f.write(f"{guest.STAGE}{what}\n")
    except OSError:
        pass


def _run_job(job: Path, argv: List[str], run: Callable[[List[str]], int]) -> int:
    """run(argv) as a process of its own would run it: stdout and stderr in
    the job's files, the signals handled afresh, a cancel delivered as
    SIGINT to the main thread, where a Ctrl-C would land."""
    out, err = open(job / "run.stdout", "wb"), open(job / "run.stderr", "wb")
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    done = threading.Event()
    main = threading.main_thread().ident

    def watch() -> None:
        while not done.wait(CANCEL_POLL_S):
            if (job / CANCEL).exists() or not job.exists():
                signal.pthread_kill(main, signal.SIGINT)
                return

    watcher = threading.Thread(target=watch, name="cancel", daemon=True)
    try:
        interrupts.rearm()
        watcher.start()
        return run(argv)
    except Exception:  # as Python ends a process on one: its traceback, exit 1
        traceback.print_exc()
        return 1
    finally:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a cancel that comes as the job ends
            done.set()
            watcher.join()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, was in zip((1, 2), saved):
                os.dup2(was, fd)
                os.close(was)
            out.close()
            err.close()


# --- this machine's side ------------------------------------------------------


def alive(qemu: dict) -> bool:
    """The process is that QEMU, and not a zombie nobody reaped yet."""
    if not remains.alive(qemu["pid"], qemu.get("start_time")):
        return False
    try:
        return Path(f"/proc/{qemu['pid']}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


class Resident:
    """A guest that takes jobs, seen from here. ready: its runner answers."""

    started = False

    def __init__(self, art: guest.Artifacts, gid: str, d: Path):
        self.art, self.id, self.dir = art, gid, d
        self.spool = d / "spool"
        self.console = d / "console.log"
        self.booted_at: Optional[str] = None
        self.boot_s: Optional[float] = None
        self.ready = False

    # what each kind answers
    def ended(self) -> Optional[str]:
        raise NotImplementedError

    def resume(self) -> None:
        pass

    def pause(self) -> None:
        pass

    def kill(self) -> None:
        raise NotImplementedError

    def describe(self, runs_before: int) -> dict:
        """What a record says of the guest that served its run."""
        return {
            "id": self.id,
            "started": self.started,
            "booted_at": self.booted_at,
            "boot_s": self.boot_s,
            "runs_before": runs_before,
        }

    def console_size(self) -> int:
        try:
            return self.console.stat().st_size
        except OSError:
            return 0

    def keep_console(self, since: int, dest: Path) -> None:
        """The console's lines from byte `since` on, into dest (a run's console.log)."""
        if self.console.exists():
            dest.write_text(guest.console_text(self.console, since))

    def _wait_ready(self, deadline: float, on_stage: StageFn, t0: float, console_as: Path) -> None:
        """Until the runner says it is ready: the boot's stages told as they come."""
        told = 0
        while not (self.spool / RUNNER).exists():
            now = time.monotonic()
            stages = guest.console_stages(self.console)
            for stage in stages[told:]:
                on_stage(stage, now - t0)
            told = len(stages)
            how = self.ended()
            if how is not None:
                if how.startswith("QEMU failed"):
                    raise errors.GuestBootFailed(f"{how}; see {console_as}.")
                raise errors.GuestBootFailed(
                    f"the guest stopped at stage '{stages[-1] if stages else 'boot'}' before its runner was ready "
                    f"(last console line: {guest.last_console_line(self.console)}); see {console_as} and "
                    f"{self.spool / 'runner.log'}."
                )
            if now > deadline:
                where = stages[-1] if stages else "before init ran"
                raise errors.GuestTimeout(
                    f"the guest timed out at stage '{where}' (last console line: "
                    f"{guest.last_console_line(self.console)}); see {console_as}."
                )
            time.sleep(0.2)
        on_stage("ready", time.monotonic() - t0)
        self.ready = True

    def run_job(
        self,
        opts: options.RunOptions,
        argv: List[str],
        dest: Path,
        deadline: float,
        on_stage: StageFn,
        console_as: Path,
        since: int,
    ) -> dict:
        """`qprof run ARGV` of opts in the guest, by deadline (monotonic);
        its output moved to dest, the console's lines from `since` to
        console_as; its result ({rc, runs_before, took_s}, and the job's
        path in the spool). Interrupted here, the job is cancelled there and
        its end awaited."""
        jid = f"{time.time_ns():x}-{os.getpid()}"
        jobs = self.spool / JOBS
        job, tmp = jobs / jid, jobs / f".{jid}"
        led = remains.ledger()
        with interrupts.deferred():
            led.claim("paths", str(tmp))
            led.claim("paths", str(job))
        published = False
        try:
            tmp.mkdir()
            (tmp / "options.json").write_text(options.to_json(replace(opts, guest=False, runs_dir=str(job / "runs"))))
            spec = {
                "argv": ["run", "--json", "--options-file", str(job / "options.json"), *argv],
                "host_time": time.time(),
                "by": {"pid": os.getpid(), "start_time": remains.start_time(os.getpid())},
            }
            write_json_atomic(tmp / "job.json", spec)
            self.resume()
            t0 = time.monotonic()
            os.rename(tmp, job)
            published = True
            return {**self._wait_result(job, deadline, on_stage, t0, console_as, since), "job": str(job)}
        except BaseException as e:
            # Interrupted here (or failing here): the job ends there as an
            # interrupted `qprof run` does; a guest that died or was killed has no job.
            if published and not isinstance(e, (errors.GuestTimeout, errors.GuestBootFailed)):
                self._cancel(job, console_as, since)
            raise
        finally:
            self.keep_console(since, console_as)
            if job.exists():
                shutil.move(str(job), str(dest))
            shutil.rmtree(tmp, ignore_errors=True)
            with interrupts.deferred():
                led.release("paths", str(tmp))
                led.release("paths", str(job))
            if self.ended() is None:
                self.pause()

    def _wait_result(self, job: Path, deadline: float, on_stage: StageFn, t0, console_as: Path, since: int) -> dict:
        told = 0
        while True:
            try:
                return json.loads((job / RESULT).read_text())
            except FileNotFoundError:
                pass
            now = time.monotonic()
            stages = guest.console_stages(self.console, since)
            for stage in stages[told:]:
                on_stage(stage_name(stage), now - t0)
            told = len(stages)
            how = self.ended()
            if how is not None:
                self.keep_console(since, console_as)
                raise self._died(how, console_as)
            if now > deadline:
                self.keep_console(since, console_as)
                raise self._timed_out(stages, console_as, since)
            time.sleep(POLL_S)

    def _died(self, how: str, console_as: Path) -> errors.QprofError:
        if how.startswith("QEMU failed"):
            return errors.GuestBootFailed(f"{how}; see {console_as}.")
        return errors.GuestBootFailed(f"the guest ended during the run ({how}); see {console_as}.")

    def _timed_out(self, stages: List[str], console_as: Path, since: int) -> errors.QprofError:
        where = stages[-1] if stages else "queued"
        self.kill()
        return errors.GuestTimeout(
            f"the guest timed out at stage '{where}' (last console line: "
            f"{guest.last_console_line(self.console, since)}); it was killed; see {console_as}."
        )

    def _cancel(self, job: Path, console_as: Path, since: int) -> None:
        """Ask the job to stop and wait for its end; a guest that does not
        answer in time is killed (and what it ran with it)."""
        try:
            (job / CANCEL).write_text("")
        except OSError:
            return
        end = time.monotonic() + CANCEL_TIMEOUT_S
        while not (job / RESULT).exists():
            if self.ended() is not None:
                return
            if time.monotonic() > end:
                self.keep_console(since, console_as)
                self.kill()
                return
            time.sleep(POLL_S)


class Booted(Resident):
    """A guest booted by this qprof, its QEMU killed on every way out: for
    one command (dying with it; its directory STATE_DIR/guest-ID), or, by
    `qprof guest start` (`started`), in a session of its own, until
    handover() gives it to the started guest's state."""

    def __init__(self, art: guest.Artifacts, started: bool = False):
        gid = new_id()
        super().__init__(art, gid, started_dir() if started else remains.state_dir() / f"guest-{gid}")
        self.detached = started
        self.vm: Optional[guest.GuestVM] = None

    def boot(self, deadline: float, on_stage: StageFn, console_as: Path) -> None:
        t0 = time.monotonic()
        self.booted_at = now_text()
        with interrupts.deferred():
            remains.ledger().claim("paths", str(self.dir))
        (self.spool / JOBS).mkdir(parents=True)
        (self.spool / "cmd.sh").write_text(guest.serve_script(self.spool))
        kw = {"qmp": self.dir / "qmp.sock", "detached": self.dir / "qemu.stderr"} if self.detached else {}
        self.vm = guest.GuestVM(self.art, self.spool, self.console, **kw).__enter__()
        on_stage("boot", 0.0)
        self._wait_ready(deadline, on_stage, t0, console_as)
        self.boot_s = round(time.monotonic() - t0, 3)

    def ended(self) -> Optional[str]:
        return self.vm.ended() if self.vm is not None else "not booted"

    def kill(self) -> None:
        if self.vm is not None:
            self.vm.__exit__()

    def handover(self) -> dict:
        """The started guest's state, written; its QEMU and directory no
        longer this qprof's."""
        qmp(self.dir / "qmp.sock", "stop")
        state = {
            "id": self.id,
            "qemu": {"pid": self.vm.proc.pid, "start_time": remains.start_time(self.vm.proc.pid)},
            "stamp": self.art.stamp,
            "kernel_release": self.art.kernel_release,
            "package": self.art.package,
            "code": guest.code_stamp(),
            "booted_at": self.booted_at,
            "boot_s": self.boot_s,
        }
        write_json_atomic(self.dir / STATE, state)
        with interrupts.deferred():
            self.vm.handover()
            self.vm = None
            remains.ledger().release("paths", str(self.dir))
        return state

    def close(self) -> None:
        """QEMU killed (nothing in it is worth waiting for: every job's
        output has been taken), its directory removed."""
        with interrupts.deferred():
            self.kill()
            if self.vm is not None or not self.detached or not (self.dir / STATE).exists():
                shutil.rmtree(self.dir, ignore_errors=True)
            remains.ledger().release("paths", str(self.dir))


class Started(Resident):
    """The guest `qprof guest start` started: the user's until `qprof guest
    stop`; its QEMU in a session of its own, outliving every command."""

    started = True

    def __init__(self, art: guest.Artifacts, state: dict):
        super().__init__(art, state["id"], started_dir())
        self.state = state
        self.qemu = state["qemu"]
        self.booted_at, self.boot_s = state["booted_at"], state["boot_s"]
        self.ready = True

    @staticmethod
    def load() -> Optional[dict]:
        try:
            return json.loads((started_dir() / STATE).read_text())
        except (OSError, ValueError):
            return None

    @classmethod
    def find(cls, art: guest.Artifacts):
        """(the started guest, None) if one runs this guest kernel and this
        qprof; else (None, why not, or None without one). A dead one's
        state is removed, and said."""
        state = cls.load()
        if state is None:
            return None, None
        if not alive(state["qemu"]):
            for item in reclaim():
                print(f"qprof: removed {item}", file=sys.stderr, flush=True)
            return None, None
        if state["stamp"] != art.stamp:
            return None, f"the started guest {state['id']} runs another guest kernel or initramfs"
        if state["code"] != guest.code_stamp():
            return None, f"qprof's files changed since the started guest {state['id']} started"
        return cls(art, state), None

    def ended(self) -> Optional[str]:
        if alive(self.qemu):
            return None
        err = [line for line in _read(self.dir / "qemu.stderr").splitlines() if line.strip()]
        return f"its QEMU, pid {self.qemu['pid']}, is gone" + (f": {err[-1].strip()}" if err else "")

    def resume(self) -> None:
        try:
            qmp(self.dir / "qmp.sock", "cont")
        except OSError as e:
            self.kill()
            raise errors.GuestBootFailed(
                f"the started guest {self.id} did not answer on its QEMU monitor ({e}); it was killed and its "
                "state removed: `qprof guest start` starts another."
            )

    def pause(self) -> None:
        """Between jobs: a guest that cannot be paused is killed, and said;
        the run it served stands."""
        try:
            qmp(self.dir / "qmp.sock", "stop")
        except OSError as e:
            self.kill()
            print(
                f"qprof: warning: the started guest {self.id} could not be paused ({e}); it was killed and its "
                "state removed: `qprof guest start` starts another.",
                file=sys.stderr,
                flush=True,
            )

    def kill(self) -> None:
        kill_started(self.state)

    def _died(self, how: str, console_as: Path) -> errors.QprofError:
        kill_started(self.state)
        return errors.GuestBootFailed(
            f"the started guest {self.id} died during the run ({how}); its state was removed: "
            f"`qprof guest start` starts another; see {console_as}."
        )

    def _timed_out(self, stages: List[str], console_as: Path, since: int) -> errors.QprofError:
        where = stages[-1] if stages else "queued"
        last = guest.last_console_line(self.console, since)
        self.kill()
        return errors.GuestTimeout(
            f"the started guest {self.id} timed out at stage '{where}' (last console line: {last}); it was killed "
            f"and its state removed: `qprof guest start` starts another; see {console_as}."
        )


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def kill_started(state: dict) -> None:
    """The started guest's QEMU killed, and its state removed."""
    with interrupts.deferred():
        qemu = state["qemu"]
        if alive(qemu):
            try:
                os.kill(qemu["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        reaped(qemu)
        remove_state()


def reaped(qemu: dict, timeout_s: float = 10.0) -> None:
    """Until the process is gone from the process table: its parent is
    init, which reaps an orphan in its own time (2 s here), and until then
    it is listed."""
    end = time.monotonic() + timeout_s
    while remains.start_time(qemu["pid"]) == qemu.get("start_time") and time.monotonic() < end:
        time.sleep(0.05)


def remove_state() -> None:
    shutil.rmtree(started_dir(), ignore_errors=True)


def qmp(sock: Path, command: str) -> dict:
    """One command to QEMU's monitor; its return."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(QMP_TIMEOUT_S)
        s.connect(str(sock))
        f = s.makefile("rwb")
        f.readline()  # the greeting
        for cmd in ("qmp_capabilities", command):
            f.write(json.dumps({"execute": cmd}).encode() + b"\n")
            f.flush()
            while True:
                line = f.readline()
                if not line:
                    raise OSError("the monitor closed")
                msg = json.loads(line)
                if "error" in msg:
                    raise OSError(msg["error"].get("desc", "an error"))
                if "return" in msg:
                    break  # else an event
        return msg["return"]


def start(art: guest.Artifacts, on_stage: StageFn) -> Started:
    """A started guest, booted and paused, its runner ready; refused when
    one runs already. Its QEMU is this qprof's (killed on every way out)
    until its state is written."""
    state = Started.load()
    if state is not None and alive(state["qemu"]):
        raise errors.GuestBootFailed(
            f"guest {state['id']} is started already (QEMU pid {state['qemu']['pid']}); "
            "`qprof guest stop` stops it, then start another."
        )
    remove_state()  # a dead one's, if any
    b = Booted(art, started=True)
    try:
        b.boot(time.monotonic() + guest.BOOT_TIMEOUT_S, on_stage, b.console)
        return Started(art, b.handover())
    finally:
        b.close()


def status() -> Optional[dict]:
    """What the started guest is and does: its state, whether it runs, its
    runs served, the job it runs, whether it is paused and whether this
    machine's runs would use it (`current`); None without one."""
    state = Started.load()
    if state is None:
        return None
    up = alive(state["qemu"])
    out = {**state, "alive": up}
    try:
        runner = json.loads((started_dir() / "spool" / RUNNER).read_text())
    except (OSError, ValueError):
        runner = {}
    out["served"], out["job"] = runner.get("served", 0), runner.get("job")
    if up:
        try:
            out["vm"] = qmp(started_dir() / "qmp.sock", "query-status").get("status")
        except OSError as e:
            out["vm"] = f"unknown ({e})"
        try:
            art = guest.artifacts()
            out["current"] = art.stamp == state["stamp"] and guest.code_stamp() == state["code"]
        except errors.QprofError:
            out["current"] = False
    return out


def stop() -> Optional[dict]:
    """The started guest powered off (its runner told to stop; killed if it
    does not within STOP_TIMEOUT_S) and its state removed; what it was."""
    info = status()
    if info is None:
        return None
    if info["alive"]:
        d = started_dir()
        (d / "spool" / STOP).write_text("")
        try:
            qmp(d / "qmp.sock", "cont")
        except OSError:
            pass
        end = time.monotonic() + STOP_TIMEOUT_S
        while alive(info["qemu"]) and time.monotonic() < end:
            time.sleep(0.1)
    kill_started(info)
    return info


def reclaim(dry_run: bool = False) -> List[str]:
    """A started guest whose QEMU died: its state removed; what was (or
    would be). A live one is the user's, left alone. (A start that did not
    finish is its qprof's ledger's: remains.reclaim removes it.)"""
    state = Started.load()
    if state is None or alive(state["qemu"]):
        return []
    if not dry_run:
        remove_state()
    return [f"started guest {state['id']}, whose QEMU died (its state in {started_dir()})"]
