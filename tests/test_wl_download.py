# SPDX-License-Identifier: GPL-2.0-only
"""qprof-wl --pattern download, run directly on 127.0.0.1: the client makes
--count connections one after another, the server answers each request with
--size bytes of the pattern, and the client checks every byte. One
"download" event per connection on the client, one "served" on the server;
a server sending another pattern period fails the client's content check
(exit 5), a request for another --size the server's (exit 5); udp and
--count 0 are refused (exit 2); with --resume every connection after the
first resumes, as the TLS library itself reports. Handshakes are the same
exchange (wl_exchange.c) with 8 bytes, to a --count too."""

import json
import subprocess

import pytest

from qprof.collectors.controlled import unpacked
from qprof.collectors.workload import WorkloadExit

from conftest import REPO, free_port, needs_build

pytestmark = [pytest.mark.system, needs_build]
WL = str(REPO / "build" / "bin" / "qprof-wl")
SIZE = 200_000
COUNT = 3


def events(out: str, name: str) -> list:
    return [e for e in map(json.loads, out.splitlines()) if e["event"] == name]


def download(stack: str, cert: list, server_args=(), client_args=()) -> tuple:
    """Server and client of one download run; both their exit codes and outputs."""
    common = ["--stack", stack, "--addr", "127.0.0.1", "--port", str(free_port())]
    common += ["--pattern", "download", "--size", str(SIZE), "--count", str(COUNT)]
    server = subprocess.Popen(
        [WL, *common, "--role", "server", *cert, *server_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = server.stdout.readline()
        assert '"ready"' in ready, ready + server.stderr.read()
        client = subprocess.run(
            [WL, *common, "--role", "client", *client_args], capture_output=True, text=True, timeout=60
        )
        out, err = server.communicate(timeout=30)  # it ends by itself after --count
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return client, subprocess.CompletedProcess(server.args, server.returncode, out, err)


@pytest.mark.parametrize("stack", ["quic", "tcp", "tcp-tls"])
def test_download_checks_every_byte_of_each(stack, cert):
    client, server = download(stack, cert)
    assert client.returncode == 0, client.stderr
    assert server.returncode == 0, server.stderr
    assert client.stderr == "" and server.stderr == ""

    downloads = events(client.stdout, "download")
    assert [d["i"] for d in downloads] == list(range(COUNT))
    for d in downloads:
        assert d["bytes"] == SIZE
        assert 0 < d["handshake_ns"] <= d["first_byte_ns"] <= d["complete_ns"], d
        if stack == "tcp-tls":
            assert 0 < d["tcp_handshake_ns"] < d["handshake_ns"], d
        if stack == "tcp":
            assert "resumed" not in d and "tcp_handshake_ns" not in d, d  # no TLS session
        else:
            assert d["resumed"] is False and d["early_data"] is False, d
        assert d["packets_received"] > 0 and d["packets_sent"] > 0, d
        assert ("lost_packets" in d) == (stack == "quic"), d  # TCP_INFO has no such count
    # Strictly one after another: each connect starts after the last download ended.
    for a, b in zip(downloads, downloads[1:]):
        assert b["t_connect_ns"] > a["t_connect_ns"] + a["complete_ns"]

    served = events(server.stdout, "served")
    assert [s["bytes"] for s in served] == [SIZE] * COUNT
    done = {"client": events(client.stdout, "done")[0], "server": events(server.stdout, "done")[0]}
    for side, d in done.items():
        assert d["role"] == side and d["exit_code"] == 0 and d["pattern"] == "download", d
        assert d["downloads"] == COUNT and d["app_bytes"] == COUNT * SIZE, d
    assert done["client"]["verified"] is True
    assert "verified" not in done["server"]  # the sender checks nothing
    assert len(events(client.stdout, "connected")) == 1


@pytest.mark.parametrize("stack", ["quic", "tcp", "tcp-tls"])
def test_download_of_other_data_fails_the_check(stack, cert):
    # A 128 KiB pattern period against the client's 64 KiB: they differ from byte 64K on.
    client, server = download(stack, cert, server_args=["--io-size", "131072"])
    assert client.returncode == WorkloadExit.VERIFY, client.stderr
    assert "download 0 failed the content check" in client.stderr, client.stderr
    assert events(client.stdout, "download") == []
    assert events(client.stdout, "done")[0]["verified"] is False
    # The server sees its download cut short and ends too.
    assert server.returncode == WorkloadExit.CONN_LOST, server.stderr
    assert events(server.stdout, "served") == []


@pytest.mark.parametrize("stack", ["quic", "tcp-tls"])
def test_resume_after_the_first_connection(stack, cert):
    client, server = download(stack, cert, ["--resume"], ["--resume"])
    assert client.returncode == 0, client.stderr
    assert server.returncode == 0, server.stderr
    downloads = events(client.stdout, "download")
    served = events(server.stdout, "served")
    assert [d["resumed"] for d in downloads] == [False, True, True]
    assert [s["resumed"] for s in served] == [False, True, True]
    assert downloads[0]["early_data"] is False
    if stack == "quic":
        # Two instruments, one answer: the client's 0-RTT bytes the server
        # acknowledged, the server's receives flagged 0-RTT.
        assert [d["early_data"] for d in downloads] == [s["early_data"] for s in served]


@pytest.mark.parametrize("stack", ["quic", "tcp", "tcp-tls"])
def test_marks_count_downloads(stack, cert):
    """Under --control both roles answer marks with their own counters,
    after their report too, and go on "exit"."""
    common = ["--stack", stack, "--port", str(free_port()), "--pattern", "download", "--size", str(SIZE)]
    common += ["--count", str(COUNT), "--control"]
    procs = {}
    try:
        for role in ("server", "client"):
            procs[role] = subprocess.Popen(
                [WL, *common, "--role", role, *(cert if role == "server" else ["--wait-start"])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            if role == "server":
                assert '"ready"' in procs[role].stdout.readline()

        def until(p, name):
            for line in p.stdout:
                e = json.loads(line)
                if e["event"] == name:
                    return e
            raise AssertionError(f"no {name} event: {p.stderr.read()}")

        def mark(p):
            p.stdin.write("mark m\n")
            p.stdin.flush()
            return until(p, "mark")

        assert mark(procs["client"])["downloads"] == 0
        procs["client"].stdin.write("start\n")
        procs["client"].stdin.flush()
        assert until(procs["client"], "done")["exit_code"] == 0
        assert until(procs["server"], "done")["exit_code"] == 0  # --count served
        for p in procs.values():
            m = mark(p)
            assert m["downloads"] == COUNT and m["app_bytes"] == COUNT * SIZE, m
            p.stdin.write("exit\n")
            p.stdin.flush()
            assert p.wait(timeout=10) == 0, p.stderr.read()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def test_udp_has_no_download():
    r = subprocess.run(
        [WL, "--stack", "udp", "--role", "client", "--pattern", "download", "--size", "1000"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == WorkloadExit.USAGE
    assert len(r.stderr.splitlines()) == 1 and "udp" in r.stderr, r.stderr


def test_count_zero_is_refused():
    r = subprocess.run(
        [WL, "--stack", "tcp", "--role", "client", "--pattern", "download", "--size", "1000", "--count", "0"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == WorkloadExit.USAGE
    assert len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.parametrize("stack", ["quic", "tcp"])
def test_a_request_for_another_size_fails_the_server(stack, cert):
    """The server checks what it was asked for: a client whose --size is
    not the server's is refused in one sentence (exit 5), and no download
    is counted on either side."""
    client, server = download(stack, cert, server_args=["--size", str(2 * SIZE)])
    assert server.returncode == WorkloadExit.VERIFY, server.stderr
    assert f"asked for {SIZE} bytes" in server.stderr and f"not the {2 * SIZE}" in server.stderr, server.stderr
    assert len(server.stderr.splitlines()) == 1
    assert client.returncode not in (0, None) and events(client.stdout, "download") == []
    assert events(server.stdout, "served") == []


@pytest.mark.parametrize("stack", ["quic", "tcp-tls"])
def test_handshakes_to_a_count(stack, cert):
    """Handshakes are the same exchange with 8 bytes: with --count N on
    both roles the client opens N connections, checks each answer and
    ends, and the server ends once it delivered N."""
    common = ["--stack", stack, "--addr", "127.0.0.1", "--port", str(free_port())]
    common += ["--pattern", "handshakes", "--count", "5", "--conns", "2"]
    server = subprocess.Popen(
        [WL, *common, "--role", "server", *cert], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert '"ready"' in server.stdout.readline()
        client = subprocess.run([WL, *common, "--role", "client"], capture_output=True, text=True, timeout=60)
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert client.returncode == 0 and server.returncode == 0, client.stderr + err
    handshakes = [e for line in client.stdout.splitlines() for e in unpacked(line.encode())]
    handshakes = [e for e in handshakes if e["event"] == "handshake"]
    assert sorted(h["i"] for h in handshakes) == list(range(5))
    assert all(h["bytes"] == 8 for h in handshakes)
    done = {"client": events(client.stdout, "done")[0], "server": events(out, "done")[0]}
    for side, d in done.items():
        assert d["handshakes"] == 5 and d["connections_opened"] == 5 and d["verified"] is True, (side, d)
