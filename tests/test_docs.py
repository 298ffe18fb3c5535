# SPDX-License-Identifier: GPL-2.0-only
"""The README and docs/ name what exists (issue 24): every file a page
names is in the repository, every link lands on a page and a heading, and
every `module.function` or `module.CONSTANT` the how-to page names is
defined in that module. The README stays short, opens with the two
commands, and its layout names every package. Modules are parsed with
ast, never imported: a page may name code whose imports need root or the
build."""

import ast
import json
import re
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO

pytestmark = pytest.mark.unit

README = REPO / "README.md"
DOCS = REPO / "docs"
HOW_TO = DOCS / "how-to-add.md"
README_MAX_LINES = 400
PAGES = [README] + sorted(DOCS.glob("*.md"))

# What a run or the build writes, not the repository: named as examples.
GENERATED = ("runs/", "build/")
# Where the how-to page's modules live: core/ is the package qprof itself.
PACKAGES = {
    "core": "qprof",
    "describe": "qprof.describe",
    "collectors": "qprof.collectors",
    "present": "qprof.present",
    "cli": "qprof.cli",
    "flamegraphs": "qprof.flamegraphs",
}
# `run.json` or `perf.data` in backticks is a file, not module.name.
FILE_SUFFIXES = {"py", "c", "h", "json", "jsonl", "md", "bt", "so", "rules", "txt", "sh", "lock", "toml"}
FILE_SUFFIXES |= {"svg", "gz", "log", "html", "folded", "sqlite", "png", "data", "pem", "prom", "perf"}
# Placeholders a page writes in a path: probes/NAME.bpf.c, runs/<id>/..., {client,server}.
PLACEHOLDER = re.compile(r"NAME|<[^>/]*>|\{[^}/]*\}")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
TOKEN_SPLIT = re.compile(r"[\s`'\"()\[\]|]+")
NAME_REF = re.compile(r"`([a-z_][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)`")
# What the how-to page must name at least (the brief of issue 24): the
# tables and functions an option, a stack or a probe is added to.
HOW_TO_NAMES = {
    "options.OPTIONS",
    "plan.resolve",
    "transports.STACKS",
    "transports.validate",
    "transports.workload_args",
    "offload.plan",
    "offload.observe",
    "record.describe",
    "record.build_record",
    "derive.crosscheck",
    "probes.PROBES",
    "floor.SPECS",
}


def named_paths(text: str) -> List[str]:
    """Every repo-relative `dir/file.ext` a page names, in prose, tables
    or code; URLs, absolute paths and link targets (checked apart) left out."""
    text = LINK.sub("]", re.sub(r"\w+://\S+", " ", text))
    paths = []
    for token in TOKEN_SPLIT.split(text):
        token = token.rstrip(".,;:")
        if "/" not in token or token.startswith(("/", "~", ".")):
            continue
        last = token.rsplit("/", 1)[1]
        if re.fullmatch(r"[\w*<>{},+-]*(\.[\w*<>{},+-]+)*\.[A-Za-z][A-Za-z0-9]*", last):
            paths.append(token)
    return paths


