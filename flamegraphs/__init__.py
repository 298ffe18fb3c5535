# SPDX-License-Identifier: GPL-2.0-only
"""Flame graphs normalised to CPU nanoseconds per byte."""
