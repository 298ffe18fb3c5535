# SPDX-License-Identifier: GPL-2.0-only
"""Kernel TLS, proven inside a QEMU guest running Debian's kernel: the
host here has none; the started guest (`qprof guest`) that serves the
guest runs as jobs (the guest as another host, with a kernel of its
own, for a run's server: tests/test_guest_host_link.py). Transfers are short: the guest is
emulated (TCG). The runs go to the session's started guest
(conftest.session_guest) unless a test says otherwise."""

import json
import os
import signal
import subprocess
import time

import pytest

from qprof import errors, remains
from qprof.collectors import guest

from conftest import SESSION_GUEST, leftovers, needs_build, qprof, run_json, started
from test_bad_input import one_sentence, run_statuses

# A guest run's few seconds of window take ten or more in the emulator;
# qprof's own deadlines for a guest (its boot 120 s, a run its window and
# 300 s) end a stuck one first, in its own words.
GUEST_RUN_S = 600
GUEST_TEST_S = 900
pytestmark = [pytest.mark.guest, needs_build, pytest.mark.timeout(GUEST_TEST_S)]
GUEST_BOOT_FAILED, GUEST_MISSING = 18, 20

needs_guest = pytest.mark.skipif(
    not list(guest.guest_dir().glob("linux-image-*-amd64_*.deb")),
    reason="the guest kernel is not downloaded; `make test` runs `make guest` first",
)


def qemu_processes():
    """QEMU processes but the session's started guest."""
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [
        line
        for line in ps.splitlines()
        if line.split(None, 1)[1:] and line.split(None, 1)[1].startswith("qemu-system")
        if line.split()[0] != str(SESSION_GUEST.get("pid"))
    ]


def served_by(rec: dict, info: dict) -> dict:
    """The record says the started guest of that status served it; its
    environment.guest."""
    g = rec["environment"]["guest"]
    assert g["started"] is True and g["id"] == info["id"], (g, info["id"])
    assert g["booted_at"] == info["booted_at"] and g["boot_s"] == info["boot_s"]
    return g


def check_guest_run(rec: dict) -> None:
    """What every guest run's record holds: emulated, the guest's kernel."""
    assert rec["status"] == "complete" and rec["verified"] is True and rec["bytes"] > 0
    env = rec["environment"]
    assert env["emulated"] is True and env["guest"]["accel"] == "tcg"
    assert env["kernel_release"] == env["guest"]["kernel_release"] != env["host"]["kernel_release"]


def spool_jobs(state_dir) -> list:
    """The started guest's jobs whose run has started its workload in the guest."""
    return list((state_dir / "guest" / "spool" / "jobs").glob("*/runs/*/client.log"))


def wait_for(what, cond, timeout_s=GUEST_RUN_S):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.2)


KTLS = ("--stack", "tcp-ktls", "--guest", "--duration", "1s", "--warmup", "0.5s")
QUIET = ("--probes", "none", "--sample-hz", "0")


def ktls_run(runs_dir, *args):
    """A kTLS run with the syscalls probe loaded; no stack samples (the
    comparison's runs take them)."""
    rec = run_json(runs_dir, *KTLS, "--probes", "syscalls", "--sample-hz", "0", *args, timeout=GUEST_RUN_S)
    assert qemu_processes() == []
    check_guest_run(rec)
    return rec


def ktls_versions(session_guest, shared):
    """TLS 1.3 and 1.2 over kTLS, one comparison in the started guest, every
    probe and the stack samples on: (runs_dir, comparison, [1.3's record,
    1.2's record])."""
    session_guest.ensure()
    d, comp = shared(
        "compare", *KTLS, "--vary", "tls=1.3,1.2", "--repeat", "1", "--probes", "syscalls,packets,cputhread",
        timeout=GUEST_RUN_S,
    )  # fmt: skip
    recs = [json.loads((d / r["id"] / "run.json").read_text()) for r in comp["runs"]]
    for rec in recs:
        check_guest_run(rec)
    return d, comp, recs


