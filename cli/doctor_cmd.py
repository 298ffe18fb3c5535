# SPDX-License-Identifier: GPL-2.0-only
"""`qprof doctor`: what this kernel and machine allow, one line per capability."""

import dataclasses
import json

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from qprof import remains
from qprof.collectors import capabilities

VERDICT_STYLES = {"ok": "green", "limited": "yellow", "missing": "red", "unknown": "dim"}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as a JSON list on stdout instead of the table.")
def doctor(as_json):
    """Check what this kernel and machine allow qprof to measure.

    Each check really tries the capability (loads the probes, samples with
    perf, sends a GSO datagram, creates a namespace and veth, adds each
    qdisc: netem, tbf, htb) and removes what it created; the build checks
    look for what `qprof run` and `qprof flame` need from `make build`.
    Verdicts: ok, limited (works with a restriction), missing, unknown
    (could not tell; the detail says why). The exit code is 0 whatever the
    verdicts: doctor reports, it does not fail.

    \b
    EXAMPLES:
      qprof doctor                 # the table: capability, verdict, detail, what to do
      qprof doctor --json | jq -r '.[] | select(.verdict != "ok") | .name'
    """
    checks = capabilities.run_checks() + [remains_check()]
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(c) for c in checks], indent=2))
        return
    table = Table()
    for header in ("CAPABILITY", "VERDICT", "DETAIL", "WHAT TO DO"):
        table.add_column(header, overflow="fold")  # fold, not "…": details hold paths
    for c in checks:
        # Text, not markup: details quote kernel and tool messages, which may contain [brackets].
        table.add_row(Text(c.name), Text(c.verdict, style=VERDICT_STYLES[c.verdict]), Text(c.detail), Text(c.fix))
    Console().print(table)


def remains_check() -> capabilities.Check:
    """What qprof processes that died left behind (reported, not removed)."""
    try:
        dead = remains.dead_ledgers()
    except OSError as e:
        return capabilities.Check(
            "remains of dead runs",
            "unknown",
            f"cannot read {remains.state_dir()}: {e.strerror}",
            "run qprof doctor as root",
        )
    items = [f"{i} (qprof pid {d.get('pid')})" for d in dead for i in remains.describe(d)]
    if not dead:
        return capabilities.Check("remains of dead runs", "ok", "no qprof that died left anything", "")
    return capabilities.Check(
        "remains of dead runs",
        "limited",
        "; ".join(items) or f"{len(dead)} ledger(s) of dead qprof processes",
        "`qprof clean` removes them (the next `qprof run` does too)",
    )