def missing_paths(text: str) -> List[str]:
    missing = []
    for path in named_paths(text):
        if path.startswith(GENERATED):
            continue
        pattern = PLACEHOLDER.sub("*", path)
        if not (any(REPO.glob(pattern)) if "*" in pattern else (REPO / pattern).exists()):
            missing.append(path)
    return missing


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped,
    spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set:
    seen: Dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def broken_links(page: Path) -> List[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if "://" in target or target.startswith("mailto:"):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    return broken


def module_index() -> Dict[str, List[Path]]:
    """Short module name -> its files among the project's Python packages."""
    index: Dict[str, List[Path]] = {}
    for folder in PACKAGES:
        for path in sorted((REPO / folder).rglob("*.py")):
            if not path.name.startswith("__"):
                index.setdefault(path.stem, []).append(path)
            elif path.name == "__init__.py" and path.parent != REPO / folder:  # a subpackage: its name
                index.setdefault(path.parent.name, []).append(path)
    return index


def defined(path: Path) -> set:
    """Names a module defines at its top level (functions, classes,
    assignments, also inside a top-level if or try); imports are not theirs."""
    names = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body + node.orelse + getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return names


def name_refs(text: str) -> set:
    return {f"{m}.{n}" for m, n in NAME_REF.findall(text) if n not in FILE_SUFFIXES}


def unresolved(text: str, index: Dict[str, List[Path]]) -> List[str]:
    bad = []
    for ref in sorted(name_refs(text)):
        module, name = ref.split(".")
        files = index.get(module)
        if not files:
            bad.append(f"{ref}: no module {module} in {', '.join(f'{p}/' for p in PACKAGES)}")
        elif not any(name in defined(f) for f in files):
            bad.append(f"{ref}: {name} is not defined in {', '.join(str(f.relative_to(REPO)) for f in files)}")
    return bad


def section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def unnamed_packages(layout: str) -> List[str]:
    """Top-level folders that are Python packages and the layout does not name."""
    return [d.name for d in sorted(REPO.iterdir()) if (d / "__init__.py").exists() and f"`{d.name}/`" not in layout]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_named_file_exists(page):
    assert missing_paths(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_lands(page):
    assert broken_links(page) == []


def test_the_how_to_page_names_only_what_is_defined():
    text = HOW_TO.read_text()
    assert HOW_TO_NAMES <= name_refs(text), sorted(HOW_TO_NAMES - name_refs(text))
    assert unresolved(text, module_index()) == []


def test_the_checks_catch_what_does_not_exist():
    index = module_index()
    # A module that is not there, a name its module lacks; a real one passes.
    text = "`stacks.validate` then `errors.NoSuchError`, `errors.QprofError` and `perf.data`"
    assert [r.split(":")[0] for r in unresolved(text, index)] == ["errors.NoSuchError", "stacks.validate"]
    # A file that is not there; generated paths, URLs and placeholders that match are not flagged.
    text = (
        "`core/no_such_module.py`, `core/errors.py`, `runs/<id>/run.json`, `build/bin/qprof-wl`, "
        "https://example.org/a/b.py, `probes/NAME.bpf.c`, [a link](core/errors.py)."
    )
    assert missing_paths(text) == ["core/no_such_module.py"]
    assert missing_paths("`probes/NAME.rs`") == ["probes/NAME.rs"]
    assert slug("Emulated links (`--link`)") == "emulated-links---link"
    assert "describe" in unnamed_packages("`core/`") and "core" not in unnamed_packages("`core/`")


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def test_the_readme_opens_with_the_two_commands():
    lines = README.read_text().splitlines()
    block = lines[lines.index("```") + 1 :]
    block = block[: block.index("```")]
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    assert lines.index("```") < 5
    assert [line.split()[:2] for line in block] == [["make", "run"], ["make", "test"]]
    assert {"run", "test"} <= targets


def test_the_readme_layout_names_every_package():
    layout = section(README.read_text(), "## Layout")
    assert unnamed_packages(layout) == []


def test_the_docs_index_lists_every_page():
    index = (DOCS / "README.md").read_text()
    assert [p.name for p in PAGES[1:] if p.name != "README.md" and f"]({p.name})" not in index] == []


def _code_of(path: Path) -> str:
    """A source file without its comments, help text and docstrings: the code that could name a stack."""
    text = path.read_text()
    if path.suffix == ".py":
        tree = ast.parse(text)
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        return "\n".join(
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
        )
    if path.suffix == ".json":  # what a record may hold, not its descriptions
        words: List[str] = []

        def walk(v):
            if isinstance(v, dict):
                for k, x in v.items():
                    words.extend(str(e) for e in x) if k == "enum" else walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)

        walk(json.loads(text))
        return "\n".join(words)
    if path.suffix in (".c", ".h"):
        text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
        return re.sub(r"static const char usage\[\] =.*?;\n", "", text, flags=re.S)
    return re.sub(r"(?m)#.*$", "", text)


def test_a_quic_library_is_its_four_places():
    """Each stack whose row names a plugin (quiche, quinn) is named by no
    code but its adapter, its build lines, its row and its category rules
    (the page's four places); comments and help text may name it."""
    from qprof.describe import transports

    plugins = [n for n, s in transports.STACKS.items() if s.plugin]
    assert plugins
    code = [p for d in PACKAGES for p in (REPO / d).rglob("*.py")]
    code += list((REPO / "describe" / "schema").glob("*.json"))
    code += [p for p in (REPO / "workloads").glob("*.[ch]")]
    for name in plugins:
        places = {REPO / "describe" / "transports.py"}
        found = [
            str(p.relative_to(REPO))
            for p in code
            if p not in places and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", _code_of(p))
        ]
        assert found == [], (name, found)
