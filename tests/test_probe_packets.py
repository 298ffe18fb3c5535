# SPDX-License-Identifier: GPL-2.0-only
"""qprof-packets and its bpftrace twin on real msquic transfers.

Each transfer's devices are probed before the client starts and read
after both ends have exited, so the probe saw every packet the transfer
put on them; the counts are checked against what msquic says it sent and
against each other (the two ends of a veth pair, TX against RX).
"""

import json
import os
import secrets
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from qprof.collectors.controlled import ControlledProcess
from qprof.collectors.endpoints import make_certificate
from qprof.collectors.probes import delta
from qprof.collectors.topology import Endpoint, Topology
from qprof.collectors.workload import WorkloadProcess

from conftest import REPO, free_port, leftovers, needs_build
from twin import bpftrace_twin

PROBE = REPO / "build" / "bin" / "qprof-packets"
WORKLOAD = REPO / "build" / "bin" / "qprof-wl"
TWIN = REPO / "probes" / "packets.bt"
# Ethernet + IPv4 + UDP: what every packet carries besides msquic's payload.
# TX lengths start at the MAC header, RX lengths at the network header.
ETH_HLEN, UDP4_HLEN = 14, 20 + 8
START_TIMEOUT_S = 10
FINISH_TIMEOUT_S = 30

pytestmark = [
    pytest.mark.system,
    needs_build,
    pytest.mark.skipif(not PROBE.exists(), reason="qprof-packets is not built; `make probes` builds it"),
]


@contextmanager
def packets_probe(devices, tmp_path: Path, *options):
    """qprof-packets --control on `devices`, attached when this yields; a
    mark(NAME) gives {dev: counters}. On a clean way out the probe must
    leave on "exit" with status 0 and nothing on stderr."""
    log = tmp_path / f"probe-{secrets.token_hex(2)}.log"
    argv = [str(PROBE), "--control", *options] + [a for d in devices for a in ("-d", d)]
    with ControlledProcess("packets probe", argv, log) as proc:
        proc.wait_event("ready", START_TIMEOUT_S)
        yield lambda name: {d["dev"]: d for d in proc.mark(name)["devices"]}
        proc.send("exit")
        assert proc.proc.wait(timeout=5) == 0
    assert log.read_text() == ""


@contextmanager
def packets_twin(ifname: str, tmp_path: Path):
    """probes/packets.bt on one device (see twin.bpftrace_twin)."""
    with bpftrace_twin(TWIN, [ifname], tmp_path) as stop:
        yield stop


# Topology tags these tests used: other qprof runs may share the machine,
# so only what these tests made is held against them.
TAGS = []


def our_children():
    ps = subprocess.run(["ps", "-eo", "ppid=,args="], capture_output=True, text=True).stdout
    return [
        line.strip()
        for line in ps.splitlines()
        if int(line.split()[0]) == os.getpid() and any(n in line for n in ("qprof-", "bpftrace", " ip "))
    ]


@pytest.fixture
def clean():
    """Every test leaves no namespace, link or process behind."""
    yield
    assert [x for x in leftovers() if any(tag in x for tag in TAGS)] == []
    assert our_children() == []


def transfer(client_ep, server_ep, tmp_path: Path, duration_ms=2000):
    """One msquic bulk transfer client -> server; their done reports."""
    cert, key = make_certificate(tmp_path)
    port = free_port() if server_ep.netns is None else 4433
    common = [str(WORKLOAD), "--stack", "quic", "--addr", server_ep.addr, "--port", str(port)]
    server_argv = common + ["--role", "server", "--cert", str(cert), "--key", str(key)]
    client_argv = common + ["--role", "client", "--duration-ms", str(duration_ms)]
    with WorkloadProcess("server", server_argv, server_ep, tmp_path / "server.log") as server:
        server.wait_event("ready", START_TIMEOUT_S)
        with WorkloadProcess("client", client_argv, client_ep, tmp_path / "client.log") as client:
            client_done = client.finish(FINISH_TIMEOUT_S)
        server_done = server.finish(FINISH_TIMEOUT_S)
    for done in (client_done, server_done):
        assert done["exit_code"] == 0, done
    assert server_done["verified"] is True
    return client_done, server_done


