# SPDX-License-Identifier: GPL-2.0-only
"""A stack is one row, a pattern is one row (issue 40): what differs
between stacks is said in describe/transports.py's table, between
patterns in describe/patterns/'s (and the options' rows say which
stacks take each option, describe/options.py), and the code asks the
row, not the name. Where the code still tests a name, this test holds
the count to what is left, so no new test of a name comes in and each
one moved to its row lowers it: udp's and tcp's differences (a flow of
datagrams, no session to resume) and msquic's own reports, counters and
knobs are rows now; of the patterns, who sends and verifies, the
window's kind, the events kept, whether it fills a link and the
record's sections that are its own."""

import ast
import pkgutil
import re
from collections import Counter

import pytest

from qprof.describe import options, patterns, transports
from qprof.describe.patterns import video

from conftest import REPO

pytestmark = pytest.mark.unit

TABLES = ("describe/transports.py", "describe/patterns/__init__.py", "describe/options.py")
PRODUCT = ("cli", "core", "collectors", "describe", "present", "flamegraphs")
# What holds a stack's name: a variable or field named stack or stack_name,
# a row's .name, a record's ["stack"] or .get("stack").
A_STACK = re.compile(r"(\bstack|stack_name|stack\.name|\[['\"]stack['\"]\]|\.get\(['\"]stack['\"]\))$")
# Left: each file's tests of a stack's name: none (core, which reads
# records without describe/, asks a record's transport, core/perbyte.py).
LEFT: Counter = Counter()
# What holds a pattern's name: pattern, opts.pattern, a flow's options.pattern,
# a record's or a flow's ["pattern"] or .get("pattern").
A_PATTERN = re.compile(r"(\bpattern|\[['\"]pattern['\"]\]|\.get\(['\"]pattern['\"]\))$")
# Left: each file's tests of a pattern's name: none.
LEFT_PATTERNS: Counter = Counter()


def names_in(node, table=transports.STACKS) -> tuple:
    if isinstance(node, ast.Constant) and node.value in table:
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        values = tuple(e.value for e in node.elts if isinstance(e, ast.Constant))
        if values and len(values) == len(node.elts) and all(v in table for v in values):
            return values
    return ()


def name_tests(table=transports.STACKS, holder=None):
    """(file, line, names) of each comparison of a name (a stack's, or
    another table's) with named rows, outside the tables."""
    holder = holder or A_STACK
    found = []
    for top in PRODUCT:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel in TABLES:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Compare):
                    continue
                parts = [node.left, *node.comparators]
                for i, part in enumerate(parts):
                    names = names_in(part, table)
                    others = [ast.unparse(p) for j, p in enumerate(parts) if j != i]
                    if names and any(holder.search(o) for o in others):
                        found.append((rel, node.lineno, names))
    return found


def test_stacks_are_asked_by_their_row_not_their_name():
    found = name_tests()
    per_file = Counter(f for f, _, _ in found)
    grown = {f: n for f, n in per_file.items() if n > LEFT[f]}
    assert grown == {}, [t for t in found if t[0] in grown]
    assert per_file == LEFT, "a name test went to its row: lower LEFT to match"


def test_a_raw_datagram_senders_bytes_are_what_it_sent():
    """core/perbyte.py divides a raw UDP client's CPU by what it sent (loss
    is a figure), told by the record's transport, not the stack's name;
    every other side, and a QUIC client over UDP, by the verified bytes."""
    from qprof.perbyte import side_bytes

    raw = {"bytes": 900, "bytes_sent": 1000, "transport": {"protocol": "udp", "tls": "none"}}
    assert (side_bytes(raw, "client"), side_bytes(raw, "server")) == (1000, 900)
    for transport in ({"protocol": "udp", "tls": "quic"}, {"protocol": "tcp", "tls": "none"}):
        assert side_bytes({**raw, "transport": transport}, "client") == 900, transport
    assert [s.name for s in transports.STACKS.values() if (s.transport, s.tls) == ("udp", "none")] == [
        s.name for s in transports.STACKS.values() if s.datagram
    ]


