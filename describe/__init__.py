# SPDX-License-Identifier: GPL-2.0-only
"""qprof.describe: a run record from what was measured, with nothing that touches the machine."""
