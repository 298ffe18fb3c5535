# SPDX-License-Identifier: GPL-2.0-only
"""qprof compare's matrix, statistics and refusals, without transfers."""

import io
import json
import os
import re
from pathlib import Path
from unittest import mock

import pytest
from rich.cells import cell_len
from rich.console import Console

from qprof import errors
from qprof.cli import compare_cmd
from qprof.collectors import compare, devices, preflight, procfs
from qprof.describe import comparison, offload, options, transports
from qprof.present import tables

pytestmark = pytest.mark.unit

SEVEN = ("quic", "quinn", "quiche", "ngtcp2", "tcp", "tcp-tls", "udp")


def base(**kw):
    return options.RunOptions(duration_s=1.0, **kw)


@pytest.fixture(autouse=True)
def interposer_built(tmp_path, monkeypatch):
    """Planning --gso off for quic looks for the interposer; these tests
    check planning, not the build."""
    lib = tmp_path / "build" / "lib" / offload.PRELOAD_LIB
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    monkeypatch.setenv("QPROF_BUILD_DIR", str(tmp_path / "build"))
    return lib


def test_vary_product_in_order_first_config_is_the_baseline():
    vary = compare.parse_vary(["gso=on,off", "io-size=64K,128K"])
    configs = compare.build_matrix(base(), ["quic"], vary, [])
    assert [c.label for c in configs] == [
        "quic gso=on io-size=64K",
        "quic gso=on io-size=128K",
        "quic gso=off io-size=64K",
        "quic gso=off io-size=128K",
    ]
    assert [c.opts.io_size for c in configs] == [65536, 131072, 65536, 131072]
    assert [c.opts.gso for c in configs] == ["on", "on", "off", "off"]


def test_stacks_side_by_side_get_each_stack_default_io_size():
    configs = compare.build_matrix(base(), compare.parse_stacks("quic,tcp-tls,tcp"), {}, [])
    assert [c.stack for c in configs] == ["quic", "tcp-tls", "tcp"]
    assert [c.opts.io_size for c in configs] == [64 << 10, 128 << 10, 128 << 10]


@pytest.mark.parametrize(
    "items, needle",
    [
        (["gsx=on,off"], "unknown --vary key 'gsx'"),
        (["gso"], "KEY=V1,V2"),
        (["gso=on,,off"], "empty value"),
        (["gso=on,on"], "twice"),
        (["gso=on,off", "gso=off,on"], "given twice"),
    ],
)
def test_bad_vary_is_refused(items, needle):
    with pytest.raises(errors.BadValue) as e:
        compare.parse_vary(items)
    assert needle in e.value.sentence


@pytest.mark.parametrize(
    "stack, vary, fixed, cls, needle",
    [
        ("quic", {"gso": ["on", "maybe"]}, [], errors.BadValue, "'quic gso=maybe'"),
        ("quic", {"gso": ["on", "off"]}, ["gso"], errors.BadValue, "both fixed and varied"),
        ("quic", {"send-mode": ["gso", "sendmsg"]}, [], errors.StackCannot, "--stack udp only"),
        ("quic", {"gro": ["on"]}, [], errors.BadValue, "at least two configurations"),
        ("udp", {"batch": ["x", "2"]}, [], errors.BadValue, "'x'"),
        ("quic", {"tls": ["1.2", "1.3"]}, [], errors.BadTls, "tcp-tls and tcp-ktls only"),
        # Ranges from the option table, checked before the first run (they
        # used to pass the up-front check and fail after earlier runs).
        ("quic", {"io-size": ["2048", "1000"]}, [], errors.BadValue, "'quic io-size=1000'"),
        ("quic", {"streams": ["1", "100"]}, [], errors.BadValue, "--streams 100 is 100 streams, more than the 64"),
        ("udp", {"batch": ["1", "5000"]}, [], errors.BadValue, "--batch 5000"),
        ("tcp-tls", {"tls": ["1.3", "1.1"]}, [], errors.BadTls, "--tls takes 1.2 or 1.3"),
        ("quic", {"exec-profile": ["lowlat", "fast"]}, [], errors.BadValue, "'fast'"),
    ],
)
def test_configurations_are_checked_before_anything_runs(stack, vary, fixed, cls, needle):
    with pytest.raises(cls) as e:
        compare.build_matrix(base(), [stack], vary, fixed)
    assert needle in e.value.sentence


