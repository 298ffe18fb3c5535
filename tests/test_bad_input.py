# SPDX-License-Identifier: GPL-2.0-only
"""Each bad input or failure: one sentence on stderr, its own exit code,
nothing left behind, and a run directory that does not look complete."""

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from qprof import errors

from conftest import REPO, leftovers, needs_build, qprof, qprof_here, started, wait_for_intervals
from refusals import refused, run_plan

# The exit codes are qprof's interface (docs/exit-codes.md, core/errors.py).
UNKNOWN_STACK, BAD_VALUE, NOT_ROOT, PORT_IN_USE = 3, 4, 5, 6
TRANSPORT_OPEN, HANDSHAKE, PEER_DIED, INTERRUPTED = 7, 8, 9, 130


def one_sentence(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("qprof: ") and lines[0].rstrip().endswith("."), lines[0]
    return lines[0]


def refused_run(runs_dir, args, code, words):
    """`qprof run ARGS` stops before anything runs: its exit code, one
    sentence holding each of words, no run directory, nothing left behind."""
    r = qprof("run", *args, runs_dir=runs_dir)
    assert r.returncode == code, r.stderr
    line = one_sentence(r.stderr)
    for w in words:
        assert w in line, line
    assert not runs_dir.exists() and leftovers() == []


def run_statuses(runs_dir):
    if not runs_dir.exists():
        return []
    return [json.loads(p.read_text())["status"] for p in runs_dir.glob("*/run.json") if p.parent.name != "latest"]


# Refused by parsing and the plan: in this process (tests/refusals.py);
# test_exit_codes holds one `qprof run` per code end to end.
@pytest.mark.unit
def test_unknown_stack():
    refused(["--stack", "sctp"], UNKNOWN_STACK, ["sctp", "quic"])


@pytest.mark.unit
@pytest.mark.parametrize(
    "args",
    [["--duration", "ten"], ["--warmup", "5 parsecs"], ["--bytes", "12Q"], ["--io-size", "1000"], ["--duration", "0s"]],
)
def test_malformed_values(args):
    refused(args, BAD_VALUE, [])


@pytest.mark.system
def test_not_root(runs_dir, tmp_path):
    os.chmod(tmp_path, 0o777)
    r = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "qprof",
            "run",
            "--duration",
            "1s",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "QPROF_RUNS_DIR": str(runs_dir), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert r.returncode == NOT_ROOT, r.stderr
    assert "root" in one_sentence(r.stderr)
    assert not runs_dir.exists()


@pytest.mark.system
@needs_build
@pytest.mark.parametrize(
    "stack, kind", [("quic", socket.SOCK_DGRAM), ("udp", socket.SOCK_DGRAM), ("tcp", socket.SOCK_STREAM)]
)
def test_port_in_use(runs_dir, stack, kind):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        r = qprof(
            "run",
            "--stack",
            stack,
            "--topology",
            "loopback",
            "--port",
            str(port),
            "--duration",
            "1s",
            runs_dir=runs_dir,
        )
    assert r.returncode == PORT_IN_USE, r.stderr
    assert str(port) in one_sentence(r.stderr)
    assert run_statuses(runs_dir) == ["incomplete"]


@pytest.mark.system
@needs_build
def test_handshake_failure_names_status(runs_dir):
    r = qprof("run", "--duration", "1s", "--inject-fault", "handshake", runs_dir=runs_dir)
    assert r.returncode == HANDSHAKE, r.stderr
    assert "QUIC_STATUS_" in one_sentence(r.stderr)
    assert run_statuses(runs_dir) == ["incomplete"]


@pytest.mark.system
@needs_build
def test_msquic_credential_failure_names_status(runs_dir):
    r = qprof("run", "--duration", "1s", "--inject-fault", "bad-cert", runs_dir=runs_dir)
    assert r.returncode == TRANSPORT_OPEN, r.stderr
    assert "QUIC_STATUS_" in one_sentence(r.stderr)
    assert run_statuses(runs_dir) == ["incomplete"]


@pytest.mark.system
@needs_build
def test_server_dies_mid_run(runs_dir):
    r = qprof("run", "--duration", "2s", "--warmup", "0.2s", "--inject-fault", "kill-server", runs_dir=runs_dir)
    assert r.returncode == PEER_DIED, r.stderr
    assert "server" in one_sentence(r.stderr)
    assert run_statuses(runs_dir) == ["incomplete"]


@pytest.mark.system
@needs_build
def test_ctrl_c(runs_dir):
    with started("run", "--duration", "30s", "--interval", "0.25s", runs_dir=runs_dir) as p:
        # Interrupt mid-measurement: the window is open once a line for its
        # first interval is out.
        wait_for_intervals(p)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    assert p.returncode == INTERRUPTED, err
    assert "interrupted" in one_sentence(err)
    statuses = run_statuses(runs_dir)
    assert statuses == ["incomplete"]
    rec = json.loads(next(runs_dir.glob("*/run.json")).read_text())
    assert "interrupted" in rec["error"]


# Issue 39: what a hostile new user found. Each case in this process
# (tests/refusals.py for `qprof run`, conftest's qprof_here for the rest).
STACK_CANNOT, BAD_MIX, CORRUPT, NO_STACKS = 38, 31, 33, 22
EMPTY_HOST = "is empty; give an SSH destination (user@host"


@pytest.mark.unit
@pytest.mark.parametrize(
    "args, flag",
    [
        (["--server", ""], "--server"),
        (["--server", "", "--client", "b"], "--server"),
        (["--server", " "], "--server"),
        # Once refused as if a host were named (--cpus is not for hosts).
        (["--server", "", "--cpus", "client=0"], "--server"),
        (["--server", "b", "--client", ""], "--client"),
        (["--server", "b", "--ssh-config", ""], "--ssh-config"),
        (["--server", "b", "--server-addr", ""], "--server-addr"),
    ],
)
def test_an_empty_destination_is_refused_not_run_here(args, flag):
    """Defect 3: `--server ""` ran a local measurement (exit 0)."""
    sentence = refused(args, BAD_VALUE, [f"{flag} '", "is empty; give", f"or drop {flag}."])
    if flag != "--ssh-config" and flag != "--server-addr":
        assert EMPTY_HOST in sentence


@pytest.mark.unit
@pytest.mark.parametrize(
    "args", [["remote", "check", ""], ["remote", "setup", ""], ["clean", "--host", ""], ["remote", "check", "  "]]
)
def test_an_empty_host_is_refused_in_the_same_sentence_by_every_command(args):
    r = qprof_here(*args)
    assert r.returncode == BAD_VALUE, r.stderr
    assert EMPTY_HOST in one_sentence(r.stderr)


@pytest.mark.unit
def test_an_empty_ssh_config_is_named_not_invisible():
    r = qprof_here("remote", "check", "bench2", "--ssh-config", "")
    assert r.returncode == BAD_VALUE and "--ssh-config '' is empty; give an ssh config file" in one_sentence(r.stderr)


@pytest.mark.unit
def test_an_empty_msquic_is_named_not_invisible():
    """Defect 8: it said "--msquic  is not a file", the name invisible."""
    refused(["--msquic", ""], BAD_VALUE, ["--msquic '' is empty; give the path of a built libmsquic.so"])


def _advice(sentence):
    """What a refusal of --app tells the user to use instead: (apps, stacks)."""
    import re

    m = re.search(r"use --app (\S+)(?: or (\S+))?\.$", sentence)
    if m:
        return [a for a in m.groups() if a], []
    m = re.search(r"over --stack ([a-z0-9, -]+?), and", sentence)
    assert m, sentence
    return [], m.group(1).split(", ")


@pytest.mark.unit
@pytest.mark.parametrize(
    "stack, app",
    [(s, a) for s in ("quic", "quinn", "quiche", "ngtcp2", "tcp", "tcp-tls", "tcp-ktls") for a in ("h1", "h2", "h3")],
)
def test_app_advice_leads_to_a_run(stack, app):
    """Defect 8: --app h3 on quinn suggested --app h1, which quinn refuses
    too. Whatever a refusal of --app suggests, the plan takes."""
    base = ["--pattern", "rr", "--app", app]
    try:
        run_plan("--stack", stack, *base)
        return
    except errors.StackCannot as e:
        sentence = e.sentence
    apps, stacks = _advice(sentence)
    assert apps or stacks, sentence
    for a in apps:
        assert run_plan("--stack", stack, "--pattern", "rr", "--app", a).options.app == a
    for s in stacks:
        app = "h3" if s in ("quic", "quinn", "quiche", "ngtcp2") else "h1"
        assert run_plan("--stack", s, "--pattern", "rr", "--app", app).options.stack == s


@pytest.mark.unit
def test_app_outside_rr_names_video_too_and_video_takes_it():
    """Defect 8: --app with bulk said "rr only", though video takes it."""
    refused(["--stack", "tcp", "--app", "h1"], STACK_CANNOT, ["--app applies to --pattern rr and video"])
    assert run_plan("--stack", "tcp", "--pattern", "video", "--app", "h1").options.app == "h1"
    refused(["--rr-mode", "closed"], STACK_CANNOT, ["--rr-mode applies to --pattern rr only; add it"])


@pytest.mark.unit
def test_app_in_a_mix_goes_to_its_rr_flows():
    """Defect 8: `--mix quic:1:rr,tcp:1 --app h3` said "add rr" (exit 4)
    although the mix has an rr flow: --app is an rr option in a mix too."""
    p = run_plan("--mix", "quic:1:rr,tcp:1", "--app", "h3", "--link", "rate=10mbit")
    assert [(fp.options.stack, fp.options.app) for fp in p.flows] == [("quic", "h3"), ("tcp", None)]
    refused(["--mix", "quic:1,tcp:1", "--app", "h3"], BAD_MIX, ["--app applies to rr", "has none"])


@pytest.mark.unit
def test_guest_cpus_refused_and_guest_mix_planned():
    """Defect 13: the guest's vCPUs are one host thread, so --cpus has
    nothing to hold a side to there; a mix in the guest is planned as here."""
    refused(["--guest", "--cpus", "client=0"], BAD_VALUE, ["--guest runs both sides in a QEMU guest", "drop --cpus"])
    assert run_plan("--guest", "--mix", "quic:1,tcp:1", "--link", "rate=10mbit").is_mix


@pytest.fixture
def damaged(tmp_path):
    """A runs directory with a real run (a golden capture) and its record damaged."""
    from test_flame_cli import add_run

    runs = tmp_path / "runs"
    runs.mkdir()

    def make(text=None, edit=None):
        rid, path = add_run(runs, "quic", edit=edit)
        if text is not None:
            (path / "run.json").write_text(text)
        return runs, rid

    return make


@pytest.mark.unit
@pytest.mark.parametrize("text", ['["x"]', "null", "5", '"run"', '{"status": ["x"]}', '{"id": '])
@pytest.mark.parametrize("command", [["flame"], ["export", "--format", "folded"], ["show"], ["report"]])
def test_a_corrupt_record_is_one_code_whichever_command_reads_it(damaged, text, command):
    """Defect 9: a corrupt record was 15 from export and flame, 33 from show
    and report; defect 8: valid JSON of the wrong type said "run 5 is ['x']"
    with exit 22."""
    runs, rid = damaged(text)
    r = qprof_here(*command, rid, "--runs-dir", str(runs))
    assert r.returncode == CORRUPT, r.stderr
    line = one_sentence(r.stderr)
    said = line.split(";")[0]  # the rest names the fix (and report's file, whose path holds this test's name)
    assert f"run {rid}'s record is corrupt" in said and said.count("corrupt") == 1, line


@pytest.mark.unit
@pytest.mark.parametrize("command", [["flame"], ["export", "--format", "pprof"]])
def test_a_mix_is_said_to_keep_no_stacks(damaged, command):
    """Defect 8: a mix's record was said made with --sample-hz 0, and a new
    run advised that would keep none either."""

    def mix(rec):
        rec.update(stack="mix", flame=None)

    runs, rid = damaged(edit=mix)
    r = qprof_here(*command, rid, "--runs-dir", str(runs))
    assert r.returncode == NO_STACKS, r.stderr
    line = one_sentence(r.stderr)
    assert "is a --mix, and a mix never samples stacks" in line and "--sample-hz" not in line, line


@pytest.mark.unit
def test_an_external_server_is_refused_where_it_cannot_run():
    """--server-cmd: bulk on a QUIC stack, the server sending, on this
    machine; its template names only what a run fills in. The direction is
    filled in as down (the client counts what arrives)."""
    cmd = ["--server-cmd", "perf_server -p {port}"]
    plan = run_plan("--stack", "quinn", *cmd)
    assert plan.options.direction == "down" and plan.options.proto == "perf"
    refused(["--stack", "tcp", *cmd], STACK_CANNOT, ["--server-cmd applies to --stack quic,", "drop --server-cmd"])
    refused(["--pattern", "rr", *cmd], STACK_CANNOT, ["--server-cmd applies to --pattern bulk only"])
    refused([*cmd, "--proto", "qprof"], STACK_CANNOT, ["not qprof's own", "drop --proto qprof"])
    refused([*cmd, "--direction", "up"], STACK_CANNOT, ["--direction up", "the server sends"])
    refused([*cmd, "--server-stack", "quinn"], STACK_CANNOT, ["--server-stack: --server-cmd runs its program"])
    refused([*cmd, "--pacing", "off"], STACK_CANNOT, ["--pacing is msquic's", "--server-cmd's program"])
    refused([*cmd, "--mix", "quic:1"], errors.BadMix.exit_code, ["drop --server-cmd"])
    refused(["--server-cmd", "perf_server -p {prot}"], BAD_VALUE, ["{prot}", "{port}"])
    refused(["--server-cmd", "perf_server 'unbalanced"], BAD_VALUE, ["does not parse", "quotes"])
    refused(["--server-cmd", ""], BAD_VALUE, ["empty"])
    # --client-cmd: the client sends (up), to --stack's qprof-wl server; one side is always qprof-wl's.
    ccmd = ["--client-cmd", "perf_client -t {addr} -p {port} -d {duration_s}"]
    assert run_plan("--stack", "quic", *ccmd).options.direction == "up"
    refused([*ccmd, "--direction", "down"], STACK_CANNOT, ["--direction down", "the client sends"])
    # Both: a program pair, --stack external, its bytes the syscalls probe's, one way, timed.
    pair = run_plan(*ccmd, *cmd).options
    assert (pair.stack, pair.direction, pair.proto) == ("external", "down", None)
    assert run_plan(*ccmd, *cmd, "--direction", "up").options.direction == "up"
    refused(["--stack", "external", *cmd], STACK_CANNOT, ["--stack external runs two programs", "--client-cmd"])
    refused(["--stack", "quinn", *ccmd, *cmd], STACK_CANNOT, ["--stack quinn: with --client-cmd", "drop --stack"])
    refused([*ccmd, *cmd, "--direction", "both"], STACK_CANNOT, ["--direction both", "give --direction up or down"])
    refused([*ccmd, *cmd, "--bytes", "1M"], STACK_CANNOT, ["--bytes: a program pair's window is timed"])
    refused([*ccmd, *cmd, "--probes", "cputhread"], STACK_CANNOT, ["add syscalls to --probes"])
    refused([*ccmd, *cmd, "--gso", "off"], STACK_CANNOT, ["--gso:", "drop --gso"])
    refused([*ccmd, *cmd, "--proto", "qprof"], STACK_CANNOT, ["--proto qprof", "drop --proto"])
    refused([*ccmd, *cmd, "--server-stack", "quic"], STACK_CANNOT, ["--server-stack:", "drop --server-stack"])
    refused([*ccmd, *cmd, "--pacing", "off"], STACK_CANNOT, ["--pacing is msquic's", "Drop --pacing"])
    refused([*ccmd, "--mix", "quic:1"], errors.BadMix.exit_code, ["drop --client-cmd"])
    refused(["--client-cmd", "perf_client {duration}"], BAD_VALUE, ["--client-cmd names {duration}"])
    refused(["--categories", "my.rules", "--guest"], BAD_VALUE, ["--categories: a guest run's stacks", "drop --guest"])


@pytest.mark.unit
def test_a_stack_file_stands_for_the_flags_it_names(tmp_path):
    """--stack-file: the programs and rules the user wrote once, as the
    flags they stand for (the page's example: docs/examples/); what it
    cannot say, or says twice, refused in one sentence naming the file."""
    example = REPO / "docs" / "examples" / "my-stack.toml"
    o = run_plan("--stack-file", str(example)).options
    assert (o.stack, o.stack_file, o.direction) == ("external", str(example), "down")
    assert o.server_cmd.startswith("./build/bin/qprof-wl --stack quiche") and "--stack quinn" in o.client_cmd
    assert o.categories == str(example.parent / "my-stack.rules")
    f = tmp_path / "s.toml"
    cases = [
        ('server = "x {port}"\nclient = 1\n', ["client is not a text"]),
        ('server = "x"\nlibrary = "mine"\n', ["names 'library', which qprof does not take", "server, client"]),
        ('protocol = "hq-interop"\nserver = "x"\n', ["protocol 'hq-interop'", "(perf)"]),
        ('categories = "my.rules"\n', ["names neither a server nor a client"]),
        ("server = x {port}\n", ["is not TOML", 'key = "value"']),
    ]
    for text, words in cases:
        f.write_text(text)
        refused(["--stack-file", str(f)], BAD_VALUE, [f"--stack-file {f}", *words])
    f.write_text('server = "perf_server -p {port}"\n')
    assert run_plan("--stack", "quinn", "--stack-file", str(f)).options.server_cmd == "perf_server -p {port}"
    refused(["--stack-file", str(f), "--server-cmd", "y"], BAD_VALUE, ["gives the server and --server-cmd gives it"])
    refused(["--stack-file", str(tmp_path / "none.toml")], BAD_VALUE, ["cannot read it", "No such file"])


@pytest.mark.unit
def test_perf_protocol_is_bulk_on_a_quic_stack():
    """--proto perf is the QUIC performance protocol: bulk's, on a QUIC
    stack; qprof's own protocol is filled in where it applies, and a TCP
    stack or another pattern refuses perf in one sentence."""
    for stack in ("quic", "quinn", "quic-go"):
        assert run_plan("--stack", stack).options.proto == "perf"
        assert run_plan("--stack", stack, "--proto", "qprof").options.proto == "qprof"
    assert run_plan("--stack", "tcp").options.proto is None
    refused(["--stack", "tcp", "--proto", "perf"], STACK_CANNOT, ["--proto applies to --stack quic", "drop --proto"])
    refused(["--pattern", "rr", "--proto", "perf"], STACK_CANNOT, ["--proto applies to --pattern bulk only"])
    refused(["--proto", "http"], BAD_VALUE, ["--proto takes qprof or perf"])


@pytest.mark.unit
def test_a_pair_of_libraries_runs_each_on_its_side(tmp_path):
    """--server-stack: the server's workload runs the server's library and
    the client's the client's; what one side's library cannot do, or
    what one library's knob would set on one side only, is refused."""
    from qprof.collectors import endpoints, listen

    p = run_plan("--stack", "quinn", "--server-stack", "quic")
    o = p.options
    # msquic's server runs with the listening-address interposer, which a
    # unit test need not have built (`make check` builds nothing): a build of its own.
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / listen.LIB).write_bytes(b"")
    argv = {
        role: endpoints.workload_argv("qprof-wl", o, role, "10.0.0.1", 4433, build_dir=tmp_path)
        for role in ("client", "server")
    }
    assert [a[a.index("--stack") + 1] for a in argv.values()] == ["quinn", "quic"]
    refused(["--stack", "tcp", "--server-stack", "quic"], STACK_CANNOT, ["--server-stack applies to --stack quic"])
    refused(["--stack", "quinn", "--server-stack", "tcp"], BAD_VALUE, ["--server-stack takes quic"])
    refused(["--stack", "quic", "--server-stack", "quinn", "--pacing", "off"], STACK_CANNOT, ["--pacing is msquic's"])
    refused(["--stack", "quic", "--server-stack", "quinn", "--msquic", "/x.so"], STACK_CANNOT, ["--msquic is msquic's"])
    refused(
        ["--stack", "quinn", "--server-stack", "s2n-quic", "--pattern", "download", "--resume"],
        STACK_CANNOT,
        ["s2n-quic has none to resume"],
    )
    refused(["--mix", "quic:1,tcp:1", "--server-stack", "quinn"], BAD_MIX, ["--server-stack pairs the two sides"])


