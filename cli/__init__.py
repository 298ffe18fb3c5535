"""qprof: where the CPU goes when bulk data moves over QUIC and TCP+kTLS."""
__version__ = "0.1.0"
