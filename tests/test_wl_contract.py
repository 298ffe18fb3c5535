# SPDX-License-Identifier: GPL-2.0-only
"""What qprof and its workload (qprof-wl) must agree on, read from both
sides' sources: the exit codes, declared once in workloads/wl.h (enum
wl_exit) and named in collectors/workload.py (WorkloadExit), which every
test imports instead of repeating a number; and the flags, declared once
in qprof_wl.c's table and once in qprof's option table
(describe/options.py): every flag qprof passes exists in the workload,
with the same choices, and is not refused for a stack qprof passes it
with."""

import re

import pytest

from qprof.collectors.workload import WorkloadExit
from qprof.describe import options, transports

from conftest import REPO

pytestmark = pytest.mark.unit
WL_H = REPO / "workloads" / "wl.h"
MAIN_C = REPO / "workloads" / "qprof_wl.c"
# The modules that put flags on qprof-wl's command line besides the option table.
ARGV_MODULES = ("collectors/endpoints.py", "describe/transports.py", "describe/offload.py")


def c_exit_codes() -> dict:
    enum = re.search(r"enum wl_exit \{(.*?)\};", WL_H.read_text(), re.S)
    assert enum, "wl.h declares no enum wl_exit"
    return {name: int(v) for name, v in re.findall(r"WL_EXIT_(\w+)\s*=\s*(\d+)", enum.group(1))}


def py_exit_codes() -> dict:
    return {k: v for k, v in vars(WorkloadExit).items() if not k.startswith("_") and isinstance(v, int)}


def c_flags() -> dict:
    """qprof_wl.c's flag table: name -> {choices, stacks, hidden}; a row may span lines."""
    table = re.search(r"static const struct flag flags\[\] = \{(.*?)\n\};", MAIN_C.read_text(), re.S)
    assert table, "qprof_wl.c has no flag table"
    # A value as C joins adjacent literals and its string macros
    # ("quic|..." or QUIC_STACKS "|" TCP_STACKS), each macro so joined too.
    text = MAIN_C.read_text()
    seq = r'(?:"[^"]*"|[A-Z_]+)(?:\s+(?:"[^"]*"|[A-Z_]+))*'
    bodies = dict(re.findall(rf"^#define ([A-Z_]+) ({seq})$", text, re.M))

    def joined(body: str) -> str:
        return "".join(
            lit if not macro else joined(bodies[macro]) for lit, macro in re.findall(r'"([^"]*)"|([A-Z_]+)', body)
        )

    assert joined(bodies["TCP_STACKS"]) == "|".join(options.TCP_STACKS)

    def strings(row: str, key: str):
        m = re.search(rf"\.{key} = ({seq})", row)
        return tuple(joined(m.group(1)).split("|")) if m else None

    flags = {}
    for row in re.split(r"\n\t(?=\{FLAG\()", table.group(1))[1:]:
        name = re.match(r"\{FLAG\(\"([a-z-]+)\"", row).group(1)
        flags[name] = {
            # A pattern's word: one of the patterns the C files enter.
            "choices": tuple(c_patterns()) if "F_PATTERN" in row else strings(row, "choices"),
            "stacks": strings(row, "stacks"),
            "hidden": ".hidden = true" in row,
            "some_patterns": ".some_patterns = true" in row,
        }
    return flags


def c_patterns() -> dict:
    """The patterns qprof-wl holds: each `struct wl_pattern` a C file
    enters with WL_PATTERN (workloads/wl_role.h), word -> the flags of
    some patterns only that it takes."""
    out = {}
    for path in sorted((REPO / "workloads").glob("*.c")):
        text = path.read_text()
        for var in re.findall(r"^WL_PATTERN\((\w+)\);", text, re.M):
            body = re.search(rf"struct wl_pattern {var} = \{{(.*?)\n\}};", text, re.S).group(1)
            word = re.search(r'\.name\s*=\s*"([a-z]+)"', body).group(1)
            taken = re.search(r'\.flags\s*=\s*"([^"]*)"', body)
            out[word] = tuple(taken.group(1).split("|")) if taken else ()
    return out


def taken(words) -> set:
    """The stacks a flag row names: PLUGIN stands for every stack whose row names a plugin."""
    plugins = {n for n, s in transports.STACKS.items() if s.plugin} if "PLUGIN" in words else set()
    return set(words) - {"PLUGIN"} | plugins