@contextmanager
def veth_pair():
    TAGS.append(secrets.token_hex(3))
    with Topology("netns", TAGS[-1]) as topo:
        yield topo


def dev(ep) -> str:
    return f"{ep.ifname}@{ep.netns}"


def assert_consistent(d: dict):
    """What holds for any device's counters, whatever crossed it."""
    for side in ("tx", "rx"):
        s = d[side]
        # Every skb lands in exactly one bucket of each histogram.
        for hist in ("len_hist_bytes", "gso_size_hist_bytes", "gso_segs_hist"):
            assert sum(s[hist]) == s["skbs"], (side, hist)
        # Bucket 0 holds 0 or 1 segment; the others are the super-packets.
        assert sum(s["gso_segs_hist"][1:]) == s["gso_skbs"], side
        assert s["udp_skbs"] + s["tcp_skbs"] + s["other_skbs"] == s["skbs"], side
        assert s["skbs"] <= s["wire_packets"] and s["bytes"] <= s["wire_bytes"], side
        assert s["wire_packets"] >= s["skbs"] - s["gso_skbs"] + 2 * s["gso_skbs"], side
    # Every packet that entered GRO came out with one result.
    assert sum(d["rx"]["gro_result"].values()) == d["rx"]["gro_entry"]


def assert_sent_by(tx: dict, done: dict, bulk: bool):
    """The device's TX is what this msquic end handed the kernel."""
    pc = done["perf_counters"]
    # One sendmsg (UDP_SEGMENT when segmenting) is one skb at the device.
    assert tx["udp_skbs"] == pytest.approx(pc["udp_send_calls"], abs=3)
    # Datagrams: msquic's udp_send runs a few above the kernel's count,
    # because it adds a send flush's running datagram total per batch
    # (QuicPacketBuilderSendBatch does not reset TotalCountDatagrams);
    # only flushes that send more than one batch (handshake, PMTU probes)
    # overcount, so it stays within a fraction of a percent.
    assert tx["wire_packets"] == pytest.approx(pc["udp_send"], rel=0.02)
    # Bytes: msquic's UDP payload plus Ethernet + IPv4 + UDP on every
    # packet (the few ARP/ND packets are a rounding error).
    per_packet = (tx["wire_bytes"] - pc["udp_send_bytes"]) / tx["wire_packets"]
    assert per_packet == pytest.approx(ETH_HLEN + UDP4_HLEN, abs=0.5)
    # ...and on every skb, for skb->len.
    per_skb = (tx["bytes"] - pc["udp_send_bytes"]) / tx["skbs"]
    assert per_skb == pytest.approx(ETH_HLEN + UDP4_HLEN, abs=1.0)
    # A bulk sender that can segment does: most packets leave in GSO
    # super-packets. (The receiver's ACKs go one by one.)
    if bulk and done["send_segmentation"]:
        assert tx["gso_skbs"] > 0 and tx["wire_packets"] > 2 * tx["skbs"]


def assert_crossed(tx: dict, rx: dict, slack=2):
    """What left one end of a wire arrived at the other, GSO intact; RX
    lengths lack the Ethernet header."""
    assert rx["skbs"] == pytest.approx(tx["skbs"], abs=slack)
    assert rx["wire_packets"] == pytest.approx(tx["wire_packets"], abs=slack)
    assert rx["gso_skbs"] == pytest.approx(tx["gso_skbs"], abs=slack)
    assert rx["udp_skbs"] == pytest.approx(tx["udp_skbs"], abs=slack)
    assert rx["wire_bytes"] == pytest.approx(tx["wire_bytes"] - ETH_HLEN * tx["wire_packets"], abs=slack * 1500)


