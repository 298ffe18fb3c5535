# SPDX-License-Identifier: GPL-2.0-only
"""qprof agent, the side of a run on another host (collectors/agent.py):
its hello, its clock and its answers, over in-memory pipes."""

import io
import json
import os
from pathlib import Path

import pytest

from qprof import __version__
from qprof.collectors import agent

pytestmark = pytest.mark.unit


def talk(*requests) -> list:
    out = io.StringIO()
    rc = agent.serve(io.StringIO("".join(json.dumps(r) + "\n" for r in requests)), out)
    assert rc == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_hello_says_version_build_and_what_is_missing(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "qprof-wl").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "qprof-wl").chmod(0o755)
    monkeypatch.setenv("QPROF_BUILD_DIR", str(tmp_path))
    hello = talk()[0]
    assert hello["event"] == "hello" and hello["qprof_version"] == __version__
    assert hello["build_dir"] == str(tmp_path)
    assert "bin/qprof-wl" not in hello["missing"]
    assert set(hello["missing"]) == set(agent.NEEDED) - {"bin/qprof-wl"}


def test_answers_in_order_and_an_unknown_op_does_not_end_it():
    hello, a, bad, b, bye = talk(
        {"op": "clock", "id": 1}, {"op": "frobnicate", "id": 2}, {"op": "clock", "id": 3}, {"op": "exit", "id": 4}
    )
    assert [a["id"], bad["id"], b["id"], bye["id"]] == [1, 2, 3, 4]
    assert b["t_ns"] >= a["t_ns"] > 0
    assert "frobnicate" in bad["error"] and "clock" in bad["error"]


def test_eof_ends_it_and_a_line_that_is_not_a_request_is_refused():
    out = io.StringIO()
    assert agent.serve(io.StringIO("not json\n"), out) == 0
    hello, refused = [json.loads(line) for line in out.getvalue().splitlines()]
    assert refused["id"] is None and "not a request" in refused["error"]


def test_edge_reads_this_host_for_the_pids_asked(tmp_path):
    pid = os.getpid()
    hello, edge, later = talk({"op": "edge", "id": 1, "pids": {"server": pid}}, {"op": "clock", "id": 2})
    assert "error" not in edge, edge
    assert edge["t_ns"] <= later["t_ns"]
    assert set(edge["processes"]) == {"server"} and edge["processes"]["server"]["oncpu_s"] > 0
    assert f"{pid}/{pid}" in edge["tasks"]
    assert edge["system"]["idle_s"] >= 0 and set(edge["net"]) == {"server", "softnet"}


def test_environment_names_the_device_toward_the_peer():
    hello, env = talk({"op": "environment", "id": 1, "peer": "127.0.0.1"})
    assert env["kernel_release"] == os.uname().release
    nic = env["nic"]
    assert nic["device"] == "lo"
    assert nic["mtu"] == int(Path("/sys/class/net/lo/mtu").read_text())
    if nic["offloads"] is None:  # no ethtool: said, never an empty table
        assert "offloads" in nic["absent_reason"]


def test_a_failed_request_is_an_error_answer_and_the_agent_goes_on():
    hello, bad, ok = talk({"op": "edge", "id": 1, "pids": {"server": 2**22 + 7}}, {"op": "clock", "id": 2})
    assert bad["id"] == 1 and bad["error"].startswith("edge failed")
    assert ok["t_ns"] > 0


def test_files_go_in_a_private_directory_that_goes_with_the_agent():
    hello, put, bad = talk(
        {"op": "files", "id": 1, "files": {"server-cert.pem": "CERT\n", "server-key.pem": "KEY\n"}},
        {"op": "files", "id": 2, "files": {"../escape": "x"}},
    )
    paths = put["paths"]
    assert set(paths) == {"server-cert.pem", "server-key.pem"}
    folder = Path(paths["server-key.pem"]).parent
    assert Path(paths["server-cert.pem"]).parent == folder
    assert "is not a file name" in bad["error"]
    assert not folder.exists()  # the agent ended (EOF): its directory went with it
