# SPDX-License-Identifier: GPL-2.0-only
"""The job protocol of a guest that takes runs (collectors/resident.py),
both its sides, without QEMU: the runner's loop (resident.serve) in a
process of its own over a spool directory, running a stand-in for
`qprof run`, and this machine's side (Resident.run_job) handing it jobs.
What a guest adds to it (the boot, pausing, QEMU's death) is the guest
tier's (tests/test_guest.py)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from qprof import errors, remains
from qprof.collectors import guest, resident
from qprof.describe import options

pytestmark = pytest.mark.unit

# The runner, with a `qprof run` that prints its arguments, sleeps as long
# as --sleep says (SIGINT ends it as it ends `qprof run`: 130) and exits
# with --rc.
RUNNER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from qprof import interrupts
    from qprof.collectors import resident

    def run(argv):
        print("ran", *argv, flush=True)
        print("its stderr", file=sys.stderr, flush=True)
        sleep_s, rc = float(argv[argv.index("--sleep") + 1]), int(argv[argv.index("--rc") + 1])
        try:
            time.sleep(sleep_s)
        except KeyboardInterrupt:
            return 130
        return int(rc)

    interrupts.install()
    resident.serve(Path(sys.argv[1]), run, console=Path(sys.argv[2]))
    """
)


class Stand(resident.Resident):
    """This machine's side of a runner in a process here."""

    def __init__(self, d: Path):
        super().__init__(None, "g1", d)
        (self.spool / resident.JOBS).mkdir(parents=True)
        self.console.write_text("boot\n")
        self.proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(self.spool), str(self.console)])
        self.killed = False
        end = time.monotonic() + 60
        while not (self.spool / resident.RUNNER).exists():
            assert self.proc.poll() is None and time.monotonic() < end
            time.sleep(0.05)
        self.ready = True

    def ended(self):
        return None if self.proc.poll() is None else f"exit {self.proc.returncode}"

    def kill(self):
        self.killed = True
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def stand(tmp_path, monkeypatch):
    monkeypatch.setenv("QPROF_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(remains, "_ledger", None)
    s = Stand(tmp_path / "guest")
    yield s
    if s.proc.poll() is None:
        (s.spool / resident.STOP).write_text("")
        s.proc.wait(timeout=30)
    assert s.proc.returncode == 0 or s.killed
    assert list((tmp_path / "state").glob("*.json")) == []  # the ledger: nothing held


class Job:
    """What the stand-in run is told: sleep this long, exit with that."""

    def __init__(self, sleep_s=0.0, rc=0):
        self.argv = ["--sleep", str(sleep_s), "--rc", str(rc)]


def run_job(stand, tmp_path, job, deadline_s=60.0, on_stage=lambda stage, s: None, name="run"):
    dest = tmp_path / name / "guest"
    dest.parent.mkdir()
    since = stand.console_size()
    opts = options.RunOptions(stack="tcp")
    return dest, stand.run_job(opts, job.argv, dest, time.monotonic() + deadline_s, on_stage, dest.parent / "c", since)


def test_a_job_runs_and_its_output_comes_here(stand, tmp_path):
    """Each job's output, exit code and place in the runner's order, moved
    where the run reads it; the console of its time beside it."""
    stages = []
    dest, result = run_job(stand, tmp_path, Job(sleep_s=0.5), on_stage=lambda stage, s: stages.append(stage))
    assert result["rc"] == 0 and result["runs_before"] == 0
    # Once its result is here the runner is idle and has counted it (a
    # `qprof guest status` right after the run says so).
    assert json.loads((stand.spool / resident.RUNNER).read_text()) == {
        **{"pid": stand.proc.pid},
        "served": 1,
        "job": None,
    }
    assert (dest / "run.stdout").read_text().startswith("ran run --json --options-file ")
    assert (dest / "run.stdout").read_text().rstrip().endswith("--sleep 0.5 --rc 0")
    assert (dest / "run.stderr").read_text() == "its stderr\n"
    opts = options.from_json((dest / "options.json").read_text())
    assert opts.guest is False and opts.runs_dir == str(Path(result["job"]) / "runs")
    assert "running" in stages
    console = (dest.parent / "c").read_text()
    assert "boot" not in console and f"{guest.STAGE}job {Path(result['job']).name}" in console
    dest, result = run_job(stand, tmp_path, Job(rc=7), name="second")
    assert result["rc"] == 7 and result["runs_before"] == 1
    assert list((stand.spool / resident.JOBS).iterdir()) == []
    assert json.loads((stand.spool / resident.RUNNER).read_text())["served"] == 2


def test_interrupted_here_the_job_is_cancelled_there(stand, tmp_path):
    """Ctrl-C here while the job runs: the job ends there as an interrupted
    run (130), its output still comes here, and the interrupt goes on."""

    def on_stage(stage, s):
        if stage == "running":
            raise KeyboardInterrupt

    for name in ("run", "again"):  # the next job is interrupted as the first was
        with pytest.raises(KeyboardInterrupt):
            run_job(stand, tmp_path, Job(sleep_s=60), on_stage=on_stage, name=name)
        dest = tmp_path / name / "guest"
        assert json.loads((dest / "result.json").read_text())["rc"] == 130
        assert (dest / resident.CANCEL).exists() and not stand.killed
    # The runner goes on with the next job.
    _, result = run_job(stand, tmp_path, Job(rc=0), name="next")
    assert result["rc"] == 0 and result["runs_before"] == 2


def test_a_job_taken_back_is_cancelled(stand, tmp_path):
    """A job whose directory goes (its qprof died; the ledger's reclaim
    removes it) ends there as if cancelled; the runner goes on."""
    jobs = stand.spool / resident.JOBS
    stand_in = jobs / ".x"
    stand_in.mkdir()
    args = ["run", *Job(sleep_s=60).argv]
    (stand_in / "job.json").write_text(json.dumps({"argv": args, "host_time": time.time()}))
    os.rename(stand_in, jobs / "x")
    end = time.monotonic() + 30
    while json.loads((stand.spool / resident.RUNNER).read_text())["job"] != "x":
        assert time.monotonic() < end
        time.sleep(0.05)
    subprocess.run(["rm", "-rf", str(jobs / "x")], check=True)
    while json.loads((stand.spool / resident.RUNNER).read_text())["job"] is not None:
        assert time.monotonic() < end, "the runner did not end the job taken back"
        time.sleep(0.05)
    _, result = run_job(stand, tmp_path, Job(rc=0))
    assert result["runs_before"] == 1


def test_a_job_past_its_deadline_kills_the_guest(stand, tmp_path):
    with pytest.raises(errors.GuestTimeout) as e:
        run_job(stand, tmp_path, Job(sleep_s=60), deadline_s=1.0)
    assert stand.killed
    line = e.value.sentence
    assert line.startswith("the guest timed out at stage 'job ") and str(tmp_path / "run" / "c") in line


def test_a_guest_that_dies_under_a_job(stand, tmp_path):
    def on_stage(stage, s):
        if stage == "running":
            stand.proc.send_signal(signal.SIGKILL)

    with pytest.raises(errors.GuestBootFailed) as e:
        run_job(stand, tmp_path, Job(sleep_s=60), on_stage=on_stage)
    assert e.value.sentence.startswith("the guest ended during the run (exit -9)")
    stand.killed = True


def test_a_started_guest_serves_only_its_own_kernel_and_qprof(tmp_path, monkeypatch):
    """Started.find: the started guest is used only while the guest kernel
    and initramfs (their stamp) and qprof (its code stamp) are the ones it
    started with; else the run boots its own, and says why."""
    monkeypatch.setenv("QPROF_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(resident, "alive", lambda qemu: True)
    monkeypatch.setattr(guest, "code_stamp", lambda: "code-1")
    art = guest.Artifacts(tmp_path / "k", tmp_path / "i", "6.1", "linux.deb", "stamp-1")
    state = {"id": "g1", "qemu": {"pid": 1, "start_time": 1}, "stamp": "stamp-1", "code": "code-1"}
    state.update(booted_at="2026-11-28T00:00:00+0000", boot_s=9.0)
    resident.started_dir().mkdir(parents=True)
    (resident.started_dir() / resident.STATE).write_text(json.dumps(state))
    found, why = resident.Started.find(art)
    assert found is not None and found.id == "g1" and why is None
    other = guest.Artifacts(tmp_path / "k2", tmp_path / "i2", "0.0", "other.deb", "stamp-2")
    found, why = resident.Started.find(other)
    assert found is None and "another guest kernel or initramfs" in why
    monkeypatch.setattr(guest, "code_stamp", lambda: "code-2")
    found, why = resident.Started.find(art)
    assert found is None and "qprof's files changed" in why


class Boots:
    """resident.Booted's stand-in: each one made is a boot, closed once."""

    made: list = []

    def __init__(self, art):
        self.art, self.closed = art, 0
        Boots.made.append(self)

    def close(self):
        self.closed += 1


@pytest.mark.parametrize("started", [False, True])
def test_a_comparisons_runs_share_one_guest(tmp_path, monkeypatch, started):
    """compare --guest: one placement for every run (shared_placement),
    whose guest is found or booted at the first run and serves the rest:
    without a started guest one boot for all of them, closed with the
    comparison; with one, that guest, never booted or closed here. A run
    under the deadline fault boots its own, whatever the comparison has."""
    from qprof.collectors import compare, placement
    from qprof.collectors.faults import Faults

    Boots.made = []
    art = guest.Artifacts(tmp_path / "k", tmp_path / "i", "6.1", "linux.deb", "stamp-1")
    monkeypatch.setattr(guest, "artifacts", lambda: art)
    monkeypatch.setattr(resident, "Booted", Boots)
    the_started = object()
    monkeypatch.setattr(resident.Started, "find", classmethod(lambda cls, a: (the_started if started else None, None)))
    cfg = type("Config", (), {"opts": options.RunOptions(stack="tcp-ktls", guest=True)})()
    said = []
    with compare.shared_placement(compare.CompareOptions(configs=[cfg, cfg])) as where:
        assert isinstance(where, placement.Guest) and where.art is art
        served = [where._resident(Faults(), said.append) for _ in range(3)]
        assert served[0] is served[1] is served[2]
        assert served[0] is (the_started if started else Boots.made[0])
        assert len(Boots.made) == (0 if started else 1) and not any(b.closed for b in Boots.made)
        own = where._resident(Faults("guest-deadline"), said.append)
        assert own is Boots.made[-1] and own is not served[0]
    assert [b.closed for b in Boots.made] == ([0] if started else [1, 0])
    assert said == []
    cfg.opts = options.RunOptions(stack="tcp")
    with compare.shared_placement(compare.CompareOptions(configs=[cfg])) as where:
        assert where is None
