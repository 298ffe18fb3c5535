# SPDX-License-Identifier: GPL-2.0-only
"""A bpftrace twin run beside its libbpf probe in a test."""

import json
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

FINISH_TIMEOUT_S = 30


@contextmanager
def bpftrace_twin(script: Path, args, scratch: Path, name: str = "twin"):
    """`bpftrace -f json SCRIPT ARGS`, attached when this yields; the
    yielded function stops it (SIGINT) and returns its printed maps."""
    err_path = scratch / f"{name}.err"
    err = open(err_path, "w")
    bt = subprocess.Popen(
        ["bpftrace", "-f", "json", str(script), *map(str, args)], stdout=subprocess.PIPE, stderr=err, text=True
    )

    def stop() -> dict:
        bt.send_signal(signal.SIGINT)
        out, _ = bt.communicate(timeout=FINISH_TIMEOUT_S)
        assert bt.returncode == 0
        maps = {}
        for line in out.splitlines():
            ev = json.loads(line) if line.startswith("{") else {}
            if ev.get("type") == "map":
                maps.update(ev["data"])
        return maps

    try:
        # BEGIN runs once every probe is attached: its printf is the cue.
        for line in bt.stdout:
            if '"type": "printf"' in line:
                break
        else:
            pytest.fail(f"bpftrace ended before tracing: {err_path.read_text()}")
        yield stop
    finally:
        if bt.poll() is None:
            bt.kill()
        bt.wait()
        bt.stdout.close()
        err.close()
