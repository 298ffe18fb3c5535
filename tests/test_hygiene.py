# SPDX-License-Identifier: GPL-2.0-only
"""The license is stated once (LICENSE, GPL-2.0) and on every source file
(an SPDX line), and the BPF programs' license section agrees with it."""

import re
import subprocess

import pytest

from conftest import REPO

pytestmark = pytest.mark.unit

SPDX = "SPDX-License-Identifier: GPL-2.0-only"
SOURCES = re.compile(r"(\.(py|c|h|sh|bt)|Makefile|\.ci/run)$")


def tracked() -> list:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [f for f in out.split() if SOURCES.search(f) and not f.startswith("tests/data/")]


def test_license_is_gpl2():
    text = (REPO / "LICENSE").read_text()
    assert "GNU GENERAL PUBLIC LICENSE" in text and "Version 2, June 1991" in text


def test_every_source_file_has_the_spdx_line():
    files = tracked()
    assert len(files) > 50, files
    missing = [f for f in files if SPDX not in "\n".join((REPO / f).read_text().splitlines()[:3])]
    assert not missing, missing


def test_bpf_programs_declare_gpl():
    for f in (REPO / "probes").glob("*.bpf.c"):
        assert 'SEC("license") = "GPL"' in f.read_text(), f
