# SPDX-License-Identifier: GPL-2.0-only
"""The progress a person watching sees: a guest run's expected length,
and the bar's "time left" column."""

from dataclasses import replace
from types import SimpleNamespace

import pytest

from qprof.cli.run_cmd import _Left
from qprof.collectors import placement
from qprof.describe import options

pytestmark = pytest.mark.unit


def test_guest_expected_length():
    opts = replace(options.RunOptions(), duration_s=4.0, warmup_s=1.0)
    assert placement.guest_expected_s(opts) == placement.GUEST_OVERHEAD_S + 5.0
    # A run as long as its transfer (--bytes, downloads) has no expected length.
    assert placement.guest_expected_s(replace(opts, duration_s=None)) is None


def test_time_left_counts_down_and_never_below_zero():
    left = _Left()
    assert left.render(SimpleNamespace(total=30.0, elapsed=12.4)).plain == "about 18 s left"
    assert left.render(SimpleNamespace(total=30.0, elapsed=31.0)).plain == "any moment"
    assert left.render(SimpleNamespace(total=None, elapsed=3.0)).plain == ""
