# SPDX-License-Identifier: GPL-2.0-only
"""Dependencies point one way (README.md, "Layout"):

    cli -> present, collectors -> describe -> flamegraphs -> core

The command (qprof.cli) uses everything. present (tables, the HTML
report, the formatter) shows records and never measures; collectors
measure; both use describe, the pure package that turns a measurement
into a record and records into figures; describe uses flamegraphs (a
record holds its flame summary) and the core (the package qprof's own
modules: errors, paths, units, files, rundir, history, figures, ...).
Nothing imports the command, and commands do not import each other.
Checked on every module's import statements."""

import ast
import re
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("cli", "present", "collectors", "describe", "flamegraphs", "probes", "workloads")
FOLDERS = {p: p for p in ("core", "flamegraphs", "describe", "collectors", "present", "cli")}
ALLOWED = {
    "core": {"core"},
    "flamegraphs": {"core"},
    "describe": {"core", "flamegraphs"},
    "collectors": {"core", "flamegraphs", "describe"},
    "present": {"core", "flamegraphs", "describe"},
    "cli": {"core", "flamegraphs", "describe", "collectors", "present"},
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
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.relative_to(REPO) not in ENTRY:
                bad += violations(layer, str(path.relative_to(REPO)), path.read_text())
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_wrong_way_import():
    assert violations("flamegraphs", "x.py", "from qprof.collectors import runner\n")
    assert violations("core", "x.py", "from qprof.cli import main\n")
    assert violations("collectors", "x.py", "import qprof.present.tables\n")
    assert violations("describe", "x.py", "from qprof.collectors import procfs\n")
    assert violations("present", "x.py", "from qprof.collectors import runner\n")
    assert not violations("collectors", "x.py", "from qprof import errors\nfrom qprof.describe import record\n")


def test_commands_do_not_import_each_other():
    bad = [
        f"{path.relative_to(REPO)}:{line} imports {mod}"
        for path in sorted((REPO / "cli").glob("*_cmd.py"))
        for mod, line in imported(path.read_text())
        if mod.startswith("qprof.cli.") and mod.endswith("_cmd")
    ]
    assert not bad, "\n".join(bad)


# --- the pure package ---------------------------------------------------------
# Nothing describe runs touches the machine: no process started, no path
# under /proc read, in describe's own modules or in any qprof module they
# import; describe's own modules do not use os either (pids, the
# environment, the clock's owner). A record is derived from a stored
# measurement alone (tests/test_record_golden.py, as any user). Text that
# names /proc (a docstring, a record's "source" sentence) is not a read of
# it; a path literal (no spaces) is.
PROCESS = re.compile(r"^\s*(?:import subprocess\b|from subprocess\b)", re.M)
OS = re.compile(r"^\s*(?:import os\b|from os\b)", re.M)


def proc_paths(text: str) -> List[str]:
    """String literals that are paths under /proc (an f-string by its literal parts)."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.JoinedStr):
            parts = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            first = node.values[0] if node.values else None
            starts = isinstance(first, ast.Constant) and str(first.value).startswith("/proc")
            if starts and not any(c.isspace() for c in "".join(parts)):
                out.append("/proc")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("/proc") and not any(c.isspace() for c in node.value):
                out.append("/proc")
    return out


def module_path(module: str) -> Optional[Path]:
    parts = module.split(".")
    if parts[0] != "qprof":
        return None
    folder = parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else "core"
    rest = parts[2:] if folder != "core" else parts[1:]
    base = REPO / folder / "/".join(rest) if rest else REPO / folder
    for cand in (base.with_suffix(".py") if rest else None, base / "__init__.py"):
        if cand is not None and cand.is_file():
            return cand
    return None


def imported_paths(path: Path) -> List[Path]:
    """The qprof modules a file imports: `from qprof.x import y` is the
    module y when there is one, else the module qprof.x."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [module_path(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parent
                mod = node.module
                out += [base / f"{mod}.py"] if mod else [base / f"{a.name}.py" for a in node.names]
            elif node.module and node.module.startswith("qprof"):
                for a in node.names:
                    out.append(module_path(f"{node.module}.{a.name}") or module_path(node.module))
    return [p for p in out if p is not None and p.is_file()]


def closure(paths: List[Path]) -> Dict[Path, Optional[Path]]:
    """Every module reached from the given files: path -> the file that first imported it."""
    seen: Dict[Path, Optional[Path]] = {}
    todo = [(p, None) for p in paths]
    while todo:
        path, by = todo.pop()
        if path not in seen:
            seen[path] = by
            todo += [(q, path) for q in imported_paths(path)]
    return seen


def machine_touching(text: str, own: bool = False) -> List[str]:
    """What in a module's text touches the machine (own: describe's own module, where os counts too)."""
    found = {m.group(0).strip() for m in PROCESS.finditer(text)} | set(proc_paths(text))
    if own:
        found |= {m.group(0).strip() for m in OS.finditer(text)}
    return sorted(found)


def test_describe_touches_nothing_of_the_machine():
    pure = sorted((REPO / "describe").glob("*.py"))
    assert len(pure) > 10, pure
    bad = []
    for path, by in closure(pure).items():
        hits = machine_touching(path.read_text(), own=path.parent == REPO / "describe")
        if hits:
            via = f" (imported by {by.relative_to(REPO)})" if by else ""
            bad.append(f"{path.relative_to(REPO)}{via}: {', '.join(hits)}")
    assert not bad, "\n".join(bad)


def test_the_purity_check_sees_the_machine():
    assert machine_touching("import subprocess\n")
    assert machine_touching("x = open('/proc/stat')\n")
    assert machine_touching("from os import getpid\n", own=True)
    assert machine_touching("with open('/proc/stat') as f:\n    pass\n")
    assert machine_touching("x = Path(f'/proc/{pid}/stat')\n")
    assert not machine_touching('"""Reads /proc/stat ticks."""\nimport json\nfrom pathlib import Path\n')
    # and it follows imports: the runner reaches a module that starts processes
    reached = closure([REPO / "collectors" / "runner.py"])
    assert REPO / "collectors" / "topology.py" in reached
    assert any(machine_touching(p.read_text()) for p in reached)


# --- the core -----------------------------------------------------------------
# Inside core/ imports point one way too (rundir -> history, remains ->
# files), with no import inside a function to hide a circle.


def core_graph() -> Dict[str, Set[str]]:
    """Each core module -> the core modules it imports."""
    core = REPO / "core"
    return {
        p.stem: {q.stem for q in imported_paths(p) if q.parent == core}
        for p in sorted(core.glob("*.py"))
        if p.relative_to(REPO) not in ENTRY
    }


def cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import circle in graph as the modules around it (a -> b -> a), or []."""
    state: Dict[str, str] = {}

    def visit(n, path):
        state[n] = "open"
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                return path[path.index(m) :] + [m]
            if m not in state:
                found = visit(m, path + [m])
                if found:
                    return found
        state[n] = "done"
        return []

    for n in sorted(graph):
        if n not in state:
            found = visit(n, [n])
            if found:
                return found
    return []


def nested_imports(source: str) -> List[int]:
    """Lines that import a qprof module inside a function (where a circle hides)."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("qprof")):
                    out.append(node.lineno)
                elif isinstance(node, ast.Import) and any(a.name.startswith("qprof") for a in node.names):
                    out.append(node.lineno)
    return sorted(set(out))


def test_the_core_imports_point_one_way():
    graph = core_graph()
    assert {"rundir", "history", "remains", "files"} <= graph.keys(), graph
    assert not cycle(graph), " -> ".join(cycle(graph))
    hidden = [f"core/{p.name}:{n}" for p in sorted((REPO / "core").glob("*.py")) for n in nested_imports(p.read_text())]
    assert not hidden, hidden


def test_the_circle_check_sees_a_circle():
    assert set(cycle({"rundir": {"history"}, "history": {"files", "rundir"}, "files": set()})) == {"rundir", "history"}
    assert not cycle({"rundir": {"history", "files"}, "history": {"files"}, "files": set()})
    assert nested_imports("def f():\n    from .rundir import load\n") == [2]
    assert nested_imports("from . import rundir\n\ndef f():\n    import json\n") == []


# The modules that start a run's processes and read its edges (issue 40):
# they ask a run's sides (collectors/sides.py), never where a side runs.
PLACE_BLIND = ("collectors/endpoints.py", "collectors/edges.py", "collectors/windows.py")
# What only collectors/sides.py chooses between: the instruments of a place.
PLACED = {"ProbeSet", "HostProbes", "target_for", "PerfRecorder", "HostsPerf", "LOCAL", "LocalSide", "RemoteSide"}


def asks_where(source: str) -> List[str]:
    """Where a module tests a run's sides (an `if` on `sides`) or picks a place's instrument."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.If, ast.IfExp, ast.BoolOp)):
            test = node.test if not isinstance(node, ast.BoolOp) else node
            names = {
                n.attr if isinstance(n, ast.Attribute) else n.id
                for n in ast.walk(test)
                if hasattr(n, "id") or isinstance(n, ast.Attribute)
            }
            if "sides" in names:
                out.append(f"{node.lineno}: tests the sides")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qprof.collectors"):
            out += [
                f"{node.lineno}: imports {a.name}"
                for a in node.names
                if a.name in PLACED or node.module.endswith(".remote")
            ]
    return out


def test_endpoints_and_edges_never_ask_where_a_side_runs():
    bad = [f"{p}:{w}" for p in PLACE_BLIND for w in asks_where((REPO / p).read_text())]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_side_asked_where_it_runs():
    assert asks_where("if self.sides:\n    pass\n")
    assert asks_where("x = a if ep.sides else b\n")
    assert asks_where("from qprof.collectors.probes import ProbeSet\n")
    assert asks_where("from qprof.collectors.remote import HostsTopology\n")
    assert not asks_where("from qprof.collectors.sides import OnMachine\nself.sides.read([], True)\n")
