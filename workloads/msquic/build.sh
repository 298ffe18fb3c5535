#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Fetch msquic's source from crates.io (pinned by Cargo.lock, checksummed)
# and build its C library with cmake, frame pointers on, into $1.
# Usage: build.sh --fetch        download the source into $CARGO_HOME (network)
#        build.sh BUILD_DIR [-DOPTION=VALUE ...]
#                                build offline (BUILD_DIR gets lib/ and include/);
#                                the options go to msquic's cmake (the tests' second
#                                build, for --msquic: -DQUIC_ENABLE_POOL_ALLOC=OFF)
# QPROF_MSQUIC_REUSE=DIR: another checkout's msquic BUILD_DIR. Where it was built
# from the same source with the same flags and options (its stamp is this one's),
# cmake and ninja run in its build tree, not a new one (ninja finds nothing to do
# while it is up to date), and its outputs are copied here (docs/setup.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "$1" = --fetch ]; then
    exec "$here/../../build-aux/crate-src.sh" "$here/Cargo.toml" msquic
fi
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
src=$("$here/../../build-aux/crate-src.sh" --offline "$here/Cargo.toml" msquic)

# -O3 because OpenSSL's Configure takes CFLAGS from the environment in
# place of its own defaults; frame pointers so perf can walk every stack.
flags="-O3 -fno-omit-frame-pointer"
stamp="$src|$flags|v1${*:+|$*}"
tree="$out/cmake"
reuse=${QPROF_MSQUIC_REUSE:-}
if [ -n "$reuse" ] && [ "$(cat "$reuse/.stamp" 2>/dev/null)" = "$stamp" ] && [ -d "$reuse/cmake" ]; then
    tree=$(cd "$reuse/cmake" && pwd)
    echo "msquic: building in $tree (QPROF_MSQUIC_REUSE, the same source, flags and options)" >&2
fi
# quictls as msquic built it (headers, static libcrypto): qprof-floor
# measures QUIC's AEAD through the very library msquic links.
quictls() {
    rm -rf "$out/quictls" && mkdir -p "$out/quictls/lib" &&
        cp -a "$tree/_deps/opensslquic-build/quictls/include" "$out/quictls/" &&
        cp "$tree/_deps/opensslquic-build/quictls/lib/libcrypto.a" "$out/quictls/lib/"
}
if [ -f "$out/lib/libmsquic.so" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
    [ -f "$out/quictls/lib/libcrypto.a" ] || quictls
    echo "msquic: up to date in $out" >&2
    exit 0
fi
rm -rf "$out/cmake" "$out/lib" "$out/include"
CFLAGS="$flags" CXXFLAGS="$flags" cmake -S "$src" -B "$tree" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQUIC_TLS_LIB=quictls \
    -DQUIC_BUILD_SHARED=ON -DQUIC_ENABLE_LOGGING=OFF -DQUIC_EMBED_GIT_HASH=OFF \
    -DQUIC_OUTPUT_DIR="$tree/out" "$@" >&2
ninja -C "$tree" msquic >&2
mkdir -p "$out/lib" "$out/include"
cp -a "$tree/out"/libmsquic.so* "$out/lib/"
cp "$src/src/inc/msquic.h" "$src/src/inc/msquic_posix.h" "$src/src/inc/quic_sal_stub.h" "$out/include/"
quictls
echo "$stamp" > "$out/.stamp"
echo "msquic: built $(ls "$out/lib") in $out" >&2
