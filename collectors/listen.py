# SPDX-License-Identifier: GPL-2.0-only
"""Where the QUIC server listens: only on the address the run gives it.

msquic binds its listeners to the dual-mode wildcard [::]:PORT, sharing it
through SO_REUSEPORT, and filters addresses in QUIC; libqprof-bind.so
(workloads/preload/bind_preload.c), loaded into the QUIC server only,
turns that bind into one on the run's address (127.0.0.1 on loopback, the
server's veth address in its namespace) and fails it with EADDRINUSE if
anything else holds the port. The TCP and UDP servers bind the address
themselves (wl_bind).
"""

import json
from pathlib import Path
from typing import Dict, List, Optional

from qprof import errors, paths
from qprof.describe import transports

LIB = "libqprof-bind.so"
REPORT_NAME = "bind-server.jsonl"


def server_env(
    stack: str, addr: str, port: int, run_path: Optional[Path], build_dir: Optional[Path] = None
) -> Dict[str, str]:
    """The QUIC server's environment (run_path: the directory its report
    goes in, on its host; build_dir: its host's build, this one's by default)."""
    if not transports.msquic(stack):
        return {}
    lib = (build_dir or paths.build_dir()) / "lib" / LIB
    if not lib.exists():
        raise errors.NotBuilt(f"the listening-address interposer is not built ({lib} is missing); run `make build`.")
    env = {"LD_PRELOAD": str(lib), "QPROF_BIND_ADDR": addr, "QPROF_BIND_PORT": str(port)}
    if run_path is not None:
        env["QPROF_BIND_REPORT"] = str(run_path / REPORT_NAME)
    return env


def merge(*envs: Dict[str, str]) -> Dict[str, str]:
    """Environments for one process; their LD_PRELOAD lists joined."""
    out: Dict[str, str] = {}
    for env in envs:
        for k, v in env.items():
            out[k] = f"{out[k]} {v}" if k == "LD_PRELOAD" and k in out else v
    return out


def read_report(run_path: Path) -> Optional[List[dict]]:
    """The server's steered binds, or None when nothing was steered."""
    try:
        return parse_report((run_path / REPORT_NAME).read_text())
    except OSError:
        return None


def parse_report(text: Optional[str]) -> Optional[List[dict]]:
    """The report's lines (None: there was none)."""
    if text is None:
        return None
    return [json.loads(l) for l in text.splitlines() if l.strip()]
