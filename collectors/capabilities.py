# SPDX-License-Identifier: GPL-2.0-only
"""What this kernel and machine allow qprof to do: one Check per capability
qprof uses, and one per part of `make build` that `qprof run` and `qprof
flame` need.

Each check really tries the capability where that is cheap (loads the
probe tools, samples with perf, sends a GSO datagram, creates a namespace,
adds each qdisc), never raises (a check that cannot tell says "unknown" and
why), removes whatever it created on every exit path, and bounds every
subprocess by TIMEOUT_S. The build checks look where qprof's own path
helpers look, so they fail exactly when a run would.
"""

from __future__ import annotations

import functools
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from qprof import paths
from qprof.collectors import procfs
from qprof.describe import offload
from qprof.errors import NotBuilt

OK, MISSING, LIMITED, UNKNOWN = "ok", "missing", "limited", "unknown"
VERDICTS = (OK, MISSING, LIMITED, UNKNOWN)
TIMEOUT_S = 5

CAP_BITS = {"CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38, "CAP_BPF": 39}
BTF_PATH = Path("/sys/kernel/btf/vmlinux")
BTF_MAGIC = 0xEB9F
TCP_ULP_PATH = procfs.TCP_ULP  # one path, the run's check and doctor's

SOL_UDP, UDP_SEGMENT, UDP_GRO = 17, 103, 104
GSO_SEGMENT_BYTES = 1400
GSO_SEND_BYTES = 2 * GSO_SEGMENT_BYTES

SOL_TLS, TLS_TX, TCP_ULP = 282, 1, 31
TLS_1_2_VERSION, TLS_CIPHER_AES_GCM_128 = 0x0303, 51

# The queueing disciplines qprof's runs may put on their veths: what each is
# for, and the `tc qdisc add ... root` arguments that try it (then `tc class
# add` arguments under it, for a classful one).
QDISCS = (
    ("netem", "link emulation: delay, loss, jitter", ["netem", "delay", "1ms", "1ms", "loss", "1%"], None),
    ("tbf", "rate limit", ["tbf", "rate", "1gbit", "burst", "64k", "latency", "10ms"], None),
    (
        "htb",
        "rate limit, by class",
        ["handle", "1:", "htb", "default", "10"],
        ["parent", "1:", "classid", "1:10", "htb", "rate", "1gbit"],
    ),
)

# The no-netem fault's stand-in for netem: no sch_ module has this name.
NO_NETEM_KIND = "qprof-no-netem"
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


def _could_not_test(name: str, e: Exception) -> Check:
    if isinstance(e, subprocess.TimeoutExpired):
        cmd = e.cmd if isinstance(e.cmd, str) else " ".join(map(str, e.cmd))
        return Check(name, UNKNOWN, f"could not test: `{cmd}` did not finish within {e.timeout:g} s", "")
    if isinstance(e, FileNotFoundError):
        return Check(name, UNKNOWN, f"could not test: {e.filename or e} not found", "")
    return Check(name, UNKNOWN, f"could not test: {e}", "")


def _check(name: str) -> Callable[[Callable[[], Result]], Callable[[], Check]]:
    """Turn a function returning (verdict, detail, fix) into one returning
    a Check that never raises."""

    def wrap(fn: Callable[[], Result]) -> Callable[[], Check]:
        @functools.wraps(fn)
        def guarded() -> Check:
            try:
                verdict, detail, fix = fn()
            except Exception as e:
                return _could_not_test(name, e)
            return Check(name, verdict, detail, fix)

        return guarded

    return wrap


def _checks(*names: str) -> Callable[[Callable[[], List[Result]]], Callable[[], List[Check]]]:
    """_check for one trial that answers several checks: the function
    returns one (verdict, detail, fix) per name, in order."""

    def wrap(fn: Callable[[], List[Result]]) -> Callable[[], List[Check]]:
        @functools.wraps(fn)
        def guarded() -> List[Check]:
            try:
                results = fn()
            except Exception as e:
                return [_could_not_test(name, e) for name in names]
            return [Check(name, *result) for name, result in zip(names, results, strict=True)]

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


@contextmanager
def _no_new_tracefs_mounts() -> Iterator[None]:
    """perf mounts tracefs itself when it is missing (nothing qprof runs
    needs it: the probes attach by BTF, tp_btf): every tracefs mount that
    appears inside the block is unmounted on the way out, so the mount
    table is left as it was found."""
    before = _tracefs_mounts()
    try:
        yield
    finally:
        for mnt in _tracefs_mounts() - before:
            _run(["umount", mnt])


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
        _run_ok(
            ["ip", "-n", s.ns_a, "link", "add", s.link_a, "type", "veth", "peer", "name", s.link_b, "netns", s.ns_b]
        )
        yield s
    finally:
        for ns in reversed(created):
            _run(["ip", "netns", "del", ns])


@contextmanager
def scratch_ns() -> Iterator[str]:
    """One namespace named after this pid, with nothing in it but its own
    lo; deleted on every exit path."""
    ns = f"qp-doc-{os.getpid()}-q"
    try:
        _run_ok(["ip", "netns", "add", ns])
        yield ns
    finally:
        _run(["ip", "netns", "del", ns])  # also after a timed-out add, which may have created it


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


def _read_line(p: subprocess.Popen, timeout_s: float) -> Tuple[Optional[bytes], bytes]:
    """The first line p writes on stdout, or None if it ends first, and
    what followed it; TimeoutExpired after timeout_s."""
    fd, buf = p.stdout.fileno(), b""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise subprocess.TimeoutExpired(p.args, timeout_s)
        chunk = os.read(fd, 65536)
        if not chunk:
            return None, buf
        buf += chunk
    line, _, rest = buf.partition(b"\n")
    return line, rest


def _events(text: bytes) -> List[dict]:
    events = []
    for line in text.decode(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    return events


def _give_the_probes_something_to_see() -> None:
    """Doctor's own traffic: a UDP datagram over lo (the syscalls probe
    counts its sendto, the packets probe lo's skbs) and a sleep (the
    cputhread probe counts the switch)."""
    try:
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx,
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
        ):
            rx.bind(("127.0.0.1", 0))
            rx.settimeout(1.0)
            tx.sendto(b"qprof doctor", rx.getsockname())
            rx.recv(64)
    except OSError:
        pass
    time.sleep(0.02)


def _try_probe(name: str) -> Tuple[str, str]:
    """Start the probe tool as `qprof run` does (on doctor's own pid and on
    lo), let it see some traffic, mark it and tell it to exit. Returns
    (OK, MISSING or LIMITED, what happened)."""
    from qprof.collectors.probes import PROBES, READY_TIMEOUT_S, Target

    target = Target(pids={"doctor": os.getpid()}, devices={"doctor": "lo@host"})
    argv = [str(paths.probe_binary(name))] + PROBES[name](target)
    # stderr to a file, not a pipe: a failed load's verifier log can fill a pipe and stall the tool.
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        try:
            try:
                ready, rest = _read_line(p, READY_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return MISSING, f"did not load and attach within {READY_TIMEOUT_S:g} s"
            if ready is None:
                p.wait(timeout=TIMEOUT_S)
            else:
                _give_the_probes_something_to_see()
                out, _ = p.communicate(b"mark doctor\nexit\n", timeout=TIMEOUT_S)
        finally:
            if p.returncode is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        err.seek(0)
        why = _last_line(err.read().decode(errors="replace")) or f"exit {p.returncode}"
    if ready is None:
        return MISSING, f"did not load or attach: {why}"
    ready_event = next(iter(_events(ready)), {})
    mark = next((e for e in _events(rest + out) if e.get("event") == "mark"), None)
    if mark is None:
        return LIMITED, f"attached, then answered no mark ({why})"
    if not ready_event.get("bpf_stats"):
        return OK, "attached and answered a mark"
    runs = sum(prog.get("run_cnt", 0) for prog in mark.get("progs", []))
    if runs == 0:
        return LIMITED, "attached, but its programs never ran"
    return OK, f"attached, its programs ran {runs} times"


@_check("tracepoints")
def check_tracepoints() -> Result:
    """What `qprof run` does with each probe tool: load it, its programs
    attached to tracepoints by BTF (tp_btf), which needs no tracefs."""
    from qprof.describe.options import PROBE_NAMES

    if os.geteuid() != 0:
        return UNKNOWN, "loading the probes (eBPF, tp_btf) needs root; this check ran as a user", AS_ROOT
    built = [name for name in PROBE_NAMES if paths.probe_binary(name).exists()]
    unbuilt = [f"qprof-{name}" for name in PROBE_NAMES if name not in built]
    if not built:
        return (
            UNKNOWN,
            (f"no probe tool is built ({', '.join(unbuilt)}), so attaching by BTF (tp_btf) could not be tried"),
            MAKE_BUILD,
        )
    with _no_new_tracefs_mounts():
        tried = {name: _try_probe(name) for name in built}
    detail = (
        "by BTF (tp_btf; no tracefs needed): "
        + "; ".join(f"qprof-{name} {what}" for name, (_, what) in tried.items())
        + (f"; {', '.join(unbuilt)} not built, so not tried (see probes build)" if unbuilt else "")
    )
    verdicts = [verdict for verdict, _ in tried.values()]
    if all(v == OK for v in verdicts):
        return OK, detail, ""
    fix = (
        (
            "`qprof run` records a probe that cannot attach as absent and carries on; boot a kernel with "
            "BTF and these tracepoints, or use --guest"
        )
        if MISSING in verdicts
        else ""
    )
    return (MISSING if all(v == MISSING for v in verdicts) else LIMITED), detail, fix


@_check("perf sampling")
def check_perf_sampling() -> Result:
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    with tempfile.TemporaryDirectory(prefix="qprof-doctor-") as tmp, _no_new_tracefs_mounts():
        data = Path(tmp) / "perf.data"
        # What qprof runs: every CPU (-a), DWARF call graphs.
        r = _run(
            [
                "perf",
                "record",
                "-q",
                "-a",
                "-e",
                "cpu-clock",
                "-F",
                "99",
                "--call-graph",
                "dwarf,8192",
                "-o",
                str(data),
                "--",
                "sleep",
                "0.1",
            ]
        )
        data_bytes = data.stat().st_size if data.exists() else 0
    if r.returncode != 0 or data_bytes == 0:
        why = _first_line(r.stderr) or f"exit {r.returncode}, {data_bytes} bytes written"
        if os.geteuid() != 0:
            # Every CPU (-a) needs perf_event_paranoid <= 0 or CAP_PERFMON; the
            # rest of qprof needs root anyway, so lowering it would not help.
            return (
                MISSING,
                (
                    f"sampling every CPU (perf record -a, as qprof runs it) needs root: as euid "
                    f"{os.geteuid()} with perf_event_paranoid={paranoid} perf said '{why}'"
                ),
                "run qprof as root",
            )
        return (
            MISSING,
            (f"perf record -a -e cpu-clock --call-graph dwarf failed as root: {why}; perf_event_paranoid={paranoid}"),
            "qprof run --sample-hz 0 runs without stack samples",
        )
    return OK, f"cpu-clock on every CPU with DWARF call graphs; perf_event_paranoid={paranoid}", ""


@_check("udp gso/gro")
def check_udp_gso_gro() -> Result:
    fix = "boot a kernel >= 5.0 (UDP_SEGMENT, UDP_GRO), or use --guest"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
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
        return (
            MISSING,
            f"no 'tls' in {TCP_ULP_PATH} ({' '.join(ulps) or 'empty'})",
            "run TCP+kTLS stacks with --guest (a QEMU guest running Debian's kernel)",
        )
    crypto_info = struct.pack(
        "=HH8s16s4s8s", TLS_1_2_VERSION, TLS_CIPHER_AES_GCM_128, bytes(8), bytes(16), bytes(4), bytes(8)
    )
    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.create_connection(listener.getsockname(), timeout=TIMEOUT_S) as client,
    ):
        peer, _ = listener.accept()
        with peer:
            try:
                client.setsockopt(socket.IPPROTO_TCP, TCP_ULP, b"tls")
                client.setsockopt(SOL_TLS, TLS_TX, crypto_info)
            except OSError as e:
                return (
                    LIMITED,
                    f"'tls' is listed, but enabling AES-GCM-128 TX on a TCP socket failed: {e.strerror}",
                    "run TCP+kTLS stacks with --guest",
                )
    return OK, "TLS 1.2 AES-GCM-128 TX enabled on a loopback TCP socket", ""


@_check("netns/veth")
def check_netns_veth() -> Result:
    if os.geteuid() != 0:
        return UNKNOWN, "creating a network namespace needs root; this check ran as a user", AS_ROOT
    try:
        with scratch_netns() as s:
            _run_ok(["ip", "-n", s.ns_a, "link", "set", s.link_a, "up"])
            _run_ok(["ip", "-n", s.ns_b, "link", "set", s.link_b, "up"])
            state = _run_ok(["ip", "-n", s.ns_a, "-o", "link", "show", s.link_a]).stdout
    except StepFailed as e:
        return MISSING, str(e), "boot a kernel with network namespaces and veth; --topology loopback needs neither"
    if "LOWER_UP" not in state:
        return LIMITED, "veth pair created and set up, but it has no carrier", ""
    return OK, "created two namespaces joined by a veth pair, brought it up, removed them", ""


def _no_module(kind: str) -> str:
    """Why the kernel does not know a qdisc: '; this kernel has no
    sch_KIND...' when modprobe finds no module either ('' when it does, or
    cannot tell)."""
    try:
        r = _run(["modprobe", "-n", f"sch_{kind}"])
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return f"; this kernel has no sch_{kind} (not built in, no module)" if r.returncode != 0 else ""


@_checks(*(f"qdisc {kind}" for kind, *_ in QDISCS))
def check_qdiscs() -> List[Result]:
    """Each qdisc really added, as root qdisc of lo in a scratch namespace,
    then deleted: a modular qdisc the kernel has not loaded yet is loaded
    by the add, so neither /proc/modules nor /sys/module can tell."""
    if os.geteuid() != 0:
        return [
            (
                UNKNOWN,
                f"{kind} ({what}): adding a qdisc needs root (a scratch network namespace); this check ran as a user",
                AS_ROOT,
            )
            for kind, what, *_ in QDISCS
        ]
    results = []
    with scratch_ns() as ns:
        for kind, what, qdisc_args, class_args in QDISCS:
            tried = [["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", *qdisc_args]]
            if class_args:
                tried.append(["tc", "-n", ns, "class", "add", "dev", "lo", *class_args])
            failed = None
            for argv in tried:
                r = _run(argv)
                if r.returncode != 0:
                    failed = (argv, _last_line(r.stderr) or f"exit {r.returncode}")
                    break
            _run(["tc", "-n", ns, "qdisc", "del", "dev", "lo", "root"])
            if failed is None:
                done = " and ".join(f"`{_tc(argv)}`" for argv in tried)
                results.append((OK, f"{kind} ({what}): {done} worked in a scratch namespace", ""))
                continue
            argv, why = failed
            why = why.removeprefix("Error: ").rstrip(".")
            if "qdisc kind is unknown" in why:
                why += _no_module(kind)
            results.append(
                (
                    MISSING,
                    f"{kind} ({what}): `{_tc(argv)}` failed: {why}",
                    f"{what.split(':')[0]} with {kind} needs another kernel: use --guest "
                    f"(a QEMU guest running Debian's kernel, which has sch_{kind} as a module)",
                )
            )
    return results


@functools.lru_cache(maxsize=None)
def qdisc_missing(kind: str, no_netem: bool = False) -> Optional[str]:
    """Why this kernel cannot add the qdisc (None: it can), tried as
    check_qdiscs does; for a run's up-front check (needs root). no_netem
    (the tests' fault): netem is asked for under a kind no kernel has a
    module for, so the kernel answers as one without sch_netem does."""
    args = next(a for k, _, a, _ in QDISCS if k == kind)
    if no_netem and kind == "netem":
        args = [NO_NETEM_KIND]
    with scratch_ns() as ns:
        r = _run(["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", *args])
    if r.returncode == 0:
        return None
    why = (_last_line(r.stderr) or f"exit {r.returncode}").removeprefix("Error: ").rstrip(".")
    if "qdisc kind is unknown" in why:
        why += _no_module(kind)
    return why


def _tc(argv: List[str]) -> str:
    """A tc command as a person would type it: without the scratch `-n NS`."""
    return " ".join(argv[:1] + argv[3:])


@_check("gso/gro switches")
def check_offload_switches() -> Result:
    """--gso/--gro on the TCP stacks set the veths' features with ethtool;
    on quic they load libqprof-offload.so (see interposers build)."""
    ethtool = shutil.which("ethtool")
    if ethtool is None:
        return (
            MISSING,
            "ethtool is not installed: the TCP stacks' --gso/--gro set the veths' features with it",
            "`make deps` installs it (Debian package ethtool)",
        )
    return OK, f"{ethtool} (TCP stacks' --gso/--gro); quic's switch is libqprof-offload.so (interposers build)", ""


def _missing_of(e: NotBuilt) -> str:
    """'PATH is missing' out of a path helper's NotBuilt sentence."""
    m = re.search(r"\((.+ is missing)\)", e.sentence)
    return m.group(1) if m else e.sentence


def _build_result(what: str, missing: List[str], consequence: str) -> Result:
    if missing:
        return MISSING, f"{'; '.join(missing)}: {consequence}", MAKE_BUILD
    return OK, what, ""


@_check("workload build")
def check_workload_build() -> Result:
    """qprof-wl (every stack) and msquic (quic); `qprof run` refuses without them."""
    missing = []
    try:
        workload: Optional[Path] = paths.workload_binary()
    except NotBuilt as e:
        workload = None
        missing.append(_missing_of(e))
    lib = paths.msquic_library()
    if not lib.exists():
        missing.append(f"{lib} is missing")
    if missing:
        return _build_result("", missing, "`qprof run` refuses to start without them")
    r = _run([str(workload), "--help"])
    if r.returncode != 0:
        return MISSING, f"`{workload} --help` exited {r.returncode}: {_last_line(r.stderr)}", MAKE_BUILD
    return OK, f"{workload.name} and {lib.name} in {paths.build_dir()}; {workload.name} --help runs", ""


@_check("other QUIC implementations")
def check_other_quic_builds() -> Result:
    """qprof-wl's transports in libraries of their own (quiche's, quinn's),
    which it loads for their stacks (workloads/wl_plugin.c): without one,
    only its --stack is refused."""
    from qprof.describe.transports import STACKS

    others = [s for s in STACKS.values() if s.plugin]
    missing, ok = [], []
    for s in others:
        try:
            paths.plugin_library(s.plugin)
        except NotBuilt as e:
            missing.append(_missing_of(e))
            continue
        ok.append(s.name)
    if missing:
        stacks = ", ".join(s.name for s in others if s.name not in ok)
        return LIMITED, f"{'; '.join(missing)}: `qprof run --stack {stacks}` refuses to start", MAKE_BUILD
    return OK, f"{', '.join(s.plugin for s in others)} in {paths.build_dir()}/lib", ""


@_check("probes build")
def check_probes_build() -> Result:
    from qprof.describe.options import PROBE_NAMES

    tools = [paths.probe_binary(name) for name in PROBE_NAMES]
    missing = [f"{tool} is missing" for tool in tools if not tool.exists()]
    return _build_result(
        f"{', '.join(t.name for t in tools)} in {tools[0].parent}",
        missing,
        "`qprof run` records those probes as absent",
    )


@_check("interposers build")
def check_interposers_build() -> Result:
    """The LD_PRELOAD libraries, where offload.py and listen.py look."""
    from qprof.collectors import listen

    lib_dir = paths.build_dir() / "lib"
    needed_by = {
        offload.PRELOAD_LIB: "quic with --gso off or --gro off",
        listen.LIB: "every quic run: it binds the server to the run's address",
    }
    missing = [
        f"{lib_dir / lib} is missing (needed by {who})"
        for lib, who in needed_by.items()
        if not (lib_dir / lib).exists()
    ]
    return _build_result(f"{', '.join(needed_by)} in {lib_dir}", missing, "`qprof run` refuses those runs")


@_check("inferno build")
def check_inferno_build() -> Result:
    """The inferno tools qprof runs (paths.inferno_tool, as perf.py and
    draw.py find them): collapse-perf folds a run's stacks, flamegraph and
    diff-folded draw."""
    found, missing = [], []
    for tool in ("collapse-perf", "flamegraph", "diff-folded"):
        try:
            found.append(paths.inferno_tool(tool))
        except NotBuilt as e:
            missing.append(_missing_of(e))
    return _build_result(
        f"{', '.join(p.name for p in found)} in {found[0].parent if found else ''}",
        missing,
        "`qprof run` keeps no folded stacks and `qprof flame` draws nothing without them",
    )


@_check("floor build")
def check_floor_build() -> Result:
    """The floor tools, where floor.measure looks, and the stacks whose
    floor each one measures."""
    from qprof.collectors import floor

    stacks: Dict[str, List[str]] = {}
    for stack, spec in floor.SPECS.items():
        stacks.setdefault(spec.binary, []).append(stack)
    tools = {paths.build_dir() / "bin" / binary: names for binary, names in stacks.items()}
    missing = [
        f"{tool} is missing (the floor of {', '.join(names)})"
        for tool, names in tools.items()
        if not os.access(tool, os.X_OK)
    ]
    return _build_result(
        f"{', '.join(t.name for t in tools)} in {paths.build_dir() / 'bin'}",
        missing,
        "runs of those stacks record their floor as absent",
    )


CHECKS = (
    check_root,
    check_btf,
    check_tracepoints,
    check_perf_sampling,
    check_udp_gso_gro,
    check_kernel_tls,
    check_netns_veth,
    check_qdiscs,
    check_offload_switches,
    check_workload_build,
    check_other_quic_builds,
    check_probes_build,
    check_interposers_build,
    check_inferno_build,
    check_floor_build,
)


def run_checks() -> list[Check]:
    checks: list[Check] = []
    for check in CHECKS:
        result = check()
        checks += result if isinstance(result, list) else [result]
    return checks
