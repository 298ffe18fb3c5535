# SPDX-License-Identifier: GPL-2.0-only
"""The floor under each stack: qprof-floor's measurement, the figures
built from it, and a real run read against it."""

import json
import subprocess

import pytest

from qprof.describe.floor import figures

from conftest import REPO, needs_build, run_json

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


@pytest.mark.system
@needs_build
@pytest.mark.parametrize("stack", ["tcp-tls", "quic"])
def test_every_stack_runs_above_its_floor(runs_dir, stack):
    rec = run_json(
        runs_dir, "--stack", stack, "--duration", "2s", "--warmup", "0.5s", "--probes", "none", "--sample-hz", "0"
    )
    f = rec["floor"]
    assert f["ns_per_byte"]["system"] == pytest.approx(f["ns_per_byte"]["client"] + f["ns_per_byte"]["server"])
    # The floor is work no implementation can skip: every side costs more.
    for side in ("client", "server", "system"):
        assert f["times_floor"][side] > 1, (side, f)
    # Measured once per environment: the next run reads the cache.
    again = run_json(
        runs_dir, "--stack", stack, "--duration", "1s", "--warmup", "0.3s", "--probes", "none", "--sample-hz", "0"
    )
    assert again["floor"]["cached"] is True and again["floor"]["seal_ns_per_byte"] == f["seal_ns_per_byte"]
