#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# qprof's Rust workloads (one binary per QUIC implementation, sharing
# wlproto), every crate pinned by checksum in Cargo.lock beside this file.
# Usage: build.sh --fetch      download every crate into $CARGO_HOME (network)
#        build.sh BUILD_DIR    build offline; binaries in BUILD_DIR/bin
# QPROF_RS_TARGET_DIR: cargo's target directory, BUILD_DIR/rs by default; one
# shared with another checkout's build rebuilds only what differs (cargo
# decides; docs/setup.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "$1" = --fetch ]; then
    exec cargo fetch --locked --manifest-path "$here/Cargo.toml" --target "$(rustc -vV | sed -n 's/^host: //p')"
fi
out=$(mkdir -p "$1/bin" && cd "$1" && pwd)
target=${QPROF_RS_TARGET_DIR:-$out/rs}
# Frame pointers in our code and the crates', so perf walks every Rust
# frame (the standard library's are as rustup built them).
RUSTFLAGS="-C force-frame-pointers=yes" cargo build --release --locked --offline \
    --manifest-path "$here/Cargo.toml" --target-dir "$target" --quiet
for b in qprof-wl-quinn qprof-wl-quiche; do
    cp "$target/release/$b" "$out/bin/$b.new" && mv "$out/bin/$b.new" "$out/bin/$b"
done
