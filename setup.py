# SPDX-License-Identifier: GPL-2.0-only
"""qprof: where the CPU goes when bulk data moves over QUIC and TCP+kTLS.

The package `qprof` is core/ (errors, paths, units, files, the run
directory, the history, the ledger, the figure table, the version); its
subpackages are the top-level folders: cli/ (the commands), present/
(tables, the HTML report, the formatter), collectors/ (measuring),
describe/ (pure: options, plan, the record from a measurement),
flamegraphs/ (folded stacks per byte), probes/ and workloads/ (their
built tools are located, not imported). Dependencies point cli ->
present, collectors -> describe -> flamegraphs -> core
(tests/test_layers.py; README.md, "Layout").
"""

from setuptools import setup

PARTS = ["cli", "present", "collectors", "describe", "probes", "flamegraphs", "workloads"]

setup(
    name="qprof",
    version="0.1.0",
    description="CPU nanoseconds per byte for QUIC (msquic) and TCP/kTLS bulk transfers",
    python_requires=">=3.9",
    packages=["qprof"] + [f"qprof.{p}" for p in PARTS] + ["qprof.describe.patterns"],
    package_dir={"qprof": "core", **{f"qprof.{p}": p for p in PARTS}},
    package_data={"qprof.describe": ["schema/*.json"], "qprof.flamegraphs": ["categories.rules"]},
    install_requires=[
        "click>=8.1,<9",
        "rich>=13.7,<16",
        "hdrhistogram>=0.10.3,<0.11",  # request/response latency (HdrHistogram_py)
        # `qprof export --format pprof` writes profile.proto with it (its descriptor
        # API; GetMessageClass since 4.25)
        "protobuf>=4.25,<8",
        # `qprof report` inlines Vega, Vega-Lite and vega-embed from its
        # javascript_bundle(), offline: 0.9 MB a report (plotly.js is 4.8 MB), no Python deps
        "vl-convert-python>=1.9,<2",
    ],
    extras_require={
        "test": [
            "pytest>=8,<10",
            "jsonschema>=4.18,<5",
            "ruff==0.17.6",
            "prometheus-client>=0.17,<1",  # its OpenMetrics parser reads `qprof export --format openmetrics` back
            "selenium>=4.20,<5",  # drives Debian's chromium for tests/test_report.py
            "hypothesis>=6.100,<7",  # tests/test_fuzz.py: what qprof reads from outside, mutated
            "pytest-timeout>=2.3,<3",  # every test's time limit (pytest.ini's timeout, or its own mark)
            # tests/test_wl_perf.py: a QUIC performance-protocol peer in another implementation
            "aioquic>=1.2,<2",
            # tests/test_summary.py: a terminal (VT100) that shows what `qprof run` leaves on its screen
            "pyte>=0.8,<0.9",
        ]
    },
    entry_points={"console_scripts": ["qprof = qprof.cli.main:main"]},
)
