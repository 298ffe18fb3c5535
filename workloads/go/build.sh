#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# qprof's Go part: quic-go's transport of qprof-wl's (workloads/go/quic-go,
# a C shared library qprof-wl loads for --stack quic-go), built by the Go
# that go.mod's `toolchain` line names. The Go module proxy serves each Go
# release as a module (golang.org/toolchain, checked against the checksum
# database as every module is), so any Go downloads it: Debian 12's 1.19
# (golang-go), too old to build quic-go, or a newer one. Modules and
# toolchain go to the module cache (`go env GOMODCACHE`), pinned by go.sum.
# Usage: build.sh --fetch      download the toolchain and every module (network)
#        build.sh BUILD_DIR    build offline: BUILD_DIR/lib/libqprof-wl-quic-go.so
#        build.sh --fmt-check  gofmt's verdict on the Go (make lint)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/quic-go"
version=$(sed -n 's/^toolchain go//p' "$src/go.mod")
case $(uname -m) in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) echo "build.sh: no Go toolchain for $(uname -m)" >&2; exit 1 ;;
esac
toolchain="golang.org/toolchain@v0.0.1-go$version.linux-$arch"
host_go=$(command -v go || true)
if [ -z "$host_go" ]; then
    echo "build.sh: no go to download Go $version with; run make apt (golang-go)" >&2
    exit 1
fi
export GOTOOLCHAIN=local GOFLAGS=-modcacherw
modcache=$("$host_go" env GOMODCACHE)
go="$modcache/$toolchain/bin/go"
if [ "$1" = --fetch ]; then
    if [ ! -x "$go" ]; then
        tmp=$(mktemp -d)
        trap 'rm -rf "$tmp"' EXIT
        (cd "$tmp" && echo "module fetch" > go.mod && "$host_go" mod download "$toolchain")
        # A module's files carry no modes: the programs made executable, as go's own toolchain switch does.
        chmod +x "$modcache/$toolchain/bin/"* "$modcache/$toolchain/pkg/tool/linux_$arch/"*
    fi
    cd "$src" && exec "$go" mod download
fi
if [ ! -x "$go" ]; then
    echo "build.sh: Go $version is not in $modcache; run make fetch" >&2
    exit 1
fi
if [ "$1" = --fmt-check ]; then
    bad=$("${go%/go}/gofmt" -l "$here")
    [ -z "$bad" ] || { echo "gofmt would change: $bad" >&2; exit 1; }
    exit 0
fi
out=$(mkdir -p "$1/lib" && cd "$1" && pwd)
cd "$src"
GOPROXY=off CGO_ENABLED=1 "$go" build -mod=readonly -buildmode=c-shared -trimpath \
    -o "$out/lib/libqprof-wl-quic-go.so.new" .
rm -f "$out/lib/libqprof-wl-quic-go.so.h"
mv "$out/lib/libqprof-wl-quic-go.so.new" "$out/lib/libqprof-wl-quic-go.so"
