#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Print the source directory of CRATE, a dependency pinned (by checksum) in
# the Cargo.lock beside MANIFEST, fetching it and every dependency it has on
# this host's target into $CARGO_HOME first, unless --offline.
# Usage: crate-src.sh [--offline] MANIFEST CRATE
#
# Fetch and resolve for the host's target only: `cargo metadata` without
# --filter-platform resolves every target's dependencies (windows-sys, …),
# which `cargo fetch --target` never downloaded, and fails offline on an
# empty cargo home (issue 11).
set -euo pipefail
offline=
if [ "${1:-}" = --offline ]; then offline=--offline; shift; fi
manifest=$1 crate=$2
target=$(rustc -vV | sed -n 's/^host: //p')
if [ -z "$offline" ]; then
    cargo fetch --locked --manifest-path "$manifest" --target "$target" >&2
fi
cargo metadata --locked --offline --filter-platform "$target" --format-version 1 --manifest-path "$manifest" |
    python3 -c 'import json, os, sys
m = json.load(sys.stdin)
print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"] == sys.argv[1]))' "$crate"
