# SPDX-License-Identifier: GPL-2.0-only
"""qprof.describe: a run record from what was measured, with nothing that touches the machine."""

# The tables first, whichever module is asked for: the option table reads
# the pattern table, whose rows name their patterns' modules, which read
# the option table's rows when they run (describe/patterns/).
from qprof.describe import options  # noqa: F401, E402
