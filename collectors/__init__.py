# SPDX-License-Identifier: GPL-2.0-only
"""Measurement: topology, workload processes, CPU accounting, the run record."""
