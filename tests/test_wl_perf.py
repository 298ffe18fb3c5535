# SPDX-License-Identifier: GPL-2.0-only
"""qprof-wl --proto perf, run directly on 127.0.0.1: the QUIC performance
protocol (draft-banks-quic-performance, ALPN "perf") between every pair
of qprof's QUIC libraries, and against a peer in another implementation
(aioquic's, from PyPI) that sends and answers bytes of its own (--verify
size). The protocol's timed download, stopped by the client's abort, runs
in every pair."""

import asyncio
import json
import subprocess

import pytest
from perf_peer import aioquic_client, aioquic_server, losing_first_close
from test_wl_download import WL

from conftest import free_port, needs_build

# It measures nothing (each check holds at any speed) and makes nothing
# system-wide: `make test` runs it beside the guest tier.
pytestmark = [pytest.mark.system, pytest.mark.beside, needs_build]
LIBRARIES = ("quic", "ngtcp2", "quiche", "quinn", "quic-go", "s2n-quic", "tquic")
TIMED_MS = 150  # each pair's --duration-ms: up until then, the download stopped then
ANSWER = 3_000_000  # bytes a perf peer asks for, or sends, in the aioquic tests
# The libraries whose TLS cannot narrow TLS 1.3's suites to AES-128-GCM
# (tquic's vendored BoringSSL): their transport proves the suite each
# handshake ran and refuses another, so aioquic, which prefers AES-256-GCM,
# puts AES-128-GCM first for them (the other libraries offer it alone).
OFFER_EVERY_SUITE = ("tquic",)


def events(out: str) -> dict:
    """A role's JSON lines by event name (the last of each)."""
    return {e["event"]: e for e in map(json.loads, out.splitlines())}


