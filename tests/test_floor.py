# SPDX-License-Identifier: GPL-2.0-only
"""The floor under each stack: qprof-floor's measurement, the figures
built from it, and a real run read against it."""

import json
import subprocess

import pytest

from qprof.describe import cpu
from qprof.describe.floor import figures

from conftest import REPO, needs_build
from test_run_flame import KEPT, QUICK_ALONE

BIN = REPO / "build" / "bin"
PARTS = {
    "library": "OpenSSL x",
    "aead": "AES-128-GCM",
    "record_bytes": 16384,
    "seconds": 0.3,
    "seal_ns_per_byte": 0.3,
    "open_ns_per_byte": 0.2,
    "copy_ns_per_byte": 0.1,
}
CPU = {
    "client": {"ns_per_byte": {"total": 1.2}},
    "server": {"ns_per_byte": {"total": 0.9}},
    "system": {"ns_per_byte": {"total": 2.5}},
}


@pytest.mark.unit
def test_figures_per_side():
    f = figures("tcp-tls", PARTS, CPU)
    assert f["ns_per_byte"] == pytest.approx({"client": 0.4, "server": 0.3, "system": 0.7})
    assert f["times_floor"] == pytest.approx({"client": 3.0, "server": 3.0, "system": 2.5 / 0.7})
    plain = figures("tcp", PARTS, CPU)
    assert plain["ns_per_byte"] == pytest.approx({"client": 0.1, "server": 0.1, "system": 0.2})
    sendfile = figures("tcp", PARTS, CPU, sendfile=True)
    assert sendfile["ns_per_byte"]["client"] == 0 and sendfile["times_floor"]["client"] is None
    assert figures("quic", {"absent": "why"}, CPU) == {"absent": "why"}


@pytest.mark.system
@needs_build
@pytest.mark.parametrize(
    "binary, size, library", [("qprof-floor", 16384, "OpenSSL 3"), ("qprof-floor-quictls", 1440, "+quic")]
)
def test_qprof_floor_measures_each_part(binary, size, library):
    r = subprocess.run(
        [str(BIN / binary), "--size", str(size), "--seconds", "0.05"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert library in out["library"] and out["record_bytes"] == size and out["aead"] == "AES-128-GCM"
    for k in ("seal_ns_per_byte", "open_ns_per_byte", "copy_ns_per_byte"):
        assert 0 < out[k] < 50, (k, out)


@pytest.mark.system
@needs_build
def test_qprof_floor_refuses_bad_size():
    r = subprocess.run([str(BIN / "qprof-floor"), "--size", "12"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--size" in r.stderr


# A 2 s run of each stack with no instrument in the window but /proc:
# test_netstat asserts on the same runs.
ALONE_2S = ("--duration", "2s", "--warmup", "0.5s", "--probes", "none", "--sample-hz", "0")
# A later, shorter run of each stack (other tests assert on them too).
AGAIN = {"quic": QUICK_ALONE, "tcp-tls": KEPT}


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("stack", ["tcp-tls", "quic"])
def test_every_stack_runs_above_its_floor(shared, stack):
    _, rec = shared("run", "--stack", stack, *ALONE_2S)
    f, nbytes = rec["floor"], rec["bytes"]
    assert f["ns_per_byte"]["system"] == pytest.approx(f["ns_per_byte"]["client"] + f["ns_per_byte"]["server"])
    # The floor is work no implementation can skip, at the least it costs:
    # each part the least of its rounds, on buffers in cache. (Measured
    # through a region beyond the last-level cache it was DRAM-bound, and
    # the tcp-tls server, whose buffers are hot, ran at 0.95x it.) So every
    # side costs more, in schedstat's nanoseconds...
    oncpu = {side: rec["cpu"][side]["ns_per_byte"]["oncpu"] for side in ("client", "server")}
    for side in ("client", "server"):
        assert oncpu[side] > f["ns_per_byte"][side], (side, oncpu, f)
        # ...and in /proc's ticks, the record's multiple, but for their grain:
        # sum_exec_runtime floored to a tick twice (utime, stime) at each edge.
        total_s = rec["cpu"][side]["total_s"]
        assert f["times_floor"][side] == pytest.approx(total_s * 1e9 / nbytes / f["ns_per_byte"][side])
        assert total_s + 2 / cpu.CLK_TCK > f["ns_per_byte"][side] * nbytes / 1e9, (side, total_s, f)
    # The machine did both sides' work, at least.
    assert oncpu["client"] + oncpu["server"] > f["ns_per_byte"]["system"]
    system_s = rec["cpu"]["system"]["total_s"]
    assert f["times_floor"]["system"] == pytest.approx(system_s * 1e9 / nbytes / f["ns_per_byte"]["system"])
    # Measured once per environment: of two runs of the stack one at most
    # measured it (whichever ran first in this environment), and both carry it.
    _, again = shared("run", "--stack", stack, *AGAIN[stack])
    assert f["cached"] or again["floor"]["cached"], (f, again["floor"])
    for part in ("seal_ns_per_byte", "open_ns_per_byte", "copy_ns_per_byte"):
        assert again["floor"][part] == f[part], part