def test_loopback_private(tmp_path, clean):
    """Both ends on 127.0.0.1 inside a namespace of their own, whose lo
    nothing else uses: every packet on it is the transfer's."""
    with veth_pair() as topo:
        here = Endpoint(topo.client.netns, "127.0.0.1", "lo")
        with packets_probe([f"lo@{here.netns}"], tmp_path, "--rx") as mark:
            client, server = transfer(here, here, tmp_path)
            lo = mark("end")[f"lo@{here.netns}"]
    assert_consistent(lo)
    tx, rx = lo["tx"], lo["rx"]
    assert lo["rx"]["gro_entry"] == 0  # lo has no NAPI
    # Both directions cross lo: data one way, ACKs the other, both on TX.
    # (msquic's feature check, CxPlatDataPathCalculateFeatureSupport, also
    # sends one 8-segment GSO skb over 127.0.0.1 as each process starts.)
    both = {
        k: client["perf_counters"][k] + server["perf_counters"][k]
        for k in ("udp_send", "udp_send_calls", "udp_send_bytes")
    }
    assert tx["udp_skbs"] == pytest.approx(both["udp_send_calls"] + 2, abs=3)
    assert tx["wire_packets"] == pytest.approx(both["udp_send"], rel=0.02)
    per_packet = (tx["wire_bytes"] - both["udp_send_bytes"]) / tx["wire_packets"]
    assert per_packet == pytest.approx(ETH_HLEN + UDP4_HLEN, abs=0.5)
    assert client["send_segmentation"] is True
    assert tx["gso_skbs"] > 0 and tx["wire_packets"] > 2 * tx["skbs"]
    assert max(tx["gso_size_hist_bytes"][1:]) > 0
    # Every skb lo transmits it receives, GSO and all.
    assert_crossed(tx, rx, slack=0)


def test_loopback_host(tmp_path, clean):
    """lo@host is shared with whatever else runs here, so only what other
    traffic cannot break is checked."""
    here = Endpoint(None, "127.0.0.1", "lo")
    with packets_probe(["lo@host"], tmp_path, "--rx") as mark:
        client, server = transfer(here, here, tmp_path)
        lo = mark("end")["lo@host"]
    assert_consistent(lo)
    tx, rx = lo["tx"], lo["rx"]
    both = {k: client["perf_counters"][k] + server["perf_counters"][k] for k in ("udp_send", "udp_send_calls")}
    assert tx["udp_skbs"] >= both["udp_send_calls"]
    assert tx["wire_packets"] >= both["udp_send"] * 0.98
    assert tx["gso_skbs"] > 0
    assert rx["skbs"] == pytest.approx(tx["skbs"], rel=0.01)


def test_veth(tmp_path, clean):
    """With --rx both directions of both ends; beside it, a probe without
    --rx (qprof run's default) counts the same transmits and no receive."""
    with veth_pair() as topo:
        devices = [dev(topo.client), dev(topo.server)]
        with packets_probe(devices, tmp_path, "--rx") as mark, packets_probe(devices, tmp_path) as tx_only:
            before = mark("start"), tx_only("start")
            client, server = transfer(topo.client, topo.server, tmp_path)
            after = mark("end"), tx_only("end")
    devs = after[0]
    c, s = devs[dev(topo.client)], devs[dev(topo.server)]
    a, b = (delta(x, y) for x, y in zip(before, after))
    for d in devices:
        assert b[d]["rx"] is None
        for k in ("skbs", "wire_packets", "gso_skbs", "udp_skbs"):
            assert b[d]["tx"][k] == pytest.approx(a[d]["tx"][k], abs=2), (d, k)
        assert b[d]["tx"]["wire_bytes"] == pytest.approx(a[d]["tx"]["wire_bytes"], rel=1e-4), d
    for d in (c, s):
        assert_consistent(d)
        # veth delivers without NAPI unless GRO asks for it: no GRO here.
        assert d["rx"]["gro_entry"] == 0
    assert client["send_segmentation"] is True
    assert_sent_by(c["tx"], client, bulk=True)
    assert_sent_by(s["tx"], server, bulk=False)
    # The data goes client -> server: client TX is server RX and carries
    # far more than the ACKs coming back.
    assert_crossed(c["tx"], s["rx"])
    assert_crossed(s["tx"], c["rx"])
    assert c["tx"]["bytes"] > 50 * c["rx"]["bytes"]
    assert s["rx"]["bytes"] > 50 * s["tx"]["bytes"]
    assert s["rx"]["gso_skbs"] > 0  # the super-packets crossed unsplit