def test_patterns_are_asked_by_their_row_not_their_name():
    found = name_tests(patterns.PATTERNS, A_PATTERN)
    per_file = Counter(f for f, _, _ in found)
    grown = {f: n for f, n in per_file.items() if n > LEFT_PATTERNS[f]}
    assert grown == {}, [t for t in found if t[0] in grown]
    # Who sends and verifies is the row's alone.
    assert per_file["describe/direction.py"] == 0
    assert per_file == LEFT_PATTERNS, "a name test went to its row: lower LEFT_PATTERNS to match"


def test_the_rows_say_what_the_names_said():
    assert [s.name for s in transports.STACKS.values() if s.datagram] == ["udp"]
    assert [s.name for s in transports.STACKS.values() if not s.sessions] == ["s2n-quic", "external", "udp", "tcp"]
    assert [s.name for s in transports.STACKS.values() if s.msquic] == ["quic"]
    assert set(options.STACK_NAMES) == set(transports.STACKS)
    assert options.PATTERNS == tuple(patterns.PATTERNS)
    assert [p.name for p in patterns.PATTERNS.values() if p.window == "count"] == ["download", "video"]
    assert [p.name for p in patterns.PATTERNS.values() if not p.events] == ["bulk"]
    assert [p.name for p in patterns.PATTERNS.values() if p.stopped is None or p.intervals] == ["bulk"]
    taking = {o.name: o.patterns for o in options.OPTIONS}
    assert (taking["resume"], taking["period"]) == (("download", "handshakes"), ("handshakes", "rr"))
    assert patterns.words(["bulk", "download", "rr"]) == "bulk, download and rr"
    assert patterns.words(["bulk", "rr"], "or") == "bulk or rr"
    assert [p.name for p in patterns.PATTERNS.values() if p.mixes] == ["bulk", "rr"]
    assert all(set(s.patterns or ()) <= set(patterns.PATTERNS) for s in transports.STACKS.values())
    assert [p.name for p in patterns.PATTERNS.values() if not p.connections] == ["bulk"]
    rules = {p.name: p.verified.__name__ for p in patterns.PATTERNS.values()}
    assert rules == {
        "bulk": "whole_streams",
        "download": "whole_streams",
        "rr": "both_checked",
        "handshakes": "both_checked",
        "video": "every_segment",
    }
    assert [p.name for p in patterns.PATTERNS.values() if p.empty_window != patterns.NO_BYTES] == ["rr"]


def test_each_verification_rule_fails_what_it_does_not_prove():
    """A rule passes a whole transfer and fails each way one is not."""
    from types import SimpleNamespace

    o = SimpleNamespace(count=2, response=10, streams=3, conns=2)
    assert patterns.row(SimpleNamespace(pattern="bulk")).expected(o) == 6
    assert patterns.row(SimpleNamespace(pattern="download")).expected(o) == 2
    sent = {"app_bytes": 100, "verified": True}
    whole = {"app_bytes": 100, "verified": True, "streams_completed": 6}
    assert patterns.whole_streams(whole, sent, o, 6)
    for broken in ({"verified": False}, {"app_bytes": 99}, {"streams_completed": 5}):
        assert not patterns.whole_streams({**whole, **broken}, sent, o, 6), broken
    assert patterns.both_checked({"verified": True}, {"verified": True}, o, 2)
    assert not patterns.both_checked({"verified": True}, {"verified": None}, o, 2)
    segments = {"verified": True, "responses": 2, "app_bytes": 20}
    assert video.every_segment(segments, {"verified": True}, o, 2)
    for broken in ({"responses": 1}, {"app_bytes": 19}, {"verified": False}):
        assert not video.every_segment({**segments, **broken}, {"verified": True}, o, 2), broken


def test_a_scan_finds_a_name_test():
    """The scan is not blind: it sees each way the code names a stack."""
    for line in ('stack == "udp"', 'opts.stack in ("tcp", "quic")', 'rec["stack"] != "quinn"', 'stack.name == "quic"'):
        node = ast.parse(line).body[0].value
        parts = [node.left, *node.comparators]
        assert names_in(parts[1]) and A_STACK.search(ast.unparse(parts[0])), line
    for line in ('fp.options.pattern in ("rr", "video")', 'f["pattern"] == "bulk"', 'cfg.get("pattern") != "rr"'):
        node = ast.parse(line).body[0].value
        assert names_in(node.comparators[0], patterns.PATTERNS) and A_PATTERN.search(ast.unparse(node.left)), line


