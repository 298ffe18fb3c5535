# SPDX-License-Identifier: GPL-2.0-only
"""One measurement path: `qprof run`, `qprof run --mix`, a guest run and
every run of `qprof compare` go through `run`.

    options --resolve--> Plan --preflight--> placement --> endpoints --> window --> Measurement --describe--> record

- resolve (describe/plan.py): every default filled, every rule between
  options checked, once; preflight (collectors/preflight.py): what only
  this machine can answer.
- the placement (collectors/placement.py) puts the endpoints somewhere:
  two network namespaces or the loopback here, a QEMU guest; it returns
  the Measurement.
- the endpoints (collectors/endpoints.py): one flow's client and server
  with the probes and perf around them, or a mix's N flows.
- the window (collectors/windows.py): each pattern says what its window is and
  when its edges are read (collectors/edges.py reads them).
- describe (describe/record.py): the record, a pure function of the
  Measurement written beside it.

The nesting of context managers is the order of ownership: the run
directory outlives the placement (topology or guest), which outlives the
endpoints' processes, so on any exit the processes die first, then the
namespaces go, then the record is marked for what happened.
"""

import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from qprof import remains
from qprof.collectors import placement, preflight
from qprof.collectors.faults import NO_FAULTS, Faults
from qprof.describe import offload, record
from qprof.describe.measurement import MEASUREMENT
from qprof.describe.plan import Plan, resolve
from qprof.files import write_text_atomic
from qprof.flamegraphs.categories import RUN_RULES
from qprof.rundir import RunDir


def log(msg: str) -> None:
    """Progress for a person watching; scripts get stderr for errors only."""
    if sys.stderr.isatty():
        print(f"qprof: {msg}", file=sys.stderr, flush=True)


def run(
    opts,
    on_progress: Callable[[str], None] = log,
    faults: Faults = NO_FAULTS,
    on_interval: Optional[Callable[[dict], None]] = None,
    on_guest: Optional[Callable[[str, float, Optional[float]], None]] = None,
    where=None,
) -> dict:
    """The record of one measurement of opts (a run or a mix, here or in
    the guest). faults: real failures for the tests (collectors/faults.py),
    never in the record. on_interval: each --interval's figures as it ends
    (the live lines; not from a guest). on_guest: a guest run's stages
    (collectors/placement.py). where: a placement its caller prepared and
    closes, shared by its runs (a comparison's guest); else the run's own."""
    plan = resolve(opts, os.cpu_count() or 1)
    binary = preflight.check(plan, faults)
    opts = plan.options
    own = where is None
    if own:
        where = _placement(opts, binary, on_guest)
    with remains.exclusive("run"):
        if own:
            where.prepare()  # what it lacks is refused before a run directory exists
        try:
            with RunDir(Path(opts.runs_dir)) as rundir:
                rundir.record.update({"stack": "mix" if plan.is_mix else opts.stack, "config": asdict(opts)})
                if opts.categories is not None:
                    # The run's own rules, beside its stacks, for every later reading of them.
                    write_text_atomic(rundir.path / RUN_RULES, preflight.categories_file(opts.categories))
                return _measure(plan, where, rundir, on_progress, faults, on_interval)
        finally:
            if own:
                where.close()


def _placement(opts, binary: Path, on_guest):
    if opts.guest:
        return placement.Guest(on_guest)
    if opts.server:
        return placement.Hosts(opts.server, opts.ssh_config, opts.client, opts.server_addr)
    return placement.Local(binary)


def _measure(plan: Plan, where, rundir: RunDir, on_progress, faults: Faults, on_interval) -> dict:
    """Measure at the placement, keep the raw measurement, describe it."""
    m = where.measure(plan, rundir, on_progress, faults, on_interval)
    # The raw measurement first: if describing it fails, the evidence stays.
    write_text_atomic(rundir.path / MEASUREMENT, m.to_json())
    rec = record.describe(m, rundir.path)
    if not plan.is_mix:
        rundir.record["offload"] = rec["offload"]
        offload.verify(plan.flows[0].offload.effective, rec["offload"]["observed"])
    rundir.complete(rec)
    return rundir.record
