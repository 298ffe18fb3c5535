# SPDX-License-Identifier: GPL-2.0-only
"""What only this machine can answer about a resolved plan, before
anything starts: root, the workload built, kernel TLS, the TCP congestion
control asked for, the qdiscs a --link needs, --server-cmd's or --client-cmd's program,
--categories' rules. A guest run leaves the
kernel's questions to the guest's kernel (a refusal there comes back with
its sentence). describe/plan.py has checked everything else."""

import os
import subprocess
import sys
from pathlib import Path

from qprof import errors, paths
from qprof.collectors import capabilities, external, procfs, topology
from qprof.collectors.faults import NO_FAULTS, Faults
from qprof.describe import external as described_external
from qprof.describe import link, pinning, transports
from qprof.describe.plan import Plan
from qprof.flamegraphs import categories


def check(plan: Plan, faults: Faults = NO_FAULTS) -> Path:
    """The workload binary to run, or the first thing this machine lacks
    as a QprofError (faults: the no-netem fault reaches the qdisc check)."""
    opts = plan.options
    if not opts.guest:
        _kernel(plan)
    if os.geteuid() != 0:
        raise errors.NotRoot("qprof run needs root (network namespaces, perf, eBPF); run it as root, e.g. with sudo.")
    binary = paths.workload_binary()
    for fp in plan.flows:  # another QUIC implementation's, beside it
        if fp.stack.programs:
            continue  # the user's programs, checked below
        paths.workload_binary(fp.stack.workload)
        if fp.stack.plugin:
            paths.plugin_library(fp.stack.plugin, fp.stack.name)
    # The server's library too, where the server runs on this machine.
    if opts.server_stack is not None and not opts.server:
        server = transports.STACKS[opts.server_stack]
        if server.plugin:
            paths.plugin_library(server.plugin, server.name)
    if opts.msquic is not None:
        msquic_library(opts.msquic)
    if opts.categories is not None:
        categories_file(opts.categories)
    for role in described_external.roles(opts):
        # Refused before anything starts; the plan checked its words.
        external.program_path(described_external.words(described_external.template(opts, role), role), role)
    if opts.cpus is not None and not opts.guest:
        # The guest's own qprof checks its CPUs.
        pinning.check_host(pinning.parse(opts.cpus), os.sched_getaffinity(0))
    # On hosts each side's kernel answers for its own device as the link
    # goes on (collectors/emulation.py apply), this one's among them.
    if opts.link is not None and not opts.guest and not opts.server:
        for kind in link.parse(opts.link).qdisc_kinds:
            why = capabilities.qdisc_missing(kind, no_netem=faults.no_netem)
            if why is not None:
                raise errors.LinkUnsupported(
                    f"--link '{opts.link}' needs {kind}, which this kernel cannot add ({why}); "
                    "run it in a QEMU guest with Debian's kernel: add --guest."
                )
    return binary


def _kernel(plan: Plan) -> None:
    """Kernel TLS and the congestion control, which a user may ask about too."""
    opts = plan.options
    for fp in plan.flows:
        if fp.stack.tls == "kernel" and not procfs.kernel_has_tls():
            raise errors.KernelFeatureMissing(
                f"this kernel lacks the TLS ULP ('tls' is not in {procfs.TCP_ULP}), so tcp-ktls cannot run here; "
                "add --guest to run it in a QEMU guest with Debian's kernel."
            )
    if opts.tcp_cc is not None and any(fp.options.tcp_cc for fp in plan.flows):
        have = Path(topology.TCP_CC_AVAILABLE).read_text().split()
        if opts.tcp_cc not in have:
            raise errors.KernelFeatureMissing(
                f"this kernel has no TCP congestion control '{opts.tcp_cc}' (it has: {', '.join(have)}); "
                "pick one of those, or load its module (modprobe tcp_NAME)."
            )


def msquic_library(path: str) -> None:
    """--msquic PATH refused unless a throwaway process loads it and finds
    msquic's entry point, with the loader's own reason."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise errors.MsquicUnusable(
            f"--msquic {path} is not a file; give the path of a built libmsquic.so (msquic's build/bin/Release/)."
        )
    probe = "import ctypes, sys; ctypes.CDLL(sys.argv[1]).MsQuicOpenVersion"
    r = subprocess.run([sys.executable, "-c", probe, str(p.resolve())], capture_output=True, text=True)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["it would not load"])[-1]
        raise errors.MsquicUnusable(
            f"--msquic {path} cannot be loaded as msquic ({why}); give a libmsquic.so built for this host."
        )


def categories_file(path: str) -> str:
    """--categories' rules, read and parsed (each bad rule refused with its line)."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise errors.BadValue(f"--categories {path}: cannot read it ({e}); give a file of CATEGORY<TAB>REGEX rules.")
    categories.parse_rules(text, path)
    return text
