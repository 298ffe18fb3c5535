# SPDX-License-Identifier: GPL-2.0-only
"""TCP stacks on the host: plain TCP and TLS in OpenSSL user space."""

import pytest

from conftest import agrees_at_its_edges, needs_build, qprof, run_json
from refusals import refused
from test_bad_input import one_sentence, refused_run, run_statuses
from test_run_quic import assert_cpu_closes

BAD_TLS, SENDFILE, KERNEL_FEATURE, HANDSHAKE = 16, 17, 12, 8


def assert_tcp_transfer(rec, streams=1):
    assert rec["status"] == "complete" and rec["verified"] is True
    assert rec["bytes"] > 0 and rec["throughput_gbps"] > 0
    assert_cpu_closes(rec)
    wc, ws = rec["workload"]["client"]["window"], rec["workload"]["server"]["window"]
    assert ws["app_bytes"] == rec["bytes"]
    # TCP_INFO, both directions: the bytes the client had acked are the
    # bytes the server received, and almost nothing flows back.
    assert wc["tcp_info"]["bytes_acked"] > 100 * max(1, wc["tcp_info"]["bytes_received"])
    assert ws["tcp_info"]["bytes_received"] == pytest.approx(wc["tcp_info"]["bytes_acked"], rel=0.02)
    assert ws["tcp_info"]["segs_in"] == pytest.approx(wc["tcp_info"]["segs_out"], rel=0.02)
    assert rec["workload"]["server"]["report"]["streams_completed"] == streams
    # eBPF: data leaves by the client's send calls, arrives by the server's
    # receive calls (the probe's and the workload's edges are a few calls apart).
    c, s = rec["syscalls"]["client"], rec["syscalls"]["server"]
    assert c["send_bytes"] >= rec["workload"]["client"]["window"]["app_bytes"] * 0.99
    assert s["recv_bytes"] >= rec["bytes"] * 0.99 and c["recv_bytes"] < s["recv_bytes"] / 100


@pytest.mark.system
@needs_build
def test_tcp_netns(runs_dir):
    rec = run_json(runs_dir, "--stack", "tcp", "--duration", "2s", "--warmup", "0.5s", "--probes", "syscalls")
    assert_tcp_transfer(rec)
    # The kernel's default (net.ipv4.tcp_ecn 2) takes ECN but does not ask: none negotiated it.
    one = {"connections": 1, "ecn_connections": 0}
    assert rec["transport"] == {"protocol": "tcp", "tls": "none", "tcp_ecn": {"client": one, "server": one}}
    c, s = rec["syscalls"]["client"], rec["syscalls"]["server"]
    # Plain TCP: bytes through the syscalls are exactly the application's.
    assert c["send_bytes"] == pytest.approx(rec["workload"]["client"]["window"]["app_bytes"], rel=0.01)
    assert s["recv_bytes"] == pytest.approx(rec["workload"]["server"]["window"]["app_bytes"], rel=0.01)
    # ...and the workload's own call counts are the syscalls eBPF saw: each
    # side's count at its marks within what the probe counted up to them.
    for side in ("client", "server"):
        check = rec["crosscheck"][side]["io_calls"]
        assert check["own"] > 0 and agrees_at_its_edges(check), (side, check)


@pytest.mark.system
@needs_build
def test_tcp_sendfile_loopback_streams(runs_dir):
    rec = run_json(
        runs_dir,
        "--stack",
        "tcp",
        "--sendfile",
        "--topology",
        "loopback",
        "--port",
        "24901",
        "--streams",
        "2",
        "--duration",
        "2s",
        "--warmup",
        "0.5s",
        "--probes",
        "syscalls",
    )
    assert_tcp_transfer(rec, streams=2)
    calls = rec["syscalls"]["client"]["by_syscall"]
    assert calls["sendfile"]["calls"] > 0 and "sendto" not in calls