def test_a_pattern_is_its_row_and_its_module():
    """A pattern is one module of describe/patterns/: its row (ROW), its
    step of resolve and its own sections of the record are there, not in
    plan.py or record.py; no section is two patterns'; the record has
    every row's sections and no other pattern's."""
    import importlib

    from qprof.describe import record

    modules = {}
    for p in patterns.PATTERNS.values():
        made_in = {p.resolve.__module__, *(f.__module__ for f in p.sections.values())}
        assert len(made_in) == 1, (p.name, made_in)
        modules[p.name] = made_in.pop()
        assert importlib.import_module(modules[p.name]).ROW is p, (p.name, modules[p.name])
        assert modules[p.name].startswith("qprof.describe.patterns."), modules[p.name]
        assert p.sections, p.name
    found = [m.name for m in pkgutil.iter_modules(patterns.__path__)]
    assert sorted(f"qprof.describe.patterns.{m}" for m in found) == sorted(modules.values())
    assert len(set(modules.values())) == len(modules), modules
    named = [key for p in patterns.PATTERNS.values() for key in p.sections]
    assert sorted(named) == sorted(set(named)) and tuple(named) == record.SECTIONS


def test_a_count_window_says_what_it_counts():
    """A pattern whose window is a count of events names its events, the
    client's report of each and its plan in words (the progress line)."""
    for p in patterns.PATTERNS.values():
        assert p.unit, p.name
        if p.window == "count":
            assert p.event and "of" in p.counting(options.RunOptions(pattern=p.name, count=3, size=9, response=9)), (
                p.name
            )


def test_an_options_patterns_are_rows():
    """The options a pattern's row takes or sets are options of the table,
    none both, and none every pattern's (no need to name it then)."""
    for p in patterns.PATTERNS.values():
        assert set(p.options + p.sets) <= set(options.BY_NAME), p.name
        assert not set(p.options) & set(p.sets), p.name
    assert all(set(o.patterns) != set(patterns.PATTERNS) for o in options.OPTIONS)


# The transports qprof-wl runs a pattern over (workloads/wl_transport.h):
# msquic's, TCP's with its TLS layer, ngtcp2's, quiche's, quinn's, the
# UDP datapath and the application layers. A pattern is the role's: none
# of them asks which pattern runs (wl_opts' pattern words, wl_role.p).
TRANSPORTS = (
    "workloads/wl_quic.c",
    "workloads/wl_quic_report.c",
    "workloads/wl_tcp.c",
    "workloads/wl_tls.c",
    "workloads/wl_ngtcp2.c",
    "workloads/quiche/wl_quiche.c",
    "workloads/rs/quinn/src/lib.rs",
    "workloads/wl_udpio.c",
    "workloads/wl_app.c",
    "workloads/wl_h1.c",
    "workloads/wl_h2.c",
    "workloads/wl_h3.c",
)
A_PATTERN_WORD = re.compile(
    r"(->|\.)(download|rr|hs|rr_closed|rr_one_stream|pattern)\b(?!\s*\()|\bwl_role\.p\b|\bwl_(bulk|download|hs|rr_pattern)\b"
)


def _code(path) -> str:
    text = path.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def test_no_transport_asks_which_pattern_runs():
    found = {}
    for rel in TRANSPORTS:
        hits = [m.group(0) for m in A_PATTERN_WORD.finditer(_code(REPO / rel))]
        if hits:
            found[rel] = hits
    assert found == {}
    # The scan finds such a test where there is one.
    assert A_PATTERN_WORD.search("if (q.o->rr) {") and A_PATTERN_WORD.search("o->download || x")


def test_a_pattern_in_c_is_its_file():
    """Each pattern qprof-wl runs is entered by WL_PATTERN at the end of
    its own file (workloads/wl_role.h), and no other C file names it: the
    role picks --pattern's by its word from the linker's table."""
    sources = {p: _code(p) for p in sorted((REPO / "workloads").glob("*.[ch]"))}
    entered = {m.group(1): p for p, text in sources.items() for m in re.finditer(r"WL_PATTERN\((\w+)\);", text)}
    assert {"wl_bulk", "wl_download", "wl_hs", "wl_rr_pattern"} <= set(entered)
    named = {
        (name, str(p.relative_to(REPO)))
        for name, home in entered.items()
        for p, text in sources.items()
        if p != home and re.search(rf"\b{name}\b(?!\.[ch]\b)", text)
    }
    assert named == set()
