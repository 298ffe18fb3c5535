# SPDX-License-Identifier: GPL-2.0-only
"""The QUIC server listens only where docs/run.md says: on 127.0.0.1 for
--topology loopback, on its veth address in its namespace; and a port
anything else holds, another msquic server included, is reported as in use
(exit 6)."""

import json
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from qprof.collectors import endpoints, listen

from conftest import REPO, needs_build, qprof, run_json, started
from test_bad_input import one_sentence, run_statuses
from test_run_flame import QUICK_ALONE

pytestmark = [pytest.mark.system, needs_build]
PORT = 4499
MAPPED_LOOPBACK = "0000000000000000FFFF00000100007F"  # ::ffff:127.0.0.1 as /proc/net/udp6 writes it


def udp_sockets_on(port: int) -> list:
    """(local address, local port) of every UDP socket on port, v4 and v6."""
    out = []
    for name in ("udp", "udp6"):
        for line in open(f"/proc/net/{name}").read().splitlines()[1:]:
            addr, hexport = line.split()[1].split(":")
            if int(hexport, 16) == port:
                out.append(addr)
    return out


def test_loopback_server_binds_loopback_only(runs_dir):
    seen = []
    with started(
        "run",
        "--json",
        "--topology",
        "loopback",
        "--port",
        str(PORT),
        "--duration",
        "2s",
        "--warmup",
        "0.5s",
        "--probes",
        "none",
        "--sample-hz",
        "0",
        runs_dir=runs_dir,
    ) as p:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and p.poll() is None:
            seen += udp_sockets_on(PORT)
            time.sleep(0.2)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert seen, "the server's socket was never seen"
    # The listener and its per-processor sockets: loopback, never the wildcard.
    assert set(seen) <= {MAPPED_LOOPBACK, "0100007F"}, set(seen)
    rec = json.loads(out)
    binds = rec["listen"]["server_binds"]
    assert binds and all(b["to"] == f"[::ffff:127.0.0.1]:{PORT}" and b["result"] == "ok" for b in binds), binds


def test_netns_server_binds_its_veth_address(runs_dir, shared):
    _, rec = shared("run", *QUICK_ALONE)
    addr = rec["environment"]["topology"]["server"]["addr"]
    assert [b["to"] for b in rec["listen"]["server_binds"]] == [f"[::ffff:{addr}]:4433"]
    tcp = run_json(
        runs_dir, "--stack", "tcp", "--duration", "0.5s", "--warmup", "0.3s", "--probes", "none", "--sample-hz", "0"
    )
    assert tcp["listen"]["server_binds"] is None  # the TCP server binds its address itself


@contextmanager
def port_holder(kind, tmp_path):
    """Something else on 127.0.0.1:PORT: msquic's own wildcard binding
    (SO_REUSEPORT), an msquic server under the interposer, or a plain socket."""
    if kind == "socket":
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", PORT))
            yield
        return
    cert, key = endpoints.make_certificate(tmp_path)
    env = dict(os.environ)
    if kind == "msquic-interposed":
        env.update(listen.server_env("quic", "127.0.0.1", PORT, None))
    other = subprocess.Popen(
        [
            str(REPO / "build" / "bin" / "qprof-wl"),
            "--stack",
            "quic",
            "--role",
            "server",
            "--addr",
            "127.0.0.1",
            "--port",
            str(PORT),
            "--cert",
            str(cert),
            "--key",
            str(key),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert json.loads(other.stdout.readline())["event"] == "ready"
        yield
    finally:
        other.kill()
        other.communicate()


@pytest.mark.parametrize("holder", ["msquic", "msquic-interposed", "socket"])
def test_port_held_is_in_use(runs_dir, tmp_path, holder):
    """msquic shares a port through SO_REUSEPORT: without the interposer a
    second server joined the first and the run failed its handshake."""
    with port_holder(holder, tmp_path):
        assert udp_sockets_on(PORT)
        r = qprof("run", "--topology", "loopback", "--port", str(PORT), "--duration", "1s", runs_dir=runs_dir)
    assert r.returncode == 6, r.stderr
    line = one_sentence(r.stderr)
    assert str(PORT) in line and "in use" in line, line
    assert run_statuses(runs_dir) == ["incomplete"]


INTERPOSED = f"""
import socket
def udp(family):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return s
def bind(s, addr):
    try:
        s.bind(addr)
        return s.getsockname()[:2]
    except OSError as e:
        return e.strerror
first = udp(socket.AF_INET6)
print(bind(first, ("::", {PORT})))
first.close()
# Another server on the address between the interposer's probe (first bind
# only) and its bind: it binds, finds the other, and gives the port back.
other = udp(socket.AF_INET)
other.bind(("127.0.0.1", {PORT}))
second = udp(socket.AF_INET6)
print(bind(second, ("::", {PORT})))
other.close()
print(bind(udp(socket.AF_INET), ("0.0.0.0", {PORT})))
print(bind(udp(socket.AF_INET6), ("::", 0)))          # msquic's start-up probes: port 0
print(bind(udp(socket.AF_INET6), ("::", {PORT + 1})))
"""


def test_interposer_steers_wildcard_binds_on_the_port_only(tmp_path):
    env = {**os.environ, **listen.server_env("quic", "127.0.0.1", PORT, tmp_path)}
    r = subprocess.run([sys.executable, "-c", INTERPOSED], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = r.stdout.splitlines()
    assert out[:3] == [str(("::ffff:127.0.0.1", PORT)), "Address already in use", str(("127.0.0.1", PORT))]
    assert out[3].startswith("('::', ") and not out[3].endswith(f" {PORT})")
    assert out[4] == str(("::", PORT + 1))
    binds = listen.read_report(tmp_path)
    assert [(b["from"], b["to"], b["result"]) for b in binds] == [
        (f"[::]:{PORT}", f"[::ffff:127.0.0.1]:{PORT}", "ok"),
        (f"[::]:{PORT}", f"[::ffff:127.0.0.1]:{PORT}", "EADDRINUSE"),
        (f"[0.0.0.0]:{PORT}", f"[127.0.0.1]:{PORT}", "ok"),
    ]


def test_env_composition():
    env = listen.merge({"LD_PRELOAD": "/a.so", "QPROF_GSO": "off"}, {"LD_PRELOAD": "/b.so", "QPROF_BIND_PORT": "1"})
    assert env == {"LD_PRELOAD": "/a.so /b.so", "QPROF_GSO": "off", "QPROF_BIND_PORT": "1"}
    assert listen.server_env("tcp", "127.0.0.1", 1, None) == {}
