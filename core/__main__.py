# SPDX-License-Identifier: GPL-2.0-only
"""`python -m qprof`: the command's entry point (not a library module)."""

from qprof.cli.main import main

main()
