#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Benchmark: are qprof's workloads as efficient as the reference tools?

qprof's verdicts are only as good as its workloads, so each one is run
beside the reference implementation of its stack, on the same machine and
topology (two namespaces, veth, MTU 1500), interleaved: every round runs
each tool once, in an order that rotates from round to round.

  tcp      qprof run --stack tcp      vs  iperf3 (always)
  quic     qprof run --stack quic     vs  secnetperf -exec:lowlat -cipher:1 -up:Ns
  tcp-tls  qprof run --stack tcp-tls  vs  secnetperf -tcp:1 (TLS 1.3 via quictls, 16 KiB records)
  ngtcp2   qprof run --stack ngtcp2 --direction down
                                      vs  ngtcp2's examples as Debian ships them (gtlsserver,
           gtlsclient; `make bench-tools`): one HTTP/3 download of a file of the bytes
           qprof's window moved, the server's from its page cache
  quinn    qprof run --stack quinn    vs  quinn's perf tool (quinn-perf client --uni-requests 1
           --bi-requests 0 --upload-size 1000G --download-size 0; --direction down swaps the sizes)
  quic-go  qprof run --stack quic-go  vs  quic-go's perf tool (perf --upload-bytes N
           --download-bytes 0, N the bytes qprof's window moved in that round; --direction
           down swaps them): one connection, one stream, as qprof's run
  s2n-quic qprof run --stack s2n-quic  vs  s2n-quic's perf tool (s2n-quic-qns perf client
           --send N --receive 0, N the bytes qprof's window moved in that round;
           --direction down swaps them), one connection, as qprof's run
  quiche   qprof run --stack quiche --pattern download --size 1G --count 3
                                      vs  quiche's apps (quiche-server, quiche-client
           --http-version HTTP/0.9): three downloads of a 1 GiB file from tmpfs, a process
           and a connection each, the server up throughout
  tquic    qprof run --stack tquic --pattern download --size 1G --count 3
                                      vs  tquic's tools (tquic_server, tquic_client
           --alpn http/0.9): the same three downloads, the same way

Both use AES-128-GCM (secnetperf's -cipher:1; its default lets quictls
choose AES-256-GCM).

--direction down turns every pair round: qprof run --direction down
against secnetperf -down:Ns (its download scenario) and iperf3 -R.

secnetperf is msquic's own perf tool. It is not in the crates.io crate
and qprof never downloads it: build it from msquic's repository at the
tag of qprof's msquic (v2.5.1) and pass --secnetperf PATH. By default it
runs on qprof's own libmsquic.so (LD_LIBRARY_PATH), so both sides use
the same library build; --secnetperf-own-msquic uses the one beside it.

qprof's figures are its own record's (the steady-state window after its
warm-up, probes and sampling off). A reference tool's are taken from
outside: /proc/stat's busy time over the client's whole run, divided by
the bytes the tool reports (iperf3: every interval, none omitted;
secnetperf: the connection's acknowledged bytes), so they include the
handshake and slow start, a small handicap at 10 s.

--scenario hps|rps|latency runs secnetperf's scenario of that name
beside qprof's pattern for it, per unit of work instead of per byte (quic,
and tcp-tls against secnetperf -tcp:1):

  hps      qprof --pattern handshakes --conns C           vs  -scenario:hps -conns:C
  rps      qprof --pattern rr --rr-mode closed --streams 100
           --request 512 --response 4000                  vs  -scenario:rps
  latency  the same with --streams 1                      vs  -scenario:latency

each for --duration (secnetperf's -runtime). The figures are the rate
(handshakes or requests a second) and the machine's CPU per unit (qprof:
its record's, over the window; secnetperf: /proc/stat's busy time over
the client's run over rate x runtime), and for rps and latency the
response time's p50 and p99 (secnetperf's -platency figures).

--qprof-before CMD adds a second qprof (another checkout's, on the same
build) to every round: a change to qprof's own code must leave its
figures where they were, measured side by side, interleaved.

quinn's perf tool lives in quinn's repository only (perf/, not on
crates.io): build it by hand against the quinn, quinn-proto and rustls
versions workloads/rs/Cargo.lock pins, and pass --quinn-perf PATH. It
runs rustls on ring with three cipher suites (AES-128-GCM first, so
chosen), where qprof's quinn workload runs rustls's default provider,
aws-lc-rs, with AES-128-GCM alone; its figures are the client's sent
bytes per interval, iperf3's JSON shape.

