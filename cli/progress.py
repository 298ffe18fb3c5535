# SPDX-License-Identifier: GPL-2.0-only
"""A long step's progress for a person watching: one line on the
terminal's stderr that says what is being done and for how long, gone
when it is done (rich); elsewhere each message goes where it went."""

from contextlib import contextmanager
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@contextmanager
def stage_line(on_terminal: bool, elsewhere: Callable[[str], None]):
    """say(message): on a terminal, the line's new text; else elsewhere(message)."""
    if not on_terminal:
        yield elsewhere
        return
    console = Console(stderr=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("starting", total=None)
        width = max(20, console.width - 16)

        def say(message: str) -> None:
            text = message if len(message) <= width else message[: width - 1] + "…"
            progress.update(task, description=escape(text))

        yield say
