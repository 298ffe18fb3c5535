# SPDX-License-Identifier: GPL-2.0-only
"""Dependencies point one way: the command (qprof.cli) uses the libraries
(qprof.collectors, qprof.flamegraphs), which use the core (the package
qprof's own modules: errors, paths, units, rundir, interrupts, remains,
perbyte, the version). flamegraphs uses only the core; collectors may use
flamegraphs (a run's record holds its flame summary, a comparison draws
differential graphs), never the reverse; nothing imports the command.
Checked on every module's import statements."""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("cli", "collectors", "flamegraphs", "probes", "workloads")
FOLDERS = {"core": "core", "flamegraphs": "flamegraphs", "collectors": "collectors", "cli": "cli"}
ALLOWED = {
    "core": {"core"},
    "flamegraphs": {"core"},
    "collectors": {"core", "flamegraphs"},
    "cli": {"core", "flamegraphs", "collectors"},
}
# `python -m qprof`: the program's entry point, not a library module.
ENTRY = {Path("core/__main__.py")}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "qprof":
        return ""
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else "core"


def imported(source: str):
    """(module, line) of every absolute import of a qprof module;
    relative imports stay within their own package."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            if node.module == "qprof":
                yield from ((f"qprof.{a.name}", node.lineno) for a in node.names)
            else:
                yield node.module, node.lineno


def violations(layer: str, name: str, source: str) -> list:
    return [
        f"{name}:{line} imports {mod} ({layer} -> {layer_of(mod)})"
        for mod, line in imported(source)
        if layer_of(mod) and layer_of(mod) != layer and layer_of(mod) not in ALLOWED[layer]
    ]


def test_imports_point_one_way():
    bad = []
    for layer, folder in FOLDERS.items():
        for path in sorted((REPO / folder).glob("*.py")):
            if path.relative_to(REPO) not in ENTRY:
                bad += violations(layer, str(path.relative_to(REPO)), path.read_text())
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_wrong_way_import():
    assert violations("flamegraphs", "x.py", "from qprof.collectors import runner\n")
    assert violations("core", "x.py", "from qprof.cli import main\n")
    assert violations("collectors", "x.py", "import qprof.cli.report\n")
    assert not violations("collectors", "x.py", "from qprof import errors\nfrom qprof.flamegraphs import diff\n")