def test_exit_codes_agree():
    c, py = c_exit_codes(), py_exit_codes()
    assert c and c == py, f"workloads/wl.h {c} against collectors/workload.py {py}"
    assert c["OK"] == 0 and len(set(c.values())) == len(c)


def test_exit_codes_are_declared_once():
    """No other source gives a WL_EXIT_ name a number: tests import
    WorkloadExit, the C side includes wl.h."""
    assign = re.compile(r"^\s*WL_EXIT_\w+\s*=\s*\d", re.M)
    py = [p for p in (REPO / "tests").glob("*.py") if assign.search(p.read_text())]
    c = [p for p in (REPO / "workloads").glob("*.[ch]") if p != WL_H and assign.search(p.read_text())]
    assert py == [] and c == []


def test_every_flag_qprof_passes_exists():
    flags = c_flags()
    passed = {o.workload for o in options.OPTIONS if o.workload}
    for module in ARGV_MODULES:
        passed |= set(re.findall(r"\"(--[a-z][a-z-]*)\"", (REPO / module).read_text()))
    assert len(flags) > 20 and {f"--{n}" for n in flags} >= passed, passed - {f"--{n}" for n in flags}


@pytest.mark.parametrize("opt", [o for o in options.OPTIONS if o.workload], ids=lambda o: o.name)
def test_each_option_table_flag_is_taken_as_qprof_passes_it(opt):
    flag = c_flags()[opt.workload[2:]]
    if opt.kind == "choice":
        # As qprof passes each choice (--pattern video runs the workload's rr).
        passed = {opt.workload_value(c) for c in opt.choices}
        assert flag["choices"] is not None and set(flag["choices"]) == passed, flag
    if flag["stacks"] is not None:
        # the workload refuses the flag on a stack outside its row: qprof must not pass it there
        assert opt.workload_stacks and set(opt.workload_stacks) <= taken(flag["stacks"]), (opt.workload_stacks, flag)


def test_the_choices_qprof_knows_are_the_workloads():
    flags = c_flags()
    # Every stack is qprof-wl's: built in, or a transport in a library it
    # loads (PLUGIN: quiche's, quinn's), which no name of qprof-wl's names.
    # (but a program pair's, which runs none: --stack external).
    assert all(s.workload == "qprof-wl" for s in transports.STACKS.values() if not s.programs)
    assert taken(flags["stack"]["choices"]) == set(options.STACK_NAMES) - set(options.PROGRAM_STACKS)
    assert options.PROGRAM_STACKS == ("external",)
    assert not {n for n, s in transports.STACKS.items() if s.plugin} & set(flags["stack"]["choices"])
    assert set(flags["send-mode"]["choices"]) == set(options.UDP_SEND_MODES)
    assert set(flags["gro"]["choices"]) == set(options.ONOFF)
    assert set(flags["exec-profile"]["choices"]) == set(options.EXEC_PROFILES)


def test_help_names_every_flag_but_the_hidden():
    usage = re.search(r"static const char usage\[\] =(.*?);\n", MAIN_C.read_text(), re.S).group(1)
    flags = c_flags()
    assert [n for n, f in flags.items() if not f["hidden"] and f"--{n} " not in usage] == []
    assert [n for n, f in flags.items() if f["hidden"] and f"--{n}" in usage] == []


def test_each_pattern_takes_the_flags_qprof_passes_it():
    """A flag of some patterns only is taken by each pattern qprof passes
    it with (the option table's patterns and set_by, as the pattern
    option passes each pattern: video as rr), and a pattern names only
    such flags."""
    flags, wl = c_flags(), c_patterns()
    assert {"bulk", "download", "rr", "handshakes"} <= set(wl)
    word = options.BY_NAME["pattern"].workload_value
    for o in options.OPTIONS:
        flag = flags.get((o.workload or "--")[2:])
        if not (flag and flag["some_patterns"]):
            continue
        for p in o.patterns + o.set_by:
            assert o.workload[2:] in wl[word(p)], (o.name, p, wl[word(p)])
    for p, taken in wl.items():
        assert all(flags[f]["some_patterns"] for f in taken), (p, taken)
