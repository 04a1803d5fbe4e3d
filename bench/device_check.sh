#!/usr/bin/env bash
# On the GPU machine: build, each rank's private host memory on both backends (rank_rss.sh), the
# tests of a job's life (stop, kill, watchdog, run lock) on the CUDA backend, then the ctest
# suite in the time left (SECONDS_LEFT, default 540). Output under $OUT.
set -u
cd "$(dirname "$0")/.."
source bench/device-setup.sh # before pipefail: its set -e takes a failed ls | head for an error
set -o pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi -L
t0=$(date +%s)
if [ ! -x build/bin/mtrun ] || [ "${REBUILD:-1}" = 1 ]; then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 &&
        cmake --build build -j16 >"$OUT/build.log" 2>&1 ||
        { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
fi
echo "build $(($(date +%s) - t0)) s"
bench/rank_rss.sh build cuda 3 | tee "$OUT/rss.log"
bench/rank_rss.sh build cpu 3 | tee -a "$OUT/rss.log"
for t in e2e_stop e2e_shm_cleanup e2e_watchdog e2e_run_lock; do
    MT_E2E_BACKEND=cuda timeout 120 bash "tests/$t.sh" "$PWD/build/bin/mtrun" "$PWD" >"$OUT/cuda-$t.log" 2>&1
    echo "cuda $t rc=$? $(tail -n 1 "$OUT/cuda-$t.log")"
    grep -E "FAIL|after [0-9]+ ms|exit [0-9]+ after" "$OUT/cuda-$t.log"
done
echo "elapsed $(($(date +%s) - t0)) s"
left=$((${SECONDS_LEFT:-540} - ($(date +%s) - t0)))
(cd build && timeout "$left" ctest -j4 --output-on-failure --timeout 300 ${CTEST_ARGS:--E e2e_beside} \
    >"$OUT/ctest.log" 2>&1)
echo "ctest rc=$?"
grep -E "tests passed|tests failed|\(Failed\)|Timeout|Not Run|\*\*\*" "$OUT/ctest.log" | head -30
echo "elapsed $(($(date +%s) - t0)) s"
