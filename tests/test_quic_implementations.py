# SPDX-License-Identifier: GPL-2.0-only
"""QUIC implementations beside msquic (issue 28): quinn's workload
(workloads/rs/) speaks qprof-wl's protocol, so a quinn run is measured as
a quic one is: data verified, the probes' counts against quinn's own,
flame graphs whose categories know rustls, aws-lc and quinn's code."""

import re

import pytest

from qprof import errors
from qprof.describe import options, plan

from conftest import REPO, needs_build, run_json

WLPROTO = REPO / "workloads" / "rs" / "wlproto" / "src" / "lib.rs"
RS_LOCK = REPO / "workloads" / "rs" / "Cargo.lock"
OTHER_MAX = 0.05
# Two instruments' counts over one window, read at its edges a moment apart.
EDGE_SKEW = 0.01
ATTEMPTS = 3


def locked_version(krate: str) -> str:
    return re.search(rf'name = "{krate}"\nversion = "([^"]+)"', RS_LOCK.read_text()).group(1)


def quinn_run(runs_dir, *args):
    """A run at 1000 Hz, complete if one of ATTEMPTS is (this VM's CPU 1
    sometimes loses samples; test_run_flame.py says how that is flagged)."""
    for _ in range(ATTEMPTS):
        rec = run_json(runs_dir, "--stack", "quinn", "--sample-hz", "1000", *args)
        if rec["flame"]["complete"]:
            break
    return rec


def assert_categories(rec):
    """Each side's categories sum to its graph; a complete capture leaves
    under 5% of it unnamed; quinn's work is crypto and protocol."""
    flame = rec["flame"]
    for side in ("client", "server"):
        f = flame["sides"][side]
        cats = f["categories_ns_per_byte"]
        assert sum(cats.values()) == pytest.approx(f["ns_per_byte"]), side
        assert cats["crypto"] > 0 and cats["protocol"] > 0, (side, cats)
        if flame["complete"]:
            assert cats["other"] < OTHER_MAX * f["ns_per_byte"], (side, cats)
    return flame


@pytest.mark.system
@needs_build
def test_quinn_bulk_is_verified_and_measured(runs_dir):
    rec = quinn_run(runs_dir, "--streams", "2", "--duration", "1.5s", "--warmup", "0.3s")
    assert rec["verified"] is True and rec["stack"] == "quinn"
    lib = rec["environment"]["quic_library"]
    assert lib["name"] == "quinn" and lib["version"] == locked_version("quinn")
    assert lib["crypto"] == f"rustls {locked_version('rustls')} on aws-lc-rs {locked_version('aws-lc-rs')}"
    # Both streams carried the window's bytes, counted by the server as it checked them.
    server = rec["workload"]["server"]["report"]
    assert len(server["stream_bytes"]) == 2 and min(server["stream_bytes"]) > 0
    assert sum(server["stream_bytes"]) == server["app_bytes"] == rec["workload"]["client"]["report"]["app_bytes"]
    # The syscalls probe and quinn count the client's sends alike. Each
    # edge reads the probe and the marks a moment apart, and the sender
    # goes on meanwhile: a share of the window that does not depend on how
    # fast this machine sends.
    own = rec["crosscheck"]["client"]
    assert own["source"].startswith("quinn")
    calls = own["udp_send_calls"]
    assert calls["own"] > 0 and calls["ebpf"] == pytest.approx(calls["own"], rel=EDGE_SKEW), calls
    # quinn-udp sends with GSO here: more datagrams than calls, as the packets probe saw.
    assert rec["offload"]["observed"]["gso"] == "on" and lib["send_segmentation"]["client"] is True
    assert own["udp_send_datagrams"]["own"] > calls["own"]
    assert rec["transport"]["quic_settings"]["server"]["stream_receive_window"] > 0
    flame = assert_categories(rec)
    # The content check is its own category, on the receiver only.
    assert flame["sides"]["server"]["categories_ns_per_byte"]["verification"] > 0
    assert flame["sides"]["client"]["categories_ns_per_byte"]["verification"] == 0


