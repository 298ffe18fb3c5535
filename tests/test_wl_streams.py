# SPDX-License-Identifier: GPL-2.0-only
"""qprof-wl --pattern bulk, run directly on 127.0.0.1: the receiver (the
server) reports the bytes it verified on each stream (quic: streams in the
one connection; tcp stacks: connections) as "stream_bytes", in its marks
and its "done", one entry per stream seen, summing to app_bytes."""

import json
import subprocess

import pytest
from test_wl_download import WL

from conftest import free_port, needs_build

pytestmark = [pytest.mark.system, needs_build]
BYTES = 1_000_000


def until(p, name):
    for line in p.stdout:
        e = json.loads(line)
        if e["event"] == name:
            return e
    raise AssertionError(f"no {name} event: {p.stderr.read()}")


def bulk(stack: str, cert: list, streams: int) -> tuple:
    """A bulk run of --streams; the server's done and a mark taken after it,
    the client's done."""
    # Both roles take --streams: the server waits for as many.
    common = ["--stack", stack, "--addr", "127.0.0.1", "--port", str(free_port()), "--streams", str(streams)]
    procs = {}
    try:
        procs["server"] = subprocess.Popen(
            [WL, *common, "--role", "server", "--control", *cert],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        server = procs["server"]
        assert '"ready"' in server.stdout.readline()
        server.stdin.write("mark before\n")
        server.stdin.flush()
        before = until(server, "mark")
        assert before["stream_bytes"] == [] and before["app_bytes"] == 0, before  # none seen yet
        procs["client"] = subprocess.Popen(
            [WL, *common, "--role", "client", "--bytes", str(BYTES)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = procs["client"].communicate(timeout=60)
        assert procs["client"].returncode == 0, err
        client_done = [e for e in map(json.loads, out.splitlines()) if e["event"] == "done"][0]
        done = until(server, "done")
        server.stdin.write("mark x\n")
        server.stdin.flush()
        mark = until(server, "mark")
        server.stdin.write("exit\n")
        server.stdin.flush()
        assert server.wait(timeout=10) == 0, server.stderr.read()
        return done, mark, client_done
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("streams", [3, 1])
@pytest.mark.parametrize("stack", ["quic", "tcp", "tcp-tls"])
def test_server_counts_each_stream(stack, streams, cert):
    done, mark, client_done = bulk(stack, cert, streams)
    assert done["exit_code"] == 0 and done["verified"] is True, done
    assert done["app_bytes"] == streams * BYTES, done
    for e in (done, mark):
        assert e["stream_bytes"] == [BYTES] * streams, e
        assert sum(e["stream_bytes"]) == e["app_bytes"], e
    assert mark["name"] == "x"
    assert "stream_bytes" not in client_done  # the sender reports none
