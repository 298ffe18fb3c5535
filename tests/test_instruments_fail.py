# SPDX-License-Identifier: GPL-2.0-only
"""An instrument that dies mid-run is named with how it ended: perf (a
stand-in speaking its control-fifo protocol) as errors.InstrumentFailed,
a probe's process by its signal or its last line. No root, no transfer:
the real runs with perf and probes killed are in test_crash_safety.py."""

import os
import signal
import stat
import sys
import textwrap

import pytest

from qprof import errors
from qprof.collectors import perf as perf_module
from qprof.collectors.controlled import ControlledProcess
from qprof.collectors.perf import PerfRecorder

from conftest import REPO

pytestmark = pytest.mark.unit

# `perf record ... --control fifo:CTL,ACK ...` as perf answers it: "ack" to
# each command, until FAKE_PERF says how to stop after reading the Nth.
FAKE_PERF = textwrap.dedent(f"""\
    #!{sys.executable}
    import os, signal, sys
    ctl, ack = sys.argv[sys.argv.index("--control") + 1].removeprefix("fifo:").split(",")
    mode, after = os.environ["FAKE_PERF"].split(":")
    r = open(ctl)
    w = open(ack, "w")
    for n, cmd in enumerate(r, 1):
        if n == int(after):
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "exit":
                print("failed to mmap with 12 (Cannot allocate memory)", file=sys.stderr, flush=True)
                os._exit(3)
            if mode == "close":
                r.close()
                w.close()
                signal.pause()
        w.write("ack\\n\\0")
        w.flush()
        if n == int(after) and mode == "close-after":
            r.close()
            w.close()
            signal.pause()
""")


