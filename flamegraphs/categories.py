# SPDX-License-Identifier: GPL-2.0-only
"""Each sample of a folded stack in one category of work, by the rules in
categories.rules (its header says how a stack is classified: leaf first,
the first frame that any rule matches decides).

`categorize(stacks)` returns samples per category for every category in
CATEGORIES order, zeros included, so the result has the same shape for
every side and run and its values sum to the input's samples.

    python -m qprof.flamegraphs.categories [FILE]   # samples per category, JSON; stdin without FILE
"""

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Pattern, Sequence

from qprof.errors import BadValue

from . import folded

CATEGORIES = (
    "handshake",  # key exchange, signatures, certificates and the handshake's messages
    "crypto",
    "protocol",
    "HTTP framing",  # --app: HTTP/1.1's parser and heads (HTTP/2, HTTP/3 with HPACK and QPACK)
    "runtime",  # a runtime's own work: Go's collector, scheduler, stack growth, cgo calls; tokio's scheduler
    "copies",
    "send syscalls",
    "receive syscalls",
    "kernel net stack",
    "NIC driver",  # a real NIC's driver (a run between hosts); a veth is the device's
    "device and softirq",
    "scheduling",
    "eBPF probes",
    "verification",  # the workload's content check, beside the rest of its own code
    "other",
)
OTHER = "other"
RULES_PATH = Path(__file__).with_name("categories.rules")


@dataclass(frozen=True)
class Rule:
    category: str
    pattern: Pattern
    line: int


def parse_rules(text: str, name: str = str(RULES_PATH)) -> List[Rule]:
    rules = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        category, tab, regex = line.partition("\t")
        if not tab or not regex:
            raise BadValue(f"{name}:{lineno}: a rule is CATEGORY<TAB>REGEX; this line has no tab or no regex.")
        if category not in CATEGORIES:
            raise BadValue(f"{name}:{lineno}: unknown category '{category}'; use one of: {', '.join(CATEGORIES)}.")
        try:
            rules.append(Rule(category, re.compile(regex), lineno))
        except re.error as e:
            raise BadValue(f"{name}:{lineno}: bad regular expression ({e}); fix the rule.")
    return rules


def load_rules(path: Path = RULES_PATH) -> List[Rule]:
    return parse_rules(path.read_text(encoding="utf-8"), str(path))


class Classifier:
    """Rules plus a per-frame cache: a capture repeats the same frames in
    many stacks."""

    def __init__(self, rules: Optional[Sequence[Rule]] = None):
        self.rules = list(load_rules() if rules is None else rules)
        self._frame: Dict[str, Optional[str]] = {}

    def frame_category(self, frame: str) -> Optional[str]:
        if frame not in self._frame:
            self._frame[frame] = next((r.category for r in self.rules if r.pattern.search(frame)), None)
        return self._frame[frame]

    def stack_category(self, stack: str) -> str:
        """Leaf first; the root (process name) is never matched."""
        for frame in reversed(folded.frames(stack)[1:]):
            category = self.frame_category(frame)
            if category is not None:
                return category
        return OTHER


# A run's own rules (`qprof run --categories FILE`), kept in its directory.
RUN_RULES = "categories.rules"


def for_run(run_dir: Path) -> Classifier:
    """The classifier of a run's stacks: the rules its --categories file
    gave, tried first at each frame, then qprof's."""
    own = run_dir / RUN_RULES
    if not own.exists():
        return Classifier()
    return Classifier(load_rules(own) + load_rules())


def categorize(stacks: Mapping[str, int], classifier: Optional[Classifier] = None) -> Dict[str, int]:
    """{category: samples} in CATEGORIES order."""
    classifier = classifier or Classifier()
    out = {c: 0 for c in CATEGORIES}
    for stack, count in stacks.items():
        out[classifier.stack_category(stack)] += count
    return out


def main(argv: Sequence[str]) -> int:
    data = folded.read(argv[0] if argv else None)
    print(json.dumps(categorize(data.stacks), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
