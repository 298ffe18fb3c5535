# SPDX-License-Identifier: GPL-2.0-only
"""`qprof ls`: the runs and comparisons under the runs directory, from
the run history (core/history.py), newest first."""

import json
from pathlib import Path
from typing import Dict, List

import click

from qprof import errors, history
from qprof.cli.run_options import runs_dir_option, whole_number
from qprof.describe import options
from qprof.describe.options import STACK_NAMES
from qprof.errors import BadValue, QprofError
from qprof.present import tables

# Index columns that say how the index knows the record, not what it holds.
INTERNAL = ("record_size", "record_mtime_ns")


def parse_option_filters(items: List[str]) -> Dict[str, object]:
    """['io-size=64K', 'gso=off'] -> {'io_size': 65536, 'gso': 'off'}: keys
    by flag or by the record's config field, values parsed as the flag
    takes them (2s, 64K); a key the option table does not know (an older
    record's) compared as JSON, else as text."""
    wanted: Dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise BadValue(f"--option '{item}' is not KEY=VALUE; write it like streams=4 or link=wifi.")
        o = options.BY_NAME.get(key) or options.BY_FIELD.get(key) or options.BY_FIELD.get(key.replace("-", "_"))
        if o is None:
            try:
                wanted[key] = json.loads(text)
            except ValueError:
                wanted[key] = text
        elif o.kind == "flag":
            flags = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}
            if text.lower() not in flags:
                raise BadValue(f"--option {key} takes on or off, not '{text}'.")
            wanted[o.field] = flags[text.lower()]
        else:
            try:
                wanted[o.field] = o.parse(text)
            except QprofError as e:
                raise BadValue(f"--option {key}: {e.sentence}")
    return wanted


@click.command(name="ls")
@click.option("--stack", "-s", default=None, help="Only runs of this stack (mix for --mix runs; a comparison of it).")
@click.option("--pattern", type=click.Choice(options.PATTERNS), default=None, help="Only runs of this pattern.")
@click.option(
    "--option",
    "option_items",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only runs whose option KEY has VALUE (as `qprof run` takes it: streams=4, io-size=64K, "
    "duration=2s); repeat for several. A comparison matches when one configuration does.",
)
@click.option("--since", default=None, metavar="7d|24h|DATE", help="Only runs since then (m, h, d, w; or ISO date).")
@click.option("--machine", default=None, help="Only runs on a machine whose hostname or CPU model contains this.")
@click.option("--kind", type=click.Choice(("run", "comparison")), default=None, help="Only runs, or comparisons.")
@click.option(
    "--status",
    type=click.Choice(history.STATUSES),
    default=None,
    help="Only runs in this state; corrupt: a record that cannot be read or lacks what its status promises.",
)
@click.option(
    "--limit", "-n", type=whole_number("limit", 0), default=20, show_default=True, help="At most N; 0 for all."
)
@click.option("--reindex", is_flag=True, help="Rebuild the index from the run directories first.")
@click.option("--json", "as_json", is_flag=True, help="One JSON array on stdout instead of the table.")
@runs_dir_option
def ls(stack, pattern, option_items, since, machine, kind, status, limit, reindex, as_json, runs_dir):
    """List runs and comparisons, newest first, with their headline figures.

    Every run and comparison is indexed as it ends in RUNS_DIR/index.sqlite
    (SQLite): its options, the environment it was measured in (kernel,
    CPU, msquic, qprof and its git commit) and its figures. The index is a
    cache of the records: it is brought up to date with the directories
    each time, rebuilt when missing, corrupt or of another version, and
    --reindex rebuilds it outright. A run whose record is incomplete or
    unreadable is listed with its state; `qprof show ID` prints it.

    \b
    EXAMPLES:
      qprof ls                                   # the latest 20
      qprof ls --stack quic --since 7d
      qprof ls --option streams=4 --option gso=off --json
      qprof ls --machine EPYC --status complete -n 0
      qprof ls --kind comparison
      qprof ls --reindex                         # rebuild the index from the directories
    """
    if stack is not None and stack not in (*STACK_NAMES, "mix"):
        raise errors.UnknownStack(f"unknown stack '{stack}'; valid stacks are: {', '.join(STACK_NAMES)}, mix.")
    root = Path(runs_dir)
    wanted = parse_option_filters(list(option_items))
    since_s = history.parse_since(since) if since is not None else None
    db = history.index(root, rebuild=reindex)
    try:
        rows = history.query(
            db,
            stack=stack,
            pattern=pattern,
            kind=kind,
            status=status,
            since=since_s,
            machine=machine,
            options=wanted,
            limit=limit or None,
        )
    finally:
        db.close()
    if as_json:
        out = [{k: v for k, v in row.items() if k not in INTERNAL} for row in rows]
        for row in out:
            row["path"] = str(root / row["path"])
        click.echo(json.dumps(out, indent=2))
        return
    tables.print_run_list(rows, root)
