# SPDX-License-Identifier: GPL-2.0-only
"""`qprof run ARGS` as far as its plan, in this process: the refusals
that parsing, the run command and describe/plan.py's resolve decide,
tested in the unit tier without a Python start-up each.

It takes the CLI's own path, and no other: the real click command parses
ARGS (its types and ranges: the option table, through cli/run_options.py), its callback
(cli/run_cmd.py's run) makes the RunOptions and checks what it checks
itself, and collectors/runner.run resolves the plan as it always does,
with this machine's CPU count. The first question only the machine can
answer (collectors/preflight.py: root, the build, the kernel, the CPUs
and files named) is where it stops; nothing before it makes anything.
What cli/main.py prints around an error (`qprof: `, and a usage error's
`see ... --help`) is tested end to end, one `qprof run` per exit code
(tests/test_exit_codes.py)."""

from unittest import mock

import click
import pytest

from qprof import errors
from qprof.cli import run_cmd
from qprof.collectors import preflight


class _Resolved(Exception):
    """runner.run got as far as preflight: the plan it resolved."""

    def __init__(self, plan):
        super().__init__("resolved")
        self.plan = plan


def _stop(plan, faults=None):
    raise _Resolved(plan)


def run_plan(*args):
    """The plan `qprof run ARGS` would measure; else the QprofError, or
    click's usage error (exit 2), the CLI would stop with."""
    with mock.patch.object(preflight, "check", _stop):
        try:
            with run_cmd.run.make_context("run", list(args)) as ctx:
                run_cmd.run.invoke(ctx)
        except _Resolved as r:
            return r.plan
    raise AssertionError(f"qprof run {' '.join(args)} ended without reaching preflight")


def refused(args, code, words):
    """`qprof run ARGS` refused before anything runs, as tests/test_bad_input's
    refused_run holds it end to end: its exit code, and one sentence holding
    each of words. The sentence, for the caller to check further."""
    with pytest.raises((errors.QprofError, click.UsageError)) as e:
        run_plan(*args)
    err = e.value
    if isinstance(err, click.UsageError):
        # cli/main.py prints it on one line, its whitespace collapsed.
        sentence = " ".join(err.format_message().split())
    else:
        sentence = err.sentence
        assert "\n" not in sentence and sentence.rstrip().endswith("."), sentence
    assert err.exit_code == code, sentence
    for w in words:
        assert w in sentence, sentence
    return sentence