@needs_guest
def test_ktls_tls13_offloads_send(session_guest, shared):
    d, _, (rec, _) = ktls_versions(session_guest, shared)
    # Every probe loads on Debian's 6.1 (packets through its portable build:
    # 6.1 has no bpf_rdonly_cast) and saw the transfer.
    assert {n: p["status"] for n, p in rec["probes"].items()} == dict.fromkeys(
        ("syscalls", "packets", "cputhread"), "present"
    )
    assert rec["probes"]["packets"]["build"] == "portable"
    devices = rec["probes"]["packets"]["window"]["devices"]
    assert sum(d["tx"]["tcp_skbs"] for d in devices) > 0
    tr = rec["transport"]
    assert tr["tls_version"] == "TLSv1.3" and tr["tls_cipher"] == "TLS_AES_128_GCM_SHA256"
    # OpenSSL 3.0 offloads TLS 1.3 send only: the client's send in the kernel,
    # the server's receive in user space; the label says no more than that.
    assert tr["ktls"]["client_send"] is True and tr["ktls"]["server_recv"] is False
    assert tr["ktls_label"] == "tx only"
    assert tr["tls_stat_delta"]["client"]["TlsTxSw"] >= 1
    assert tr["tls_stat_delta"]["server"]["TlsRxSw"] == 0
    # The guest's own run directory came back into the host's.
    guest_rec = json.loads((d / rec["id"] / rec["guest_run"] / "run.json").read_text())
    assert guest_rec["bytes"] == rec["bytes"]


@needs_guest
def test_ktls_tls12_offloads_both_directions(session_guest, shared):
    d, _, (_, rec) = ktls_versions(session_guest, shared)
    tr = rec["transport"]
    assert tr["tls_version"] == "TLSv1.2" and tr["ktls_label"] == "tx+rx"
    assert tr["tls_stat_delta"]["client"]["TlsTxSw"] >= 1
    assert tr["tls_stat_delta"]["server"]["TlsRxSw"] >= 1
    # With receive in the kernel the server reads plaintext with recvmsg
    # (kTLS hands record types over cmsg), not read() as OpenSSL does in
    # user space.
    calls = rec["syscalls"]["server"]["by_syscall"]
    assert calls.get("read", {}).get("bytes", 0) < 0.01 * rec["bytes"]
    # The probe's window is the workload's but for when each read its
    # counters at an edge: the probe somewhere between its t_ns and t_ns +
    # read_ns (one call per map; the first edge's took 38 ms under TCG in
    # one run), the server at its mark's t_ns. What the server read between
    # the two is in one window and not the other: at most the window's own
    # rate over that gap (the server reads as fast as it decrypts; the
    # probe's read only takes CPU from it), plus at each edge one read in
    # flight, counted by the probe as it returns and by the workload once
    # checked: at most one --io-size buffer, more than the record buffer
    # OpenSSL has kTLS read into.
    m = json.loads((d / rec["id"] / rec["guest_run"] / "measurement.json").read_text())
    apart_ns = 0
    for name, p in rec["probes"]["syscalls"]["edges"].items():
        t = m["window"][name]["server_mark"]["t_ns"]
        apart_ns += max(abs(p["t_ns"] - t), abs(p["t_ns"] + p["read_ns"] - t))
    slack = rec["bytes"] / rec["window_s"] * apart_ns / 1e9 + 2 * rec["config"]["io_size"]
    assert abs(calls["recvmsg"]["bytes"] - rec["bytes"]) <= slack, (calls["recvmsg"]["bytes"], rec["bytes"], slack)


@needs_guest
def test_a_started_guest_serves_a_comparison_and_says_so(session_guest, shared):
    """Both runs of the comparison went to the started guest, one after the
    other, and each record says so; what a guest run keeps (its own run
    directory, its stacks) is where the commands that read it look."""
    d, comp, recs = ktls_versions(session_guest, shared)
    info = session_guest.status()
    first, second = (served_by(rec, info) for rec in recs)
    assert second["runs_before"] == first["runs_before"] + 1 <= info["served"] - 1
    # Idle between runs: paused, no job.
    assert info["alive"] and info["vm"] == "paused" and info["job"] is None and info["current"] is True
    # Debian's kernel has a PVH entry: QEMU boots its ELF there, not the bzImage.
    argv = open(f"/proc/{info['qemu']['pid']}/cmdline").read().split("\0")
    kernel = argv[argv.index("-kernel") + 1]
    assert kernel == str(guest.artifacts().kernel) and os.path.basename(kernel).startswith("vmlinux-"), argv
    for rec in recs:
        assert rec["flame"]["samples"]["client"] > 0
        assert (d / rec["id"] / rec["flame"]["stacks_dir"]).is_dir()
        assert (d / rec["id"] / "console.log").read_text().count(guest.STAGE + "job ") >= 1
        for cmd in (("show", rec["id"]), ("flame", rec["id"], "--side", "client")):
            r = qprof(*cmd, "--runs-dir", str(d))
            assert r.returncode == 0 and r.stderr == "", r.stderr
    assert comp["flame_diff"]["sides"]["client"]["svg"]


