# SPDX-License-Identifier: GPL-2.0-only
"""Where qprof finds what `make build` produced and where runs are written."""

import os
from pathlib import Path

from .errors import NotBuilt

REPO_ROOT = Path(__file__).resolve().parent.parent


def build_dir() -> Path:
    return Path(os.environ.get("QPROF_BUILD_DIR", REPO_ROOT / "build"))


def workload_binary(name: str = "qprof-wl") -> Path:
    """A workload's program: qprof-wl, or another QUIC implementation's (describe/transports.py)."""
    path = build_dir() / "bin" / name
    if not os.access(path, os.X_OK):
        raise NotBuilt(f"the workload is not built ({path} is missing); run `make build` in {REPO_ROOT}.")
    return path


def plugin_library(name: str, stack: str = "") -> Path:
    """A transport of qprof-wl's in a library of its own (describe/transports.py,
    plugin), for STACK. `make run` builds none of them, only what the quic
    stack needs; `make build` builds them all."""
    path = build_dir() / "lib" / name
    if not os.path.isfile(path):
        whose = f"--stack {stack}'s transport" if stack else "this stack's transport"
        raise NotBuilt(
            f"{whose} is not built ({path} is missing) and `make run` leaves it out: "
            f"run `make build` in {REPO_ROOT}, which builds every stack."
        )
    return path


def probe_binary(name: str) -> Path:
    """QPROF_PROBE_DIR overrides where probe tools are found (tests use it
    to stand in a probe that fails to load)."""
    return Path(os.environ.get("QPROF_PROBE_DIR", build_dir() / "bin")) / f"qprof-{name}"


def msquic_library() -> Path:
    return build_dir() / "msquic" / "lib" / "libmsquic.so"


def runs_dir() -> Path:
    return Path(os.environ.get("QPROF_RUNS_DIR", "runs"))


def inferno_tool(name: str) -> Path:
    """One of inferno's programs (inferno-NAME), as `make build` installs them."""
    path = build_dir() / "tools" / "bin" / f"inferno-{name}"
    if not os.access(path, os.X_OK):
        raise NotBuilt(
            f"inferno is not built ({path} is missing); run `make inferno` (part of `make build`) in {REPO_ROOT}."
        )
    return path
