"""Shared by the tests: run the real CLI, and check that nothing is left."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def qprof(*args, runs_dir=None, timeout=120, env_extra=None, **kw):
    """`python -m qprof ARGS` in a subprocess, as a user would run it."""
    env = dict(os.environ)
    if runs_dir is not None:
        env["QPROF_RUNS_DIR"] = str(runs_dir)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "qprof", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


def run_json(runs_dir, *args, timeout=120):
    r = qprof("run", "--json", *args, runs_dir=runs_dir, timeout=timeout)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    return json.loads(r.stdout)


def leftovers():
    """Namespaces, links and processes a run could have left behind."""
    found = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {line.split()[0]}" for line in ns.splitlines() if line.startswith("qp-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(": ")[1].split("@")[0]
        if name.startswith("qp"):
            found.append(f"link {name}")
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    found += [f"process {line.strip()}" for line in ps.splitlines() if "qprof-wl" in line]
    return found


@pytest.fixture
def runs_dir(tmp_path):
    d = tmp_path / "runs"
    yield d
    assert leftovers() == []


needs_build = pytest.mark.skipif(
    not (REPO / "build" / "bin" / "qprof-wl").exists(),
    reason="the workload is not built; `make test` builds it first",
)


@pytest.fixture
def tracefs():
    """tracefs for bpftrace's tracepoint probes, left as it was found."""
    from qprof.collectors import tracefs as t

    with t.mounted() as path:
        yield path