def test_veth_gro_napi(tmp_path, clean):
    """With GRO on (and UDP GRO forwarding, so GSO skbs qualify) the server's
    veth receives through NAPI, and the GRO hooks see every skb."""
    with veth_pair() as topo:
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                topo.server.netns,
                "ethtool",
                "-K",
                topo.server.ifname,
                "gro",
                "on",
                "rx-udp-gro-forwarding",
                "on",
            ],
            check=True,
            capture_output=True,
        )
        with packets_probe([dev(topo.client), dev(topo.server)], tmp_path, "--rx") as mark:
            transfer(topo.client, topo.server, tmp_path)
            devs = mark("end")
    c, s = devs[dev(topo.client)], devs[dev(topo.server)]
    for d in (c, s):
        assert_consistent(d)
    rx = s["rx"]
    # Every UDP skb took the NAPI path; ND may too (a socket owns it), ARP not.
    assert c["tx"]["udp_skbs"] - 2 <= rx["gro_entry"] <= c["tx"]["skbs"] + 2
    assert c["rx"]["gro_entry"] == 0  # the client's end kept GRO off
    # What GRO merged into another skb does not reach netif_receive_skb.
    res = rx["gro_result"]
    out_of_gro = rx["gro_entry"] - res["merged"] - res["merged_free"] - res["consumed"]
    assert rx["skbs"] == pytest.approx(out_of_gro, abs=c["tx"]["other_skbs"] + 2)
    assert rx["wire_packets"] == pytest.approx(c["tx"]["wire_packets"], abs=2)


def test_twin_agrees(tmp_path, clean, tracefs):
    """The bpftrace twin and qprof-packets count the same transfer alike
    (the twin counts RX always, the tool with --rx)."""
    with veth_pair() as topo:
        with (
            packets_twin(topo.client.ifname, tmp_path) as stop_twin,
            packets_probe([dev(topo.client)], tmp_path, "--rx") as mark,
        ):
            client, _ = transfer(topo.client, topo.server, tmp_path)
            ours = mark("end")[dev(topo.client)]
            theirs = stop_twin()
    tx = ours["tx"]
    # The probe counted what msquic sent (a skb a send call, its datagrams on the wire)...
    assert_sent_by(tx, client, bulk=True)
    # ...and the twin counts it alike.
    assert theirs["@tx_skbs"] == pytest.approx(tx["skbs"], rel=0.01)
    assert theirs["@tx_wire_packets"] == pytest.approx(tx["wire_packets"], rel=0.01)
    assert theirs["@tx_gso_skbs"] == pytest.approx(tx["gso_skbs"], rel=0.01)
    assert theirs["@tx_bytes"] == pytest.approx(tx["bytes"], rel=0.01)
    assert theirs["@rx_skbs"] == pytest.approx(ours["rx"]["skbs"], rel=0.01)


def test_portable_build_counts_alike(tmp_path, clean):
    """The build for kernels without bpf_rdonly_cast (--portable, chosen by
    itself before 6.2) and the default one, attached together to both ends
    of one transfer, count the same packets the same way: same maps, same
    layout, headers parsed alike. Counted from a mark both take once
    attached: the new veths' IPv6 neighbour traffic goes on meanwhile."""
    with veth_pair() as topo:
        devs = [dev(topo.client), dev(topo.server)]
        with (
            packets_probe(devs, tmp_path, "--rx") as fast,
            packets_probe(devs, tmp_path, "--rx", "--portable") as portable,
        ):
            before = fast("start"), portable("start")
            client, _ = transfer(topo.client, topo.server, tmp_path)
            after = fast("end"), portable("end")
    a, b = (delta(x, y) for x, y in zip(before, after))
    # The default build counted what msquic sent, super-packets and all...
    assert_sent_by(a[dev(topo.client)]["tx"], client, bulk=True)
    # ...and the portable one counts the same.
    for d in devs:
        for side in ("tx", "rx"):
            x, y = a[d][side], b[d][side]
            for k in ("skbs", "wire_packets", "gso_skbs", "udp_skbs", "tcp_skbs", "other_skbs"):
                assert y[k] == pytest.approx(x[k], abs=2), (d, side, k)
            assert y["wire_bytes"] == pytest.approx(x["wire_bytes"], rel=1e-4), (d, side)
            assert y["gso_segs_hist"] == pytest.approx(x["gso_segs_hist"], abs=2), (d, side)


