# SPDX-License-Identifier: GPL-2.0-only
"""The receiver's content check can fail: a server that expects another
pattern than the client sends refuses the data (exit 5, "content check"),
and the same pair with matching patterns passes. The pattern's period is
max(--io-size, 64K) (workloads/wl.h), so a client sending with 128 KiB
periods to a server expecting 64 KiB ones differs from byte 64K on."""

import json
import subprocess

import pytest

from qprof.collectors.workload import WorkloadExit

from conftest import REPO, free_port, needs_build

pytestmark = [pytest.mark.system, needs_build]
WL = str(REPO / "build" / "bin" / "qprof-wl")


def transfer(stack: str, server_io: int, client_io: int, cert: list) -> tuple:
    common = ["--stack", stack, "--addr", "127.0.0.1", "--port", str(free_port())]
    server = subprocess.Popen(
        [WL, *common, "--role", "server", "--io-size", str(server_io), *(cert if stack != "udp" else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()  # the ready event
        assert '"ready"' in line, line + server.stderr.read()
        client = subprocess.run(
            [
                WL,
                *common,
                "--role",
                "client",
                "--io-size",
                str(client_io),
                "--bytes" if stack != "udp" else "--duration-ms",
                str(4 << 20) if stack != "udp" else "300",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        out, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    done = [json.loads(l) for l in out.splitlines() if '"done"' in l]
    return server.returncode, err, client, done[-1] if done else {}


@pytest.mark.parametrize("stack", ["quic", "tcp", "udp"])
def test_content_check_refuses_other_data(stack, cert):
    rc, err, _, _ = transfer(stack, 65536, 131072, cert)
    assert rc == WorkloadExit.VERIFY, err
    assert "content check" in err, err


@pytest.mark.parametrize("stack", ["quic", "tcp", "udp"])
def test_content_check_passes_the_same_data(stack, cert):
    rc, err, client, done = transfer(stack, 131072, 131072, cert)
    assert rc == 0, err
    assert client.returncode == 0, client.stderr
    # Checked well past one period, so offsets beyond 64K were compared.
    assert done.get("verified") is True and done["app_bytes"] >= (4 << 20 if stack != "udp" else 1 << 20), done
