# SPDX-License-Identifier: GPL-2.0-only
"""qprof: where the CPU goes when bulk data moves over QUIC and TCP+kTLS.

This package's own modules are the core every part imports: errors (exit
codes and sentences), paths, units, rundir (the run directory and its
records), history (the runs indexed for `qprof ls`), interrupts, remains
(the ledger) and the version. The parts are
its subpackages: cli (the command), collectors (measurement), flamegraphs
(folded stacks per byte); dependencies point cli -> collectors ->
flamegraphs -> core (tests/test_layers.py).
"""

__version__ = "0.1.0"
