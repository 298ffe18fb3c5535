# SPDX-License-Identifier: GPL-2.0-only
"""--server-cmd and --client-cmd: a program qprof does not build, in one
side's place, profiled beside --stack's qprof-wl on the other through
the QUIC performance protocol (docs/own-implementation.md).

The programs are qprof-wl itself, started as a plain command that qprof
knows nothing of (the docs page's example, run as written), and a perf
server in another implementation, aioquic's (tests/perf_peer.py). Every
way a program can fail to be a server or a client is held to its exit
code, its sentence and nothing left behind (the runs_dir fixture's
leftovers()); the waits for one to listen, connect or end are the
impatient fault's 1 s (collectors/faults.py) rather than their 10-15."""

import re
import shlex
import subprocess
import sys

import pytest

from qprof.flamegraphs import categories, folded

from conftest import REPO, impossible_figures, needs_build, qprof
from test_bad_input import one_sentence, refused_run, run_statuses

pytestmark = [pytest.mark.system, needs_build]

PAGE = REPO / "docs" / "own-implementation.md"
PEER = f"{sys.executable} {REPO / 'tests' / 'perf_peer.py'}" + " --addr {addr} --port {port} --cert {cert} --key {key}"
WL = "./build/bin/qprof-wl --stack quic --role server --addr {addr} --cert {cert} --key {key}"
WL_CLIENT = "./build/bin/qprof-wl --stack quinn --role client --addr {addr} --port {port} --direction up"
# A capture on this VM's sample-losing CPU is weighted and says so.
SAMPLING_WARNINGS = r"incomplete|samples|weighted"


def example(*flags: str) -> list:
    """The page's worked example of exactly these flags (--server-cmd,
    --client-cmd, both, or --stack-file), its arguments after `qprof run`."""
    blocks = re.findall(r"```sh\n(qprof run .*?)\n```", PAGE.read_text(), re.S)
    given = lambda b: {f for f in ("--server-cmd", "--client-cmd", "--stack-file") if f in b}  # noqa: E731
    words = next(shlex.split(b.replace("\\\n", " ")) for b in blocks if given(b) == set(flags))
    assert words[:2] == ["qprof", "run"], words
    return words[2:]