quic-go's perf tool (github.com/quic-go/perf) is not on the Go module
proxy: build it by hand against the quic-go workloads/go/quic-go/go.mod
pins (`go mod edit -require github.com/quic-go/quic-go@v0.65.0`, with
the Go its toolchain line names) and pass --quic-go-perf PATH. Its
windows start at 1 MiB and grow to 1 GiB; it writes and reads 16 KiB a
call. Its time is its own upload's or download's (after the handshake).

s2n-quic's perf tool (s2n-quic-qns perf, in s2n-quic's repository as
quic/s2n-quic-qns, not on crates.io): build it by hand and pass
--s2n-qns PATH. Both ends get a certificate for "qprof" made here with
openssl. Its figure is the bytes over its client's whole run (handshake
included), /proc/stat's busy time over the same.

quiche's apps live in quiche's repository only (apps/, not on
crates.io): build them by hand against the quiche and boring versions
workloads/rs/Cargo.lock pins (copy that Cargo.lock beside apps/ and point
its quiche dependency at crates.io; quiche 0.30 made PathEvent
non-exhaustive, so the two matches on it need a `_ => ()` arm), and pass --quiche-apps DIR, the
directory holding quiche-server and quiche-client. Both sides get qprof's
quiche windows (64 MiB per connection, 16 MiB per stream); the rest are
the apps' defaults (cubic, SO_TXTIME pacing, GSO on the server, one
recvfrom per datagram). quiche-server reads the whole file into memory
for each request, inside the measured time: a file server's work that
qprof's workload does not do. Each round measures that read alone (dd
with one block of the file's size, as std::fs::read does it) and prints
the apps' figure less it beside the raw one.

tquic's tools are on crates.io (tquic_tools, at the tquic version
workloads/rs/Cargo.lock pins), but qprof never downloads them: build them
by hand (cargo install tquic_tools --version 1.6.0 --locked --root DIR)
and pass --tquic-tools DIR/bin. They run tquic's defaults (BBR, pacing,
1200-byte datagrams, tquic's windows; the server gathers 16 packets a
send, the client 1), and do their own UDP I/O: one sendto and one
recvfrom a datagram, no GSO or GRO. tquic_server reads the whole file
into memory for each request (std::fs::read), as quiche-server does: the
same dd figure is printed and taken off.

USAGE: .venv/bin/python benchmarks/fidelity.py [--rounds N] [--duration S] [--secnetperf PATH] [--stacks LIST]
       [--qprof-before CMD] [--direction up|down] [--quinn-perf PATH] [--quiche-apps DIR]
       [--quic-go-perf PATH] [--s2n-qns PATH] [--tquic-tools DIR]
(the venv's Python: it makes the namespaces with qprof's own Topology)
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QPROF = str(REPO / ".venv" / "bin" / "qprof")

from qprof.collectors import procfs  # noqa: E402
from qprof.collectors.topology import Topology  # noqa: E402

# The stacks whose reference is not secnetperf.
OWN_REFERENCE = ("tcp", "quinn", "ngtcp2", "quiche", "quic-go", "s2n-quic", "tquic")
# The stacks paired with a file server's downloads (QUICHE_QPROF_ARGS), less its file reads.
DOWNLOADS = ("quiche", "tquic")
# The stacks whose reference moves the bytes qprof's run of the same round moved.
SAME_BYTES = ("quic-go", "s2n-quic")


def busy_s(a, b) -> float:
    d = b - a
    return d.user_s + d.nice_s + d.system_s + d.irq_s + d.softirq_s + d.steal_s


