# SPDX-License-Identifier: GPL-2.0-only
"""`qprof doctor --json` on this host: every check once with a valid verdict,
verdicts that agree with what the host has, and nothing left behind."""

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from qprof.collectors.capabilities import caps_held

from conftest import qprof

NAMES = [
    "root",
    "btf",
    "tracepoints",
    "perf sampling",
    "udp gso/gro",
    "kernel tls",
    "netns/veth",
    "qdisc netem",
    "qdisc tbf",
    "qdisc htb",
    "gso/gro switches",
    "workload build",
    "other QUIC implementations",
    "probes build",
    "interposers build",
    "inferno build",
    "floor build",
    "remains of dead runs",
]
BUILD_CHECKS = ["workload build", "probes build", "interposers build", "inferno build", "floor build"]
QDISC_CONFIG = {"netem": "CONFIG_NET_SCH_NETEM", "tbf": "CONFIG_NET_SCH_TBF", "htb": "CONFIG_NET_SCH_HTB"}
VERDICTS = {"ok", "missing", "limited", "unknown"}
# Doctor's scratch namespaces and links (qp-doc-<pid>-a, qpd<pid>a); narrower
# than conftest.leftovers() so a `qprof run` elsewhere on the host cannot fail this.
SCRATCH_NAME = re.compile(r"^(qp-doc|qpd\d+[ab]$)")


def tracefs_mounts():
    return sorted(
        line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines() if line.split()[2] == "tracefs"
    )