@pytest.mark.unit
def test_a_stack_make_run_leaves_out_names_make_build(tmp_path, monkeypatch):
    """After `make run` alone (qprof-wl and msquic built, none of the other
    libraries' transports): the quic stack passes the build check, and each
    stack whose transport is a library of its own, client's or server's, is
    refused in one sentence that names it and `make build`, exit 11."""
    from qprof.collectors import preflight
    from qprof.describe.transports import STACKS

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "qprof-wl").write_text("")
    (tmp_path / "bin" / "qprof-wl").chmod(0o755)
    monkeypatch.setenv("QPROF_BUILD_DIR", str(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # past the root check, to the build's
    assert preflight.check(run_plan("--stack", "quic")) == tmp_path / "bin" / "qprof-wl"
    plugins = [s for s in STACKS.values() if s.plugin]
    assert {"quinn", "quic-go"} <= {s.name for s in plugins}
    for s in plugins:
        for args in (["--stack", s.name], ["--stack", "quic", "--server-stack", s.name]):
            with pytest.raises(errors.NotBuilt) as e:
                preflight.check(run_plan(*args))
            sentence = e.value.sentence
            assert e.value.exit_code == 11 and "\n" not in sentence and sentence.endswith("."), sentence
            for w in (f"--stack {s.name}'s transport is not built", f"{tmp_path}/lib/{s.plugin} is missing"):
                assert w in sentence, sentence
            assert "`make run` leaves it out" in sentence and "run `make build` in" in sentence, sentence
