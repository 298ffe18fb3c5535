#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# qprof's Rust parts (the transports of qprof-wl's written in Rust, quinn's,
# each a library qprof-wl loads; quiche's C API as a static library), every
# crate pinned by checksum in Cargo.lock beside this file.
# Usage: build.sh --fetch      download every crate into $CARGO_HOME (network)
#        build.sh BUILD_DIR    build offline; the transports in BUILD_DIR/lib, quiche's library in BUILD_DIR/rs-ffi
# QPROF_RS_TARGET_DIR: cargo's target directory, BUILD_DIR/rs by default; one
# shared with another checkout's build rebuilds only what differs (cargo
# decides; docs/setup.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "$1" = --fetch ]; then
    exec cargo fetch --locked --manifest-path "$here/Cargo.toml" --target "$(rustc -vV | sed -n 's/^host: //p')"
fi
out=$(mkdir -p "$1/lib" && cd "$1" && pwd)
target=${QPROF_RS_TARGET_DIR:-$out/rs}
# Frame pointers in our code and the crates', so perf walks every Rust
# frame (the standard library's are as rustup built them).
RUSTFLAGS="-C force-frame-pointers=yes" cargo build --release --locked --offline \
    --manifest-path "$here/Cargo.toml" --target-dir "$target" --quiet
# Each transport crate's library (a cdylib named qprof_wl_STACK: quinn's),
# which qprof-wl loads for --stack STACK (wl_plugin.c).
for so in "$target"/release/libqprof_wl_*.so; do
    [ -e "$so" ] || continue
    name=$(basename "$so" .so)
    stack=${name#libqprof_wl_}
    cp "$so" "$out/lib/libqprof-wl-${stack//_/-}.so.new"
    mv "$out/lib/libqprof-wl-${stack//_/-}.so.new" "$out/lib/libqprof-wl-${stack//_/-}.so"
done
rm -f "$out/bin/qprof-wl-quinn" # the program quinn's transport replaced
# quiche's C API for qprof-wl's quiche transport (the Makefile's
# QUICHE_PLUGIN): the static library quiche-ffi makes, and the headers of
# the quiche and the BoringSSL it was built from, in BUILD_DIR/rs-ffi;
# each copied only when it changed, so make rebuilds only then.
ffi="$out/rs-ffi"
mkdir -p "$ffi/include"
lib="$target/release/libqprof_quiche_ffi.a"
cmp -s "$lib" "$ffi/libqprof_quiche_ffi.a" || { cp "$lib" "$ffi/lib.new" && mv "$ffi/lib.new" "$ffi/libqprof_quiche_ffi.a"; }
# The crates' sources as make fetch left them in cargo's registry, at the
# versions Cargo.lock pins (cargo metadata would want every platform's
# crates, which fetch leaves out).
locked() { sed -n "/^name = \"$1\"\$/{n;s/^version = \"\(.*\)\"\$/\1/p;q}" "$here/Cargo.lock"; }
registry="${CARGO_HOME:-$HOME/.cargo}/registry/src"
crate_dir() {
    local d
    for d in "$registry"/*/"$1-$(locked "$1")"; do
        [ -d "$d" ] && { echo "$d"; return; }
    done
    echo "build.sh: $1 $(locked "$1") is not in $registry; run make fetch" >&2
    exit 1
}
quiche_dir=$(crate_dir quiche)
boring_dir=$(crate_dir boring-sys)
cp -ru "$quiche_dir/include/quiche.h" "$boring_dir/deps/boringssl/include/openssl" "$ffi/include/"
# tquic's C API for qprof-wl's tquic transport (the Makefile's TQUIC_PLUGIN),
# the same way: its static library, and the headers of the tquic and the
# BoringSSL it vendors, in BUILD_DIR/rs-ffi/tquic (its BoringSSL is not
# quiche's).
tq="$ffi/tquic"
mkdir -p "$tq/include"
lib="$target/release/libqprof_tquic_ffi.a"
cmp -s "$lib" "$tq/libqprof_tquic_ffi.a" || { cp "$lib" "$tq/lib.new" && mv "$tq/lib.new" "$tq/libqprof_tquic_ffi.a"; }
tquic_dir=$(crate_dir tquic)
cp -ru "$tquic_dir/include/tquic.h" "$tquic_dir/include/tquic_def.h" "$tquic_dir/deps/boringssl/src/include/openssl" "$tq/include/"
