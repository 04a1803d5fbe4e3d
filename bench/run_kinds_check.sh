#!/usr/bin/env bash
# One call on the GPU machine for a refactor that must change no bit and no speed: builds this
# tree and a base tree (BASE_SRC, e.g. `git archive REV` unpacked into a carried .base/) side
# by side, runs bench/bitwise_matrix.sh's jobs on the CUDA backend with both and compares them
# byte for byte, then the ctests given (TESTS, a regex), and with BENCH=NAME the bench config
# with both builds.   Usage: OUT=... BASE_SRC=.base TESTS=REGEX [BENCH=7b] bench/run_kinds_check.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
t0=$(date +%s)
source bench/device-setup.sh >/dev/null 2>&1 # before pipefail: its own pipelines end early
set -o pipefail
(cmake -S "${BASE_SRC:-.base}" -B build-base -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake-base.log" 2>&1 &&
    cmake --build build-base -j8 >"$OUT/build-base.log" 2>&1
 echo "base build rc=$? $(($(date +%s) - t0)) s") &
bash bench/device_run.sh >"$OUT/build-new.log" 2>&1
echo "new build rc=$? $(($(date +%s) - t0)) s"
wait
timeout "${BITWISE_S:-230}" bash bench/device_run.sh bitwise 2>&1 | grep -E "same|DIFF|FAIL"
echo "bitwise done $(($(date +%s) - t0)) s"
if [ -n "${TESTS:-}" ]; then
    timeout "${TESTS_S:-200}" bash bench/device_run.sh "tests=$TESTS" 2>&1 | tail -25
    echo "tests done $(($(date +%s) - t0)) s"
fi
if [ -n "${BENCH:-}" ]; then
    bash bench/device_run.sh "bench-$BENCH" "basebench-$BENCH" 2>&1 | tail -6
    echo "bench done $(($(date +%s) - t0)) s"
fi
