#!/usr/bin/env bash
# The 100B and 120B models on the GPU machine, whose 125 GiB host holds a few of their layers:
# each runs as two full-width slices (bench/configs/slice-MODEL-*.cfg: the exact
# layer shape, vocabulary and tokens per step; 2 or 3 and 4 layers), and bench/slices.py takes the
# difference: seconds, GPU and host bytes per layer, and the full model extrapolated beside
# `mtrun --plan` of its config with the slices' settings.
# The MoE models qwen3-30b-a3b, mixtral-8x7b and gpt-oss-20b likewise, from 2 and 4 layers;
# gpt-oss-120b from 1 and 2 (a layer is 3.2 B parameters: 4 of them with their fp32 state are
# 154 GB, more than the host). Qwen3.5's qwen3.5-27b and qwen3.5-35b-a3b from 4 and 8: their
# layers come in periods of 4 (three Gated DeltaNet, one gated attention), and slices of whole
# periods differ by the mean layer. deepseek-v3 from 2 and 3 layers, its own first ones, all
# dense: none of its MoE layers (11.3 B parameters) fits the GPU or the host
# (bench/configs/slice-deepseek-v3-2l.cfg), so the slices are set beside their own plans and
# the whole model is not extrapolated from them (its plan does not fit the GPU either).
# Usage: bench/run_slices.sh BUILD_DIR OUT_DIR [100b] [120b] [qwen3-30b-a3b] [mixtral-8x7b]
#   [gpt-oss-20b] [gpt-oss-120b] [qwen3.5-27b] [qwen3.5-35b-a3b] [deepseek-v3]
#   (default: 100b 120b)
set -u
BUILD=$1
OUT=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
for m in ${*:-100b 120b}; do
    a=2 b=4
    [ "$m" = 120b ] && a=3 # the ring full in both (configs/slice-120b-3l.cfg)
    [ "$m" = gpt-oss-120b ] && a=1 b=2
    full=$here/../configs/$m.cfg
    case $m in qwen3.5-*) a=4 b=8 ;; deepseek-v3) a=2 b=3 full=- ;; esac
    "$here/run_bench.sh" "$BUILD" "$OUT" "slice-$m-${a}l" "slice-$m-${b}l"
    # the slices' settings on the full config (the 120B slices keep its optimizer.clip = 0)
    overrides=recompute=always,keep_attention=0,optimizer.device_groups=1
    python3 "$here/slices.py" "$BUILD/bin/mtrun" "$full" "$overrides" \
        "$OUT/run-slice-$m-${a}l" "$OUT/run-slice-$m-${b}l" | tee -a "$OUT/slices.txt"
done