@pytest.mark.system
@needs_build
@pytest.mark.parametrize(
    "version,cipher", [("1.3", "TLS_AES_128_GCM_SHA256"), ("1.2", "ECDHE-ECDSA-AES128-GCM-SHA256")]
)
def test_tcp_tls(runs_dir, version, cipher):
    rec = run_json(
        runs_dir, "--stack", "tcp-tls", "--tls", version, "--duration", "2s", "--warmup", "0.5s", "--probes", "syscalls"
    )
    assert_tcp_transfer(rec)
    tr = rec["transport"]
    assert tr["tls"] == "user" and tr["tls_version"] == f"TLSv{version}" and tr["tls_cipher"] == cipher
    # User-space TLS: nothing claims the kernel.
    assert tr["ktls_label"] == "none" and not any(tr["ktls"].values())
    # TLS adds record framing and tags, 22 bytes per 16 KiB record (0.13%),
    # about what the edges' readings can differ by: the bound is two-sided.
    c = rec["syscalls"]["client"]
    app = rec["workload"]["client"]["window"]["app_bytes"]
    assert 0.995 < c["send_bytes"] / app < 1.01
    # Over the whole run the workload's own totals show the overhead exactly:
    # the server read as many plaintext bytes as the client wrote.
    assert rec["workload"]["server"]["report"]["app_bytes"] == rec["workload"]["client"]["report"]["app_bytes"]
    # Configured as a production server reads and a batching sender writes:
    # at most one read() per 16 KiB record (read-ahead), and one write() per
    # SSL_write, its records gathered (not one write() a record).
    s = rec["syscalls"]["server"]
    records = s["recv_bytes"] / (16384 + 22)
    assert s["recv_calls"] <= 1.05 * records, (s["recv_calls"], records)
    writes_per_ssl_write = c["send_calls"] / rec["workload"]["client"]["window"]["io_calls"]
    assert writes_per_ssl_write == pytest.approx(1.0, abs=0.05), writes_per_ssl_write


@pytest.mark.system
@needs_build
def test_unknown_cipher(runs_dir):
    r = qprof("run", "--stack", "tcp-tls", "--cipher", "ROT13-GCM", "--duration", "1s", runs_dir=runs_dir)
    assert r.returncode == BAD_TLS, r.stderr
    assert "ROT13-GCM" in one_sentence(r.stderr)
    assert run_statuses(runs_dir) == ["incomplete"]


@pytest.mark.unit
@pytest.mark.parametrize(
    "args",
    [["--stack", "quic", "--tls", "1.2"], ["--stack", "tcp", "--cipher", "X"], ["--stack", "tcp-tls", "--tls", "1.1"]],
)
def test_tls_options_refused(args):
    refused(args, BAD_TLS, [])


@pytest.mark.unit
@pytest.mark.parametrize("stack", ["quic", "tcp-tls"])
def test_sendfile_refused(stack):
    refused(["--stack", stack, "--sendfile"], SENDFILE, [stack])


@pytest.mark.system
@needs_build
def test_ktls_on_this_host_points_to_guest(runs_dir):
    ulp = open("/proc/sys/net/ipv4/tcp_available_ulp").read().split()
    if "tls" in ulp:
        pytest.skip("this kernel has the TLS ULP; the refusal applies to kernels without it")
    r = qprof("run", "--stack", "tcp-ktls", runs_dir=runs_dir)
    assert r.returncode == KERNEL_FEATURE, r.stderr
    line = one_sentence(r.stderr)
    assert "tcp_available_ulp" in line and "--guest" in line
    assert not runs_dir.exists()


@pytest.mark.system
@needs_build
def test_tls_handshake_failure_names_side_and_reason(runs_dir):
    r = qprof("run", "--stack", "tcp-tls", "--duration", "1s", "--inject-fault", "tls-mismatch", runs_dir=runs_dir)
    assert r.returncode == HANDSHAKE, r.stderr
    line = one_sentence(r.stderr)
    assert "TLS handshake failed on the" in line and "SSL routines" in line
    assert run_statuses(runs_dir) == ["incomplete"]


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("cc", ["reno", "cubic"])
def test_tcp_congestion_control_is_what_the_socket_ran(runs_dir, cc):
    # cubic is not in this host's tcp_allowed_congestion_control, so a
    # namespace could not default to it; a root process's socket can use it.
    rec = run_json(
        runs_dir, "--stack", "tcp-tls", "--tcp-cc", cc, "--duration", "0.5s", "--warmup", "0.3s", "--probes", "none"
    )
    assert rec["workload"]["client"]["report"]["tcp_congestion_control"] == cc
    assert rec["workload"]["server"]["report"]["tcp_congestion_control"] == cc


@pytest.mark.unit
def test_tcp_cc_refused_on_a_stack_without_tcp():
    refused(["--stack", "quic", "--tcp-cc", "cubic"], 38, ["quic does not use TCP"])


@pytest.mark.system
@needs_build
def test_tcp_cc_refused(runs_dir):
    """What this kernel has is preflight's question: end to end."""
    args = ["--stack", "tcp", "--tcp-cc", "vegas"]
    refused_run(runs_dir, args, KERNEL_FEATURE, ["no TCP congestion control 'vegas'", "cubic"])
