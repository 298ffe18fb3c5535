# SPDX-License-Identifier: GPL-2.0-only
"""--msquic PATH (issue 28): the quic stack on a libmsquic of the user's.
Both sides load that file, and their loaders say so in the record, with
its version and git hash. A file that is not msquic is refused before
anything runs, and one the workloads did not load fails the run."""

import hashlib
import json
import shutil

import pytest

from qprof import errors, paths
from qprof.collectors import preflight
from qprof.describe import record

from conftest import needs_build, qprof, run_json
from refusals import refused
from test_bad_input import one_sentence, refused_run
from test_pinning import UNPINNED

MSQUIC_UNUSABLE, BAD_VALUE = 37, 4


def own_library():
    return (paths.build_dir() / "msquic" / "lib" / "libmsquic.so.2").resolve()


# The project's msquic built a second time with another flag (`make
# msquic-variant`, which `make test` runs): a build of the user's own.
VARIANT = paths.build_dir() / "msquic-nopool" / "lib" / "libmsquic.so.2"


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.system
@needs_build
@pytest.mark.skipif(not VARIANT.exists(), reason="the second msquic is not built; `make msquic-variant` builds it")
def test_compare_two_msquic_builds(runs_dir):
    """An msquic developer's regression check: `qprof compare --vary
    msquic=A,B` runs the same transfer on two builds, interleaved, and
    each run's record names the file both its sides loaded."""
    a, b = own_library(), VARIANT.resolve()
    assert sha256(a) != sha256(b)  # another flag, another library
    r = qprof(
        "compare",
        "--stack",
        "quic",
        "--vary",
        f"msquic={a},{b}",
        "--duration",
        "0.5s",
        "--warmup",
        "0.3s",
        "--repeat",
        "1",
        "--json",
        runs_dir=runs_dir,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    comp = json.loads(r.stdout)
    assert [c["overrides"]["msquic"] for c in comp["configs"]] == [str(a), str(b)]
    assert len(comp["runs"]) == 2
    for run in comp["runs"]:
        rec = json.loads((runs_dir / run["id"] / "run.json").read_text())
        lib = comp["configs"][run["config"]]["overrides"]["msquic"]
        assert rec["verified"] is True and rec["config"]["msquic"] == lib
        assert rec["environment"]["msquic_library"] == {"client": lib, "server": lib}
        assert rec["environment"]["quic_library"]["name"] == "msquic"
        assert rec["environment"]["msquic_version"] == "2.5.1"


@pytest.mark.system
@needs_build
def test_compare_refuses_a_build_it_cannot_load_before_the_first_run(runs_dir, tmp_path):
    """`--vary msquic=GOOD,BAD` used to measure GOOD, then exit 37 with an
    incomplete comparison: every configuration meets preflight first."""
    bad = tmp_path / "libmsquic.so"
    r = qprof(
        *("compare", "--stack", "quic", "--vary", f"msquic={own_library()},{bad}", "--duration", "1s"),
        runs_dir=runs_dir,
    )
    assert r.returncode == MSQUIC_UNUSABLE, r.stderr
    line = one_sentence(r.stderr)
    assert f"configuration 'quic msquic={bad}'" in line and "is not a file" in line
    assert not runs_dir.exists()  # nothing measured, no comparison directory


@pytest.mark.system
@needs_build
def test_both_sides_run_on_the_library_asked(runs_dir, tmp_path, shared):
    """A copy of the project's library under another name and place: each
    side's loader took that file, not the one qprof-wl's RUNPATH names."""
    theirs = tmp_path / "their-build" / "libmsquic-custom.so"
    theirs.parent.mkdir()
    shutil.copy(own_library(), theirs)
    rec = run_json(runs_dir, "--stack", "quic", "--msquic", str(theirs), "--duration", "0.5s", "--warmup", "0.3s")
    env = rec["environment"]
    assert env["msquic_library"] == {"client": str(theirs.resolve()), "server": str(theirs.resolve())}
    # The project's build embeds no git hash (the crate's source has no git): absent, not "Unknown".
    assert env["msquic_version"] == "2.5.1" and env["msquic_git_hash"] is None
    assert rec["config"]["msquic"] == str(theirs) and rec["verified"] is True
    # Without it, the project's own build, as the RUNPATH says.
    _, rec = shared("run", *UNPINNED)
    assert rec["config"]["msquic"] is None and rec["stack"] == "quic"
    assert set(rec["environment"]["msquic_library"].values()) == {str(own_library())}


@pytest.mark.system
@needs_build
def test_a_file_that_is_not_msquic_is_refused(runs_dir, tmp_path):
    nothing = tmp_path / "missing.so"
    refused_run(runs_dir, ["--msquic", str(nothing)], MSQUIC_UNUSABLE, ["is not a file"])
    text = tmp_path / "libmsquic.so"
    text.write_text("not a library\n")
    refused_run(runs_dir, ["--msquic", str(text)], MSQUIC_UNUSABLE, ["cannot be loaded as msquic"])
    ssl = next(p for p in ("/usr/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libssl.so.3"))
    refused_run(runs_dir, ["--msquic", ssl], MSQUIC_UNUSABLE, ["MsQuicOpenVersion"])


@pytest.mark.unit
def test_msquic_is_refused_where_it_cannot_apply():
    """Refused by the plan, before the file is looked at (tests/refusals.py)."""
    refused(
        ["--stack", "tcp", "--msquic", str(own_library())], errors.StackCannot.exit_code, ["tcp does not use msquic"]
    )
    refused(["--msquic", str(own_library()), "--guest"], BAD_VALUE, ["drop --guest or --msquic"])


@pytest.mark.unit
def test_a_library_the_sides_did_not_load_is_not_recorded(tmp_path):
    lib = tmp_path / "libmsquic.so"
    lib.write_text("")
    record.prove_msquic_library(str(lib), {"client": str(lib), "server": str(lib)})
    with pytest.raises(errors.SettingUnproven, match="did not take effect on the server: it loaded msquic from /x"):
        record.prove_msquic_library(str(lib), {"client": str(lib), "server": "/x"})


@pytest.mark.unit
def test_the_loader_check_names_the_file():
    with pytest.raises(errors.MsquicUnusable, match="--msquic /nonexistent/libmsquic.so is not a file"):
        preflight.msquic_library("/nonexistent/libmsquic.so")
