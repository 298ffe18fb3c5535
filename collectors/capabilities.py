"""What this kernel and machine allow qprof to do: one Check per capability.

Each check really tries the capability where that is cheap (attaches a
tracepoint, sends a GSO datagram, creates a namespace), never raises (a
check that cannot tell says "unknown" and why), removes whatever it created
on every exit path, and bounds every subprocess by TIMEOUT_S.
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Tuple

from . import paths
from .errors import NotBuilt

OK, MISSING, LIMITED, UNKNOWN = "ok", "missing", "limited", "unknown"
VERDICTS = (OK, MISSING, LIMITED, UNKNOWN)
TIMEOUT_S = 5

CAP_BITS = {"CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38, "CAP_BPF": 39}
BTF_PATH = Path("/sys/kernel/btf/vmlinux")
BTF_MAGIC = 0xEB9F
TRACEFS_DIRS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
# The tracepoint the syscalls probe (tp_btf/sys_enter) and its bpftrace twin attach to.
TRACEPOINT = "raw_syscalls:sys_enter"
TCP_ULP_PATH = Path("/proc/sys/net/ipv4/tcp_available_ulp")

SOL_UDP, UDP_SEGMENT, UDP_GRO = 17, 103, 104
GSO_SEGMENT_BYTES = 1400
GSO_SEND_BYTES = 2 * GSO_SEGMENT_BYTES

SOL_TLS, TLS_TX, TCP_ULP = 282, 1, 31
TLS_1_2_VERSION, TLS_CIPHER_AES_GCM_128 = 0x0303, 51

TRACEPOINTS_ONLY = "qprof's probes use tracepoints only; nothing to do"
AS_ROOT = "run qprof doctor as root"
MAKE_BUILD = "run `make build`"

Result = Tuple[str, str, str]  # verdict, detail, fix


@dataclass
class Check:
    name: str
    verdict: str  # one of VERDICTS
    detail: str
    fix: str


class StepFailed(Exception):
    """A command a check depends on failed; the message names it and why."""


def _check(name: str) -> Callable[[Callable[[], Result]], Callable[[], Check]]:
    """Turn a function returning (verdict, detail, fix) into one returning
    a Check that never raises."""
    def wrap(fn: Callable[[], Result]) -> Callable[[], Check]:
        @functools.wraps(fn)
        def guarded() -> Check:
            try:
                verdict, detail, fix = fn()
            except subprocess.TimeoutExpired as e:
                why = f"`{' '.join(e.cmd)}` did not finish within {e.timeout:g} s"
                return Check(name, UNKNOWN, f"could not test: {why}", "")
            except FileNotFoundError as e:
                return Check(name, UNKNOWN, f"could not test: {e.filename or e} not found", "")
            except Exception as e:
                return Check(name, UNKNOWN, f"could not test: {e}", "")
            return Check(name, verdict, detail, fix)
        return guarded
    return wrap


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    """argv, given TIMEOUT_S to finish. If it does not (or the check is
    interrupted) its whole process group is killed: subprocess.run would
    kill only argv itself and leave e.g. perf's workload running."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=TIMEOUT_S)
    finally:
        if p.returncode is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def _run_ok(argv: list[str]) -> subprocess.CompletedProcess:
    r = _run(argv)
    if r.returncode != 0:
        raise StepFailed(f"`{' '.join(argv)}` failed: {_last_line(r.stderr) or f'exit {r.returncode}'}")
    return r


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _first_line(text: str) -> str:
    """The first line that says something: perf's errors open with a bare
    "Error:" and end with pages of advice."""
    lines = [line.strip() for line in text.splitlines() if line.strip().rstrip(":") not in ("", "Error")]
    return lines[0].removeprefix("Error:").strip() if lines else ""