@pytest.fixture
def fake_perf(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    perf = bin_dir / "perf"
    perf.write_text(FAKE_PERF)
    perf.chmod(perf.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("QPROF_STATE_DIR", str(tmp_path / "state"))
    run_path = tmp_path / "run"
    run_path.mkdir()

    def start(mode):
        monkeypatch.setenv("FAKE_PERF", mode)
        return PerfRecorder(run_path, 99)

    yield start
    assert not list((tmp_path / "state").glob("*.json")), "the ledger still holds something"


def one_sentence(e):
    text = str(e)
    assert "\n" not in text and text.endswith("."), text
    return text


@pytest.mark.parametrize(
    "mode, when, how",
    [
        ("kill:1", "enable", "perf record ended mid-run (killed by SIGKILL)"),
        ("kill:2", "disable", "perf record ended mid-run (killed by SIGKILL)"),
        ("exit:2", "disable", "perf record ended mid-run (exit 3: failed to mmap with 12 (Cannot allocate memory))"),
        ("close:1", "enable", "perf record stopped answering mid-run (closed its control fifo but did not exit)"),
    ],
)
def test_perf_dying_at_a_command_is_instrument_failed(fake_perf, mode, when, how):
    with fake_perf(mode) as perf:
        tmp = perf._tmp.name
        with pytest.raises(errors.InstrumentFailed) as e:
            perf.enable()
            perf.disable()
        assert e.value.exit_code == 26
        line = one_sentence(e.value)
        assert line.startswith(how) and "--sample-hz 0" in line, line
    assert perf.proc.poll() is not None and not os.path.exists(tmp)


def test_perf_killed_between_commands_is_instrument_failed(fake_perf):
    with fake_perf("none:0") as perf:
        perf.enable()
        os.kill(perf.proc.pid, signal.SIGKILL)
        perf.proc.wait()
        with pytest.raises(errors.InstrumentFailed, match=r"^perf record ended mid-run \(killed by SIGKILL\)"):
            perf.disable()
        with pytest.raises(errors.InstrumentFailed, match="killed by SIGKILL"):
            perf.stop()


def test_perf_that_closed_its_fifo_meets_epipe_not_a_traceback(fake_perf):
    with fake_perf("close-after:1") as perf:
        perf.enable()
        with pytest.raises(
            errors.InstrumentFailed, match=r"^perf record stopped answering mid-run \(closed its control fifo"
        ):
            perf.disable()
    assert perf.proc.poll() == -signal.SIGKILL  # killed on the way out


PROBE = """\
import os, signal, sys
print('{"event": "ready"}', flush=True)
sys.stdin.readline()
MODE
"""


@pytest.mark.parametrize(
    "mode, reason",
    [
        ("os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"),
        (
            "print('libbpf: map lookup failed: -EPERM', file=sys.stderr, flush=True); "
            "os.kill(os.getpid(), signal.SIGTERM)",
            "killed by SIGTERM: libbpf: map lookup failed: -EPERM",
        ),
        (
            "print('failed to read maps: No such file', file=sys.stderr, flush=True); sys.exit(3)",
            "failed to read maps: No such file",
        ),
        ("sys.exit(3)", "exit 3"),
    ],
)
def test_a_probe_that_went_quiet_is_named_by_how_it_ended(tmp_path, monkeypatch, mode, reason):
    monkeypatch.setenv("QPROF_STATE_DIR", str(tmp_path / "state"))
    with ControlledProcess(
        "fake probe", [sys.executable, "-c", PROBE.replace("MODE", mode)], tmp_path / "probe.log"
    ) as p:
        p.wait_event("ready", 10)
        p.send("mark start")
        with pytest.raises(Exception) as e:
            p.wait_event("mark", 10)
        assert type(e.value).__name__ == "ProcessEnded"
        assert p.how_it_ended() == reason


# `perf script` as perf prints a capture of two sides and an idle CPU.
SCRIPT_OUT = """\
qprof-wl  101/101  [000] 1.000100: cpu-clock: \n\
\t    1111 encrypt (/usr/lib/libcrypto.so)
\t    2222 main (/build/qprof-wl)

qprof-wl  202/203  [001] 1.000200: cpu-clock: \n\
\t    3333 recv (/usr/lib/libc.so)

swapper     0/0     [001] 1.010300: cpu-clock: \n\
\tffffffff81000000 default_idle ([kernel.kallsyms])

"""


@pytest.mark.skipif(
    not (REPO / "build" / "tools" / "bin" / "inferno-collapse-perf").exists(),
    reason="inferno is not built; `make build` builds it",
)
@pytest.mark.parametrize("inferno_ok", [True, False])
def test_one_pass_of_perf_script_folds_and_counts_each_cpu(tmp_path, monkeypatch, inferno_ok):
    """fold() reads `perf script` once: inferno folds it per side (idle
    dropped) while each sample's header is counted for its CPU (idle
    included); an inferno that fails is named with its last word."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "perf").write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({SCRIPT_OUT!r})\n")
    (bin_dir / "perf").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    if not inferno_ok:
        (bin_dir / "inferno").write_text("#!/bin/sh\necho 'no stacks in line 1' >&2\nexit 2\n")
        (bin_dir / "inferno").chmod(0o755)
        monkeypatch.setattr(perf_module.paths, "inferno_tool", lambda name: bin_dir / "inferno")
    perf = PerfRecorder.__new__(PerfRecorder)
    perf.data = tmp_path / "perf.data"
    out = tmp_path / "stacks"
    if not inferno_ok:
        with pytest.raises(errors.NotBuilt, match=r"inferno-collapse-perf failed \(no stacks in line 1\)"):
            perf.fold({"client": 101, "server": 202}, out)
        return
    samples, per_cpu = perf.fold({"client": 101, "server": 202}, out)
    assert samples == {"client": 1, "server": 1, "others": 0}
    assert per_cpu == {"0": 1, "1": 2}
    assert (out / "client.folded").read_text() == "qprof-wl;main;encrypt 1\n"
    assert (out / "server.folded").read_text() == "qprof-wl;recv 1\n"
