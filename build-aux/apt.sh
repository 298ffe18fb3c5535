#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Debian packages for qprof, from empty apt lists as well as warm ones.
# Usage: apt.sh install PKG...       install those not installed yet
#        apt.sh kernel-deb DIR       download the package linux-image-amd64
#                                    depends on (the guest's kernel) into DIR
# The package lists are refreshed once when they are missing or when an
# install or download fails, so a machine whose lists are empty or stale
# (a fresh image, or all packages already installed) still works.
# APT_OPTS: extra options for apt-get/apt-cache (the tests point the lists
# at an empty directory with it).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
read -r -a opts <<< "${APT_OPTS:-}"
updated=
update() {
    [ -n "$updated" ] && return 1
    echo "apt: updating the package lists" >&2
    apt-get "${opts[@]}" update -qq
    updated=1
}
lists_empty() {
    ! apt-cache "${opts[@]}" policy linux-image-amd64 2>/dev/null | grep -q 'Candidate: [0-9]'
}

case "${1:-}" in
install)
    shift
    missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && exit 0
    echo "apt: installing ${missing[*]}" >&2
    if lists_empty; then update; fi
    apt-get "${opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" ||
        { update && apt-get "${opts[@]}" install -y -qq --no-install-recommends "${missing[@]}"; }
    ;;
kernel-deb)
    dir=$2
    mkdir -p "$dir"
    ls "$dir"/linux-image-*-amd64_*.deb >/dev/null 2>&1 && exit 0
    if lists_empty; then update; fi
    pkg() { apt-cache "${opts[@]}" depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}'; }
    name=$(pkg)
    echo "guest: downloading $name" >&2
    (cd "$dir" && apt-get "${opts[@]}" download -qq "$name") ||
        { update && name=$(pkg) && (cd "$dir" && apt-get "${opts[@]}" download -qq "$name"); }
    ;;
*)
    echo "usage: apt.sh install PKG... | apt.sh kernel-deb DIR" >&2
    exit 2
    ;;
esac
