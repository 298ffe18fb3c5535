# SPDX-License-Identifier: GPL-2.0-only
"""`qprof remote setup HOST`: this qprof onto another host, from this
checkout's commit, over the SSH connection (issue 26).

A run refuses a host whose qprof is another commit or lacks its build
(collectors/ssh.py), and starts it at the path this one lives at. Setting
up makes that true:

1. this checkout's commit (HEAD) goes to the host as a git bundle over the
   SSH channel: nothing of qprof's is fetched from anywhere else, and the
   host needs no access to where this checkout came from;
2. there, at the same path, it is cloned (nothing there yet) or fetched
   into the qprof checkout already there (whose tracked files must be
   unchanged: a checkout with changes is refused, not overwritten), and
   checked out at that commit;
3. the README's set-up runs there, `make deps build`, its lines shown as
   they come (it installs Debian's packages, the venv without the test
   tools, which are `make test`'s, and the build from the package
   registries, as on this machine);
4. the host is checked as a run checks it (`qprof agent`'s hello), with
   qprof started from that path's venv where it is not this one's
   (`qprof_at`: what QPROF_REMOTE_QPROF then says for a run).

A checkout here with uncommitted changes sends its commit without them
(said as a warning). The bundle's temporary directory there is removed on
every way out.
"""

import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, List, Optional

from qprof import errors, paths
from qprof.collectors import environment
from qprof.collectors.controlled import die_with_parent
from qprof.collectors.ssh import SshHost

STEP_TIMEOUT_S = 300.0
BUILD = ("deps", "build")
VENV = ".venv"  # the Makefile's VENV
# What is at PATH there: "absent" (nothing, or an empty directory, which git
# clones into), "clean COMMIT", "changed COMMIT", or "other" (not a git checkout).
LOOK = (
    'p="$1"; if [ ! -e "$p" ] || { [ -d "$p" ] && [ -z "$(ls -A "$p")" ]; }; then echo absent; '
    'elif git -C "$p" rev-parse HEAD >/dev/null 2>&1; then '
    'c=$(git -C "$p" rev-parse HEAD); '
    'if [ -z "$(git -C "$p" status --porcelain --untracked-files=no)" ]; '
    'then echo "clean $c"; else echo "changed $c"; fi; '
    "else echo other; fi"
)


def qprof_at(path: str) -> List[str]:
    """How qprof set up at path is started there: its own venv's python
    (what `make deps` made), as QPROF_REMOTE_QPROF would say it."""
    return [str(Path(path) / VENV / "bin" / "python"), "-m", "qprof"]


def _git(*args: str) -> str:
    r = subprocess.run(["git", "-C", str(paths.REPO_ROOT), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise errors.BadValue(
            f"git here failed ({r.stderr.strip()[-200:]}); `qprof remote setup` needs a git checkout."
        )
    return r.stdout


def _there(host: SshHost, argv, what: str, timeout_s: float = STEP_TIMEOUT_S) -> str:
    r = host.run(argv, timeout_s)
    if r.returncode != 0:
        line = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise errors.RemoteNotBuilt(f"{what} failed on {host.name} ({line}); fix it there and run setup again.")
    return r.stdout


def setup(host: SshHost, path: Optional[str], build: bool, say: Callable[[str], None]) -> dict:
    """This checkout's commit installed at path (default: this checkout's)
    on the host, and built; what was done."""
    commit = environment.qprof_commit()
    if commit is None:
        raise errors.BadValue(
            f"this qprof ({paths.REPO_ROOT}) is not a git checkout, so it has no commit to send; "
            "set up the host from a checkout made by the README's commands."
        )
    if _git("status", "--porcelain", "--untracked-files=no").strip():
        say(f"warning: this checkout has uncommitted changes; {host.name} gets commit {commit[:12]} without them")
    path = path or str(paths.REPO_ROOT)
    state = _there(host, ["sh", "-c", LOOK, "qprof", path], "looking at the path").strip()
    kind, _, there = state.partition(" ")
    if kind == "other":
        raise errors.RemoteNotBuilt(
            f"{path} on {host.name} exists and is not a git checkout; move it away or give another --path."
        )
    if kind == "changed":
        raise errors.RemoteNotBuilt(
            f"the qprof checkout at {path} on {host.name} (commit {there[:12]}) has changed tracked files, "
            "which setup would overwrite; commit or discard them there first."
        )
    if kind == "clean" and there == commit:
        say(f"{host.name}: {path} is already at {commit[:12]}")
    else:
        _send(host, path, commit, kind == "absent", say)
    if build:
        _build(host, path, say)
    return {"host": host.name, "path": path, "commit": commit, "was": state, "built": build}


def _send(host: SshHost, path: str, commit: str, fresh: bool, say: Callable[[str], None]) -> None:
    """HEAD as a bundle over the channel, then cloned or fetched there and checked out."""
    tmp = _there(host, ["mktemp", "-d", "/tmp/qprof-setup-XXXXXX"], "making a temporary directory").strip()
    try:
        bundle = f"{tmp}/qprof.bundle"
        with tempfile.TemporaryDirectory(prefix="qprof-bundle-") as here:
            local = Path(here) / "qprof.bundle"
            _git("bundle", "create", "--quiet", str(local), "HEAD")
            say(f"{host.name}: sending commit {commit[:12]} ({local.stat().st_size / 1e6:.1f} MB bundle)")
            with open(local, "rb") as f:
                r = subprocess.run(
                    host.command(["sh", "-c", 'cat > "$1"', "qprof", bundle]),
                    stdin=f,
                    capture_output=True,
                    timeout=STEP_TIMEOUT_S,
                    preexec_fn=die_with_parent,
                )
            if r.returncode != 0:
                raise errors.RemoteNotBuilt(
                    f"sending the bundle to {host.name} failed ({r.stderr.decode(errors='replace').strip()[-200:]})."
                )
        if fresh:
            say(f"{host.name}: cloning into {path}")
            _there(host, ["git", "clone", "--quiet", "--no-checkout", bundle, path], "git clone")
        else:
            say(f"{host.name}: fetching into {path}")
            _there(host, ["git", "-C", path, "fetch", "--quiet", bundle, "HEAD"], "git fetch")
        _there(host, ["git", "-C", path, "checkout", "--quiet", "--detach", commit], "git checkout")
    finally:
        host.run(["rm", "-rf", tmp], STEP_TIMEOUT_S)


def _build(host: SshHost, path: str, say: Callable[[str], None]) -> None:
    """`make deps build` there, each line said as it comes."""
    argv = host.command(["make", "-C", path, *BUILD])
    say(f"{host.name}: {shlex.join(['make', '-C', path, *BUILD])}")
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
    )
    last = ""
    for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip()
        if line:
            last = line
            say(f"{host.name}: {line}")
    if proc.wait() != 0:
        raise errors.RemoteNotBuilt(
            f"`make {' '.join(BUILD)}` failed on {host.name} (exit {proc.returncode}: {last[-160:]}); "
            f"see the lines above, fix it there and run setup again."
        )
