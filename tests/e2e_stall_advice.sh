#!/usr/bin/env bash
# When the GPU keeps idling on slow optimizer ranks, the compute rank says so once, with the
# knob that helps (optimizer.device_groups); a run whose optimizers keep up says nothing.
# MT_FAULT_SLOW_ADAMW_MS makes every optimizer rank sleep that long per group update.
# Skipped (exit 77) without a usable GPU: only the CUDA backend measures the GPU's idle time.
source "$(dirname "$0")/e2e_lib.sh" "$@"
require_gpu
small_config cuda "$WORK/cuda.cfg"
MT_FAULT_SLOW_ADAMW_MS=60 run_job slow 3 "$WORK/cuda.cfg" || show_log slow
run_job fast 3 "$WORK/cuda.cfg" || show_log fast
grep -E '^note:' "$WORK/slow.log"
expect "the slow run names the wait and optimizer.device_groups, once" \
    test "$(grep -c '^note: the GPU idles .*optimizer.device_groups is [0-9]' "$WORK/slow.log")" -eq 1
expect "the run whose optimizers keep up gives no such note" \
    test "$(grep -c '^note: the GPU idles' "$WORK/fast.log")" -eq 0
expect "both runs trained all 20 steps" \
    test "$(losses "$WORK/slow" | wc -l)" -eq 20 -a "$(losses "$WORK/fast" | wc -l)" -eq 20
finish
