"""Measurement: topology, workload processes, CPU accounting, the run record."""