@needs_guest
def test_ktls_handshakes_and_requests_at_load(session_guest, runs_dir):
    """Issue 27's patterns on kernel TLS: new connections resuming their
    sessions, each with its send in the kernel, and a closed loop over
    four connections, every answer checked."""
    session_guest.ensure()
    rec = ktls_run(runs_dir, "--pattern", "handshakes", "--conns", "2", "--resume")
    h = rec["handshakes"]
    whole = h["whole_run"]
    assert h["handshakes"] > 0 and whole["handshakes"] == whole["connections_opened"]
    assert whole["resumed"] >= whole["handshakes"] - 2 and h["early_data"] == 0
    assert rec["transport"]["ktls"]["client_send"] is True
    assert rec["transport"]["tcp_ecn"]["client"]["connections"] == whole["handshakes"]
    rec = ktls_run(
        runs_dir,
        *("--pattern", "rr", "--rr-mode", "closed", "--conns", "2", "--streams", "2"),
        *("--request", "512", "--response", "4000"),
    )
    rr = rec["rr"]
    assert rr["mode"] == "closed" and rr["in_flight"] == 4 and rr["requests_per_s"] > 0
    assert rec["transport"]["ktls"]["client_send"] is True
    assert rec["transport"]["tcp_ecn"]["server"]["connections"] == 4


@needs_guest
def test_ctrl_c_cancels_the_job_in_the_started_guest(session_guest, runs_dir):
    """Ctrl-C on this machine while the started guest runs the job: the job
    is interrupted in the guest as `qprof run` is (its run marked, what it
    made removed), this qprof exits 130, and the guest, paused again,
    serves the next run."""
    info = session_guest.ensure()
    state = remains.state_dir()
    args = ("run", "--stack", "tcp", "--guest", "-d", "60s", *QUIET)
    with started(*args, runs_dir=runs_dir) as p:
        wait_for("workload in the guest's job", lambda: spool_jobs(state) or p.poll() is not None)
        os.kill(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=300)
    assert p.returncode == errors.Interrupted.exit_code, err
    assert one_sentence(err) == f"qprof: {errors.Interrupted.default_sentence}"
    assert run_statuses(runs_dir) == ["incomplete"]
    run = next(runs_dir.glob("2*"))
    result = json.loads((run / "guest" / "result.json").read_text())
    assert result == {**result, "rc": errors.Interrupted.exit_code, "runs_before": info["served"]}
    inner = json.loads(next((run / "guest" / "runs").glob("2*/run.json")).read_text())
    assert inner["status"] == "incomplete" and inner["error"] == errors.Interrupted.default_sentence
    assert leftovers() == []
    after = session_guest.status()
    assert after == {**info, "served": info["served"] + 1, "vm": "paused"}
    # It serves the next run as it served this one.
    rec = run_json(runs_dir, "--stack", "tcp", "--guest", "-d", "0.5s", "--warmup", "0.2s", *QUIET, timeout=GUEST_RUN_S)
    check_guest_run(rec)
    assert served_by(rec, after)["runs_before"] == after["served"]


