# SPDX-License-Identifier: GPL-2.0-only
"""The C workload (qprof-wl) lives beside this file; Python only locates it."""
