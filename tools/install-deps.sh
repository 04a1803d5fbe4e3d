#!/usr/bin/env bash
# Installs the Debian packages MegaTrain-C builds and runs with, when any is missing.
# Run by `make demo` and `make test`, so a fresh machine needs nothing else.
set -euo pipefail
packages=(build-essential cmake pkg-config python3 libopenmpi-dev openmpi-bin libucx-dev ucx-utils
          libnuma-dev libhwloc-dev libconfig-dev libcjson-dev libpcre2-dev libxxhash-dev xxhash liburing-dev gnuplot-nox)
# `make fuzz` builds with clang's libFuzzer (and OpenMP for clang); nothing else needs them.
[ "${1:-}" = fuzz ] && packages+=(clang libclang-rt-14-dev libomp-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