def caps_held(cap_eff_hex: str) -> set[str]:
    """The capabilities qprof needs that a CapEff mask (hex, as in
    /proc/<pid>/status) holds."""
    mask = int(cap_eff_hex, 16)
    return {name for name, bit in CAP_BITS.items() if mask >> bit & 1}


def _tracefs_mounts() -> set[str]:
    with open("/proc/self/mounts") as f:
        return {fields[1] for fields in (line.split() for line in f) if len(fields) > 2 and fields[2] == "tracefs"}


def _tracefs_dir() -> Optional[Path]:
    return next((d for d in TRACEFS_DIRS if (d / "events").is_dir()), None)


@contextmanager
def _no_new_tracefs_mounts() -> Iterator[None]:
    """perf and bpftrace mount tracefs themselves when it is missing: every
    tracefs mount that appears inside the block is unmounted on the way out,
    so the mount table is left as it was found."""
    before = _tracefs_mounts()
    try:
        yield
    finally:
        for mnt in _tracefs_mounts() - before:
            _run(["umount", mnt])


@contextmanager
def _tracefs() -> Iterator[Optional[Path]]:
    """Yield the tracefs directory, mounting it for the block if needed;
    None if tracefs cannot be had."""
    with _no_new_tracefs_mounts():
        if _tracefs_dir() is None:
            _run(["mount", "-t", "tracefs", "nodev", str(TRACEFS_DIRS[0])])
        yield _tracefs_dir()


@dataclass
class ScratchNetns:
    ns_a: str
    ns_b: str
    link_a: str  # lives in ns_a
    link_b: str  # lives in ns_b, the veth peer of link_a


@contextmanager
def scratch_netns() -> Iterator[ScratchNetns]:
    """Two namespaces joined by a veth pair, named after this pid. The veth
    is created inside the namespaces, so deleting them (on every exit path)
    deletes everything; the host's namespace is never touched."""
    pid = os.getpid()
    s = ScratchNetns(f"qp-doc-{pid}-a", f"qp-doc-{pid}-b", f"qpd{pid}a", f"qpd{pid}b")
    created = []
    try:
        for ns in (s.ns_a, s.ns_b):
            created.append(ns)  # before `add`: a timed-out add may still have created it
            _run_ok(["ip", "netns", "add", ns])
        _run_ok(["ip", "-n", s.ns_a, "link", "add", s.link_a, "type", "veth",
                 "peer", "name", s.link_b, "netns", s.ns_b])
        yield s
    finally:
        for ns in reversed(created):
            _run(["ip", "netns", "del", ns])


@_check("root")
def check_root() -> Result:
    euid = os.geteuid()
    with open("/proc/self/status") as f:
        cap_eff = next(line.split()[1] for line in f if line.startswith("CapEff:"))
    lacking = sorted(set(CAP_BITS) - caps_held(cap_eff), key=CAP_BITS.get)
    detail = f"euid {euid}, CapEff {cap_eff}" + (f", lacks {', '.join(lacking)}" if lacking else "")
    fix = "run as root (sudo qprof ...)"
    if euid == 0 and not lacking:
        return OK, detail, ""
    if euid != 0 and len(lacking) == len(CAP_BITS):
        return MISSING, detail, fix
    return LIMITED, detail, fix


@_check("btf")
def check_btf() -> Result:
    fix = "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y, or use --guest"
    try:
        with BTF_PATH.open("rb") as f:
            header = f.read(2)
    except FileNotFoundError:
        return MISSING, f"{BTF_PATH} does not exist", fix
    except OSError as e:
        return MISSING, f"{BTF_PATH} is not readable: {e.strerror}", "run as root (sudo qprof ...)"
    if len(header) < 2 or struct.unpack("<H", header)[0] != BTF_MAGIC:
        return MISSING, f"{BTF_PATH} does not start with the BTF magic", fix
    size_bytes = BTF_PATH.stat().st_size
    return OK, f"{BTF_PATH}, {size_bytes} bytes", ""


