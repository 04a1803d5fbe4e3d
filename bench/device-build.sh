#!/usr/bin/env bash
# The prologue of every script run on the GPU machine, sourced from the repository's root: the
# carried Debian packages unpacked (device-setup.sh), mpirun allowed as root (the machine runs
# its commands as root), $OUT made, and the tree built with CUDA into build/, the build's log
# in $OUT and its errors on the terminal.
source bench/device-setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
t0=$(date +%s)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build -j16 >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build: $(($(date +%s) - t0)) s, commit $(git rev-parse --short HEAD 2>/dev/null)"
