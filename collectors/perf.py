# SPDX-License-Identifier: GPL-2.0-only
"""Stack samples over exactly the measured window, folded per side.

`perf record -a --call-graph dwarf` (or `fp`) on the software cpu-clock
event (this VM has no hardware counters) with a fixed period in
nanoseconds (`-c`), so every sample is the same slice of CPU time and
samples × period is CPU time.
perf starts disabled (`-D -1`) and is switched on and off through its
control fifo (`--control fifo:ctl,ack`) at the window's edges, as pyperf
does. After the run `perf script | inferno-collapse-perf --pid --all`
folds the stacks, and they are split by process into client, server and
others (every other task but idle) folded files: the interchange format
the flamegraphs package reads. The client's and server's stacks are also
kept per thread (threads.folded), for a capture that must be weighted.

Where samples go missing (measured 2026-11-24, issue 25): on this 2-vCPU
VM the kernel's cpu-clock hrtimer handler runs every period on both CPUs
(its timer:hrtimer_expire_entry fires 495 times in a 5 s window at 99 Hz)
but on CPU 1 writes fewer samples (455), with no LOST or THROTTLE
record in perf.data: the sample is dropped in the kernel before the ring
buffer, so no buffer size (-m), enable method (a plain `perf record -a`
beside a run lost as much, 74-97%), call graph (fp lost as dwarf did) or
probe set (--probes none lost too) brings it back here.

A PerfRecorder is a context manager and the one owner of the perf
process, its fifos and perf.data (removed unless kept).
"""

import ctypes
import os
import platform
import re
import select
import signal
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from qprof import errors, interrupts, paths, remains
from qprof.collectors.controlled import start_owned
from qprof.describe import options
from qprof.describe.hosts import STAT_EVENTS

EVENT = "cpu-clock"
ACK_TIMEOUT_S = 10.0
EXIT_TIMEOUT_S = 30.0  # perf's exit after SIGINT, before it is killed
WAKE_S = 0.02  # how often its side-band thread is woken while perf winds down
SIDES = ("client", "server", "others")
IDLE_COMMS = ("swapper",)
CLONE_FRAMES = ("clone3", "__clone3", "clone", "__clone", "__clone_internal")
# A sample's header in `perf script -F comm,pid,tid,cpu,time,...`: "comm pid/tid [cpu] time:"
# (a frame's line has no "/tid [cpu] time:"); found by one search of a block, whose
# literal "/" sre finds fast, not a match per line.
SAMPLE_CPU = re.compile(rb"/\d+ +\[(\d+)\] +\d+\.\d+:")
FOLD_BLOCK = 1 << 20
_ROOT = re.compile(r"^(?P<comm>.*)-(?P<pid>\d+)(?:/(?P<tid>\d+))?$")
# The workload's stacks again, each under "<side>/<tid>": what weights a
# capture whose CPU missed samples by each thread's exact on-CPU time
# (flamegraphs/weighting.py).
THREADS_FILE = "threads.folded"
WEIGHED_SIDES = ("client", "server")

# How perf walks user stacks: "fp" follows frame pointers at each sample;
# "dwarf" copies DWARF_STACK_BYTES of each sample's user stack and its
# registers into perf.data, and `perf script` unwinds them from .eh_frame
# (CFI) at fold time. Kernel stacks are walked by the kernel either way.
# Measured 2026-11-22 (benchmarks/callgraph_cost.py, flame_speed.py; 99 Hz):
# stack quality of the workload threads, fp → dwarf: quic 67/58% → 99.7/99.8%
# (quictls' AES-GCM assembly uses rbp), tcp-tls 0/4% → 100/100% (Debian's
# OpenSSL has no frame pointers), tcp 0.4/13% → 100/100% (glibc's send and
# recv wrappers). Throughput with/without sampling: dwarf 0.943 (quic),
# 0.983 (tcp-tls), 0.996 (tcp) against fp 0.964, 0.971, 0.989: within this
# machine's noise. A 60 s quic capture of both CPUs: 92 MB perf.data
# against 2 MB, folded, normalised and drawn in 0.75 s against 0.31 s.
# 8192 bytes unwind as far as 16384 and 32768 did (99.4-99.7%) at half and
# a quarter of the data; the few stacks left short stop in msquic, not at
# the copy's end.
CALL_GRAPHS = options.CALL_GRAPHS
STACKS_DIR = "stacks"  # the folded stacks, in the run directory
DEFAULT_CALL_GRAPH = "dwarf"
DWARF_STACK_BYTES = 8192
# A stack may ask for more (describe/transports.py, dwarf_stack_bytes):
# quinn's transport (quinn-proto's deep frames; when it was tokio's tasks,
# their futures): 8192 bytes reached a thread entry for 1-6% of a 2 s bulk
# run's samples, 32768 for 99-100% (2026-11-29).
# quiche's workload, under its deep frames: 75% and 27% at 8192, 99.6% and
# 99.5% at 32768.