@_check("tracepoints")
def check_tracepoints() -> Result:
    fix = "boot a kernel with syscall tracepoints (CONFIG_HAVE_SYSCALL_TRACEPOINTS), or use --guest"
    if os.geteuid() != 0:
        return UNKNOWN, "attaching to a tracepoint needs root; this check ran as a user", AS_ROOT
    was_mounted = _tracefs_dir() is not None
    with _tracefs() as tracing:
        if tracing is None:
            # perf looks tracepoints up in tracefs; qprof's probes (tp_btf) do not.
            return UNKNOWN, ("tracefs is not mounted and cannot be mounted, so perf cannot attach to "
                             f"{TRACEPOINT}; qprof's probes (tp_btf) do not need it, the bpftrace twins do"), ""
        # A Python start-up makes hundreds of syscalls: a count of 0 would mean the attach is not live.
        r = _run(["perf", "stat", "-e", TRACEPOINT, "-x,", "--", sys.executable, "-c", "import os; os.getpid()"])
    if r.returncode != 0:
        return MISSING, f"perf could not attach to {TRACEPOINT}: {_last_line(r.stderr)}", fix
    count = next((line.split(",")[0] for line in r.stderr.splitlines() if TRACEPOINT in line), "")
    if not count.isdigit() or int(count) == 0:
        return LIMITED, f"perf attached to {TRACEPOINT} but counted {count or 'nothing'}", ""
    if not was_mounted:
        # qprof's probes attach by BTF (tp_btf) and need no tracefs; perf and
        # bpftrace mount it for themselves, as this check did.
        return OK, (f"perf counted {count} {TRACEPOINT}; tracefs is not mounted, which qprof's probes "
                    "(tp_btf) do not need"), ""
    return OK, f"tracefs at {tracing}; perf counted {count} {TRACEPOINT}", ""


@_check("kprobes")
def check_kprobes() -> Result:
    if os.geteuid() != 0:
        return UNKNOWN, "kprobe_events is in tracefs, which only root can mount and read; this check ran as a user", \
            AS_ROOT
    with _tracefs() as tracing:
        if tracing is None:
            return UNKNOWN, "tracefs is not available, so kprobe_events cannot be looked for", ""
        kprobe_events = tracing / "kprobe_events"
        if kprobe_events.exists():
            return OK, f"{kprobe_events} exists", ""
    return MISSING, f"no {kprobe_events}: kernel built without CONFIG_KPROBE_EVENTS", TRACEPOINTS_ONLY


@_check("fentry/fexit")
def check_fentry() -> Result:
    if shutil.which("bpftrace") is None:
        return UNKNOWN, "bpftrace is not installed, so fentry could not be tried", "apt-get install bpftrace"
    if os.geteuid() != 0:
        return UNKNOWN, "attaching fentry needs root (bpftrace refuses a user); this check ran as a user", AS_ROOT
    # The probe exits on the first vfs_read, which some process does all the time.
    with _no_new_tracefs_mounts():
        r = _run(["bpftrace", "-e", "kfunc:vmlinux:vfs_read { exit(); }"])
    if r.returncode == 0:
        return OK, "bpftrace attached kfunc:vmlinux:vfs_read", ""
    # bpftrace ends its errors with the offending source line and a ~~~ marker; the ERROR line says why.
    errors = [line.split("ERROR:", 1)[1] for line in r.stderr.splitlines() if "ERROR:" in line]
    return MISSING, f"bpftrace: {_last_line(errors[-1] if errors else r.stderr)}", TRACEPOINTS_ONLY


