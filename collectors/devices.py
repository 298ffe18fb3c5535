# SPDX-License-Identifier: GPL-2.0-only
"""GSO and GRO on the machine: the veths' features set and read with
ethtool, the LD_PRELOAD interposer that steers msquic's offload probes
(its library, where its reports go) and what it reports. The plan these
carry out, and what a run observed, are describe/offload.py's."""

import json
from pathlib import Path
from typing import Dict, Optional

from qprof import errors, paths
from qprof.describe import offload
from qprof.describe.offload import PRELOAD_LIB, REPORT_NAME, OffloadPlan

ETHTOOL_NAMES = {
    "tso": "tcp-segmentation-offload",
    "gso": "generic-segmentation-offload",
    "gro": "generic-receive-offload",
    "udp_gso": "tx-udp-segmentation",
}


def set_device_features(endpoint, features: Dict[str, str]) -> None:
    if not features:
        return
    r = endpoint.run(["ethtool", "-K", endpoint.ifname, *[x for k, v in features.items() for x in (k, v)]])
    if r.returncode != 0:
        raise errors.TopologyFailed(
            f"`ethtool -K {endpoint.ifname}` failed ({r.stderr.strip() or r.returncode}); "
            "check that ethtool is installed (`make deps`)."
        )


def read_device_features(endpoint) -> Optional[Dict[str, str]]:
    """ethtool's view of the features qprof cares about, or None."""
    r = endpoint.run(["ethtool", "-k", endpoint.ifname])
    if r.returncode != 0:
        return None
    features = offload.parse_features(r.stdout)
    return {key: features[full].split()[0] for key, full in ETHTOOL_NAMES.items() if full in features}


def read_interposer_reports(run_path: Path) -> Optional[Dict[str, list]]:
    """What the interposer steered, per role; None when none was loaded."""
    out, any_file = {}, False
    for role in ("client", "server"):
        f = run_path / REPORT_NAME.format(role=role)
        lines = []
        if f.exists():
            any_file = True
            lines = [json.loads(l) for l in f.read_text().splitlines() if l.strip()]
        out[role] = lines
    return out if any_file else None


def interposer_env(plan: OffloadPlan, run_path: Optional[Path]) -> Dict[str, Dict[str, str]]:
    """Each role's environment for the plan: the interposer preloaded with
    the plan's settings, its reports in the run directory."""
    out: Dict[str, Dict[str, str]] = {}
    for role, env in plan.env.items():
        if not env:
            out[role] = {}
            continue
        lib = paths.build_dir() / "lib" / PRELOAD_LIB
        if not lib.exists():
            raise errors.NotBuilt(f"the GSO/GRO interposer is not built ({lib} is missing); run `make build`.")
        out[role] = {"LD_PRELOAD": str(lib), **env}
        if run_path is not None:
            out[role]["QPROF_OFFLOAD_REPORT"] = str(run_path / REPORT_NAME.format(role=role))
    return out