class PerfControl:
    """A perf command started disabled (`-D -1`) and switched on and off
    through its control fifo (`--control fifo:ctl,ack`): its process, its
    fifos, its log (log_path) and its output (data), owned here."""

    name = "perf"

    def __init__(self, run_path: Path, data: Path, log_path: Path, keep_data: bool):
        self.run_path = run_path
        self.data = data
        self.log_path = log_path
        self.keep_data = keep_data
        self.proc: Optional[subprocess.Popen] = None
        self._tmp: Optional[tempfile.TemporaryDirectory] = None
        self._ctl = self._ack = None
        self._ending = False  # told to exit (end()); its exit is then not a death

    def argv(self, ctl: Path, ack: Path) -> List[str]:
        raise NotImplementedError

    def __enter__(self):
        try:
            with interrupts.deferred():  # made and claimed as one step; close() removes both
                self._tmp = tempfile.TemporaryDirectory(prefix="qprof-perf-")
                remains.ledger().claim("paths", self._tmp.name)
            ctl, ack = Path(self._tmp.name) / "ctl", Path(self._tmp.name) / "ack"
            os.mkfifo(ctl)
            os.mkfifo(ack)
            self._log = open(self.log_path, "wb")
            start_owned(self, self.argv(ctl, ack), stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
            self._ctl = self._open_ctl(ctl)
            self._ack = os.fdopen(os.open(ack, os.O_RDONLY | os.O_NONBLOCK), "r")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _open_ctl(self, ctl: Path):
        """The control fifo's write end, once perf has opened its read end:
        a perf that fails at start-up must be an error, not a hang."""
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while True:
            try:
                return os.fdopen(os.open(ctl, os.O_WRONLY | os.O_NONBLOCK), "w")
            except OSError:  # ENXIO: no reader yet
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise errors.Timeout(f"{self.name} did not start ({self._why()}); {self.without}")
                time.sleep(0.02)

    def _why(self) -> str:
        self._log.flush()
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit {self.proc.poll()}"

    def _ended(self, within_s: float = 1.0) -> bool:
        """Whether perf has exited, or does within within_s: its fifos close
        in the kernel's exit path a moment before it can be reaped."""
        try:
            self.proc.wait(timeout=within_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def died(self) -> errors.InstrumentFailed:
        """perf ended on its own (or closed its control fifo and does not
        end): how, and its last word."""
        code = self.proc.returncode if self._ended() else None
        how = (
            "closed its control fifo but did not exit"
            if code is None
            else f"killed by {signal.Signals(-code).name}"
            if code < 0 and -code in signal.valid_signals()
            else f"exit {code}"
        )
        self._log.flush()
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        said = f": {lines[-1].strip()}" if lines else ""
        verb = "stopped answering" if code is None else "ended"
        return errors.InstrumentFailed(f"{self.name} {verb} mid-run ({how}{said}), {self.lost}")

    def _command(self, cmd: str) -> None:
        if self.proc.poll() is not None:
            raise self.died()
        try:
            self._ctl.write(cmd + "\n")
            self._ctl.flush()
        except OSError:  # EPIPE: perf's end of the fifo closed, as on its exit
            raise self.died()
        if not select.select([self._ack], [], [], ACK_TIMEOUT_S)[0]:
            if self.proc.poll() is not None:
                raise self.died()
            raise errors.Timeout(f"perf did not acknowledge '{cmd}' within {ACK_TIMEOUT_S:.0f} s; see {self.log_path}.")
        # perf writes "ack\n" with its terminating NUL, which lands at the
        # front of the next reply.
        reply = self._ack.readline().replace("\0", "").strip()
        if reply != "ack" and (not reply or self._ended()):  # "": perf closed the fifo, as on its exit
            raise self.died()
        if reply != "ack":
            raise errors.Timeout(f"perf did not acknowledge '{cmd}' (said '{reply}'); see {self.log_path}.")

    def enable(self) -> None:
        self._command("enable")

    def disable(self) -> None:
        self._command("disable")

    def stop(self) -> None:
        """Let perf write perf.data and exit."""
        if self.proc and self.proc.poll() is not None and not self._ending:
            raise self.died()
        self._interrupt()

    def end(self) -> None:
        """SIGINT, on which perf writes what it has and exits; stop() waits for it."""
        if self.proc and self.proc.poll() is None and not self._ending:
            self.proc.send_signal(signal.SIGINT)
            self._ending = True

    def _interrupt(self) -> None:
        """perf ended (end()) and waited for (killed if it does not exit)."""
        self.end()
        if self.proc and self.proc.poll() is None:
            try:
                self._wait_exit(EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _wait_exit(self, timeout_s: float) -> None:
        self.proc.wait(timeout=timeout_s)

    def close(self) -> None:
        with interrupts.deferred():
            if self.proc:
                if self.proc.poll() is None:
                    self.proc.kill()
                self.proc.wait()
                remains.ledger().release("pids", self._claim)
            for f in (self._ctl, self._ack):
                try:
                    if f:
                        f.close()
                except OSError:
                    pass
            if getattr(self, "_log", None):
                self._log.close()
            if self._tmp:
                self._tmp.cleanup()
                remains.ledger().release("paths", self._tmp.name)
                self._tmp = None
            if not self.keep_data:
                self.data.unlink(missing_ok=True)
                Path(str(self.data) + ".old").unlink(missing_ok=True)


class PerfRecorder(PerfControl):
    """`perf record -a` on cpu-clock over the window, folded after."""

    name = "perf record"
    without = "run `qprof doctor` or pass --sample-hz 0 to run without stacks."
    lost = "so the run has no complete stack samples; run again, or pass --sample-hz 0 to run without stacks."

    def __init__(
        self,
        run_path: Path,
        sample_hz: int,
        keep_data: bool = False,
        call_graph: Optional[str] = None,
        dwarf_bytes: int = DWARF_STACK_BYTES,
    ):
        self.call_graph = call_graph or DEFAULT_CALL_GRAPH
        self.dwarf_bytes = dwarf_bytes
        if self.call_graph not in CALL_GRAPHS:
            raise errors.BadValue(f"call graph '{self.call_graph}' is not one of {', '.join(CALL_GRAPHS)}.")
        self.period_ns = int(round(1e9 / sample_hz))
        self.sample_hz = sample_hz
        super().__init__(run_path, run_path / "perf.data", run_path / "perf.log", keep_data)

    def argv(self, ctl: Path, ack: Path) -> List[str]:
        return [
            "perf",
            "record",
            "-q",
            "-a",
            # No build-ids: qprof folds the samples here, from these binaries,
            # at once, so it needs none, and without them perf neither walks
            # every sample again as it exits (1.2 s of a 1 s capture in the TCG
            # guest) nor copies each new build of a binary into ~/.debug, which
            # grew to 1.3 GB on a development machine.
            "--no-buildid",
            *record_call_graph(self.call_graph, self.dwarf_bytes),
            "-e",
            EVENT,
            "-c",
            str(self.period_ns),
            "-D",
            "-1",
            "--control",
            f"fifo:{ctl},{ack}",
            "-o",
            str(self.data),
        ]

    def disable(self) -> None:
        """Sampling off at the window's end, and perf told to write what it
        has and exit: its wind-down then overlaps the run's own, instead of
        following it; capture() waits for it."""
        super().disable()
        self.end()

    def _wait_exit(self, timeout_s: float) -> None:
        """perf's exit waits for its side-band thread (the BPF programs
        loaded and unloaded while it records, whose names its stacks need),
        which polls for them a second at a time: 0.72-0.8 s after SIGINT in
        a 1.3 s run here, whichever phase the poll was in. A BPF program
        loaded wakes it, so one is, every WAKE_S until perf has gone."""
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            wake_side_band()
            try:
                self.proc.wait(timeout=min(WAKE_S, max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise

    def capture(self, pids: Dict[str, int], out_dir: Path) -> dict:
        """Stopped, folded into out_dir per side, and counted per CPU:
        {"samples", "samples_per_cpu", "period_ns"} (what a host's perf
        gives for capture_record)."""
        self.stop()
        samples, per_cpu = self.fold(pids, out_dir)
        return {"samples": samples, "samples_per_cpu": per_cpu, "period_ns": self.period_ns}

    def fold(self, pids: Dict[str, int], out_dir: Path) -> Tuple[Dict[str, int], Dict[str, int]]:
        """perf.data -> out_dir/{client,server,others}.folded and
        out_dir/threads.folded, in one pass of `perf script`: (samples per
        side, samples each CPU recorded, idle included). A CPU well short
        of window x rate lost samples (its timer did not fire), which is
        what a gap between a graph and the collectors' CPU time points to."""
        out_dir.mkdir(exist_ok=True)
        # No period field: inferno would sum periods; counts stay samples.
        # --no-inline: with DWARF unwinding perf would otherwise look every
        # user frame up in the debug info for inlined callees (13x slower on
        # a 60 s capture) and add frames a frame-pointer capture lacks.
        # cpu: each sample's header counted here on its way to inferno
        # (which reads past it), instead of a second pass over perf.data
        # (~1.7 s of a 1 s run in the TCG guest, 0.12 s here).
        script = subprocess.Popen(
            ["perf", "script", "-i", str(self.data), "--no-inline", "-F", "comm,pid,tid,cpu,time,event,ip,sym,dso"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        per_cpu: Dict[str, int] = {}
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            collapse = subprocess.Popen(
                [str(paths.inferno_tool("collapse-perf")), "--tid", "--all"],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
            )
            try:
                # In blocks of whole lines, each block's headers counted by
                # one search: a loop over lines in Python took 1.6 s of a 1 s
                # run in the TCG guest.
                for block in whole_lines(script.stdout):
                    count_cpus(block, per_cpu)
                    collapse.stdin.write(block)
            except BrokenPipeError:  # inferno ended early: its exit says why
                pass
            finally:
                try:
                    collapse.stdin.close()
                except BrokenPipeError:
                    pass
                script.stdout.close()
                script.wait()
                collapse.wait()
            if collapse.returncode != 0:
                err.seek(0)
                raise errors.NotBuilt(
                    f"inferno-collapse-perf failed ({err.read().decode(errors='replace').strip()[-200:]}); "
                    "check `perf script` on the run's perf.data (--keep-perf-data)."
                )
            out.seek(0)
            folded = out.read().decode(errors="replace")
        per_cpu = dict(sorted(per_cpu.items(), key=lambda kv: int(kv[0])))
        return split_folded(folded, pids, out_dir), per_cpu


def whole_lines(stream, size: int = FOLD_BLOCK) -> Iterator[bytes]:
    """stream's bytes as they come (read1: up to size at a time), each
    block ending at a line's end but the last, which is what is left."""
    tail = b""
    while True:
        got = stream.read1(size)
        if not got:
            break
        block = tail + got
        cut = block.rfind(b"\n") + 1
        block, tail = block[:cut], block[cut:]
        if block:
            yield block
    if tail:
        yield tail


# The bpf(2) call, and the least program it loads: a socket filter of two
# instructions (r0 = 0; exit), loaded and closed at once.
SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
BPF_PROG_LOAD, BPF_PROG_TYPE_SOCKET_FILTER = 5, 1
NOOP_PROG = bytes((0xB7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0))
BPF_ATTR_SIZE = 128  # the union's start is the part a load reads; the rest zero


def wake_side_band() -> bool:
    """Load and unload a program that does nothing, which every perf
    recording BPF events (its side-band thread) is told of at once; False
    where the kernel refused it (perf then exits in its own time)."""
    if SYS_BPF is None:
        return False
    insns = ctypes.create_string_buffer(NOOP_PROG, len(NOOP_PROG))
    gpl = ctypes.create_string_buffer(b"GPL")
    attr = ctypes.create_string_buffer(BPF_ATTR_SIZE)
    struct.pack_into("=IIQQ", attr, 0, BPF_PROG_TYPE_SOCKET_FILTER, 2, ctypes.addressof(insns), ctypes.addressof(gpl))
    fd = remains.libc().syscall(SYS_BPF, BPF_PROG_LOAD, attr, BPF_ATTR_SIZE)
    if fd < 0:
        return False
    os.close(fd)
    return True


def count_cpus(text: bytes, per_cpu: Dict[str, int]) -> None:
    """Add the samples whose headers are in text (whole lines of `perf
    script`) to per_cpu, by the CPU each names."""
    for cpu in SAMPLE_CPU.findall(text):
        key = str(int(cpu))
        per_cpu[key] = per_cpu.get(key, 0) + 1


def capture_record(perf, samples: Dict[str, int], samples_per_cpu: Dict[str, int]) -> dict:
    """The measurement's capture: what perf (a PerfRecorder, or each host's
    together) sampled, and where its folded stacks are in the run directory."""
    return {
        "event": EVENT,
        "sample_period_ns": perf.period_ns,
        "sample_hz": perf.sample_hz,
        "call_graph": perf.call_graph,
        "samples": samples,
        "samples_per_cpu": samples_per_cpu,
        "stacks_dir": STACKS_DIR,
    }


def record_call_graph(call_graph: str, dwarf_bytes: int = DWARF_STACK_BYTES) -> list:
    if call_graph == "dwarf":
        return ["--call-graph", f"dwarf,{dwarf_bytes}"]
    return ["--call-graph", "fp"]


def split_folded(folded: str, pids: Dict[str, int], out_dir: Path) -> Dict[str, int]:
    """Split folded stacks rooted at "comm-PID/TID" (or "comm-PID") into one
    file per side; the root loses its pid and tid so runs compare frame by
    frame. The client's and server's stacks are also written to
    threads.folded, each under a "<side>/<tid>" root. Idle is dropped, and
    so is the clone frame under a thread's start_thread (DWARF unwinds into
    glibc's clone3, which keeps no frame pointer, so fp stacks start at
    start_thread): captures of either walk then diff frame by frame."""
    side_of = {pid: side for side, pid in pids.items()}
    lines = {side: [] for side in SIDES}
    threads = []
    samples = {side: 0 for side in SIDES}
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        root, _, rest = stack.partition(";")
        m = _ROOT.match(root)
        comm, pid = (m.group("comm"), int(m.group("pid"))) if m else (root, -1)
        if pid == 0 or comm in IDLE_COMMS:
            continue
        side = side_of.get(pid, "others")
        first, _, after = rest.partition(";")
        if first in CLONE_FRAMES and after.partition(";")[0] == "start_thread":
            rest = after
        line = f"{comm};{rest} {count}" if rest else f"{comm} {count}"
        lines[side].append(line)
        if side in WEIGHED_SIDES and m and m.group("tid"):
            threads.append(f"{side}/{m.group('tid')};{line}")
        samples[side] += int(count)
    for side in SIDES:
        (out_dir / f"{side}.folded").write_text("".join(l + "\n" for l in lines[side]))
    (out_dir / THREADS_FILE).write_text("".join(l + "\n" for l in threads))
    return samples


# Hardware counters per side (issue 26): one process's cycles and
# instructions over the window, `perf stat -p PID` switched on and off at
# the window's edges as the sampler is. It ends by itself once its process
# has, writing what it counted. Where the machine has no hardware PMU (this
# VM, the TCG guest) perf says "<not supported>": the figures are absent,
# in perf's words (describe/hosts.py parse_perf_stat).
class PerfStat(PerfControl):
    name = "perf stat"
    without = "run `qprof doctor`."
    lost = "so the run has no hardware counters; run again."

    def __init__(self, run_path: Path, pid: int, tag: str):
        self.pid = pid
        super().__init__(run_path, run_path / f"perf-stat-{tag}.csv", run_path / f"perf-stat-{tag}.log", True)

    def argv(self, ctl: Path, ack: Path) -> List[str]:
        return ["perf", "stat", "-e", ",".join(STAT_EVENTS), "-x,", "-p", str(self.pid), "-D", "-1"] + [
            "--control",
            f"fifo:{ctl},{ack}",
            "-o",
            str(self.data),
        ]

    def output(self) -> str:
        """What it counted: stopped if it still runs (its process ended
        first: it already wrote it); "" when it wrote nothing."""
        self._interrupt()
        try:
            return self.data.read_text()
        except OSError:
            return ""
