"""The C workload (qprof-wl) lives beside this file; Python only locates it."""