def run_here(runs_dir, *args) -> dict:
    """`qprof run --json ARGS` from the repository's top, as the page has it."""
    r = qprof("run", "--json", *args, runs_dir=runs_dir, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert all(re.search(SAMPLING_WARNINGS, line) for line in r.stderr.splitlines() if line.strip()), r.stderr
    import json

    rec = json.loads(r.stdout)
    assert impossible_figures(rec) == []
    return rec


def holds_an_external_side(rec: dict, side: str, program: str) -> None:
    """What a run with --server-cmd or --client-cmd says of that side,
    whatever program it is: it sent, and qprof-wl's side counted."""
    ours = "client" if side == "server" else "server"
    way = "down" if side == "server" else "up"
    assert rec["verified"] is True and rec["verification"] == "sizes", rec["verification"]
    assert rec["config"]["direction"] == way and rec["config"]["proto"] == "perf"
    assert rec["direction"][way]["bytes"] == rec["bytes"] > 0
    # qprof-wl counted every byte, each stream whole.
    counted = rec["workload"][ours]["report"]
    assert counted["verified"] is True and counted["app_bytes"] >= rec["bytes"], counted
    assert rec["crosscheck"][ours]["source"], rec["crosscheck"][ours]
    # Nothing the program alone could count is made up.
    assert rec["bytes_sent"] is None and rec["workload"][side]["window"] is None
    lib = rec["environment"]["quic_library"][side]
    assert lib["name"] is None and lib["program"].endswith(program) and lib["absent_reason"], lib
    assert "absent_reason" in rec["crosscheck"][side] and "absent" in rec["floor"], rec["floor"]
    assert rec["transport"]["quic_settings"][side] is None
    # Measured by its pid: its CPU, and the syscalls probe saw it send at
    # least the bytes qprof-wl counted (their QUIC packets' payload).
    # (schedstat's ns: a short window has too few of /proc's ticks for the rest.)
    assert rec["cpu"][side]["oncpu_schedstat_s"] > 0 and rec["cpu"][side]["ns_per_byte"]["oncpu"] > 0
    assert rec["syscalls"][side]["send_bytes"] >= rec["bytes"], rec["syscalls"][side]
    assert rec["workload"][side]["report"]["external"] is True


def test_the_pages_example_profiles_a_program_qprof_cannot_see_into(runs_dir):
    """docs/own-implementation.md's example as written: qprof-wl's quiche
    server as a plain program, an msquic client asking for its bytes."""
    args = example("--server-cmd")
    rec = run_here(runs_dir, *args)
    holds_an_external_side(rec, "server", "qprof-wl")
    assert rec["stack"] == "quic" and rec["config"]["server_cmd"] == args[args.index("--server-cmd") + 1]
    # Its threads are the program's: qprof-wl's, under perf and the cputhread probe.
    threads = rec["cpu_threads"]["server"]["threads"]
    assert threads and all(t["comm"].startswith("qprof-wl") for t in threads), threads
    # Its stacks are quiche's, and qprof's rules know them: protocol and crypto both seen.
    cats = rec["flame"]["sides"]["server"]["categories_ns_per_byte"]
    if rec["flame"]["sides"]["server"]["samples"] >= 700:  # as tests/test_app.py: enough kept to expect each
        assert cats["protocol"] > 0 and cats["crypto"] > 0, cats


def test_a_perf_server_of_another_implementation(runs_dir):
    """aioquic's perf server (Python), a fixed size, pinned: every byte
    asked for arrived, counted by the client; the server's CPU is the
    interpreter's, which the page's rules file names."""
    rules = REPO / "tests" / "data" / "aioquic.rules"
    args = ("--categories", str(rules), "--cpus", "client=0,server=1")
    rec = run_here(runs_dir, "--stack", "quinn", "--bytes", "3M", "--server-cmd", PEER, *args)
    holds_an_external_side(rec, "server", sys.executable.rsplit("/", 1)[-1])
    assert rec["bytes"] == 3 << 20
    # --cpus pins the program as it pins qprof-wl (taskset, which execs it).
    assert rec["placement"]["on_requested_share"] == {"client": 1.0, "server": 1.0}, rec["placement"]
    # --categories: its rules are the run's, and the record's categories are
    # its stacks read by them (before qprof's), as every later reading will.
    run_dir = runs_dir / rec["id"]
    assert (run_dir / categories.RUN_RULES).read_text() == rules.read_text()
    stacks = folded.read(run_dir / "stacks" / "server.folded").stacks
    own = categories.categorize(stacks, categories.for_run(run_dir))
    if sum(own.values()):
        period, shown = rec["flame"]["sample_period_ns"], rec["flame"]["sides"]["server"]
        if "weighting" not in shown:  # a weighted side's figures are its threads' scaled samples
            assert shown["categories_ns_per_byte"] == {c: n * period / rec["bytes"] for c, n in own.items()}
        # The interpreter's frames, aioquic's protocol, are "other" by qprof's rules alone.
        assert own["other"] <= categories.categorize(stacks)["other"]


def test_a_client_program_qprof_cannot_see_into(runs_dir):
    """The page's example of a client: qprof-wl's quinn client as a plain
    program, uploading for the {duration_ms} the run gives it, to an
    msquic server that counts."""
    rec = run_here(runs_dir, *example("--client-cmd"))
    holds_an_external_side(rec, "client", "qprof-wl")
    threads = rec["cpu_threads"]["client"]["threads"]
    assert threads and all(t["comm"].startswith("qprof-wl") for t in threads), threads


def test_a_program_pair_is_profiled_by_what_the_probes_count(runs_dir):
    """The page's program pair as written: qprof-wl's quiche server and
    quinn client, both plain programs. No side counts or verifies, so the
    bytes are the syscalls probe's (what the client's receive calls took),
    and the record says so; each side is measured by its pid."""
    args = example("--server-cmd", "--client-cmd")
    rec = run_here(runs_dir, *args)
    assert rec["stack"] == "external" and rec["config"]["proto"] is None
    assert rec["verified"] is None and rec["verification"] == "none" and "client" in rec["counted_by"]
    assert rec["bytes_total"] is None and rec["bytes_sent"] is None
    assert rec["config"]["direction"] == "down" and rec["direction"]["down"]["bytes"] == rec["bytes"] > 0
    # What the record calls its bytes is what the probe saw the client take, and the client sent far less.
    assert rec["bytes"] == rec["syscalls"]["client"]["recv_bytes"] > rec["syscalls"]["client"]["send_bytes"]
    assert rec["intervals"] is None and "absent" in rec["floor"]
    for side in ("client", "server"):
        lib = rec["environment"]["quic_library"][side]
        assert lib["name"] is None and lib["program"].endswith("qprof-wl") and lib["absent_reason"], lib
        assert rec["workload"][side]["window"] is None and "absent_reason" in rec["crosscheck"][side]
        assert rec["cpu"][side]["oncpu_schedstat_s"] > 0 and rec["cpu"][side]["ns_per_byte"]["oncpu"] > 0
        threads = rec["cpu_threads"][side]["threads"]
        assert threads and all(t["comm"].startswith("qprof-wl") for t in threads), threads
        assert rec["workload"][side]["report"]["external"] is True
    # The server sent over the window what the client took, give or take
    # what was on its way at each edge: the direction is the data's.
    assert rec["syscalls"]["server"]["send_bytes"] > rec["syscalls"]["server"]["recv_bytes"]


def test_a_stack_file_runs_as_written(runs_dir):
    """The page's stack file (docs/examples/my-stack.toml): the pair it
    names, its rules the run's, its path in the record."""
    args = example("--stack-file")
    rec = run_here(runs_dir, *args, "--sample-hz", "0")
    stack_file = REPO / args[args.index("--stack-file") + 1]
    assert rec["stack"] == "external" and rec["config"]["stack_file"] == str(stack_file.relative_to(REPO))
    assert rec["verification"] == "none" and rec["bytes"] == rec["syscalls"]["client"]["recv_bytes"] > 0
    assert "--stack quiche" in rec["config"]["server_cmd"] and "--stack quinn" in rec["config"]["client_cmd"]
    rules = (stack_file.parent / "my-stack.rules").read_text()
    assert (runs_dir / rec["id"] / categories.RUN_RULES).read_text() == rules


def test_a_program_pair_told_the_wrong_direction(runs_dir):
    """The server sends, and --direction up says the client does: the
    server took less than it sent, so the run says which way to give
    (exit 69), and leaves nothing."""
    args = example("--server-cmd", "--client-cmd")
    quick = ("--duration", "0.5s", "--warmup", "0.3s", "--sample-hz", "0", "--probes", "syscalls")
    r = qprof("run", *args, *quick, "--direction", "up", runs_dir=runs_dir, cwd=REPO)
    assert r.returncode == 69, r.stderr
    line = one_sentence(r.stderr)
    assert "the server program sent" in line and "give --direction down" in line, line
    assert run_statuses(runs_dir) == ["incomplete"]


# Each way a program fails to be a server or a client: (its role, the
# case, its command, more of `qprof run`'s arguments, its code, words of its sentence).
NO_GOOD = [
    ("server", "exits at once", "false", (), 61, ["the server program exited with code 1 before the run was over"]),
    ("server", "never listens", "sleep 61.25", (), 62, ["bound no UDP port within 1 s", "the run's is"]),
    ("server", "another port", WL + " --port 4999", (), 63, ["listens on UDP port 4999, not the run's", "{port}"]),
    (
        "server",
        "leaves a child",
        f"sh -c 'sleep 61.5 & exec {WL} --port {{port}} --proto perf'",
        (),
        64,
        ["left 1 process of its own behind", "(sleep)", "qprof killed them"],
    ),
    ("server", "another ALPN", WL + " --port {port} --proto qprof", (), 65, ["does not speak ALPN perf"]),
    (
        "server",
        "answers short",
        PEER + " --short 1000",
        ("--bytes", "1M"),
        66,
        ["after 1047576 bytes of the 1048576 asked", "answered fewer bytes than the client asked"],
    ),
    ("client", "exits at once", "false", (), 61, ["the client program exited with code 1 before the run was over"]),
    ("client", "never connects", "sleep 61.25", (), 68, ["made no connection to the server within 1 s", "{port}"]),
    ("client", "another ALPN", WL_CLIENT + " --proto qprof --duration-ms 500", (), 61, ["exited with code 4"]),
    ("client", "runs past its end", WL_CLIENT + " --proto perf --duration-ms 60000", (), 67, ["still running 2 s"]),
    (
        "client",
        "leaves a child",
        f"sh -c 'sleep 61.5 & exec {WL_CLIENT} --proto perf --duration-ms {{duration_ms}}'",
        (),
        64,
        ["the client program left 1 process of its own behind", "(sleep)"],
    ),
]


@pytest.mark.parametrize("role,case,cmd,extra,code,words", NO_GOOD, ids=[f"{r[0]}: {r[1]}" for r in NO_GOOD])
def test_a_program_that_is_no_server_or_no_client(runs_dir, role, case, cmd, extra, code, words):
    """Each its exit code and one sentence; the record says incomplete
    with it; the program's whole process group is gone (the runs_dir
    fixture holds the namespaces and qprof-wl to none left)."""
    timed = ("--duration", "0.5s", "--warmup", "0.3s") if not extra else ()
    args = [*timed, "--probes", "none", "--sample-hz", "0", f"--{role}-cmd", cmd, *extra]
    r = qprof("run", "--inject-fault", "impatient", "--stack", "quic", *args, runs_dir=runs_dir, cwd=REPO)
    assert r.returncode == code, (case, r.stderr)
    line = one_sentence(r.stderr)
    for w in words:
        assert w in line, (case, line)
    assert run_statuses(runs_dir) == ["incomplete"]
    left = subprocess.run(["pgrep", "-f", "sleep 61"], capture_output=True, text=True).stdout
    assert left == "", left


def test_what_is_refused_before_anything_runs(runs_dir):
    """A program not found, a template naming what qprof does not fill in,
    --categories' file unreadable or a rule that does not parse."""
    refused_run(runs_dir, ["--stack", "quic", "--server-cmd", "no-such-perf-server -p {port}"], 60, ["not found"])
    refused_run(runs_dir, ["--stack", "quic", "--server-cmd", "perf_server -p {prot}"], 4, ["{prot}", "{port}"])
    refused_run(runs_dir, ["--stack", "quic", "--client-cmd", "no-such-perf-client {addr}"], 60, ["--client-cmd's"])
    pair = ["--client-cmd", WL_CLIENT, "--server-cmd", "no-such-perf-server -p {port}"]
    refused_run(runs_dir, pair, 60, ["--server-cmd's program 'no-such-perf-server' is not found"])
    bad = runs_dir.parent / "bad.rules"
    bad.write_text("protocol\t^(unclosed\n")
    refused_run(runs_dir, ["--categories", str(bad)], 4, [f"{bad}:1: bad regular expression"])
    refused_run(runs_dir, ["--categories", str(runs_dir.parent / "none.rules")], 4, ["cannot read it"])
