#!/usr/bin/env bash
# The same config and seed on backend cuda vs cpu: per-step losses of a tiny model agree
# within bf16 tolerance over 20 steps; the cuda run with the kernel-time profile on, whose report
# must account for the stream's time. Skipped (exit 77) without a usable GPU.
source "$(dirname "$0")/e2e_lib.sh" "$@"
require_gpu
small_config cuda "$WORK/cuda.cfg"
run_job cpu 3 "$SRC/configs/test-small.cfg" || show_log cpu
MT_KERNEL_TIMES=1 run_job cuda 3 "$WORK/cuda.cfg" || show_log cuda
expect "the cuda run used the cuda backend" grep -q 'backend cuda' "$WORK/cuda.log"
expect "the cuda run logged 20 steps" test "$(losses "$WORK/cuda" | wc -l)" -eq 20
paste -d' ' <(losses "$WORK/cpu" | sed 's/.*"loss"://') <(losses "$WORK/cuda" | sed 's/.*"loss"://') \
    >"$WORK/pairs"
cat "$WORK/pairs"
expect "every step's loss agrees within 2% (bf16 compute vs fp32 reference)" \
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 0.02 * $1) bad = 1 } END { exit bad }' \
    "$WORK/pairs"
grep KTIME "$WORK/cuda.log"
expect "the kernel-time report names GEMMs with their rate" \
    grep -qE 'KTIME GEMMs \(cuBLASLt\) +[0-9.]+ ms +[0-9.]+% +[0-9.]+ TFLOP/s' "$WORK/cuda.log"
expect "the report lists GEMM shapes with their calls" \
    grep -qE 'KTIME +gemm NT M [0-9]+ N [0-9]+ K [0-9]+ -> bf16 +[0-9]+ calls' "$WORK/cuda.log"
expect "the classes' shares sum to 100%" awk '/KTIME [A-Za-z]/ && !/KTIME   / {
        for (i = 1; i <= NF; i++) if ($i ~ /%$/) s += $i } END { exit !(s > 99.5 && s < 100.5) }' \
    "$WORK/cuda.log"
finish