@pytest.fixture(scope="module")
def doctor_pid():
    """doctor run once, as conftest.qprof runs the CLI, but with its pid
    known: the probe tools it starts are given it (-p PID)."""
    mounts_before = tracefs_mounts()
    p = subprocess.Popen(
        [sys.executable, "-m", "qprof", "doctor", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), mounts_before, p.pid


@pytest.fixture(scope="module")
def doctor(doctor_pid):
    r, mounts_before, _ = doctor_pid
    return r, mounts_before


@pytest.fixture(scope="module")
def checks(doctor):
    return {c["name"]: c for c in json.loads(doctor[0].stdout)}


@pytest.fixture(scope="module")
def verdicts(doctor):
    r, _ = doctor
    return {c["name"]: c["verdict"] for c in json.loads(r.stdout)}


@pytest.mark.system
def test_exits_zero_with_json_and_empty_stderr(doctor):
    r, _ = doctor
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    checks = json.loads(r.stdout)
    assert all(set(c) == {"name", "verdict", "detail", "fix"} for c in checks)


@pytest.mark.system
def test_every_check_once_in_order_with_a_known_verdict(doctor):
    checks = json.loads(doctor[0].stdout)
    assert [c["name"] for c in checks] == NAMES
    for c in checks:
        assert c["verdict"] in VERDICTS, c
        assert c["detail"], c


@pytest.mark.system
def test_kernel_tls_missing_exactly_when_the_tls_ulp_is_not_listed(verdicts):
    tls_listed = "tls" in Path("/proc/sys/net/ipv4/tcp_available_ulp").read_text().split()
    assert (verdicts["kernel tls"] == "missing") == (not tls_listed)


@pytest.mark.system
def test_btf_ok_exactly_when_vmlinux_btf_exists(verdicts):
    assert (verdicts["btf"] == "ok") == Path("/sys/kernel/btf/vmlinux").exists()


def probe_tools_given(pid):
    """Live processes of qprof's probe tools whose arguments hold pid."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if Path(argv[0].decode(errors="replace")).name.startswith("qprof-") and str(pid).encode() in argv:
            found.append(b" ".join(argv).decode(errors="replace"))
    return found


@pytest.mark.system
def test_leaves_no_namespace_link_mount_or_probe(doctor_pid):
    _, mounts_before, pid = doctor_pid
    assert probe_tools_given(pid) == []
    netns = [
        line.split()[0]
        for line in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
    ]
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout.splitlines()
    ]
    assert [name for name in netns + links if SCRATCH_NAME.match(name)] == []
    assert tracefs_mounts() == mounts_before


@pytest.mark.unit
def test_caps_held_decodes_only_the_bits_qprof_needs():
    assert caps_held("0000000000201000") == {"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}  # bits 12, 21
    assert caps_held("000000c000000000") == {"CAP_PERFMON", "CAP_BPF"}  # bits 38, 39
    assert caps_held("0000000000500800") == set()  # bits 11, 20, 22
    assert caps_held("000001ffffffffff") == {"CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_PERFMON", "CAP_BPF"}


@pytest.mark.system
def test_as_a_user_doctor_says_what_needs_root(tmp_path):
    """Run as nobody, doctor does not claim what only root can do (perf -a)
    nor blame the kernel for what is a missing privilege."""
    import os
    import sys

    os.chmod(tmp_path, 0o777)
    r = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "qprof",
            "doctor",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "QPROF_STATE_DIR": str(tmp_path / "state")},
    )
    assert r.returncode == 0, r.stderr
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert checks["root"]["verdict"] == "missing"
    perf = checks["perf sampling"]
    assert perf["verdict"] == "missing" and "needs root" in perf["detail"] and perf["fix"] == "run qprof as root"
    assert "Access to performance monitoring" in perf["detail"]  # perf's reason, not its closing advice
    # A missing privilege is not a kernel that lacks the feature.
    for name in ("tracepoints", "netns/veth", "qdisc netem", "qdisc tbf", "qdisc htb"):
        assert checks[name]["verdict"] == "unknown" and "root" in checks[name]["fix"], checks[name]
    assert "CONFIG_FTRACE" not in checks["tracepoints"]["fix"]


PERF_AS_USER = """\
Error:
Access to performance monitoring and observability operations is limited.
Consider adjusting /proc/sys/kernel/perf_event_paranoid setting to open
perf_event_paranoid setting is 2:
To make the adjusted perf_event_paranoid setting permanent preserve it
in /etc/sysctl.conf (e.g. kernel.perf_event_paranoid = <setting>)
"""


@pytest.mark.unit
def test_perf_is_quoted_by_its_first_line_that_says_something():
    from qprof.collectors.capabilities import _first_line

    assert _first_line(PERF_AS_USER) == "Access to performance monitoring and observability operations is limited."
    assert _first_line("Error:\tUnable to find debugfs/tracefs\nHint: ...") == "Unable to find debugfs/tracefs"
    assert _first_line("\n") == ""


@pytest.mark.system
def test_the_probes_are_tried_by_btf_without_tracefs(checks):
    """The probes attach by tp_btf: doctor loads them, and asks for no tracefs."""
    c = checks["tracepoints"]
    assert "tp_btf" in c["detail"] and "no tracefs needed" in c["detail"], c
    assert "tracefs" not in c["fix"], c
    for name in ("syscalls", "packets", "cputhread"):
        assert f"qprof-{name}" in c["detail"], c


def kernel_config():
    """The running kernel's build configuration and where it was read:
    /proc/config.gz (CONFIG_IKCONFIG_PROC) or where Debian installs it,
    /boot/config-RELEASE; None when neither exists."""
    release = os.uname().release
    for path, decode in ((Path("/proc/config.gz"), gzip.decompress), (Path(f"/boot/config-{release}"), bytes)):
        try:
            return decode(path.read_bytes()).decode(), str(path)
        except OSError:
            continue
    return None


def kernel_has_qdisc(kind):
    """Whether the running kernel can add sch_KIND (built in, loaded, or a
    module modprobe can load), and the source that says so; None when no
    source exists on this host."""
    name, option = f"sch_{kind}", QDISC_CONFIG[kind]
    if Path(f"/sys/module/{name}").exists():
        return True, f"/sys/module/{name} (loaded, or built in with parameters)"
    modules = Path("/lib/modules") / os.uname().release
    module = next(iter(sorted(modules.glob(f"kernel/net/sched/{name}.ko*"))), None) if modules.is_dir() else None
    config = kernel_config()
    if config is not None:
        text, where = config
        lines = set(text.splitlines())
        if f"{option}=y" in lines:
            return True, f"{where}: {option}=y"
        if f"{option}=m" in lines:
            # Built as a module: modprobe loads it if it is installed for this release.
            return module is not None, f"{where}: {option}=m, module {module or f'not under {modules}'}"
        return False, f"{where}: {option} not set"
    if modules.is_dir():
        builtin = modules / "modules.builtin"
        if builtin.exists() and f"kernel/net/sched/{name}.ko" in builtin.read_text().split():
            return True, f"{builtin} lists {name}"
        if module is not None:
            return True, f"{module}"
        if builtin.exists():
            return False, f"neither {builtin} nor {modules}/kernel/net/sched has {name}"
    return None


@pytest.mark.system
@pytest.mark.parametrize("kind", sorted(QDISC_CONFIG))
def test_each_qdisc_has_its_own_line_and_a_verdict_the_kernel_config_agrees_with(checks, kind):
    c = checks[f"qdisc {kind}"]
    assert c["verdict"] in ("ok", "missing"), c
    assert c["detail"].startswith(f"{kind} ("), c
    if c["verdict"] == "missing":
        assert "--guest" in c["fix"], c
    if kind == "netem":
        assert "delay, loss, jitter" in c["detail"], c
    has = kernel_has_qdisc(kind)
    if has is None:
        pytest.skip(
            f"nothing on this host says whether the kernel has sch_{kind}: no /proc/config.gz, "
            f"no /boot/config-{os.uname().release}, no /sys/module/sch_{kind}, no /lib/modules/{os.uname().release}"
        )
    present, source = has
    if present:
        assert c["verdict"] == "ok", (source, c)
    else:
        assert c["verdict"] == "missing" and f"no sch_{kind}" in c["detail"], (source, c)


@pytest.mark.system
def test_an_empty_build_dir_fails_each_build_check_naming_what_and_make_build(tmp_path):
    """QPROF_BUILD_DIR moves every path helper: nothing is built there."""
    env = {"QPROF_BUILD_DIR": str(tmp_path), "QPROF_STATE_DIR": str(tmp_path / "state")}
    r = qprof("doctor", "--json", env_extra=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert list(checks) == NAMES
    expected = {
        "workload build": [f"{tmp_path}/bin/qprof-wl is missing", "libmsquic.so is missing"],
        "probes build": [f"{tmp_path}/bin/qprof-{n} is missing" for n in ("syscalls", "packets", "cputhread")],
        "interposers build": [
            f"{tmp_path}/lib/libqprof-offload.so is missing",
            f"{tmp_path}/lib/libqprof-bind.so is missing",
        ],
        "inferno build": [f"inferno-{t} is missing" for t in ("collapse-perf", "flamegraph", "diff-folded")],
        "floor build": [f"{tmp_path}/bin/qprof-floor is missing", f"{tmp_path}/bin/qprof-floor-quictls is missing"],
    }
    assert sorted(expected) == sorted(BUILD_CHECKS)
    for name, sentences in expected.items():
        c = checks[name]
        assert c["verdict"] == "missing" and "make build" in c["fix"], c
        for sentence in sentences:
            assert sentence in c["detail"], c
    # Without quinn's and quiche's transports only their stacks are refused: limited, not missing.
    other = checks["other QUIC implementations"]
    assert other["verdict"] == "limited" and "make build" in other["fix"], other
    assert f"{tmp_path}/lib/libqprof-wl-quinn.so is missing" in other["detail"], other
    assert "--stack quinn, quiche" in other["detail"], other
    if os.geteuid() == 0:
        # Nothing to load: the probes are not tried, and that is not the kernel's fault.
        assert checks["tracepoints"]["verdict"] == "unknown" and "make build" in checks["tracepoints"]["fix"]
