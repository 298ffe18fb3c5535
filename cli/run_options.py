# SPDX-License-Identifier: GPL-2.0-only
"""The options of one measured transfer as click options, shared by `qprof
run` and `qprof compare`: every one comes from the table in
describe/options.py, which also checks the values and declares each
default (resolved by describe/plan.py)."""

from dataclasses import replace

import click

from qprof.cli.units import Duration, Rate, Size
from qprof.describe import options


def _click_option(o: options.Option):
    names = [o.flag] + ([o.short] if o.short else []) + [o.field]
    kw = {"help": o.help_text, "default": o.default, "metavar": o.metavar}
    if o.kind == "flag":
        kw.update(is_flag=True)
        kw.pop("metavar")
    elif o.kind == "duration":
        kw.update(type=Duration())
    elif o.kind == "size":
        kw.update(type=Size())
    elif o.kind == "rate":
        kw.update(type=Rate())
    elif o.kind == "int":
        # Out of range on the command line is a usage error (exit 2);
        # the same bounds check --vary values (options.check, exit 4).
        kw.update(type=click.IntRange(o.lo, o.hi))
    elif o.kind == "text" and o.envvar:
        kw.update(type=click.Path(file_okay=False), envvar=o.envvar)
    elif o.kind == "choice" and o.metavar is None:
        kw.update(type=click.Choice(o.choices))
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
    return opts
