# SPDX-License-Identifier: GPL-2.0-only
"""Folded stacks, the interchange format between collectors/ and
flamegraphs/ (and inferno): one stack a line, `root;frame;...;leaf COUNT`.

The root is the process name, frames run outwards-in, COUNT is a whole
number (samples as recorded; femtoseconds per byte once normalised).
Frames may hold spaces ("[unknown] "), so the count is what follows the
last space. As inferno does, a malformed line is skipped with one warning
for the whole input, never fatal; only input with nothing usable in it is.
A count past MAX_COUNT is malformed: no capture holds that many samples,
and CPU time made of it is no number a float holds.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, TextIO, Tuple, Union

from qprof.errors import BadStacks

Source = Union[str, Path, TextIO, None]
MAX_COUNT = 2**64 - 1  # inferno's counts are u64 too


def warn_stderr(message: str) -> None:
    print(f"qprof: warning: {message}", file=sys.stderr)


@dataclass
class Folded:
    """Stacks of one input, duplicates summed, in input order."""

    stacks: Dict[str, int] = field(default_factory=dict)
    name: str = "<stdin>"
    skipped_lines: int = 0  # malformed lines left out
    partial_last_line: bool = False  # the text did not end with a newline

    @property
    def samples(self) -> int:
        return sum(self.stacks.values())


def frames(stack: str) -> List[str]:
    """root, frame, ..., leaf."""
    return stack.split(";")


def parse_line(line: str) -> Optional[Tuple[str, int]]:
    """(stack, count), or None for a malformed line."""
    stack, sep, count = line.rstrip("\r\n").rpartition(" ")
    if not sep or not stack.strip() or not count.isascii() or not count.isdigit() or len(count.lstrip("0")) > 20:
        return None
    n = int(count)
    return (stack, n) if n <= MAX_COUNT else None


def parse(text: str, name: str = "<stdin>", warn: Callable[[str], None] = warn_stderr) -> Folded:
    out = Folded(name=name, partial_last_line=bool(text) and not text.endswith("\n"))
    first_bad = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parsed = parse_line(line)
        if parsed is None:
            out.skipped_lines += 1
            first_bad = first_bad or (lineno, line)
            continue
        stack, count = parsed
        out.stacks[stack] = out.stacks.get(stack, 0) + count
    if out.skipped_lines and not out.stacks:
        raise BadStacks(
            f"{name} holds no folded stacks ({out.skipped_lines} malformed line(s), "
            f"the first at line {first_bad[0]}); it should read 'root;frame;...;leaf COUNT' "
            "as `qprof run` writes it."
        )
    if out.skipped_lines:
        lineno, line = first_bad
        shown = line if len(line) <= 60 else line[:57] + "..."
        warn(
            f"{name}: skipped {out.skipped_lines} malformed line(s), the first at line {lineno} "
            f"({shown!r}); the graph leaves their samples out."
        )
    return out


def read(source: Source = None, warn: Callable[[str], None] = warn_stderr) -> Folded:
    """Folded stacks from a path, an open text file, or stdin (None or "-")."""
    if source is None or source == "-":
        return parse(sys.stdin.read(), "<stdin>", warn)
    if hasattr(source, "read"):
        return parse(source.read(), getattr(source, "name", "<input>"), warn)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BadStacks(
            f"{path} is not text (not UTF-8): it is not a folded-stacks file; "
            "fold perf.data with `perf script | inferno-collapse-perf`."
        )
    except OSError as e:
        raise BadStacks(f"cannot read {path} ({e.strerror or e}); check the path and its permissions.")
    return parse(text, str(path), warn)


def lines(stacks: Mapping[str, int]) -> Iterable[str]:
    """Stacks as folded lines, sorted, as inferno sorts them, so output is stable."""
    for stack in sorted(stacks):
        yield f"{stack} {stacks[stack]}\n"


def write(stacks: Mapping[str, int], dest: Union[str, Path, TextIO, None] = None) -> None:
    """To a path, an open text file, or stdout (None or "-")."""
    if dest is None or dest == "-":
        sys.stdout.writelines(lines(stacks))
    elif hasattr(dest, "write"):
        dest.writelines(lines(stacks))
    else:
        with open(dest, "w", encoding="utf-8") as f:
            f.writelines(lines(stacks))