@pytest.mark.system
@needs_build
def test_quinn_downloads_each_checked(runs_dir):
    rec = quinn_run(runs_dir, "--pattern", "download", "--size", "256K", "--count", "8")
    assert rec["verified"] is True
    d = rec["downloads"]
    assert d["count"] == 8 and d["served"] == 8
    for row in d["each"]:
        assert row["bytes"] == 256 << 10
        # Times from the connect call, in order: handshake, first byte, last byte.
        assert 0 < row["handshake_s"] < row["first_byte_s"] <= row["complete_s"], row
        # quinn's own counts of the connection's packets, each side's.
        assert row["client"]["packets_received"] > 0 and row["server"]["packets_sent"] > 0, row
    # The server sends: its sends and quinn's count of them agree.
    calls = rec["crosscheck"]["server"]["udp_send_calls"]
    assert calls["ebpf"] == pytest.approx(calls["own"], rel=EDGE_SKEW), calls
    flame = assert_categories(rec)
    # Eight handshakes in the window: rustls and aws-lc's key exchange and signatures.
    assert sum(flame["sides"][s]["categories_ns_per_byte"]["handshake"] for s in ("client", "server")) > 0


@pytest.mark.system
@needs_build
def test_quinn_gso_off_sends_a_datagram_a_call(runs_dir):
    """--gso off through the interposer: quinn-udp's own probe of
    UDP_SEGMENT fails, so it sends one datagram per call, and says so."""
    rec = run_json(runs_dir, "--stack", "quinn", "--gso", "off", "--duration", "1s", "--warmup", "0.3s")
    assert rec["verified"] is True
    assert rec["environment"]["quic_library"]["send_segmentation"]["client"] is False
    obs = rec["offload"]["observed"]
    assert obs["gso"] == "off", obs
    # quinn's own count: one datagram in each send. The probes' share may
    # fall below one (a call the full socket refused sent none), never above.
    qs = rec["workload"]["client"]["window"]["quic_stats"]
    assert qs["udp_tx_ios"] > 0 and qs["udp_tx_datagrams"] == qs["udp_tx_ios"], qs
    assert obs["evidence"]["datagrams_per_send_call"] <= 1 + EDGE_SKEW, obs
    # GRO stays quinn-udp's to take: independent of GSO there, unlike msquic.
    assert rec["offload"]["effective"]["gro"] is None


def resolve(**kw):
    return plan.resolve(options.RunOptions(stack="quinn", **kw))


@pytest.mark.unit
@pytest.mark.parametrize(
    "kw, words",
    [
        ({"pattern": "rr"}, "runs --pattern bulk and download, not rr"),
        ({"pattern": "handshakes"}, "not handshakes"),
        ({"direction": "down"}, "sends up only"),
        ({"conns": 2}, "opens one connection"),
        ({"pattern": "download", "resume": True}, "does not resume sessions"),
        ({"pacing": "off"}, "--pacing is msquic's"),
        ({"msquic": "/x.so"}, "quinn does not use msquic"),
        ({"ecn": "on"}, "keeps its library's default"),
        ({"tls_version": "1.2"}, "QUIC's TLS is fixed"),
    ],
)
def test_what_quinns_workload_does_not_take_is_refused(kw, words):
    with pytest.raises(errors.QprofError, match=re.escape(words)):
        resolve(**kw)


@pytest.mark.unit
def test_quinn_is_no_flow_of_a_mix():
    with pytest.raises(errors.BadMix, match="use quic for the QUIC flows"):
        plan.resolve(options.RunOptions(mix="quinn:1,tcp:1"), cpus=8)


@pytest.mark.unit
@pytest.mark.parametrize(
    "kw", [{}, {"streams": 4, "bytes": 1 << 20}, {"pattern": "download", "size": 1 << 20, "count": 3}, {"gso": "off"}]
)
def test_every_flag_qprof_passes_quinn_is_wlprotos(kw):
    """The Rust workloads' command line (wlproto's Opts) takes every flag
    qprof gives them: clap refuses any other, and the run would fail."""
    p = resolve(**kw)
    fp = p.flows[0]
    taken = {"--" + f.replace("_", "-") for f in re.findall(r"^\s*pub (\w+):", WLPROTO.read_text(), re.M)}
    for role in ("client", "server"):
        passed = [a for a in options.workload_args(fp.options, role) + fp.offload.args[role] if a.startswith("--")]
        assert set(passed) <= taken, (role, set(passed) - taken)


@pytest.mark.unit
def test_the_workloads_exit_codes_are_qprof_wls():
    """wlproto's exit codes are wl.h's, name for name."""
    c = dict(re.findall(r"WL_EXIT_(\w+) = (\d+)", (REPO / "workloads" / "wl.h").read_text()))
    rs = dict(re.findall(r"pub const (\w+): i32 = (\d+);", WLPROTO.read_text()))
    assert c and rs == c