def test_twin_compiles(tmp_path, tracefs):
    """bpftrace 0.17 has no --dry-run; --emit-elf compiles every probe to
    BPF bytecode without loading it."""
    elf = tmp_path / "packets.o"
    r = subprocess.run(
        ["bpftrace", "--emit-elf", str(elf), str(TWIN), "lo"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert elf.stat().st_size > 0


@pytest.mark.parametrize(
    "spec, code, words",
    [
        ("qpnosuch0@host", 2, ["no device 'qpnosuch0'", "'host'"]),
        ("lo@qp-nosuch-ns", 2, ["no network namespace 'qp-nosuch-ns'", "ip netns list"]),
        ("lo@", 64, ["invalid device 'lo@'"]),
        ("lo@a/b", 64, ["invalid device"]),
    ],
)
def test_bad_device(spec, code, words):
    r = subprocess.run([str(PROBE), "-d", spec, "--control"], capture_output=True, text=True, timeout=30)
    assert r.returncode == code
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1, r.stderr
    for w in words:
        assert w in r.stderr


def test_bad_device_in_namespace(clean):
    with veth_pair() as topo:
        r = subprocess.run(
            [str(PROBE), "-d", f"qpnosuch0@{topo.client.netns}"], capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 2
        assert r.stderr.splitlines() == [
            f"qprof-packets: no device 'qpnosuch0' in namespace '{topo.client.netns}'; "
            f"see 'ip -n {topo.client.netns} link'"
        ]
        # The same name twice is refused rather than counted twice.
        r = subprocess.run(
            [str(PROBE), "-d", dev(topo.client), "-d", dev(topo.client)], capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 2 and "same device" in r.stderr and len(r.stderr.splitlines()) == 1


def test_interval_table_and_json():
    """By default TX alone (no receive program attached, RX null: not
    counted, not zero); with --rx both. The four captures are apart (each
    its own programs and maps) and watch lo side by side: 2 s, not 5."""
    argv = {
        "table": ["-d", "lo", "1", "1"],
        "table rx": ["-d", "lo", "--rx", "1", "1"],
        "json": ["-d", "lo@host", "--json", "1", "2"],
        "json rx": ["-d", "lo@host", "--json", "--rx", "1", "2"],
    }
    procs = {
        k: subprocess.Popen([str(PROBE), *a], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k, a in argv.items()
    }
    out = {}
    try:
        for k, p in procs.items():
            stdout, stderr = p.communicate(timeout=30)
            out[k] = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    r = out["table"]
    assert r.returncode == 0 and r.stderr == ""
    header, *rows = r.stdout.strip().splitlines()
    for col in ("SKBS", "BYTES", "WIRE PKTS", "GSO SKBS", "AVG LEN (B)", "UDP", "TCP"):
        assert col in header
    assert [row.split()[:2] for row in rows] == [["lo@host", "TX"]]
    r = out["table rx"]
    assert r.returncode == 0 and r.stderr == ""
    assert [row.split()[:2] for row in r.stdout.strip().splitlines()[1:]] == [["lo@host", "TX"], ["lo@host", "RX"]]
    for key, rx in (("json", False), ("json rx", True)):
        r = out[key]
        assert r.returncode == 0 and r.stderr == ""
        marks = [json.loads(line) for line in r.stdout.splitlines()]
        assert len(marks) == 2 and all(m["event"] == "mark" and m["name"] == "interval" for m in marks)
        (d,) = marks[1]["devices"]
        assert d["dev"] == "lo@host" and d["ifindex"] == 1
        assert d["netns_ino"] == os.stat("/proc/self/ns/net").st_ino
        progs = {p["name"] for p in marks[1]["progs"]}
        if rx:
            assert progs == {"start_xmit", "receive_skb", "gro_entry", "gro_exit"}
            assert d["rx"]["gro_entry"] == sum(d["rx"]["gro_result"].values())
        else:
            assert progs == {"start_xmit"} and d["rx"] is None
        assert d["tx"]["skbs"] == sum(d["tx"]["len_hist_bytes"])
    r = subprocess.run([str(PROBE), "--help"], capture_output=True, text=True, timeout=30)
    assert "EXAMPLES:" in r.stdout + r.stderr
