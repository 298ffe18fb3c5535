# SPDX-License-Identifier: GPL-2.0-only
"""A client started with --wait-start that hears "exit", or EOF, before
"start" never starts, whatever its stack and pattern: it exits 0 with its
"done" and moves no byte. Over SSH, EOF on its stdin is all a remote side
hears of a qprof that went away, so a client that waited on would be left
behind on the other host. No server listens on the port: a client that
started anyway would fail to connect and exit non-zero."""

import json
import subprocess

import pytest

from qprof.collectors.workload import WorkloadExit

from conftest import REPO, free_port, needs_build

pytestmark = [pytest.mark.system, needs_build]
WL = str(REPO / "build" / "bin" / "qprof-wl")

PATTERNS = {
    "bulk": ["--bytes", "1000000"],
    "download": ["--pattern", "download", "--size", "100000", "--count", "3"],
    "rr": ["--pattern", "rr", "--payload", "256", "--period-us", "5000", "--duration-ms", "500"],
}
CASES = [(s, p) for s in ("quic", "tcp", "tcp-tls", "udp") for p in PATTERNS if s != "udp" or p == "bulk"]


@pytest.mark.parametrize("how", ["exit", "eof"])
@pytest.mark.parametrize("stack,pattern", CASES)
def test_a_client_told_to_go_before_start_never_starts(stack, pattern, how):
    argv = [WL, "--stack", stack, "--role", "client", "--addr", "127.0.0.1", "--port", str(free_port())]
    argv += ["--control", "--wait-start", *PATTERNS[pattern]]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # A hang is the failure this guards against; 30 s is only how long to wait for it.
        out, err = proc.communicate("exit\n" if how == "exit" else "", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == WorkloadExit.OK, err
    events = [json.loads(line) for line in out.splitlines()]
    done = [e for e in events if e["event"] == "done"]
    assert len(done) == 1 and done[0]["exit_code"] == 0 and done[0]["app_bytes"] == 0, events
    assert not [e for e in events if e["event"] == "connected"], events


def test_a_pattern_word_and_its_flags_are_the_patterns_own():
    """--pattern takes the word of a pattern a C file entered, and its
    refusal names every one; a flag of some patterns only, given to a
    pattern whose file does not name it, is refused by the two names."""
    from test_wl_contract import c_patterns

    def refused(*argv) -> str:
        argv = [WL, "--stack", "tcp", "--role", "client", *argv]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        assert r.returncode == WorkloadExit.USAGE and r.stdout == "", r
        assert len(r.stderr.splitlines()) == 1, r.stderr
        return r.stderr

    said = refused("--pattern", "nope")
    assert "--pattern must be" in said and "not nope" in said
    assert all(word in said for word in c_patterns()), said
    assert "--period-us is not for --pattern download" in refused("--pattern", "download", "--period-us", "100")
    assert "--size is not for --pattern rr" in refused("--pattern", "rr", "--size", "10")