def server(stack: str, port: int, cert: list, *args: str) -> subprocess.Popen:
    p = subprocess.Popen(
        [WL, "--stack", stack, "--role", "server", "--addr", "127.0.0.1", "--port", str(port), *cert]
        + ["--proto", "perf", "--control", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert '"ready"' in p.stdout.readline(), p.stderr.read()
    return p


def client_argv(stack: str, port: int, *args: str) -> list:
    common = ["--stack", stack, "--role", "client", "--addr", "127.0.0.1", "--port", str(port)]
    return [WL, *common, "--proto", "perf", *args]


def server_done(p: subprocess.Popen) -> dict:
    """The server's done report, once its client has gone; then it exits."""
    for line in p.stdout:
        e = json.loads(line)
        if e["event"] == "done":
            p.stdin.write("exit\n")
            p.stdin.flush()
            p.wait(timeout=10)
            return e
    raise AssertionError(f"no done from the server: {p.stderr.read()}")


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    p.wait()


@pytest.mark.parametrize("server_stack", LIBRARIES)
@pytest.mark.parametrize("client_stack", LIBRARIES)
def test_every_pair_of_libraries_speaks_perf(client_stack, server_stack, cert):
    """Each library as the client against each as the server, both ways at
    once (an up stream, its count 0, and a timed download, its count
    2^64-1, that the client stops by aborting it): every byte checked
    against the pattern by the side that received it."""
    port = free_port()
    srv = server(server_stack, port, cert, "--direction", "both")
    try:
        argv = client_argv(client_stack, port, "--direction", "both", "--duration-ms", str(TIMED_MS))
        c = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert c.returncode == 0, c.stderr
        cdone, sdone = events(c.stdout)["done"], server_done(srv)
        assert srv.returncode == 0, srv.stderr.read()
    finally:
        stop(srv)
    for done in (cdone, sdone):
        assert done["verified"] is True and done["streams_completed"] == 2, done
    # Up: the server checked every byte the client sent, to its FIN.
    # (Streams are numbered up first: the server's second, the download, it received nothing on.)
    assert sdone["stream_bytes"] == [cdone["sent_bytes"], 0] and cdone["sent_bytes"] > 0, (cdone, sdone)
    # Down: the client checked what came before it stopped the stream; the
    # server sent at least that (the rest was in flight, or never went).
    down = cdone["stream_bytes"][1]
    assert 0 < down <= sdone["sent_bytes"], (cdone, sdone)
    assert sdone["request_bytes"] == 0, sdone


@pytest.mark.parametrize("stack", LIBRARIES)
def test_a_perf_client_of_another_implementation(stack, cert):
    """aioquic's client asks a qprof-wl server for ANSWER bytes on one
    stream and uploads ANSWER zeros on another: the server, told --verify
    size, counts the upload whole and answers the count asked, no more."""
    port = free_port()
    srv = server(stack, port, cert, "--direction", "both", "--verify", "size")
    try:
        requests = [(ANSWER, 0), (0, ANSWER)]
        down, up = asyncio.run(asyncio.wait_for(aioquic_client(port, requests, stack in OFFER_EVERY_SUITE), 60))
        done = server_done(srv)
        assert srv.returncode == 0, srv.stderr.read()
    finally:
        stop(srv)
    assert (down, up) == (ANSWER, 0)
    assert done["verified"] is True and done["stream_bytes"] == [ANSWER, 0], done
    assert done["sent_bytes"] == ANSWER and done["request_bytes"] == 0, done


def test_content_is_checked_unless_told_otherwise(cert):
    """Without --verify size the server checks the upload against the
    pattern: aioquic's zeros fail it (exit 5, at the first byte)."""
    port = free_port()
    srv = server("quic", port, cert)
    try:
        # The server closes the connection on the failed check: aioquic's
        # stream then ends as if answered (an empty answer), or in an error.
        try:
            asyncio.run(asyncio.wait_for(aioquic_client(port, [(0, ANSWER)]), 30))
        except ConnectionError:
            pass
        done = server_done(srv)
    finally:
        stop(srv)
    assert srv.returncode == 5 and done["verified"] is False, done
    assert "failed the content check on stream 0 at offset 0" in srv.stderr.read()


async def against_aioquic(stack: str, port: int, cert: list):
    uploads: list = []
    srv = await aioquic_server("127.0.0.1", port, cert[1], cert[3], uploads, aes128_first=stack in OFFER_EVERY_SUITE)
    try:
        argv = client_argv(stack, port, "--direction", "both", "--bytes", str(ANSWER), "--verify", "size")
        p = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(p.communicate(), 60)
        return p.returncode, out.decode(), err.decode(), uploads
    finally:
        srv.close()


@pytest.mark.parametrize("stack", LIBRARIES)
def test_a_perf_server_of_another_implementation(stack, cert):
    """A qprof-wl client against aioquic's server, both ways with --bytes:
    the server answers the count asked with zeros, which the client
    (--verify size) counts whole; it received the client's upload whole."""
    code, out, err, uploads = asyncio.run(against_aioquic(stack, free_port(), cert))
    assert code == 0, err
    done = events(out)["done"]
    assert done["verified"] is True and done["streams_completed"] == 2, done
    assert done["stream_bytes"] == [0, ANSWER] and done["sent_bytes"] == ANSWER, done
    # The down stream's request carried its count alone; the up stream's, the pattern's bytes.
    assert sorted(uploads) == [0, ANSWER], uploads


async def close_lost_once(stack: str, port: int, cert: list):
    """A qprof-wl client's download from aioquic's server, whose connection
    loses the client's first CONNECTION_CLOSE: how that connection ended."""
    ended = asyncio.get_running_loop().create_future()
    srv = await aioquic_server(
        "127.0.0.1", port, cert[1], cert[3], [], aes128_first=stack in OFFER_EVERY_SUITE,
        create_protocol=losing_first_close(ended),
    )  # fmt: skip
    try:
        argv = client_argv(stack, port, "--direction", "down", "--bytes", str(ANSWER), "--verify", "size")
        p = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, err = await asyncio.wait_for(p.communicate(), 60)
        assert p.returncode == 0, err.decode()
        # aioquic's idle timeout is 60 s: an unanswered PING ends it by that, long after this.
        return await asyncio.wait_for(ended, 30)
    finally:
        srv.close()


@pytest.mark.parametrize("stack", LIBRARIES)
def test_a_close_lost_once_is_sent_again(stack, cert):
    """The client closes once its download is whole; its CONNECTION_CLOSE
    is lost and the server goes on sending: the client, still in its
    closing period, answers with its close again, and the server's
    connection ends by the client's close, not by its idle timeout. (Sent
    once and lost, it left quiche's server waiting 30 s.) Every library's
    transport keeps its closing period (RFC 9000 10.2.1): msquic's and
    s2n-quic's library answers for it, quinn's and quic-go's do while
    qprof-wl keeps the connection (rs/quinn's linger) or the Transport
    (quic-go's), and ngtcp2's, quiche's and tquic's leave it to qprof-wl
    (wl_udp_io_closing). The same packet again is allowed, and is what
    wl_udp_io_closing and quic-go send: the server takes it as new."""
    ended = asyncio.run(close_lost_once(stack, free_port(), cert))
    assert ended.reason_phrase != "Idle timeout", ended
