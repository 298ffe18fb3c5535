"""Flame graphs normalised to CPU nanoseconds per byte."""
