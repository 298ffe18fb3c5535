# SPDX-License-Identifier: GPL-2.0-only
"""The README's set-up works from empty caches (issue 11): what `make`
downloads is fetched here into empty directories, and what the build then
reads offline is found there. A warm cargo home, pip cache or apt list on
the machine running the tests cannot hide a missing download step.

The downloads are real (crates.io ~140 MB, the Go module proxy ~90 MB with
Go's toolchain, PyPI, Debian's lists); nothing is compiled.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

# Downloads into empty directories: beside the guest tier in `make test`.
pytestmark = [pytest.mark.network, pytest.mark.beside]


@pytest.fixture(scope="module")
def target():
    """This host's Rust target triple, asked of rustc when a test needs it:
    collecting the suite runs no tool. Without rustc the cargo tests skip."""
    try:
        out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True).stdout
    except OSError:  # not on PATH, or not ours to run
        out = ""
    host = next((l.split(": ", 1)[1] for l in out.splitlines() if l.startswith("host: ")), None)
    if host is None:
        pytest.skip("no rustc on PATH; `make deps` installs cargo")
    return host


def cold_env(tmp_path: Path) -> dict:
    """An environment whose cargo home, Go module cache and pip cache are empty."""
    (tmp_path / "cargo").mkdir()
    return {
        **os.environ,
        "CARGO_HOME": str(tmp_path / "cargo"),
        "GOMODCACHE": str(tmp_path / "gomod"),
        "GOFLAGS": "-modcacherw",  # a module cache pytest's tmp_path cleanup can remove
        "PIP_NO_CACHE_DIR": "1",
        "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
    }


def run(argv, env, cwd=REPO, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=900, **kw)
    assert r.returncode == 0, f"{argv} failed:\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def fetched(tmp_path_factory, target):
    """`make fetch` with an empty CARGO_HOME and GOMODCACHE: every crate and module the build reads."""
    tmp = tmp_path_factory.mktemp("cold")
    env = cold_env(tmp)
    run(["make", "--no-print-directory", "fetch"], env)
    return env


def offline_src(env, script_dir: str, crate: str) -> Path:
    """Where the build finds CRATE's source, offline (what `make build` runs)."""
    r = run([str(REPO / "build-aux" / "crate-src.sh"), "--offline", str(REPO / script_dir / "Cargo.toml"), crate], env)
    return Path(r.stdout.strip())


def test_msquic_source_from_empty_cargo_home(fetched):
    src = offline_src(fetched, "workloads/msquic", "msquic")
    assert src.is_relative_to(fetched["CARGO_HOME"]), src
    assert src.name == "msquic-2.5.1-beta"
    for f in ("src/inc/msquic.h", "src/inc/msquic_posix.h", "CMakeLists.txt", "submodules/quictls/Configure"):
        assert (src / f).is_file(), f


def test_inferno_and_its_locked_dependencies_from_empty_cargo_home(fetched, target):
    src = offline_src(fetched, "flamegraphs/inferno", "inferno")
    assert src.is_relative_to(fetched["CARGO_HOME"]) and src.name == "inferno-0.12.8", src
    # What `cargo install --path SRC --locked --offline` resolves: every
    # dependency inferno's own Cargo.lock names for this target.
    r = run(
        [
            "cargo",
            "metadata",
            "--locked",
            "--offline",
            "--filter-platform",
            target,
            "--format-version",
            "1",
            "--manifest-path",
            str(src / "Cargo.toml"),
        ],
        fetched,
    )
    names = {p["name"] for p in json.loads(r.stdout)["packages"]}
    assert {"inferno", "quick-xml", "clap"} <= names