@needs_guest
def test_a_started_guest_killed_under_a_run(tmp_path, runs_dir):
    """A started guest of its own (its own state directory): started, said
    in `qprof guest status`, then its QEMU killed while it runs a job. The
    run stops with exit 18 and one sentence naming the guest, its state is
    removed, and nothing is left."""
    state = tmp_path / "state"
    env = {"QPROF_STATE_DIR": str(state)}
    r = qprof("guest", "start", env_extra=env, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    gid = r.stdout.split()[2]
    assert r.stdout.startswith(f"started guest {gid} (") and "until `qprof guest stop`" in r.stdout
    r = qprof("guest", "status", env_extra=env)
    assert r.returncode == 0 and f"guest {gid}: QEMU pid " in r.stdout, r.stderr
    assert "0 runs served; idle, paused; runs with --guest use it." in r.stdout
    info = json.loads(qprof("guest", "status", "--json", env_extra=env).stdout)
    args = ("run", "--stack", "tcp", "--guest", "-d", "60s", *QUIET)
    with started(*args, runs_dir=runs_dir, env_extra=env) as p:
        wait_for("workload in the guest's job", lambda: spool_jobs(state) or p.poll() is not None)
        os.kill(info["qemu"]["pid"], signal.SIGKILL)
        _, err = p.communicate(timeout=300)
    assert p.returncode == GUEST_BOOT_FAILED, err
    line = one_sentence(err)
    run = next(runs_dir.glob("2*"))
    assert line.startswith(f"qprof: the started guest {gid} died during the run (its QEMU, pid {info['qemu']['pid']}")
    assert "its state was removed: `qprof guest start` starts another" in line and str(run / "console.log") in line
    assert run_statuses(runs_dir) == ["incomplete"]
    assert json.loads((run / "run.json").read_text())["error"] in line
    assert guest.STAGE + "job " in (run / "console.log").read_text()
    assert json.loads(qprof("guest", "status", "--json", env_extra=env).stdout) is None
    assert qprof("guest", "stop", env_extra=env).stdout == "no guest is started; nothing to stop.\n"
    assert qemu_processes() == [] and sorted(p.name for p in state.iterdir()) == ["lock"]


def test_clean_removes_a_started_guest_whose_qemu_died(tmp_path, session_guest):
    """A started guest's state whose QEMU is gone (a process that ended
    stands in for it, in a state directory of the test's): status says so,
    `qprof clean` removes it. A live started guest (the session's) is its
    user's: `qprof clean` leaves it."""
    state = tmp_path / "state"
    (state / "guest").mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    qemu = {"pid": gone.pid, "start_time": remains.start_time(gone.pid)}
    gone.wait()
    (state / "guest" / "guest.json").write_text(
        json.dumps({"id": "g1", "qemu": qemu, "booted_at": "2026-11-28T00:00:00+0000", "boot_s": 9.0})
    )
    env = {"QPROF_STATE_DIR": str(state)}
    r = qprof("guest", "status", env_extra=env)
    assert r.stdout == "guest g1 is not running (its QEMU died); `qprof clean` removes its state.\n", r.stderr
    r = qprof("clean", "-n", env_extra=env)
    assert r.stdout == f"would remove started guest g1, whose QEMU died (its state in {state / 'guest'})\n"
    r = qprof("clean", env_extra=env)
    assert r.stdout == f"removed started guest g1, whose QEMU died (its state in {state / 'guest'})\n"
    assert not (state / "guest").exists()
    info = session_guest.ensure()
    r = qprof("clean")
    assert r.returncode == 0 and "guest" not in r.stdout, r.stdout
    assert session_guest.status() == info


@needs_guest
def test_guest_artifacts_are_cached():
    first = guest.artifacts()
    mtime = first.initramfs.stat().st_mtime_ns
    second = guest.artifacts()
    assert second == first and second.initramfs.stat().st_mtime_ns == mtime


def test_guest_missing(runs_dir, tmp_path):
    r = qprof("run", "--stack", "tcp-ktls", "--guest", runs_dir=runs_dir, env_extra={"QPROF_GUEST_DIR": str(tmp_path)})
    assert r.returncode == GUEST_MISSING, r.stderr
    assert "make guest" in one_sentence(r.stderr)
    assert not runs_dir.exists()


@needs_guest
def test_guest_boot_failure_says_where(runs_dir, tmp_path, session_guest):
    # A cached "kernel" QEMU cannot boot: the run stops with QEMU's reason.
    # Its artifacts are not the started guest's, which it leaves alone.
    info = session_guest.ensure()
    deb = tmp_path / "linux-image-0.0-amd64_0_amd64.deb"
    deb.write_text("")
    kernel, initramfs = tmp_path / "vmlinuz-bad", tmp_path / "initramfs-bad.cpio.gz"
    kernel.write_text("not a kernel\n")
    initramfs.write_text("")
    (tmp_path / f"built-{guest._stamp(deb)}.json").write_text(
        json.dumps({"kernel": str(kernel), "initramfs": str(initramfs), "kernel_release": "0.0", "package": deb.name})
    )
    r = qprof(
        "run",
        "--stack",
        "tcp-ktls",
        "--guest",
        "--duration",
        "1s",
        runs_dir=runs_dir,
        env_extra={"QPROF_GUEST_DIR": str(tmp_path)},
    )
    assert r.returncode == GUEST_BOOT_FAILED, r.stderr
    assert "QEMU failed" in one_sentence(r.stderr)
    assert run_statuses(runs_dir) == ["incomplete"]
    assert qemu_processes() == []
    assert session_guest.status() == info
