# SPDX-License-Identifier: GPL-2.0-only
"""A bounded fuzz pass over what qprof reads from outside (issue 38): the
folded stacks `qprof flame` and `qprof export` read, the workload's control
lines (JSON events and packed batches), the --link, --vary, --mix and
--cpus syntaxes, a damaged run.json under `qprof show`, `report`,
`check`, `flame` and `export` (and `ls`, which indexes it), and a damaged
comparison.json under `show`, `report`, `check` and `ls`.

The invariant, for every target: bad input never gives a traceback. A
parser gives a value or a QprofError whose sentence is one line; a
command exits with the code docs/exit-codes.md gives the cause and one
sentence on stderr.

Each target's corpus is tests/data/fuzz/<target>/ (README.md there): real
inputs (the project's own captures and records, the docs' specs) and
every input that once broke a target (regress-*), each run as it is and
mutated by hypothesis (truncated, bytes inserted or flipped, spliced with
another) beside inputs built from strategies. The commands run in this
process (CliRunner), with flame graphs' drawing stubbed.

Budget: each test runs a fixed number of examples, the same ones every
run (derandomize), so the file takes well under 30 s in `make check` and
`make test` on a 2-CPU machine. QPROF_FUZZ_EXAMPLES=N runs N examples a test, new ones each
run, for a longer exploratory pass:

    QPROF_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -m unit tests/test_fuzz.py

A failure prints the smallest input hypothesis found; add it to the
target's corpus as a regress-* file with the fix.
"""

import base64
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qprof import files
from qprof.collectors import compare, controlled
from qprof.describe import link, mix, offload, options, pinning
from qprof.errors import QprofError
from qprof.flamegraphs import categories, draw, folded, normalize, sides

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
CORPUS = DATA / "fuzz"
TARGETS = ("folded", "control", "link", "vary", "mix", "cpus", "record", "comparison")
# The real records the damaged ones are made from, and their stack samples.
RUNS = DATA / "report" / "runs"
GOOD = "20261123-215335-de60ea"  # qprof run --stack tcp (report/README.md)
COMPARISON = "20261123-215335-e67b1b"  # qprof compare --stacks tcp,udp, of GOOD and OTHER
OTHER = "20261123-215339-68ce20"
RUN, BASE = GOOD, "20261124-000000-ba5e00"  # the run under its own id (as records name it), a copy
# Exit codes (docs/exit-codes.md): the cause each command may end with here.
RUN_NOT_FOUND, BAD_STACKS, NO_STACKS, INCOMPATIBLE, RECORD = 15, 23, 22, 24, 33
ALLOWED = {
    "show": {0, RECORD},
    "report": {0, RECORD},
    "check": {0, INCOMPATIBLE, RECORD, 40},
    "flame": {0, NO_STACKS, BAD_STACKS, INCOMPATIBLE, RECORD},  # 24: --diff
    "export": {0, NO_STACKS, BAD_STACKS, RECORD},
    "ls": {0},
    "comparison": {0, RUN_NOT_FOUND, INCOMPATIBLE, RECORD, 40},  # check: 15, a run it names is not there
}
EXAMPLES = int(os.environ.get("QPROF_FUZZ_EXAMPLES") or 0)


def _unlimited() -> list:
    """A longer pass runs past pytest.ini's time limit a test (pytest-timeout's)."""
    try:
        import pytest_timeout  # noqa: F401
    except ImportError:
        return []
    return [pytest.mark.timeout(0)]


pytestmark = [pytest.mark.unit, *(_unlimited() if EXAMPLES else [])]


