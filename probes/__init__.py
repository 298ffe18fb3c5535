"""eBPF probes (libbpf CO-RE on tracepoints) and their bpftrace twins."""