def test_gro_on_loopback_tcp_cannot_be_honoured():
    with pytest.raises(errors.BadValue) as e:
        compare.build_matrix(base(topology="loopback"), ["tcp"], {"gro": ["on", "off"]}, [])
    assert "loopback" in e.value.sentence and "--topology netns" in e.value.sentence


# --- before the first run: every configuration resolved and checked here -------------


class _Started(Exception):
    """compare.run was reached: the first run would start."""


def compare_until_run(*args):
    """`qprof compare ARGS` in this process, through the real click command,
    as far as the first run (which compare.run would start)."""
    with mock.patch.object(compare, "run", side_effect=_Started):
        with compare_cmd.compare_cmd.make_context("compare", list(args)) as ctx:
            compare_cmd.compare_cmd.invoke(ctx)
    raise AssertionError(f"qprof compare {' '.join(args)} ended without reaching its first run")


def test_every_configuration_meets_preflight_before_the_first_run():
    seen = []
    with mock.patch.object(preflight, "check", lambda plan, faults=None: seen.append(plan.options)):
        with pytest.raises(_Started):
            compare_until_run("--stacks", ",".join(SEVEN), "--duration", "1s")
        assert [o.stack for o in seen] == list(SEVEN)
        seen.clear()
        with pytest.raises(_Started):
            compare_until_run("--vary", "msquic=/a/libmsquic.so,/b/libmsquic.so", "--duration", "1s")
        assert [o.msquic for o in seen] == ["/a/libmsquic.so", "/b/libmsquic.so"]


# A library this machine loads as msquic, standing in for a build of the user's own.
GOOD_MSQUIC = "/good/libmsquic.so"


@pytest.fixture
def machine(interposer_built, monkeypatch):
    """preflight's questions answered as on a machine where qprof runs as
    root with every workload built, on a kernel without kernel TLS."""
    bin_dir = interposer_built.parent.parent / "bin"
    bin_dir.mkdir()
    for stack in (s for s in transports.STACKS.values() if not s.programs):
        (bin_dir / stack.workload).write_text("#!/bin/sh\n")
        (bin_dir / stack.workload).chmod(0o755)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(procfs, "kernel_has_tls", lambda: False)
    real = preflight.msquic_library
    monkeypatch.setattr(preflight, "msquic_library", lambda path: None if path == GOOD_MSQUIC else real(path))


@pytest.mark.parametrize(
    "args, cls, words",
    [
        # Used to measure tcp first (seven stacks first: 28 s), then exit 12.
        (["--stacks", "tcp,tcp-ktls"], errors.KernelFeatureMissing, ["configuration 'tcp-ktls'", "--guest"]),
        # Used to measure A, then exit 37, leaving an incomplete comparison.
        (
            ["--vary", f"msquic={GOOD_MSQUIC},/nonexistent/libmsquic.so"],
            errors.MsquicUnusable,
            ["configuration 'quic msquic=/nonexistent/libmsquic.so'", "is not a file"],
        ),
    ],
)
def test_a_configuration_this_machine_cannot_run_is_refused_before_any_runs(machine, args, cls, words):
    with pytest.raises(cls) as e:
        compare_until_run(*args, "--duration", "1s")
    sentence = e.value.sentence
    assert "\n" not in sentence and sentence.endswith("."), sentence
    for w in words:
        assert w in sentence, sentence