def qprof_record(stack: str, args: list, duration, runs_dir: str, qprof: str = QPROF) -> dict:
    """qprof's record of one run, probes and sampling off (duration None:
    a pattern whose window is its count, such as downloads)."""
    timed = ["--duration", f"{duration}s"] if duration is not None else []
    r = subprocess.run(
        [*qprof.split(), "run", "--json", "--stack", stack, *args, *timed, "--probes", "none", "--sample-hz", "0"],
        capture_output=True,
        text=True,
        env={**os.environ, "QPROF_RUNS_DIR": runs_dir},
    )
    if r.returncode != 0:
        sys.exit(f"qprof run --stack {stack} {' '.join(args)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def run_qprof(stack: str, duration: float, runs_dir: str, qprof: str = QPROF, direction: str = "up") -> tuple:
    way = ["--direction", direction] if direction != "up" else []
    rec = qprof_record(stack, way, duration, runs_dir, qprof)
    return rec["throughput_gbps"], rec["cpu"]["system"]["ns_per_byte"]["total"]


def _served(topo, server_argv, client_argv, env=None, settle_s=0.5, timeout_s=60.0):
    """Run a server in the server namespace and a client in the client
    namespace; /proc/stat around the client; the client's stdout."""
    server = subprocess.Popen(
        topo.server.command(server_argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        time.sleep(settle_s)
        before = procfs.read_system()
        try:
            r = subprocess.run(
                topo.client.command(client_argv), capture_output=True, text=True, env=env, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            # secnetperf -tcp:1 -down hung (no output, 2+ min) in 1 of its first 3 runs here: the round goes on.
            print(f"{client_argv[0]} did not finish in {timeout_s:g} s; this round has no reference", flush=True)
            return None, None
        after = procfs.read_system()
    finally:
        server.kill()
        server.wait()
    if r.returncode != 0:
        sys.exit(f"{client_argv[0]} failed: {r.stderr.strip()[-300:]}")
    return r.stdout, busy_s(before, after)


def run_iperf3(topo, duration: float, direction: str = "up") -> tuple:
    reverse = ["-R"] if direction == "down" else []
    out, busy = _served(
        topo,
        ["iperf3", "-s", "-1"],
        ["iperf3", "-c", topo.server.addr, "-t", str(duration), "-J", *reverse],
        timeout_s=duration + 60,
    )
    if out is None:
        return None
    j = json.loads(out)
    nbytes = sum(i["sum"]["bytes"] for i in j["intervals"])
    gbps = j["end"]["sum_received"]["bits_per_second"] / 1e9
    return gbps, busy * 1e9 / nbytes


def run_secnetperf(topo, duration: float, path: str, env, tcp: bool, direction: str = "up") -> tuple:
    # The server's -cipher:1 = QUIC_ALLOWED_CIPHER_SUITE_AES_128_GCM_SHA256,
    # qprof's AEAD (a client given it prints nothing); left alone, quictls
    # prefers AES-256-GCM.
    common = ["-exec:lowlat"] + (["-tcp:1"] if tcp else [])
    out, busy = _served(
        topo,
        [path, *common, "-cipher:1"],
        [path, f"-target:{topo.server.addr}", *common, f"-{direction}:{duration:g}s", "-pctput:1"],
        env=env,
        timeout_s=duration + 60,
    )
    if out is None:
        return None
    m = re.search(rf"{'Upload' if direction == 'up' else 'Download'} (\d+) bytes @ (\d+) kbps", out)
    if not m:
        sys.exit(f"secnetperf printed no result: {out.strip()[-300:]}")
    nbytes, kbps = int(m.group(1)), int(m.group(2))
    return kbps / 1e6, busy * 1e9 / nbytes


def run_quinn_perf(topo, duration: float, path: str, direction: str = "up") -> tuple:
    """quinn's perf tool: one unidirectional request that uploads (or, down,
    a bidirectional one whose answer is the download) for the duration."""
    sizes = ["--uni-requests", "1", "--bi-requests", "0", "--upload-size", "1000G", "--download-size", "0"]
    if direction == "down":
        sizes = ["--uni-requests", "0", "--bi-requests", "1", "--upload-size", "0", "--download-size", "1000G"]
    out, busy = _served(
        topo,
        [path, "server", "--listen", f"{topo.server.addr}:4433"],
        [path, "client", f"{topo.server.addr}:4433", *sizes, "--duration", f"{duration:g}", "--json", "-"],
        timeout_s=duration + 60,
    )
    if out is None:
        return None
    j = json.loads(out[out.index("{") :])
    nbytes = sum(i["sum"]["bytes"] for i in j["intervals"])
    seconds = sum(i["sum"]["seconds"] for i in j["intervals"])
    return nbytes * 8 / seconds / 1e9, busy * 1e9 / nbytes


def run_quic_go_perf(topo, nbytes: int, path: str, direction: str = "up") -> tuple:
    """quic-go's perf tool: one stream that uploads (or, down, downloads)
    nbytes; its rate over its own transfer's time, which it logs."""
    up, down = (nbytes, 0) if direction == "up" else (0, nbytes)
    addr = f"{topo.server.addr}:4433"
    client = [path, "--server-address", addr, "--upload-bytes", str(up), "--download-bytes", str(down)]
    server = subprocess.Popen(
        topo.server.command([path, "--run-server", "--server-address", addr]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        before = procfs.read_system()
        r = subprocess.run(topo.client.command(client), capture_output=True, text=True, timeout=120)
        after = procfs.read_system()
    finally:
        server.kill()
        server.wait()
    way = "uploaded" if direction == "up" else "downloaded"
    m = re.search(rf"{way} [^:]+: ([\d.]+)s", r.stderr)
    if r.returncode != 0 or not m:
        sys.exit(f"quic-go's perf failed: {r.stderr.strip()[-300:]}")
    return nbytes * 8 / float(m.group(1)) / 1e9, busy_s(before, after) * 1e9 / nbytes


def run_s2n_qns(topo, nbytes: int, path: str, tmp: str, direction: str = "up") -> tuple:
    """s2n-quic's perf tool (s2n-quic-qns perf): one connection that sends
    (or, down, receives) nbytes, timed over its client's whole run."""
    cert, key = f"{tmp}/qns-cert.pem", f"{tmp}/qns-key.pem"
    if not os.path.exists(cert):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=qprof", "-addext", "subjectAltName=DNS:qprof"],
            check=True, capture_output=True,
        )  # fmt: skip
    send, receive = (nbytes, 0) if direction == "up" else (0, nbytes)
    ip = topo.server.addr
    server = [path, "perf", "server", "--ip", ip, "--port", "4433", "--certificate", cert, "--private-key", key]
    client = [path, "perf", "client", "--ip", ip, "--port", "4433", "--server-name", "qprof", "--ca", cert]
    client += ["--send", str(send), "--receive", str(receive), "--local-ip", topo.client.addr]
    srv = subprocess.Popen(topo.server.command(server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        before, t0 = procfs.read_system(), time.monotonic()
        r = subprocess.run(topo.client.command(client), capture_output=True, text=True, timeout=120)
        seconds, after = time.monotonic() - t0, procfs.read_system()
    finally:
        srv.kill()
        srv.wait()
    if r.returncode != 0:
        sys.exit(f"s2n-quic-qns perf failed: {r.stderr.strip()[-300:]}")
    return nbytes * 8 / seconds / 1e9, busy_s(before, after) * 1e9 / nbytes


def _served_file(tmp: str, nbytes: int) -> tuple:
    """A sparse file of nbytes (read from the page cache, no disk) in
    tmp/htdocs, and a throw-away key and certificate for the server."""
    d = Path(tmp)
    key, cert, blob = d / "key.pem", d / "cert.pem", d / "htdocs" / "blob"
    if not blob.exists() or blob.stat().st_size != nbytes:
        blob.parent.mkdir(exist_ok=True)
        with open(blob, "wb") as f:
            f.truncate(nbytes)
    if not cert.exists():
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
            + ["-days", "1", "-subj", "/CN=qprof", "-keyout", str(key), "-out", str(cert)],
            check=True,
            capture_output=True,
        )
    return key, cert, blob


def run_ngtcp2_examples(topo, nbytes: int, tmp: str) -> tuple:
    """ngtcp2's example client downloading nbytes over HTTP/3 from its example
    server (GnuTLS builds, Debian's): the client's run, handshake included."""
    key, cert, blob = _served_file(tmp, nbytes)
    addr = topo.server.addr
    t0 = time.monotonic()
    out, busy = _served(
        topo,
        ["gtlsserver", "-q", "-d", str(blob.parent), addr, "4433", str(key), str(cert)],
        ["gtlsclient", "-q", "--exit-on-all-streams-close", addr, "4433", f"https://{addr}:4433/blob"],
        timeout_s=120,
    )
    if out is None:
        return None
    seconds = time.monotonic() - t0 - 0.5  # less _served's settling wait
    return nbytes * 8 / seconds / 1e9, busy * 1e9 / nbytes


# quiche's pairing: qprof's downloads and the apps' are the same work.
QUICHE_SIZE, QUICHE_COUNT = 1 << 30, 3
QUICHE_QPROF_ARGS = ["--pattern", "download", "--size", str(QUICHE_SIZE), "--count", str(QUICHE_COUNT)]
# qprof's quiche workload's windows (the quiche transport, workloads/quiche/wl_quiche.c), given to the apps.
QUICHE_WINDOWS = [
    *("--max-data", str(64 << 20), "--max-window", str(64 << 20)),
    *("--max-stream-data", str(16 << 20), "--max-stream-window", str(16 << 20)),
]


def _downloads(topo, server_argv: list, client_argv: list, blob: Path, what: str) -> tuple:
    """QUICHE_COUNT downloads of blob, a client_argv process each, from one
    server_argv. Returns throughput, machine ns/B, and the ns/B of the
    server's file reads alone."""
    server = subprocess.Popen(topo.server.command(server_argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        t0, before = time.monotonic(), procfs.read_system()
        for _ in range(QUICHE_COUNT):
            # The body goes to stdout: /dev/null, as cheap a sink as there is.
            r = subprocess.run(
                topo.client.command(client_argv),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
            if r.returncode != 0:
                sys.exit(f"{what} failed: {r.stderr.strip()[-300:]}")
        seconds, busy = time.monotonic() - t0, busy_s(before, procfs.read_system())
    finally:
        server.kill()
        server.wait()
    # The server's std::fs::read of the file per request: one buffer of its
    # size, faulted in and filled by one read, as dd with one block does.
    before = procfs.read_system()
    for _ in range(QUICHE_COUNT):
        subprocess.run(
            ["dd", f"if={blob}", "of=/dev/null", f"bs={QUICHE_SIZE}", "count=1", "iflag=fullblock"],
            check=True,
            capture_output=True,
        )
    read = busy_s(before, procfs.read_system())
    nbytes = QUICHE_SIZE * QUICHE_COUNT
    return nbytes * 8 / seconds / 1e9, busy * 1e9 / nbytes, read * 1e9 / nbytes


def run_quiche_apps(topo, apps: str, tmp: str) -> tuple:
    """quiche's apps: QUICHE_COUNT downloads of a QUICHE_SIZE file over
    HTTP/0.9, a quiche-client process each, from one quiche-server."""
    key, cert, blob = _served_file(tmp, QUICHE_SIZE)
    addr = topo.server.addr
    server = [f"{apps}/quiche-server", "--listen", f"{addr}:4433", "--root", str(blob.parent)]
    server += ["--cert", str(cert), "--key", str(key), "--no-retry", *QUICHE_WINDOWS]
    client = [f"{apps}/quiche-client", "--no-verify", "--http-version", "HTTP/0.9", *QUICHE_WINDOWS]
    return _downloads(topo, server, [*client, f"https://{addr}:4433/blob"], blob, "quiche-client")


def run_tquic_tools(topo, tools: str, tmp: str) -> tuple:
    """tquic's tools: the same downloads over HTTP/0.9, a tquic_client
    process each (one request, its body dropped), from one tquic_server,
    each on its defaults; logs off."""
    key, cert, blob = _served_file(tmp, QUICHE_SIZE)
    addr = topo.server.addr
    server = [f"{tools}/tquic_server", "--listen", f"{addr}:4433", "--root", str(blob.parent)]
    server += ["--cert", str(cert), "--key", str(key), "--log-level", "OFF"]
    client = [f"{tools}/tquic_client", "--connect-to", f"{addr}:4433", "--alpn", "http/0.9", "--log-level", "OFF"]
    return _downloads(topo, server, [*client, f"https://{addr}:4433/blob"], blob, "tquic_client")


# secnetperf's scenario -> qprof's options for the same work.
UNIT_SCENARIOS = {
    "hps": lambda conns: ["--pattern", "handshakes", "--conns", str(conns)],
    "rps": lambda conns: (
        [*("--pattern", "rr", "--rr-mode", "closed", "--conns", "1", "--streams", "100")]
        + ["--request", "512", "--response", "4000"]
    ),
    "latency": lambda conns: (
        [*("--pattern", "rr", "--rr-mode", "closed", "--conns", "1", "--streams", "1")]
        + ["--request", "512", "--response", "4000"]
    ),
}


def run_qprof_units(stack: str, scenario: str, duration: float, runs_dir: str, conns: int) -> tuple:
    """(units/s, machine us/unit, p50 us, p99 us) from qprof's record."""
    rec = qprof_record(stack, UNIT_SCENARIOS[scenario](conns), duration, runs_dir)
    if scenario == "hps":
        h = rec["handshakes"]
        return h["per_s"], h["per_handshake"]["cpu_s"]["machine"] * 1e6, None, None
    x = rec["rr"]
    d = x["delay_ns"]
    return x["requests_per_s"], x["per_request"]["cpu_s"]["machine"] * 1e6, d["p50"] / 1e3, d["p99"] / 1e3


def run_secnetperf_units(topo, scenario: str, duration: float, path: str, env, tcp: bool, conns: int) -> tuple:
    common = ["-exec:lowlat"] + (["-tcp:1"] if tcp else [])
    extra = [f"-conns:{conns}"] if scenario == "hps" else []
    out, busy = _served(
        topo,
        [path, *common, "-cipher:1"],
        [path, f"-target:{topo.server.addr}", *common, f"-scenario:{scenario}", f"-runtime:{duration:g}s", *extra],
        env=env,
        timeout_s=duration + 60,
    )
    if out is None:
        return None
    m = re.search(r"Result: (\d+) (HPS|RPS)", out)
    if not m:
        sys.exit(f"secnetperf printed no result: {out.strip()[-300:]}")
    rate = int(m.group(1))
    p50 = re.search(r"50th: (\d+)", out)
    p99 = re.search(r"99th: (\d+)", out)
    return (
        rate,
        busy * 1e6 / (rate * duration),
        int(p50.group(1)) if p50 else None,
        int(p99.group(1)) if p99 else None,
    )


def units_row(a, b) -> str:
    """Rate and machine CPU per unit of a against b, median (min-max) and ratio; then p50 and p99 medians."""
    out = []
    for k, fmt in ((0, "{:9.0f}"), (1, "{:8.1f}")):
        sa, sb = summary([x[k] for x in a]), summary([x[k] for x in b])
        out.append(
            f"{fmt.format(sa[0])} ({fmt.format(sa[1]).strip()}-{fmt.format(sa[2]).strip()}) "
            f"{fmt.format(sb[0])} ({fmt.format(sb[1]).strip()}-{fmt.format(sb[2]).strip()}) {sa[0] / sb[0]:6.3f}"
        )
    for k in (2, 3):
        va, vb = [x[k] for x in a if x[k] is not None], [x[k] for x in b if x[k] is not None]
        out.append(f"{statistics.median(va):7.0f} {statistics.median(vb):7.0f}" if va and vb else f"{'-':>7} {'-':>7}")
    return " ".join(out)


def summary(values):
    return statistics.median(values), min(values), max(values)


def pair_row(a, b) -> str:
    """Throughput and ns/B of a against b: each median (min-max), and their ratio."""
    at, bt = summary([x[0] for x in a]), summary([x[0] for x in b])
    ac, bc = summary([x[1] for x in a]), summary([x[1] for x in b])
    return (
        f"{at[0]:6.2f} ({at[1]:.2f}-{at[2]:.2f}) {bt[0]:6.2f} ({bt[1]:.2f}-{bt[2]:.2f}) {at[0] / bt[0]:6.3f} "
        f"{ac[0]:6.3f} ({ac[1]:.3f}-{ac[2]:.3f}) {bc[0]:6.3f} ({bc[1]:.3f}-{bc[2]:.3f}) {ac[0] / bc[0]:6.3f}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--stacks", default="tcp,quic,tcp-tls")
    ap.add_argument("--secnetperf", help="path of a secnetperf built from msquic v2.5.1")
    ap.add_argument(
        "--secnetperf-own-msquic", action="store_true", help="run secnetperf on the libmsquic beside it, not qprof's"
    )
    ap.add_argument("--quinn-perf", help="path of quinn's perf tool, built against workloads/rs/Cargo.lock's quinn")
    ap.add_argument("--quiche-apps", metavar="DIR", help="directory of quiche-server and quiche-client (quiche's apps)")
    ap.add_argument("--quic-go-perf", help="quic-go's perf tool, built against go.mod's quic-go")
    ap.add_argument("--s2n-qns", help="s2n-quic's perf tool (s2n-quic-qns), built by hand")
    ap.add_argument("--tquic-tools", metavar="DIR", help="directory of tquic_server and tquic_client (tquic_tools)")
    ap.add_argument("--qprof-before", metavar="CMD", help="another qprof to run beside this one, interleaved")
    ap.add_argument("--direction", choices=("up", "down"), default="up", help="down: the server sends, in every tool")
    ap.add_argument(
        "--scenario", choices=("bulk", *UNIT_SCENARIOS), default="bulk", help="secnetperf's scenario, per unit of work"
    )
    ap.add_argument("--conns", type=int, default=32, help="hps: connections at once (secnetperf's default here: 32)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (namespaces)")
    if args.scenario != "bulk":
        return units_main(args)
    stacks = [s for s in args.stacks.split(",") if s]
    if args.quinn_perf is None and "quinn" in stacks:
        print("no --quinn-perf: quinn not compared (quinn's perf tool; see the docstring)")
        if not args.qprof_before:
            stacks = [s for s in stacks if s != "quinn"]
    if args.quiche_apps is None and "quiche" in stacks:
        print("no --quiche-apps: quiche not compared (quiche's apps; see the docstring)")
        if not args.qprof_before:
            stacks = [s for s in stacks if s != "quiche"]
    if args.quic_go_perf is None and "quic-go" in stacks:
        print("no --quic-go-perf: quic-go not compared (quic-go's perf tool; see the docstring)")
        if not args.qprof_before:
            stacks = [s for s in stacks if s != "quic-go"]
    if args.s2n_qns is None and "s2n-quic" in stacks:
        print("no --s2n-qns: s2n-quic not compared (s2n-quic-qns; see the docstring)")
        if not args.qprof_before:
            stacks = [s for s in stacks if s != "s2n-quic"]
    if args.tquic_tools is None and "tquic" in stacks:
        print("no --tquic-tools: tquic not compared (tquic's tools; see the docstring)")
        if not args.qprof_before:
            stacks = [s for s in stacks if s != "tquic"]
    if "ngtcp2" in stacks and shutil.which("gtlsclient") is None:
        print("no gtlsclient: ngtcp2 not compared (`make bench-tools` installs Debian's ngtcp2 examples)")
    if args.secnetperf is None:
        skipped = [s for s in stacks if s not in OWN_REFERENCE]
        if skipped:
            print(f"no --secnetperf: {', '.join(skipped)} not compared (secnetperf is msquic's; see the docstring)")
        if not args.qprof_before:
            stacks = [s for s in stacks if s in OWN_REFERENCE]
    env = dict(os.environ)
    if args.secnetperf and not args.secnetperf_own_msquic:
        env["LD_LIBRARY_PATH"] = str(REPO / "build" / "msquic" / "lib")
    refs = {
        "tcp": "iperf3",
        "quic": "secnetperf",
        "tcp-tls": "secnetperf -tcp:1",
        "quinn": "quinn-perf",
        "ngtcp2": "gtlsclient (down)",
        "quiche": "quiche apps (down)",
        "quic-go": "quic-go perf",
        "s2n-quic": "s2n-quic-qns perf",
        "tquic": "tquic tools (down)",
    }
    got = {s: {"qprof": [], "ref": [], "before": []} for s in stacks}
    refs_there = {
        "tcp": True,
        "quinn": args.quinn_perf is not None,
        "ngtcp2": shutil.which("gtlsclient") is not None,
        "quiche": args.quiche_apps is not None,
        "quic-go": args.quic_go_perf is not None,
        "s2n-quic": args.s2n_qns is not None,
        "tquic": args.tquic_tools is not None,
    }
    has_ref = {s: refs_there.get(s, args.secnetperf is not None) for s in stacks}
    whos = ("qprof", "ref") + (("before",) if args.qprof_before else ())
    jobs = [(s, who) for s in stacks for who in whos if who != "ref" or has_ref[s]]
    # The examples download: qprof's ngtcp2 runs sent down to match, and the
    # examples fetch as many bytes as its last window moved.
    window_bytes = {}
    # The served files on tmpfs where there is one: memory, as the page cache.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory() as runs_dir, tempfile.TemporaryDirectory(dir=shm) as examples_dir:
        for rnd in range(args.rounds):
            order = jobs[rnd % len(jobs) :] + jobs[: rnd % len(jobs)]
            for stack, who in order:
                # Both qprofs run the work its reference pairs with: ngtcp2's
                # examples download, quiche's apps download files.
                qprof = args.qprof_before if who == "before" else QPROF
                if who != "ref" and stack == "ngtcp2":
                    rec = qprof_record(stack, ["--direction", "down"], args.duration, runs_dir, qprof)
                    if who == "qprof":
                        window_bytes[stack] = rec["bytes"]
                    res = rec["throughput_gbps"], rec["cpu"]["system"]["ns_per_byte"]["total"]
                elif who != "ref" and stack in DOWNLOADS:
                    rec = qprof_record(stack, QUICHE_QPROF_ARGS, None, runs_dir, qprof)
                    res = rec["throughput_gbps"], rec["cpu"]["system"]["ns_per_byte"]["total"]
                elif who != "ref" and stack in SAME_BYTES:
                    way = ["--direction", args.direction] if args.direction != "up" else []
                    rec = qprof_record(stack, way, args.duration, runs_dir, qprof)
                    if who == "qprof":
                        window_bytes[stack] = rec["bytes"]
                    res = rec["throughput_gbps"], rec["cpu"]["system"]["ns_per_byte"]["total"]
                elif who != "ref":
                    res = run_qprof(stack, args.duration, runs_dir, qprof, args.direction)
                else:
                    with Topology("netns", f"fd{os.getpid() % 10000}") as topo:
                        if stack == "tcp":
                            res = run_iperf3(topo, args.duration, args.direction)
                        elif stack == "quinn":
                            res = run_quinn_perf(topo, args.duration, args.quinn_perf, args.direction)
                        elif stack == "quiche":
                            res = run_quiche_apps(topo, args.quiche_apps, examples_dir)
                        elif stack == "tquic":
                            res = run_tquic_tools(topo, args.tquic_tools, examples_dir)
                        elif stack == "quic-go":
                            nbytes = window_bytes.get(stack, int(args.duration * 0.3e9))
                            res = run_quic_go_perf(topo, nbytes, args.quic_go_perf, args.direction)
                        elif stack == "s2n-quic":
                            nbytes = window_bytes.get(stack, int(args.duration * 0.8e9))
                            res = run_s2n_qns(topo, nbytes, args.s2n_qns, examples_dir, args.direction)
                        elif stack == "ngtcp2":
                            nbytes = window_bytes.get(stack, int(args.duration * 1e9))
                            res = run_ngtcp2_examples(topo, nbytes, examples_dir)
                        else:
                            res = run_secnetperf(
                                topo, args.duration, args.secnetperf, env, stack == "tcp-tls", args.direction
                            )
                if res is None:
                    continue
                got[stack][who].append(res)
                print(
                    f"round {rnd + 1}: {stack:8} {refs[stack] if who == 'ref' else who:18} "
                    f"{res[0]:6.2f} Gbit/s {res[1]:.3f} ns/B",
                    flush=True,
                )
    print(
        f"\n{args.rounds} rounds of {args.duration:g} s, direction {args.direction}, netns + veth, interleaved; "
        "median (min-max)"
    )
    print(
        f"{'stack':8} {'reference':18} {'qprof Gbit/s':>20} {'ref Gbit/s':>20} {'ratio':>6}"
        f" {'qprof ns/B':>20} {'ref ns/B':>20} {'ratio':>6}"
    )
    for s in (s for s in stacks if has_ref[s]):
        print(f"{s:8} {refs[s]:18} {pair_row(got[s]['qprof'], got[s]['ref'])}")
    for s, server, label in (("quiche", "quiche-server", "apps"), ("tquic", "tquic_server", "tools")):
        if has_ref.get(s) and got[s]["ref"]:
            less = [(g, ns - read) for g, ns, read in got[s]["ref"]]
            reads = summary([x[2] for x in got[s]["ref"]])
            print(f"{server}'s file reads alone: {reads[0]:.3f} ({reads[1]:.3f}-{reads[2]:.3f}) ns/B; less them:")
            print(f"{s:8} {label + ' less reads':18} {pair_row(got[s]['qprof'], less)}")
    if args.qprof_before:
        print(f"\nthis qprof against --qprof-before ({args.qprof_before}), same rounds")
        print(
            f"{'stack':8} {'Gbit/s':>20} {'before Gbit/s':>20} {'ratio':>6}"
            f" {'ns/B':>20} {'before ns/B':>20} {'ratio':>6}"
        )
        for s in stacks:
            print(f"{s:8} {pair_row(got[s]['qprof'], got[s]['before'])}")


def units_main(args) -> None:
    """--scenario hps|rps|latency: qprof's pattern against secnetperf's scenario, interleaved."""
    if args.secnetperf is None:
        sys.exit(f"--scenario {args.scenario} compares against secnetperf: give --secnetperf PATH")
    stacks = [s for s in args.stacks.split(",") if s in ("quic", "tcp-tls")]
    env = dict(os.environ)
    if not args.secnetperf_own_msquic:
        env["LD_LIBRARY_PATH"] = str(REPO / "build" / "msquic" / "lib")
    got = {s: {"qprof": [], "ref": []} for s in stacks}
    jobs = [(s, who) for s in stacks for who in ("qprof", "ref")]
    unit = "handshake" if args.scenario == "hps" else "request"
    with tempfile.TemporaryDirectory() as runs_dir:
        for rnd in range(args.rounds):
            order = jobs[rnd % len(jobs) :] + jobs[: rnd % len(jobs)]
            for stack, who in order:
                if who == "qprof":
                    res = run_qprof_units(stack, args.scenario, args.duration, runs_dir, args.conns)
                else:
                    with Topology("netns", f"fd{os.getpid() % 10000}") as topo:
                        res = run_secnetperf_units(
                            topo, args.scenario, args.duration, args.secnetperf, env, stack == "tcp-tls", args.conns
                        )
                if res is None:
                    continue
                got[stack][who].append(res)
                lat = f" p50 {res[2]:.0f} us p99 {res[3]:.0f} us" if res[2] is not None else ""
                print(
                    f"round {rnd + 1}: {stack:8} {who:6} {res[0]:9.0f} {unit}s/s {res[1]:8.1f} us/{unit}{lat}",
                    flush=True,
                )
    print(
        f"\n{args.rounds} rounds of {args.duration:g} s, secnetperf -scenario:{args.scenario}, netns + veth, "
        "interleaved; median (min-max); CPU is the machine's"
    )
    print(
        f"{'stack':8} {'qprof /s':>24} {'secnetperf /s':>24} {'ratio':>6} {'qprof us':>20} {'secnetperf us':>20}"
        f" {'ratio':>6} {'p50 q':>7} {'p50 s':>7} {'p99 q':>7} {'p99 s':>7}"
    )
    for s in stacks:
        if got[s]["qprof"] and got[s]["ref"]:
            print(f"{s:8} {units_row(got[s]['qprof'], got[s]['ref'])}")


if __name__ == "__main__":
    main()