def test_rust_workloads_and_their_locked_dependencies_from_empty_cargo_home(fetched, target):
    """The other QUIC implementations' workloads (workloads/rs/): every crate
    their Cargo.lock pins for this target, found offline after `fetch`."""
    r = run(
        [
            "cargo",
            "metadata",
            "--locked",
            "--offline",
            "--filter-platform",
            target,
            "--format-version",
            "1",
            "--manifest-path",
            str(REPO / "workloads" / "rs" / "Cargo.toml"),
        ],
        fetched,
    )
    pkgs = json.loads(r.stdout)["packages"]
    names = {p["name"] for p in pkgs}
    assert {"wlffi", "qprof-wl-quinn", "quinn-proto", "rustls", "aws-lc-rs", "aws-lc-sys"} <= names
    assert {"qprof-quiche-ffi", "quiche", "boring", "boring-sys", "cdylib-link-lines"} <= names
    assert {"qprof-wl-s2n-quic", "s2n-quic", "s2n-tls", "s2n-tls-sys", "tokio"} <= names
    assert {"qprof-tquic-ffi", "tquic", "ring"} <= names
    # Every registry crate's source is in the fetched cargo home.
    registry = [p for p in pkgs if p["source"] and p["source"].startswith("registry+")]
    assert registry and all(Path(p["manifest_path"]).is_relative_to(fetched["CARGO_HOME"]) for p in registry)


def test_go_and_quic_go_from_empty_module_cache(fetched):
    """quic-go's transport (workloads/go/): the Go its go.mod's toolchain
    line names, from the module proxy into the empty module cache (Debian
    12's Go is too old to build quic-go), and every package the build
    compiles, listed offline by that Go from what `fetch` got."""
    src = REPO / "workloads" / "go" / "quic-go"
    want = re.search(r"^toolchain (go\S+)$", (src / "go.mod").read_text(), re.M).group(1)
    go = next(Path(fetched["GOMODCACHE"], "golang.org").glob(f"toolchain@v0.0.1-{want}.linux-*/bin/go"))
    env = {**fetched, "GOTOOLCHAIN": "local", "GOPROXY": "off", "GOFLAGS": "-mod=readonly"}
    assert run([str(go), "version"], env).stdout.split()[2] == want
    r = run([str(go), "list", "-deps", "-f", "{{.ImportPath}} {{.Module}}", "."], {**env, "PWD": str(src)}, cwd=src)
    modules = {line.split(" ", 1)[1] for line in r.stdout.splitlines() if " " in line and "<nil>" not in line}
    pinned = re.search(r"^\s*github.com/quic-go/quic-go (\S+)$", (src / "go.mod").read_text(), re.M).group(1)
    assert f"github.com/quic-go/quic-go {pinned}" in modules and "golang.org/x/net" in " ".join(modules), modules


def test_offline_build_step_refuses_what_was_not_fetched(tmp_path, target):
    """The build's offline step on an empty cargo home fails with cargo's
    reason rather than reaching the network: it reads only what `fetch` got."""
    env = cold_env(tmp_path)
    r = subprocess.run(
        [str(REPO / "workloads" / "msquic" / "build.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert r.returncode != 0
    assert "offline" in r.stderr
    assert not (tmp_path / "out" / "lib").exists()


def test_venv_from_empty_pip_cache(tmp_path):
    """`make venv` into a new directory with pip's cache off, with the test
    tools as `make test` installs them: qprof and its PyPI dependencies
    install, and the command starts."""
    env = cold_env(tmp_path)
    venv = tmp_path / "venv"
    run(["make", "--no-print-directory", f"VENV={venv}", "EXTRAS=test", "venv"], env)
    assert not (tmp_path / "pip-cache").exists()
    r = run([str(venv / "bin" / "qprof"), "--version"], env)
    assert r.stdout.startswith("qprof")


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="not a Debian machine")
def test_guest_kernel_from_empty_apt_lists(tmp_path):
    """The guest kernel's download works when apt's package lists are empty
    (a fresh image, or one where every package was already installed)."""
    lists = tmp_path / "lists"
    (lists / "partial").mkdir(parents=True)
    archives = tmp_path / "archives"
    (archives / "partial").mkdir(parents=True)
    env = {
        **os.environ,
        "APT_OPTS": f"-o Dir::State::Lists={lists} -o Dir::Cache::Archives={archives} "
        f"-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=",
    }
    r = run([str(REPO / "build-aux" / "apt.sh"), "kernel-deb", str(tmp_path / "guest")], env)
    assert "updating the package lists" in r.stderr
    debs = list((tmp_path / "guest").glob("linux-image-*-amd64_*.deb"))
    assert len(debs) == 1 and debs[0].stat().st_size > 10 << 20, debs
    r = subprocess.run(["dpkg-deb", "--info", str(debs[0])], capture_output=True, text=True)
    assert r.returncode == 0 and "Package: linux-image-" in r.stdout
