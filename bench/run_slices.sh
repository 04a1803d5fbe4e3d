#!/usr/bin/env bash
# The 100B and 120B models on the GPU machine, whose 125 GiB host holds a few of their layers:
# each runs as two full-width slices (bench/configs/slice-MODEL-*.cfg: the exact
# layer shape, vocabulary and tokens per step; 2 or 3 and 4 layers), and bench/slices.py takes the
# difference: seconds, GPU and host bytes per layer, and the full model extrapolated beside
# `mtrun --plan` of its config with the slices' settings.
# The MoE models qwen3-30b-a3b and mixtral-8x7b likewise, from 2 and 4 layers.
# Usage: bench/run_slices.sh BUILD_DIR OUT_DIR [100b] [120b] [qwen3-30b-a3b] [mixtral-8x7b]
#   (default: 100b 120b)
set -u
BUILD=$1
OUT=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
for m in ${*:-100b 120b}; do
    a=2
    [ "$m" = 120b ] && a=3 # the ring full in both (configs/slice-120b-3l.cfg)
    "$here/run_bench.sh" "$BUILD" "$OUT" "slice-$m-${a}l" "slice-$m-4l"
    # the slices' settings on the full config (the 120B slices keep its optimizer.clip = 0)
    overrides=recompute=always,keep_attention=0,optimizer.device_groups=1
    python3 "$here/slices.py" "$BUILD/bin/mtrun" "$here/../configs/$m.cfg" "$overrides" \
        "$OUT/run-slice-$m-${a}l" "$OUT/run-slice-$m-4l" | tee -a "$OUT/slices.txt"
done
