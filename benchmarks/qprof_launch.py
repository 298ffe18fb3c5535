# SPDX-License-Identifier: GPL-2.0-only
"""`qprof` for the benchmarks, with perf's call graph chosen.

`qprof run` has no option for the call graph yet, so a benchmark that
compares them starts qprof in a Python that first sets the perf module's
defaults (DEFAULT_CALL_GRAPH, DWARF_STACK_BYTES), which PerfRecorder reads
when it is made. Without a call graph it is plain `.venv/bin/qprof`.
"""

from pathlib import Path
from typing import List, Optional

REPO = Path(__file__).resolve().parent.parent
QPROF = str(REPO / ".venv" / "bin" / "qprof")
PYTHON = str(REPO / ".venv" / "bin" / "python")


def add_arguments(ap) -> None:
    ap.add_argument(
        "--call-graph",
        choices=("fp", "dwarf"),
        help="perf's stack walk for the sampled runs (default: collectors/perf.py's DEFAULT_CALL_GRAPH)",
    )
    ap.add_argument(
        "--dwarf-bytes",
        type=int,
        help="user stack bytes perf copies per sample with --call-graph dwarf (default: DWARF_STACK_BYTES)",
    )


def qprof(call_graph: Optional[str] = None, dwarf_bytes: Optional[int] = None) -> List[str]:
    if call_graph is None and dwarf_bytes is None:
        return [QPROF]
    sets = []
    if call_graph is not None:
        sets.append(f"p.DEFAULT_CALL_GRAPH = {call_graph!r}")
    if dwarf_bytes is not None:
        sets.append(f"p.DWARF_STACK_BYTES = {int(dwarf_bytes)}")
    code = (
        "import sys; import qprof.collectors.perf as p; "
        + "; ".join(sets)
        + "; from qprof.cli.main import main; sys.argv[0] = 'qprof'; sys.exit(main())"
    )
    return [PYTHON, "-c", code]


def describe(call_graph: Optional[str], dwarf_bytes: Optional[int]) -> str:
    """ "fp" or "dwarf,BYTES", as the sampled runs used it (run with .venv/bin/python)."""
    from qprof.collectors import perf

    cg = call_graph or perf.DEFAULT_CALL_GRAPH
    return f"dwarf,{dwarf_bytes or perf.DWARF_STACK_BYTES}" if cg == "dwarf" else cg
