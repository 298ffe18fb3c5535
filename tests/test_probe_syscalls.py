# SPDX-License-Identifier: GPL-2.0-only
"""qprof-syscalls against its bpftrace twin and against the workload."""

import json
import re
import signal
import subprocess
import time

import pytest

from qprof.collectors import endpoints

from conftest import REPO, needs_build

pytestmark = [pytest.mark.system, needs_build]
BIN = REPO / "build" / "bin"
NR = {"sendmsg": 46, "sendmmsg": 307, "recvmsg": 47, "recvmmsg": 299, "sendto": 44, "recvfrom": 45}


class Proc:
    """A JSON-lines child with stdin commands, killed on exit."""

    def __init__(self, argv):
        self.p = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def until(self, event):
        for line in self.p.stdout:
            if line.startswith("{"):
                ev = json.loads(line)
                if ev.get("event") == event:
                    return ev
        raise AssertionError(f"no {event} event: {self.p.stderr.read()}")

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def test_libbpf_and_bpftrace_agree(tmp_path, tracefs):
    cert, key = endpoints.make_certificate(tmp_path)
    procs = []
    try:
        server = Proc(
            [BIN / "qprof-wl", "-s", "quic", "-r", "server", "-p", "24811", "--cert", cert, "--key", key, "--control"]
        )
        procs.append(server)
        server.until("ready")
        client = Proc([BIN / "qprof-wl", "-s", "quic", "-r", "client", "-p", "24811", "--control", "--wait-start"])
        procs.append(client)
        pids = [server.p.pid, client.p.pid]
        probe = Proc([BIN / "qprof-syscalls", "-p", f"{pids[0]},{pids[1]}", "--control"])
        procs.append(probe)
        probe.until("ready")
        twin = Proc(["bpftrace", REPO / "probes" / "syscalls.bt", str(pids[0]), str(pids[1])])
        procs.append(twin)
        bt = twin.p
        assert "Attaching" in bt.stdout.readline()
        time.sleep(0.5)  # bpftrace prints "Attaching" just before it attaches
        client.send("start")
        client.until("connected")
        time.sleep(2)
        client.send("stop")
        client.until("done")
        server.until("done")
        probe.send("mark end")
        mark = probe.until("mark")
        bt.send_signal(signal.SIGINT)
        out, err = bt.communicate(timeout=30)
    finally:
        for p in reversed(procs):
            p.kill()

    counted = {}
    for m in re.finditer(r"^@calls\[(\d+), (\d+)\]: (\d+)$", out, re.M):
        counted[(int(m.group(1)), int(m.group(2)))] = int(m.group(3))
    assert counted, out + err
    libbpf = {}
    for t in mark["threads"]:
        if t["sys"] in NR:
            k = (t["tgid"], NR[t["sys"]])
            libbpf[k] = libbpf.get(k, 0) + t["calls"]
    # The transfer's own calls: the client's sendmsg and the server's recvmmsg.
    assert libbpf[(pids[0], NR["recvmmsg"])] > 1000 and libbpf[(pids[1], NR["sendmsg"])] > 1000
    for k in set(libbpf) | set(counted):
        a, b = libbpf.get(k, 0), counted.get(k, 0)
        assert a == pytest.approx(b, rel=0.01), (k, a, b)


def test_every_bpftrace_twin_compiles(tracefs):
    scripts = sorted((REPO / "probes").glob("*.bt"))
    assert scripts
    for script in scripts:
        # -d: bpftrace 0.17's dry run (parse, resolve probes, generate code, attach nothing).
        r = subprocess.run(["bpftrace", "-d", str(script), "1", "2"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (script.name, r.stderr[-2000:])