def test_what_no_configuration_can_do_here_is_said_once_for_all(machine, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(errors.NotRoot) as e:
        compare_until_run("--stacks", "tcp,udp", "--duration", "1s")
    assert e.value.sentence.startswith("qprof run needs root"), e.value.sentence
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(_Started):
        compare_until_run("--stacks", "tcp,udp", "--duration", "1s")


def test_unknown_stack_in_stacks():
    with pytest.raises(errors.UnknownStack):
        compare.parse_stacks("quic,sctp")


def test_summary_leaves_unmeasured_out_never_zero():
    s = comparison.summarize([2.0, None, 4.0, 3.0])
    assert (s["n"], s["absent"], s["median"], s["min"], s["max"]) == (3, 1, 3.0, 2.0, 4.0)
    none = comparison.summarize([None, None])
    assert none["n"] == 0 and none["median"] is None


def test_beyond_spread_needs_three_runs_and_disjoint_ranges():
    a, b = comparison.summarize([1.0, 1.1, 1.2]), comparison.summarize([1.3, 1.4, 1.5])
    assert comparison.beyond_spread(a, b) is True
    c = comparison.summarize([1.15, 1.4, 1.5])
    assert comparison.beyond_spread(a, c) is False
    assert comparison.beyond_spread(comparison.summarize([1.0, 1.1]), comparison.summarize([2.0, 2.1])) is None


def rec(gbps, sys_nspb, cats=None):
    r = {
        "throughput_gbps": gbps,
        "cpu": {s: {"ns_per_byte": {"total": sys_nspb}} for s in ("client", "server", "system")},
    }
    if cats:
        r["flame"] = {"sides": {"client": {"categories_ns_per_byte": cats}}}
    return r


def test_table_ratios_against_first_and_representative_run():
    cfgs = [object(), object()]
    runs = [
        {"config": 0, "record": rec(10, 1.0, {"crypto": 0.5})},
        {"config": 1, "record": rec(5, 2.0, {"crypto": 1.0})},
        {"config": 0, "record": rec(12, 0.9, {"crypto": 0.4})},
        {"config": 1, "record": rec(6, 2.2, {"crypto": 1.1})},
        {"config": 0, "record": rec(11, 0.8, {"crypto": 0.45})},
        {"config": 1, "record": rec(4, 2.4, {"crypto": 1.2})},
    ]
    t = comparison.table(cfgs, runs, comparison.metrics([r["record"] for r in runs]))
    assert t["throughput_gbps"][0]["median"] == 11 and t["throughput_gbps"][1]["median"] == 5
    assert t["throughput_gbps"][1]["ratio"] == pytest.approx(5 / 11)
    assert t["throughput_gbps"][1]["beyond_spread"] is True
    assert t["client_crypto_ns_per_byte"][1]["ratio"] == pytest.approx(1.1 / 0.45)
    assert "client_syscalls_per_mb" not in t  # never measured: no row, not zeros
    assert comparison.representative(runs, 1)["record"]["cpu"]["system"]["ns_per_byte"]["total"] == 2.2


# --- offload ---------------------------------------------------------------------


def test_quic_gso_off_implies_gro_off_through_the_interposer(tmp_path, interposer_built):
    lib = interposer_built
    p = offload.plan("quic", "netns", "off", None)
    assert p.effective == {"gso": "off", "gro": "off"}
    assert p.notes and "GRO off follows GSO off" in p.notes[0]
    # The plan says what to steer; the machine's side preloads the interposer to do it.
    assert p.env["client"] == {"QPROF_GSO": "off", "QPROF_GRO": "off"}
    env = devices.interposer_env(p, tmp_path)["client"]
    assert env["LD_PRELOAD"] == str(lib) and env["QPROF_GSO"] == "off" and env["QPROF_GRO"] == "off"
    assert env["QPROF_OFFLOAD_REPORT"].startswith(str(tmp_path))
    assert offload.plan("quic", "netns", None, None).env == {"client": {}, "server": {}}
    assert devices.interposer_env(offload.plan("quic", "netns", None, None), tmp_path) == {"client": {}, "server": {}}


def test_quic_gso_off_gro_on_is_refused():
    with pytest.raises(errors.StackCannot) as e:
        offload.plan("quic", "netns", "off", "on")
    assert "GSO off and GRO on" in e.value.sentence


def test_udp_plan_maps_gso_to_send_mode():
    assert offload.plan("udp", "netns", "off", None).args["client"] == ["--send-mode", "sendmmsg"]
    p = offload.plan("udp", "netns", None, "off", batch=8)
    assert p.args["client"] == ["--send-mode", "gso", "--batch", "8"]
    assert p.args["server"] == ["--gro", "off"]
    assert p.effective["gso"] == "on"


def test_tcp_plan_sets_device_features():
    p = offload.plan("tcp", "netns", "off", "on")
    assert p.devices == {"tso": "off", "gso": "off", "gro": "on"}


def observed(gso, gro, applies, **ev):
    return {"gso": gso, "gro": gro, "gro_applies": applies, "evidence": ev, "stack_reports": None}


def test_contradictions():
    assert offload.contradictions({"gso": "off", "gro": None}, observed("on", None, None, client_tx_gso_skbs=7))
    assert not offload.contradictions({"gso": "off", "gro": None}, observed("off", None, None))
    assert offload.contradictions({"gso": "on", "gro": None}, observed("off", None, None))
    # GRO on with nothing for GRO to do is not a contradiction; with something, it is.
    assert not offload.contradictions({"gso": None, "gro": "on"}, observed("on", "off", False, server_rx_gro_entries=0))
    assert offload.contradictions({"gso": None, "gro": "on"}, observed("off", "off", True, server_rx_gro_entries=0))
    assert offload.contradictions(
        {"gso": None, "gro": "off"}, observed("on", "on", True, recv_bytes_per_message=60000.0)
    )
    # Unmeasured is never a contradiction (nor a confirmation).
    assert not offload.contradictions({"gso": "off", "gro": "off"}, observed(None, None, None))
    msquic_says = observed("off", "off", False)
    msquic_says["stack_reports"] = {"gso": "on", "gro": "off"}
    assert "msquic reports it on" in offload.contradictions({"gso": "off", "gro": "off"}, msquic_says)[0]
    with pytest.raises(errors.OffloadContradiction):
        offload.verify({"gso": "on", "gro": None}, observed("off", None, None))


def test_missing_interposer_is_not_built(monkeypatch, tmp_path):
    monkeypatch.setenv("QPROF_BUILD_DIR", str(tmp_path / "nothing"))
    with pytest.raises(errors.NotBuilt) as e:
        devices.interposer_env(offload.plan("quic", "netns", "off", None), tmp_path)
    assert "make build" in e.value.sentence


def test_categories_of_an_incomplete_capture_are_absent():
    good, short = rec(10, 1.0, {"crypto": 0.5}), rec(10, 1.0, {"crypto": 0.01})
    short["flame"]["complete"] = False  # a CPU missed samples: every frame on it undercounts
    runs = [{"config": 0, "record": good, "id": "a"}, {"config": 1, "record": short, "id": "b"}]
    t = comparison.table([0, 1], runs, comparison.metrics([good, short]))
    assert t["client_crypto_ns_per_byte"][0]["n"] == 1
    assert t["client_crypto_ns_per_byte"][1]["n"] == 0 and t["client_crypto_ns_per_byte"][1]["median"] is None


def test_a_receive_torn_at_the_edges_is_not_coalescing():
    """The syscalls probe adds a call's count, then its bytes; an edge can
    read between the two, at each edge. One datagram's bytes more than the
    messages is such a tear (a CI run was refused for it), not GRO; three
    more is coalescing."""

    def rec(nbytes, msgs):
        calls = {"recvmsg": {"bytes": nbytes, "calls": msgs, "errors": 0}}
        return {"stack": "udp", "config": {}, "syscalls": {"server": {"by_syscall": calls}}}

    assert offload.observe(rec(1001 * 1472, 1000), 1472)["gro"] == "off"
    assert offload.observe(rec(1002 * 1472, 1000), 1472)["gro"] == "off"
    assert offload.observe(rec(1003 * 1472, 1000), 1472)["gro"] == "on"
    assert offload.observe(rec(1000 * 1472, 1000), 1472)["gro"] == "off"


# --- the table at any width ------------------------------------------------------

STORED = Path(__file__).parent / "data/report/runs/comparisons/20261123-215335-e67b1b/comparison.json"


def seven_stacks() -> dict:
    """The stored tcp,udp comparison as seven stacks of three runs each
    would have it: each figure the stored one scaled per stack and per
    run, so every cell has a spread, a ratio and a * (and an absent
    figure stays absent)."""
    rec = json.loads(STORED.read_text())
    rec["configs"] = [{"label": s, "stack": s, "overrides": {}} for s in SEVEN]
    rec["repeat"] = 3
    for key, rows in rec["metrics"].items():
        v = next((r["median"] for r in rows if r["median"]), None)
        new = [
            comparison.summarize([None if v is None else v * (1 + 0.37 * i) * (1 + 0.05 * j) for j in range(3)])
            for i in range(len(SEVEN))
        ]
        for r in new:
            r["ratio"] = r["median"] / new[0]["median"] if r["median"] is not None and new[0]["median"] else None
            r["beyond_spread"] = comparison.beyond_spread(new[0], r) if r is not new[0] else None
        rec["metrics"][key] = new
    return rec


def printed(rec: dict, width: int) -> str:
    out = io.StringIO()
    tables.print_comparison(rec, Console(file=out, width=width))
    return out.getvalue()


def shown_cells(rec: dict) -> list:
    """Every cell the table shows: each figure's, and each flame category's
    that reaches the floor in some configuration."""
    out = []
    for key, rows in rec["metrics"].items():
        u = rec["metric_units"][key]
        if ": " in u["label"] and all((r["median"] or 0) < tables.CATEGORY_FLOOR_NS_PER_BYTE for r in rows):
            continue
        out += [tables.cell(r, u["unit"], i == 0) for i, r in enumerate(rows)]
    return out


@pytest.mark.parametrize("width", [80, 60])
def test_seven_stacks_at_a_narrow_width_keep_every_number_and_name_whole(width):
    """Seven stacks side by side used to take 80 columns by cutting every
    cell to '0.…' and quinn and quiche both to 'qui…'."""
    rec = seven_stacks()
    text = printed(rec, width)
    assert "…" not in text
    assert max(cell_len(line) for line in text.splitlines()) <= width
    lines = text.splitlines()
    cells = shown_cells(rec)
    assert sum(c != "—" for c in cells) > 100 and any("*" in c for c in cells)
    for c in cells:
        assert any(c in line for line in lines), c  # whole, on one line
    for name in SEVEN:  # each stack named whole: "tcp" alone, not within "tcp-tls"
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), name


def test_configurations_stay_columns_where_they_fit():
    rec = seven_stacks()
    text = printed(rec, 200)
    header = next(line for line in text.splitlines() if "FIGURE" in line)
    assert re.findall(r"[\w-]+", header)[1:] == list(SEVEN)


def test_a_long_label_wraps_between_its_settings_and_a_column_wider_than_the_console_is_not_cut():
    rec = seven_stacks()
    lib = "/home/someone/src/msquic/build/linux/x64_openssl/bin/Release/libmsquic.so.2"  # 74 characters
    rec["configs"][1]["label"] = f"quic gso=off io-size=64K msquic={lib}"
    text = printed(rec, 60)
    assert "…" not in text and f"msquic={lib}" in text
    assert "quic gso=off io-size=64K" in text
    for c in shown_cells(rec):
        assert c in text, c
