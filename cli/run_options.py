# SPDX-License-Identifier: GPL-2.0-only
"""The options of one measured transfer as click options, shared by `qprof
run` and `qprof compare`: every one comes from the table in
describe/options.py, which also checks the values and declares each
default (resolved by describe/plan.py)."""

from dataclasses import replace
from pathlib import Path
from typing import Optional

import click

from qprof import errors
from qprof.describe import external, options


class Checked(click.ParamType):
    """A number, size, duration or rate as the table's option reads it
    (Option.parse) and holds it to its range (Option.check): one sentence
    and the option's own error, never click's usage error."""

    def __init__(self, o: options.Option):
        self.option = o
        self.name = {"int": "integer"}.get(o.kind, o.kind)

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            return self.option.parse(value)
        self.option.check(value)
        return value


def whole_number(name: str, lo: int, hi: Optional[int] = None) -> Checked:
    """A command's own whole-number option, held to [lo, hi] as the table's are."""
    return Checked(options.Option(name, "int", None, "", lo=lo, hi=hi))


class CheckedChoice(click.Choice):
    """A choice as the table checks it: its help lists the choices, and a
    value that is none of them is the option's error, as with --vary."""

    def __init__(self, o: options.Option):
        super().__init__(o.choices)
        self.option = o

    def convert(self, value, param, ctx):
        self.option.check(value)
        return value


def _click_option(o: options.Option):
    names = [o.flag] + ([o.short] if o.short else []) + [o.field]
    kw = {"help": o.help_text, "default": o.default, "metavar": o.metavar}
    if o.kind == "flag":
        kw.update(is_flag=True)
        kw.pop("metavar")
    elif o.kind in ("duration", "size", "rate", "int"):
        # Read and held to its range by the table, as a --vary value is:
        # a value out of range is a bad value (exit 4) wherever it is given.
        kw.update(type=Checked(o))
        if o.kind != "duration" and (o.lo, o.hi) != (None, None) and o.range_text() not in o.help_text:
            kw["help"] = f"{o.help_text} Range: {o.range_text()}."  # as click's ranges said it
    elif o.kind == "text" and o.envvar:
        kw.update(type=click.Path(file_okay=False), envvar=o.envvar)
    elif o.kind == "choice" and o.metavar is None:
        kw.update(type=CheckedChoice(o))
    elif o.kind == "probes":
        kw.update(default=",".join(o.default), metavar="P1,P2|none")
    kw["show_default"] = o.show_default and o.default not in (None, False)
    if o.kind == "duration" and o.default is not None:
        kw["show_default"] = f"{o.default:g}s"
    return click.option(*names, **kw)


# Every command that reads run directories takes this (run and compare write
# them: theirs is the option table's "runs-dir").
runs_dir_option = click.option(
    "--runs-dir",
    type=click.Path(file_okay=False),
    default=options.BY_NAME["runs-dir"].default,
    show_default=True,
    envvar=options.BY_NAME["runs-dir"].envvar,
    help="Where run directories are.",
)


def click_option(name: str):
    """One option of the table for one command only (cli=False in the table)."""
    return _click_option(options.BY_NAME[name])


def transfer_options(f):
    for o in reversed(options.OPTIONS):
        if o.cli:
            f = _click_option(o)(f)
    return f


def to_run_options(stack: str, kwargs: dict) -> options.RunOptions:
    """RunOptions from the click keywords, every value checked."""
    fields = {k: v for k, v in kwargs.items() if k in options.BY_FIELD}
    fields["probes"] = options.parse_probes(fields["probes"])
    opts = replace(options.RunOptions(), stack=stack, **fields)
    options.check(opts)
    if opts.stack_file is not None:
        path = Path(opts.stack_file)
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise errors.BadValue(
                f"--stack-file {opts.stack_file}: cannot read it ({getattr(e, 'strerror', None) or e}); "
                "give the path of your stack file."
            ) from None
        opts = external.from_stack_file(opts, text, opts.stack_file, str(path.parent))
    return opts