@_check("perf sampling")
def check_perf_sampling() -> Result:
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    with tempfile.TemporaryDirectory(prefix="qprof-doctor-") as tmp, _no_new_tracefs_mounts():
        data = Path(tmp) / "perf.data"
        # What qprof runs: every CPU (-a), DWARF call graphs.
        r = _run(["perf", "record", "-q", "-a", "-e", "cpu-clock", "-F", "99", "--call-graph", "dwarf,8192",
                  "-o", str(data), "--", "sleep", "0.1"])
        data_bytes = data.stat().st_size if data.exists() else 0
    if r.returncode != 0 or data_bytes == 0:
        why = _first_line(r.stderr) or f"exit {r.returncode}, {data_bytes} bytes written"
        if os.geteuid() != 0:
            # Every CPU (-a) needs perf_event_paranoid <= 0 or CAP_PERFMON; the
            # rest of qprof needs root anyway, so lowering it would not help.
            return MISSING, (f"sampling every CPU (perf record -a, as qprof runs it) needs root: as euid "
                             f"{os.geteuid()} with perf_event_paranoid={paranoid} perf said '{why}'"), \
                "run qprof as root"
        return MISSING, (f"perf record -a -e cpu-clock --call-graph dwarf failed as root: {why}; "
                         f"perf_event_paranoid={paranoid}"), \
            "qprof run --sample-hz 0 runs without stack samples"
    return OK, f"cpu-clock on every CPU with DWARF call graphs; perf_event_paranoid={paranoid}", ""


@_check("hardware counters")
def check_hardware_counters() -> Result:
    with _no_new_tracefs_mounts():
        r = _run(["perf", "stat", "-e", "instructions", "-x,", "--", "true"])
    if r.returncode != 0 or "<not supported>" in r.stderr or "<not counted>" in r.stderr:
        return MISSING, "software cpu-clock only: qprof reports nanoseconds, not cycles", "nothing to do"
    return OK, "perf counts instructions", ""


@_check("udp gso/gro")
def check_udp_gso_gro() -> Result:
    fix = "boot a kernel >= 5.0 (UDP_SEGMENT, UDP_GRO), or use --guest"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        try:
            tx.setsockopt(SOL_UDP, UDP_SEGMENT, GSO_SEGMENT_BYTES)
            tx.setsockopt(SOL_UDP, UDP_GRO, 1)
        except OSError as e:
            return MISSING, f"setsockopt UDP_SEGMENT/UDP_GRO: {e.strerror}", fix
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(1.0)
        tx.sendto(bytes(GSO_SEND_BYTES), rx.getsockname())
        sizes = []
        try:
            while sum(sizes) < GSO_SEND_BYTES:
                sizes.append(len(rx.recv(65535)))
        except socket.timeout:
            pass
    if sizes == [GSO_SEGMENT_BYTES, GSO_SEGMENT_BYTES]:
        return OK, f"a {GSO_SEND_BYTES}-byte GSO send arrived as 2 x {GSO_SEGMENT_BYTES}-byte datagrams", ""
    return LIMITED, f"options accepted, but a {GSO_SEND_BYTES}-byte GSO send arrived as {sizes or 'nothing'}", fix


@_check("kernel tls")
def check_kernel_tls() -> Result:
    ulps = TCP_ULP_PATH.read_text().split()
    # Not listed: don't setsockopt(TCP_ULP) anyway, it would load the tls module and leave it loaded.
    if "tls" not in ulps:
        return MISSING, f"no 'tls' in {TCP_ULP_PATH} ({' '.join(ulps) or 'empty'})", \
            "run TCP+kTLS stacks with --guest (a QEMU guest running Debian's kernel)"
    crypto_info = struct.pack("=HH8s16s4s8s", TLS_1_2_VERSION, TLS_CIPHER_AES_GCM_128,
                              bytes(8), bytes(16), bytes(4), bytes(8))
    with socket.create_server(("127.0.0.1", 0)) as listener, \
            socket.create_connection(listener.getsockname(), timeout=TIMEOUT_S) as client:
        peer, _ = listener.accept()
        with peer:
            try:
                client.setsockopt(socket.IPPROTO_TCP, TCP_ULP, b"tls")
                client.setsockopt(SOL_TLS, TLS_TX, crypto_info)
            except OSError as e:
                return LIMITED, f"'tls' is listed, but enabling AES-GCM-128 TX on a TCP socket failed: {e.strerror}", \
                    "run TCP+kTLS stacks with --guest"
    return OK, "TLS 1.2 AES-GCM-128 TX enabled on a loopback TCP socket", ""


