# SPDX-License-Identifier: GPL-2.0-only
"""The `qprof` command: click subcommands, one module each, over the
libraries (qprof.collectors, qprof.flamegraphs) and the core (qprof)."""
