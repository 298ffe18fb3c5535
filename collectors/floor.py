# SPDX-License-Identifier: GPL-2.0-only
"""The floor under a stack's CPU per byte: what the unavoidable work costs
on this machine, so a run's ns/B can be read as a multiple of it.

Per stack, the floor is the work no implementation of it can skip: each
side's one copy across the socket API (into the kernel on send, out of it
on receive) and, for stacks with encryption, AES-128-GCM seal on the
sender and open on the receiver, at the stack's record size (TLS: 16 KiB
records; QUIC: ~1440-byte packets) through the crypto library the stack
uses (the system's OpenSSL for TLS over TCP, msquic's own quictls for
QUIC). `qprof-floor` measures them in CPU ns per byte; the result is
cached per machine, kernel and binary in build/floor/, so it is measured
once per environment, before the run, never inside its window.

For tcp-ktls the kernel seals the records; OpenSSL's AES-GCM stands in for
the kernel's, both AES-NI.
"""

import hashlib
import json
import os
import subprocess
from pathlib import Path

from qprof import paths
from qprof.collectors import environment
from qprof.describe.floor import SPECS

SECONDS = 0.3  # CPU time per operation


def _cache_dir() -> Path:
    """QPROF_FLOOR_DIR overrides it: the guest's runner keeps its floors on
    its own tmpfs for its lifetime (the build directory is read-only there)."""
    return Path(os.environ.get("QPROF_FLOOR_DIR", paths.build_dir() / "floor"))


def measure(stack: str) -> dict:
    """The floor's components for the stack, from the cache or measured now
    (~1 s of CPU). {"absent": reason} when they cannot be had."""
    spec = SPECS.get(stack)
    if spec is None:
        return {"absent": f"no floor is measured through {stack}'s own crypto library yet"}
    binary = paths.build_dir() / "bin" / spec.binary
    if not os.access(binary, os.X_OK):
        return {"absent": f"{binary} is not built (`make build`)"}
    st = binary.stat()
    key = hashlib.sha256(
        json.dumps(
            [
                str(binary),
                st.st_mtime_ns,
                st.st_size,
                spec.record_bytes,
                environment.cpu_model(),
                os.cpu_count(),
                os.uname().release,
            ]
        ).encode()
    ).hexdigest()[:16]
    cache = _cache_dir() / f"{spec.binary}-{spec.record_bytes}-{key}.json"
    try:
        return {**json.loads(cache.read_text()), "cached": True}
    except (OSError, ValueError):
        pass
    r = subprocess.run(
        [str(binary), "--size", str(spec.record_bytes), "--seconds", str(SECONDS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0:
        return {"absent": f"{spec.binary} failed: {(r.stderr.strip().splitlines() or ['no message'])[-1]}"}
    out = json.loads(r.stdout)
    out.pop("check", None)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(out) + "\n")
        os.replace(tmp, cache)
    except OSError:
        pass  # read-only build directory (the --guest): measured each run
    return {**out, "cached": False}
