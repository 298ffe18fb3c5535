"""`qprof doctor --json` on this host: every check once with a valid verdict,
verdicts that agree with what the host has, and nothing left behind."""
import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import qprof
from qprof.collectors.capabilities import caps_held

NAMES = ["root", "btf", "tracepoints", "kprobes", "fentry/fexit", "perf sampling", "hardware counters",
         "udp gso/gro", "kernel tls", "netns/veth", "tc qdiscs", "msquic build",
         "gso/gro switches", "remains of dead runs"]
VERDICTS = {"ok", "missing", "limited", "unknown"}
# Doctor's scratch namespaces and links (qp-doc-<pid>-a, qpd<pid>a); narrower
# than conftest.leftovers() so a `qprof run` elsewhere on the host cannot fail this.
SCRATCH_NAME = re.compile(r"^(qp-doc|qpd\d+[ab]$)")


def tracefs_mounts():
    return sorted(line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
                  if line.split()[2] == "tracefs")


@pytest.fixture(scope="module")
def doctor():
    mounts_before = tracefs_mounts()
    r = qprof("doctor", "--json")
    return r, mounts_before


@pytest.fixture(scope="module")
def verdicts(doctor):
    r, _ = doctor
    return {c["name"]: c["verdict"] for c in json.loads(r.stdout)}


def test_exits_zero_with_json_and_empty_stderr(doctor):
    r, _ = doctor
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    checks = json.loads(r.stdout)
    assert all(set(c) == {"name", "verdict", "detail", "fix"} for c in checks)


def test_every_check_once_in_order_with_a_known_verdict(doctor):
    checks = json.loads(doctor[0].stdout)
    assert [c["name"] for c in checks] == NAMES
    for c in checks:
        assert c["verdict"] in VERDICTS, c
        assert c["detail"], c


def test_kernel_tls_missing_exactly_when_the_tls_ulp_is_not_listed(verdicts):
    tls_listed = "tls" in Path("/proc/sys/net/ipv4/tcp_available_ulp").read_text().split()
    assert (verdicts["kernel tls"] == "missing") == (not tls_listed)


def test_btf_ok_exactly_when_vmlinux_btf_exists(verdicts):
    assert (verdicts["btf"] == "ok") == Path("/sys/kernel/btf/vmlinux").exists()


def test_leaves_no_namespace_link_or_mount(doctor):
    _, mounts_before = doctor
    netns = [line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                        text=True, check=True).stdout.splitlines()]
    links = [line.split(":")[1].strip().split("@")[0] for line in subprocess.run(
        ["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout.splitlines()]
    assert [name for name in netns + links if SCRATCH_NAME.match(name)] == []
    assert tracefs_mounts() == mounts_before


def test_caps_held_decodes_only_the_bits_qprof_needs():
    assert caps_held("0000000000201000") == {"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}  # bits 12, 21
    assert caps_held("000000c000000000") == {"CAP_PERFMON", "CAP_BPF"}          # bits 38, 39
    assert caps_held("0000000000500800") == set()                                # bits 11, 20, 22
    assert caps_held("000001ffffffffff") == {"CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_PERFMON", "CAP_BPF"}


def test_as_a_user_doctor_says_what_needs_root(tmp_path):
    """Run as nobody, doctor does not claim what only root can do (perf -a)
    nor blame the kernel for what is a missing privilege."""
    import os
    import sys
    os.chmod(tmp_path, 0o777)
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        sys.executable, "-m", "qprof", "doctor", "--json"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
                                                        "QPROF_STATE_DIR": str(tmp_path / "state")})
    assert r.returncode == 0, r.stderr
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert checks["root"]["verdict"] == "missing"
    perf = checks["perf sampling"]
    assert perf["verdict"] == "missing" and "needs root" in perf["detail"] and perf["fix"] == "run qprof as root"
    assert "Access to performance monitoring" in perf["detail"]  # perf's reason, not its closing advice
    # A missing privilege is not a kernel that lacks the feature.
    for name in ("tracepoints", "kprobes", "fentry/fexit"):
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


def test_perf_is_quoted_by_its_first_line_that_says_something():
    from qprof.collectors.capabilities import _first_line
    assert _first_line(PERF_AS_USER) == "Access to performance monitoring and observability operations is limited."
    assert _first_line("Error:\tUnable to find debugfs/tracefs\nHint: ...") == "Unable to find debugfs/tracefs"
    assert _first_line("\n") == ""
