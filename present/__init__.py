# SPDX-License-Identifier: GPL-2.0-only
"""qprof.present: terminal tables, the HTML report and the one number formatter."""