def budget(examples: int):
    """`examples` fixed examples, or QPROF_FUZZ_EXAMPLES new ones."""
    return settings(
        max_examples=EXAMPLES or examples,
        derandomize=not EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def corpus(target: str) -> list:
    return sorted(p for p in (CORPUS / target).iterdir() if p.is_file() and p.name != "README.md")


def seeds(target: str) -> list:
    return [p.read_bytes() for p in corpus(target)]


def text(data: bytes) -> str:
    """Bytes as a command-line argument reaches Python (undecodable ones kept)."""
    return data.decode("utf-8", "surrogateescape")


def one_sentence(sentence: str) -> str:
    assert sentence and len(sentence.splitlines()) == 1, repr(sentence)
    assert sentence == sentence.strip() and sentence.endswith("."), repr(sentence)
    return sentence


def holds(parse, *args):
    """parse(*args): a value, or a QprofError of one sentence; anything
    else (a traceback) fails the test."""
    try:
        return parse(*args)
    except QprofError as e:
        one_sentence(e.sentence)
        return e


# --- inputs: the corpus, mutated, and built from strategies -----------------------------

# Bytes a mutation inserts besides random ones: separators, numbers at
# the edges of what a parser converts, digits Python's int() reads but
# ASCII does not, and what splits a line.
TOKENS = [
    b",", b"=", b":", b"-", b";", b" ", b"%", b"\n", b"\r", b"\x00", b"\xff", b"\x85", b"\xe2\x80\xa8",
    b"0", b"-1", b"9" * 30, b"9" * 400, b"9" * 5000, b"1e308", b"nan", b"inf", "\u00b2".encode(), "\u0663".encode(),
    b"null", b"[]", b"{}", b'"', b"[" * 3000,
]  # fmt: skip


@st.composite
def mutated(draw, pool: list) -> bytes:
    """A seed, then one to four edits: cut, insert, flip, delete, splice, repeat."""
    data = bytearray(draw(st.sampled_from(pool)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(("cut", "insert", "token", "flip", "delete", "splice", "repeat")))
        if op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "token":
            data[at:at] = draw(st.sampled_from(TOKENS))
        elif op == "flip" and data:
            data[min(at, len(data) - 1)] ^= 1 << draw(st.integers(0, 7))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        elif op == "splice":
            other = draw(st.sampled_from(pool))
            data = data[:at] + other[draw(st.integers(0, len(other))) :]
        elif op == "repeat":
            n = draw(st.integers(1, 16))
            data[at:at] = data[at : at + n] * draw(st.integers(2, 50))
    return bytes(data)


def inputs(target: str, built: st.SearchStrategy) -> st.SearchStrategy:
    """A target's bytes: a seed as it is, a mutated seed, or one built."""
    pool = seeds(target)
    return st.one_of(st.sampled_from(pool), mutated(pool), built)


def joined(parts: st.SearchStrategy, sep: str = ",") -> st.SearchStrategy:
    return st.lists(parts, min_size=0, max_size=6).map(lambda p: sep.join(p).encode())


NUMBER = st.one_of(
    st.integers(-5, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", "0", "00", "1.", ".5", "9" * 400, "\u00b2", "\u0663", "1e3", "0x10", "-0"]),
)


def spec(keys, units) -> st.SearchStrategy:
    """key=NUMBERunit items, or a bare word, joined by commas."""
    item = st.one_of(
        st.tuples(st.sampled_from(keys), NUMBER, st.sampled_from(units)).map(lambda t: f"{t[0]}={t[1]}{t[2]}"),
        st.sampled_from(keys),
        st.text(max_size=6),
    )
    return joined(item)


# --- 1. folded stacks --------------------------------------------------------------------

FRAME = st.one_of(
    st.sampled_from(["qprof-wl", "[unknown]", "start_thread", "QuicWorkerLoop", "tcp_sendmsg_[k]", "", " ", "a b"]),
    st.text(max_size=8),
)
FOLDED_LINE = st.tuples(st.lists(FRAME, min_size=0, max_size=6), NUMBER).map(lambda t: f"{';'.join(t[0])} {t[1]}")
FOLDED = inputs("folded", joined(FOLDED_LINE, "\n"))


def drawn(data: folded.Folded):
    """What `qprof flame` makes of a side's stacks, drawing aside."""
    classifier = categories.Classifier()
    for unit in (normalize.BYTE, sides.unit_of({"config": {"pattern": "rr"}})):
        fig = normalize.figures(data.stacks, 10_101_010, 1_000_000, classifier, unit)
        normalize.scaled(data.stacks, 10_101_010, 1_000_000, unit)
        draw.side_subtitle("r", fig, 1.0, normalize.gap_percent(fig.ns_per_unit, 1.0), None)


@budget(150)
@given(FOLDED)
def test_folded_reader(data):
    """A folded file of any bytes: its stacks (bad lines skipped with one
    warning), or BadStacks; what is read draws."""
    warnings = []
    with tempfile.NamedTemporaryFile(suffix=".folded") as f:
        f.write(data)
        f.flush()
        got = holds(folded.read, f.name, warnings.append)
    assert len(warnings) <= 1
    for w in warnings:
        one_sentence(w)
    if isinstance(got, folded.Folded):
        assert all(n >= 0 for n in got.stacks.values())
        drawn(got)


@contextmanager
def run_dir(root: Path, rid: str = RUN, record: bytes = None, edit=None):
    """RUNS/GOOD copied in as root/rid, its record `record` (bytes) or
    the real one with edit(rec) applied."""
    shutil.rmtree(root / rid, ignore_errors=True)
    shutil.copytree(RUNS / GOOD, root / rid)
    if record is None:
        rec = json.loads((RUNS / GOOD / "run.json").read_text())
        rec["id"] = rid
        if edit:
            edit(rec)
        record = json.dumps(rec).encode()
    (root / rid / "run.json").write_bytes(record)
    yield root / rid


@budget(40)
@given(FOLDED, st.booleans())
def test_flame_and_export_of_a_damaged_stacks_file(cli, data, recorded):
    """A run whose client.folded is any bytes: drawn, or refused (23)."""
    drop = (lambda rec: rec["flame"]["samples"].pop("client")) if not recorded else None
    with run_dir(cli.root, edit=drop) as d:
        (d / "stacks" / "client.folded").write_bytes(data)
        for argv in (("flame", RUN, "--side", "client"), ("export", RUN, "--format", "pprof", "--side", "client")):
            code, _ = cli.run(*argv)
            assert code in (0, BAD_STACKS), (argv, code)


# --- 2. the workload's control lines -----------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([10**400, -(2**64)])
    | st.floats()
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
B64 = st.one_of(
    st.binary(max_size=96).map(lambda b: base64.b64encode(b).decode()),
    st.text(alphabet="ABCab012+/=\n -_", max_size=24),
    JSON,
)
BATCH = st.builds(
    lambda ev, fields, b64: {"event": ev, "fields": fields, "b64": b64},
    st.sampled_from(["rr_batch", "handshake_batch", "x_batch", "_batch"]),
    st.one_of(st.sampled_from(["seq,due_ns,sent_ns,answered_ns,conn", "i,bytes", "", ","]), JSON),
    B64,
)
EVENT = st.one_of(
    st.builds(
        lambda ev, rest: {**rest, "event": ev},
        st.sampled_from(["mark", "done", "spawned", "ready"]),
        st.dictionaries(st.sampled_from(["pid", "name", "t_ns", "exit_code", "x"]), JSON, max_size=4),
    ),
    st.fixed_dictionaries({"event": st.sampled_from(["spawned", "done"]), "pid": JSON, "exit_code": JSON}),
    BATCH,
    JSON,
)
CONTROL = inputs(
    "control",
    st.lists(EVENT.map(lambda e: json.dumps(e, separators=(",", ":"))), max_size=5).map(
        lambda ls: "".join(f"{l}\n" for l in ls).encode()
    ),
)


@budget(150)
@given(CONTROL)
def test_control_lines(data):
    """A workload's stdout of any bytes, as the reader thread takes it:
    its events, each a dict naming its event (other lines skipped), and
    its reports unpacked, or a QprofError; the reader always ends with eof."""
    for line in data.splitlines(keepends=True):
        ev = holds(controlled.event, line)
        assert ev is None or isinstance(ev, QprofError) or isinstance(ev["event"], str)
        got = holds(controlled.unpacked, line)
        if isinstance(got, list):
            assert all(isinstance(e, dict) and isinstance(e.get("event"), str) for e in got)
    proc = controlled.ControlledProcess("client", [], Path("/dev/null"), spawned=True)
    proc.proc = SimpleNamespace(stdout=iter(data.splitlines(keepends=True)))
    proc._read_events()  # the reader thread's loop, here
    events = []
    while not proc.events.empty():
        events.append(proc.events.get())
    assert events[-1] == {"event": "eof"} and all(isinstance(e["event"], str) for e in events)
    assert proc.pid_there is None or isinstance(proc.pid_there, int)
    holds(lambda: proc.reports)


# --- 3. the option syntaxes --------------------------------------------------------------

LINK = inputs("link", spec(list(link.KEYS) + list(link.PRESETS), ["ms", "s", "us", "%", "mbit", "kbit", "bit", ""]))


@budget(300)
@given(LINK)
def test_link_syntax(data):
    got = holds(link.parse, text(data))
    if isinstance(got, link.Link):
        for mtu in (1500, 65536):
            link.plan(got, mtu).commands("qpv0")


MIX = inputs(
    "mix",
    joined(
        st.tuples(
            st.sampled_from(options.STACK_NAMES + ("sctp", "")),
            st.sampled_from(["", ":0", ":1", ":3", ":99999999999999", ":" + "9" * 400, ":\u0663"]),
            st.sampled_from(["", ":rr", ":bulk", ":download", ":"]),
        ).map("".join)
    ),
)


@budget(300)
@given(MIX, st.integers(1, 64), st.integers(1, 65535))
def test_mix_syntax(data, cpus, port):
    got = holds(mix.parse, text(data), "bulk", port, cpus)
    if isinstance(got, list):
        assert 0 < len(got) <= mix.MAX_FLOWS_PER_CPU * cpus and got[-1].port <= 65535


CPUS = inputs(
    "cpus",
    joined(
        st.tuples(
            st.sampled_from(["client=", "server=", "", "other=", "="]),
            st.sampled_from(["0", "1", "0-1", "3-2", "0-99999999999", "", "-", "1-", "\u00b2", "0,2"]),
        ).map("".join)
    ),
)


@budget(300)
@given(CPUS)
def test_cpus_syntax(data):
    spec_text = text(data)
    got = holds(pinning.parse, spec_text)
    if isinstance(got, dict):
        holds(pinning.check_host, got, {0, 1})
        for cpus in got.values():
            pinning.wrapped(["qprof-wl"], cpus)
        if spec_text:
            pinning.record(spec_text, {"client": {"cpus": {"0": 1.0}}})


VARY_ITEM = st.tuples(
    st.sampled_from(list(options.VARY_KEYS) + ["gsx", ""]),
    st.sampled_from(["=", "", "=="]),
    st.lists(
        st.sampled_from(
            [
                "on",
                "off",
                "1",
                "4",
                "64K",
                "10ms",
                "1%",
                "rate",
                "wifi",
                "",
                " ",
                "up",
                "down",
                "9" * 40,
                "9" * 400 + "K",
            ]
            + ["\u00b2", "1" + "0" * 5000, "2.5mbit", "lowlat", "1.3", "cubic"]
        ),
        max_size=4,
    ).map(",".join),
).map("".join)
VARY = inputs("vary", joined(VARY_ITEM, "\n"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Planning --gso off for quic looks for the interposer: a stand-in."""
    build = tmp_path_factory.mktemp("build")
    lib = build / "lib" / offload.PRELOAD_LIB
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QPROF_BUILD_DIR", str(build))
        yield build


@budget(150)
@given(VARY, st.sampled_from(["quic", "tcp-tls", "udp"]))
def test_vary_syntax(built, data, stack):
    """--vary items (one a line): the matrix every configuration of it
    makes, each resolved as `qprof run` resolves it, or a QprofError."""
    vary = holds(compare.parse_vary, text(data).split("\n"))
    if isinstance(vary, dict):
        configs = holds(compare.build_matrix, options.RunOptions(duration_s=1.0), [stack], vary, [])
        if isinstance(configs, list):
            assert len(configs) >= 2 and all(isinstance(c.opts, options.RunOptions) for c in configs)


# --- 4. a damaged run.json under the commands that read it -------------------------------


class Cli:
    """main.main in this process over a runs directory; signals, the
    machine's state directory and inferno left alone."""

    def __init__(self, root: Path):
        self.root = root

    def run(self, *argv):
        """(exit code, stdout) of `qprof ARGV --runs-dir ROOT`, after
        checking what it said on stderr: one sentence on failure, and
        never a traceback (an exception out of main fails the test)."""
        from qprof.cli import main

        with CliRunner().isolation() as (out, err, _):
            try:
                main.main([*argv, "--runs-dir", str(self.root)])
                code = 0
            except SystemExit as e:
                code = e.code
        stderr = err.getvalue().decode()
        assert "Traceback" not in stderr, stderr
        if code:
            said = [l for l in stderr.splitlines() if l.strip() and not l.startswith("qprof: warning: ")]
            assert len(said) == 1 and said[0].startswith("qprof: "), (argv, code, stderr)
            one_sentence(said[0])
        return code, out.getvalue().decode()


def _rendered(scaled, svg, title, subtitle, unit):
    """draw.render without inferno: what reaches it is what the test checks."""
    svg.write_text(f"<svg><title>{title}</title></svg>")
    return svg


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    from qprof import interrupts

    root = tmp_path_factory.mktemp("fuzz") / "runs"
    root.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interrupts, "install", lambda: None)  # pytest keeps its own handlers
        mp.setattr(draw, "render", _rendered)
        mp.setattr(
            draw, "render_diff", lambda a, b, svg, title, subtitle, unit: _rendered(b, svg, title, subtitle, unit)
        )
        mp.setattr(files.os, "fsync", lambda fd: None)  # a report a call: 1 MB, synced
        mp.setenv("QPROF_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        mp.delenv("QPROF_RUNS_DIR", raising=False)
        shutil.copytree(RUNS / OTHER, root / OTHER)  # the comparison's other run
        with run_dir(root, BASE):
            yield Cli(root)


COMMANDS = (
    ("show", RUN),
    ("report", RUN),
    ("check", RUN, "--baseline", BASE),
    ("check", BASE, "--baseline", RUN),
    ("flame", RUN),
    ("flame", "--diff", BASE, RUN),
    ("export", RUN, "--format", "openmetrics"),
    ("ls", "--json"),  # the history indexes every record
    ("ls",),
)
REAL = (RUNS / GOOD / "run.json").read_bytes()
COMPARISON_COMMANDS = (
    ("show", COMPARISON),
    ("report", COMPARISON),
    ("check", COMPARISON, "--baseline", GOOD),
    ("check", GOOD, "--baseline", COMPARISON),
    ("ls", "--json"),
)
REAL_COMPARISON = (RUNS / "comparisons" / COMPARISON / "comparison.json").read_bytes()


@st.composite
def path_into(draw, rec):
    """A path to a value inside rec, shallow more often than deep."""
    path, node = [], rec
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)):
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        path.append(key)
        node = node[key]
    return path


@st.composite
def reshaped(draw, real: bytes) -> bytes:
    """The real record with one to four values removed or replaced by
    one of another type."""
    rec = json.loads(real)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(path_into(rec))
        if not path:
            continue
        parent = rec
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(JSON)
    return json.dumps(rec).encode()


def records(target: str, real: bytes) -> st.SearchStrategy:
    return st.one_of(
        st.sampled_from(seeds(target)),
        mutated([real] + seeds(target)),
        reshaped(real),
        JSON.map(lambda v: json.dumps(v).encode()),
    )


def damaged(cli, record: bytes):
    """Every command that reads a record, on this one as the run (and as
    the baseline): each exits with a code for its cause, and a record that
    cannot be read as one is corrupt (33) to all of them."""
    got = []
    with run_dir(cli.root, RUN, record) as d:
        rec, why = files.read_record(d / "run.json")
        unreadable = why or files.problem("run", RUN, rec, whole=False)
        for argv in COMMANDS:
            code, _ = cli.run(*argv)
            assert code in ALLOWED[argv[0]], (argv, code)
            assert code == RECORD or not unreadable or argv[0] == "ls", (argv, code, unreadable)
            got.append((argv[0], code))
    return got


@budget(30)
@given(records("record", REAL))
def test_a_damaged_record(cli, record):
    damaged(cli, record)


def damaged_comparison(cli, record: bytes):
    """show, report, check (it as the run, and as the baseline) and ls of
    a comparison whose comparison.json is this."""
    path = cli.root / "comparisons" / COMPARISON / "comparison.json"
    if not path.parent.exists():
        shutil.copytree(RUNS / "comparisons" / COMPARISON, path.parent)
    path.write_bytes(record)
    rec, why = files.read_record(path)
    unreadable = why or files.problem("comparison", COMPARISON, rec, whole=False)
    for argv in COMPARISON_COMMANDS:
        code, _ = cli.run(*argv)
        assert code in ALLOWED["comparison" if argv[0] == "check" else argv[0]], (argv, code)
        assert code == RECORD or not unreadable or argv[0] == "ls", (argv, code, unreadable)


@budget(15)
@given(records("comparison", REAL_COMPARISON))
def test_a_damaged_comparison(cli, record):
    damaged_comparison(cli, record)


# --- the corpus -------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_the_corpus_is_there(target):
    """An emptied corpus would let the fuzz pass on nothing."""
    files = corpus(target)
    assert len(files) >= 3, f"{CORPUS / target} holds {len(files)} inputs"
    assert all(f.stat().st_size > 0 or f.name.startswith("regress-") for f in files)


def test_every_corpus_input_as_it_is(cli, built):
    """Each input of the corpus, unmutated, holds its target's invariant."""
    for data in seeds("folded"):
        test_folded_reader.hypothesis.inner_test(data)
        for recorded in (True, False):
            test_flame_and_export_of_a_damaged_stacks_file.hypothesis.inner_test(cli, data, recorded)
    for data in seeds("control"):
        test_control_lines.hypothesis.inner_test(data)
    for data in seeds("link"):
        test_link_syntax.hypothesis.inner_test(data)
    for data in seeds("mix"):
        test_mix_syntax.hypothesis.inner_test(data, 2, 4433)
    for data in seeds("cpus"):
        test_cpus_syntax.hypothesis.inner_test(data)
    for data in seeds("vary"):
        test_vary_syntax.hypothesis.inner_test(built, data, "quic")
    for path in corpus("record"):
        damaged(cli, path.read_bytes())
    for path in corpus("comparison"):
        damaged_comparison(cli, path.read_bytes())


def test_the_real_record_reads(cli):
    """The undamaged records: every command succeeds (so the fuzz damages
    something that works)."""
    assert damaged(cli, REAL) == [(c[0], 0) for c in COMMANDS]
    for argv in COMPARISON_COMMANDS:
        damaged_comparison(cli, REAL_COMPARISON)
        assert cli.run(*argv)[0] == 0, argv


def test_the_loaders_types_are_the_schemas():
    """files.TYPES, what makes a record unreadable to every command,
    holds each field to the type its schema gives it (or looser)."""
    loader = {dict: {"object"}, list: {"array"}, str: {"string"}, int: {"integer"}}
    loader[files._NUMBER] = {"number", "integer"}
    for kind, types in files.TYPES.items():
        schema = json.loads((REPO / "describe" / "schema" / f"{kind}.schema.json").read_text())
        for key, t in types.items():
            assert declared(schema, schema["properties"][key]) - {"null"} <= loader[t], (kind, key)


def declared(schema: dict, prop: dict) -> set:
    """The JSON types a schema's property may take."""
    if "$ref" in prop:
        return declared(schema, schema["$defs"][prop["$ref"].rsplit("/", 1)[-1]])
    if "oneOf" in prop or "anyOf" in prop:
        return set().union(*(declared(schema, p) for p in prop.get("oneOf") or prop["anyOf"]))
    if "type" in prop:
        return {prop["type"]} if isinstance(prop["type"], str) else set(prop["type"])
    values = prop["enum"] if "enum" in prop else [prop["const"]]
    return {{str: "string", int: "integer"}[type(v)] for v in values}
