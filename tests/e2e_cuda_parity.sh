#!/usr/bin/env bash
# The same config and seed on backend cuda vs cpu: per-step losses of a tiny model agree
# within bf16 tolerance over 20 steps. Skipped (exit 77) without a usable GPU.
source "$(dirname "$0")/e2e_lib.sh" "$@"
require_gpu
small_config cuda "$WORK/cuda.cfg"
run_job cpu 3 "$SRC/configs/test-small.cfg" || show_log cpu
run_job cuda 3 "$WORK/cuda.cfg" || show_log cuda
expect "the cuda run used the cuda backend" grep -q 'backend cuda' "$WORK/cuda.log"
expect "the cuda run logged 20 steps" test "$(losses "$WORK/cuda" | wc -l)" -eq 20
paste -d' ' <(losses "$WORK/cpu" | sed 's/.*"loss"://') <(losses "$WORK/cuda" | sed 's/.*"loss"://') \
    >"$WORK/pairs"
cat "$WORK/pairs"
expect "every step's loss agrees within 2% (bf16 compute vs fp32 reference)" \
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 0.02 * $1) bad = 1 } END { exit bad }' \
    "$WORK/pairs"
finish