@_check("netns/veth")
def check_netns_veth() -> Result:
    try:
        with scratch_netns() as s:
            _run_ok(["ip", "-n", s.ns_a, "link", "set", s.link_a, "up"])
            _run_ok(["ip", "-n", s.ns_b, "link", "set", s.link_b, "up"])
            state = _run_ok(["ip", "-n", s.ns_a, "-o", "link", "show", s.link_a]).stdout
    except StepFailed as e:
        return MISSING, str(e), "run as root on a kernel with network namespaces and veth"
    if "LOWER_UP" not in state:
        return LIMITED, "veth pair created and set up, but it has no carrier", ""
    return OK, "created two namespaces joined by a veth pair, brought it up, removed them", ""


@_check("tc qdiscs")
def check_tc_qdiscs() -> Result:
    try:
        with scratch_netns() as s:
            tbf = _run(["tc", "-n", s.ns_a, "qdisc", "add", "dev", s.link_a, "root",
                        "tbf", "rate", "1gbit", "burst", "64k", "latency", "10ms"])
            netem = _run(["tc", "-n", s.ns_b, "qdisc", "add", "dev", s.link_b, "root", "netem", "delay", "1ms"])
    except StepFailed as e:
        return UNKNOWN, f"no scratch namespace to try qdiscs in: {e}", ""
    fixes = {"tbf": "rate limiting needs --guest", "netem": "delay/loss emulation needs --guest"}
    results = {"tbf": tbf, "netem": netem}
    failed = [kind for kind, r in results.items() if r.returncode != 0]
    detail = "; ".join(f"{kind} missing ({_last_line(r.stderr)})" if kind in failed else f"{kind} ok"
                       for kind, r in results.items())
    fix = "; ".join(fixes[kind] for kind in failed)
    if not failed:
        return OK, detail, ""
    return (MISSING if len(failed) == len(results) else LIMITED), detail, fix


@_check("msquic build")
def check_msquic_build() -> Result:
    lib = paths.msquic_library()
    if not lib.exists():
        return MISSING, f"{lib} does not exist", MAKE_BUILD
    try:
        workload = paths.workload_binary()
    except NotBuilt as e:
        return MISSING, e.sentence, MAKE_BUILD
    r = _run([str(workload), "--help"])
    if r.returncode != 0:
        return MISSING, f"`{workload} --help` exited {r.returncode}: {_last_line(r.stderr)}", MAKE_BUILD
    return OK, f"{lib.name} and {workload.name} in {paths.build_dir()}; {workload.name} --help runs", ""


@_check("gso/gro switches")
def check_offload_switches() -> Result:
    """What --gso/--gro need: the interposer for quic, ethtool for TCP."""
    from .offload import PRELOAD_LIB
    lib = paths.build_dir() / "lib" / PRELOAD_LIB
    ethtool = shutil.which("ethtool")
    missing = [what for what, ok in ((f"{lib} (quic --gso/--gro off)", lib.exists()),
                                     ("ethtool (TCP --gso/--gro)", ethtool)) if not ok]
    if missing:
        return MISSING, "missing: " + "; ".join(missing), "run `make build` (ethtool comes with `make deps`)"
    return OK, f"{lib.name} built, {ethtool} present", ""


CHECKS = (check_root, check_btf, check_tracepoints, check_kprobes, check_fentry, check_perf_sampling,
          check_hardware_counters, check_udp_gso_gro, check_kernel_tls, check_netns_veth, check_tc_qdiscs,
          check_msquic_build, check_offload_switches)


def run_checks() -> list[Check]:
    return [check() for check in CHECKS]
