# SPDX-License-Identifier: GPL-2.0-only
"""Kernel TLS, proven inside a QEMU guest running Debian's kernel: the
host here has none; and the guest as another host, with a kernel of its
own, for a run's server (issue 26). Transfers are short: the guest is
emulated (TCG)."""

import json
import subprocess

import pytest

from qprof.collectors import guest

from conftest import needs_build, qprof, run_json
from test_bad_input import one_sentence, run_statuses
from test_run_hosts import hosts_run

pytestmark = [pytest.mark.guest, needs_build]
GUEST_BOOT_FAILED, GUEST_MISSING = 18, 20

needs_guest = pytest.mark.skipif(
    not list(guest.guest_dir().glob("linux-image-*-amd64_*.deb")),
    reason="the guest kernel is not downloaded; `make test` runs `make guest` first",
)


def qemu_processes():
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [l for l in ps.splitlines() if l.startswith("qemu-system")]


def ktls_run(runs_dir, *args, probes="syscalls"):
    rec = run_json(
        runs_dir,
        "--stack",
        "tcp-ktls",
        "--guest",
        "--duration",
        "1s",
        "--warmup",
        "0.5s",
        "--probes",
        probes,
        *args,
        timeout=400,
    )
    assert qemu_processes() == []
    assert rec["status"] == "complete" and rec["verified"] is True and rec["bytes"] > 0
    env = rec["environment"]
    assert env["emulated"] is True and env["guest"]["accel"] == "tcg"
    assert env["kernel_release"] == env["guest"]["kernel_release"] != env["host"]["kernel_release"]
    return rec


@needs_guest
def test_ktls_tls13_offloads_send(runs_dir):
    rec = ktls_run(runs_dir, probes="syscalls,packets,cputhread")
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
    guest_rec = json.loads((runs_dir / rec["id"] / rec["guest_run"] / "run.json").read_text())
    assert guest_rec["bytes"] == rec["bytes"]


@needs_guest
def test_ktls_handshakes_and_requests_at_load(runs_dir):
    """Issue 27's patterns on kernel TLS: new connections resuming their
    sessions, each with its send in the kernel, and a closed loop over
    four connections, every answer checked."""
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
def test_ktls_tls12_offloads_both_directions(runs_dir):
    rec = ktls_run(runs_dir, "--tls", "1.2")
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
    m = json.loads((runs_dir / rec["id"] / rec["guest_run"] / "measurement.json").read_text())
    apart_ns = 0
    for name, p in rec["probes"]["syscalls"]["edges"].items():
        t = m["window"][name]["server_mark"]["t_ns"]
        apart_ns += max(abs(p["t_ns"] - t), abs(p["t_ns"] + p["read_ns"] - t))
    slack = rec["bytes"] / rec["window_s"] * apart_ns / 1e9 + 2 * rec["config"]["io_size"]
    assert abs(calls["recvmsg"]["bytes"] - rec["bytes"]) <= slack, (calls["recvmsg"]["bytes"], rec["bytes"], slack)


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


def test_guest_boot_failure_says_where(runs_dir, tmp_path):
    # A cached "kernel" QEMU cannot boot: the run stops with QEMU's reason.
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


@needs_guest
def test_a_run_with_its_server_in_the_guest(guest_ssh_host, runs_dir):
    """The server on a host with a kernel of its own: the QEMU guest
    (Debian's kernel, TCG) reached over a tap device. Its environment is
    its own kernel's, its clock is not ours, and its machine-wide figures
    are its own, added to this machine's."""
    host = guest_ssh_host
    rec = hosts_run(runs_dir, host, "--stack", "quic", "-d", "2s", "--warmup", "1s", timeout=600)
    assert rec["status"] == "complete" and rec["verified"] is True and rec["bytes"] > 0
    hosts = rec["hosts"]
    assert hosts["same_kernel"] is False
    there, here = hosts["server"]["environment"], hosts["client"]["environment"]
    assert there["kernel_release"] == guest.artifacts().kernel_release != here["kernel_release"]
    assert there["boot_id"] != here["boot_id"]
    clock = hosts["server"]["clock"]
    assert clock["uncertainty_ns"] * 2 >= clock["rtt_ns"] > 0
    for name, probe in rec["probes"].items():
        assert probe["status"] == "present", (name, probe)
    assert rec["probes"]["packets"]["hosts"]["server"]["build"] == "portable"  # Debian's 6.1
    flame = rec["flame"]
    for side in ("client", "server"):
        assert rec["cpu"][side]["oncpu_schedstat_s"] > 0
        assert flame["samples"][side] > 0
    # Each kernel's CPUs in the capture's coverage, each against its own window.
    assert {c.split("/")[0] for c in flame["coverage_per_cpu"]} == {"client", "server"}
    # The machine: both kernels' CPU together.
    for role in ("client", "server"):
        assert hosts[role]["cpu"]["total_s"] > 0
    assert rec["cpu"]["system"]["total_s"] == pytest.approx(
        hosts["client"]["cpu"]["total_s"] + hosts["server"]["cpu"]["total_s"], rel=1e-9
    )
    assert host.wait_idle() == []
