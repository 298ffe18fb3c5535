#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# inferno (flame graphs) from crates.io: the crate pinned by checksum in
# Cargo.lock beside this file, its dependencies as inferno's own published
# Cargo.lock pins them (what `cargo install --locked` would use).
# Usage: build.sh --fetch      download all of it into $CARGO_HOME (network)
#        build.sh ROOT         build offline; binaries in ROOT/bin: the three
#                              qprof runs (core/paths.py inferno_tool), not all
#                              eleven (28 s instead of 43 on 2 vCPUs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
crate_src="$here/../../build-aux/crate-src.sh"
if [ "$1" = --fetch ]; then
    src=$("$crate_src" "$here/Cargo.toml" inferno)
    cargo fetch --locked --manifest-path "$src/Cargo.toml" --target "$(rustc -vV | sed -n 's/^host: //p')" >&2
    echo "$src"
    exit 0
fi
src=$("$crate_src" --offline "$here/Cargo.toml" inferno)
cargo install --path "$src" --locked --offline --root "$1" --quiet \
    --bin inferno-collapse-perf --bin inferno-flamegraph --bin inferno-diff-folded
