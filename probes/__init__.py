# SPDX-License-Identifier: GPL-2.0-only
"""eBPF probes (libbpf CO-RE on tracepoints) and their bpftrace twins."""
