"""qprof: where the CPU goes when bulk data moves over QUIC and TCP+kTLS.

The top-level folders are the package's parts: cli/ is the package `qprof`
itself (the command), and collectors/, probes/, flamegraphs/, workloads/
are its subpackages.
"""
from setuptools import setup

PARTS = ["collectors", "probes", "flamegraphs", "workloads"]

setup(
    name="qprof",
    version="0.1.0",
    description="CPU nanoseconds per byte for QUIC (msquic) and TCP/kTLS bulk transfers",
    python_requires=">=3.9",
    packages=["qprof"] + [f"qprof.{p}" for p in PARTS],
    package_dir={"qprof": "cli", **{f"qprof.{p}": p for p in PARTS}},
    install_requires=[
        "click>=8.1,<9",
        "rich>=13.7,<16",
    ],
    extras_require={"test": ["pytest>=8,<10", "jsonschema>=4.18,<5"]},
    entry_points={"console_scripts": ["qprof = qprof.main:main"]},
)
