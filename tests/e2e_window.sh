#!/usr/bin/env bash
# Sliding-window attention as layer kinds (model.sliding_window, model.layer_types), on the CPU
# backend through the real mtrun:
# - a window as long as the rows is no window: the same losses, bitwise;
# - a shorter one changes them, and -np 2 = -np 3 bitwise with it; a window on one layer of two
#   (gpt-oss's alternation) differs from both;
# - refused in one line, exit 2: a layer_types entry of another kind, the wrong count, a sliding
#   layer without a window, a negative window, a linear_attention layer without its dims or with
#   value heads not a multiple of the key heads, and an export_dir for a model no architecture we
#   write can describe (a window on some layers only).
# - with a GPU, the same windows on the CUDA backend: -np 2 = -np 3 bitwise, and each step's
#   loss within 2% of the CPU's.
# usage: e2e_window.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg" # 2 layers, rows of 32 tokens
sed -i -e 's/^steps = .*/steps = 6;/' -e 's/interval = .*/interval = 6;/' "$WORK/base.cfg"
MIXED='model.layer_types="sliding_attention,full_attention"'
run_job none 2 "$WORK/base.cfg" || show_log none
run_job long 2 "$WORK/base.cfg" model.sliding_window=32 || show_log long
run_job w8 2 "$WORK/base.cfg" model.sliding_window=8 || show_log w8
run_job w8np3 3 "$WORK/base.cfg" model.sliding_window=8 || show_log w8np3
run_job mixed 2 "$WORK/base.cfg" model.sliding_window=8 "$MIXED" || show_log mixed
for r in none long w8 w8np3 mixed; do
    expect "$r ran 6 steps" test "$(losses "$WORK/$r" 2>/dev/null | wc -l)" -eq 6
done
expect "a window of 32 keys on rows of 32 is none, bitwise" diff <(losses "$WORK/none") <(losses "$WORK/long")
differ() { test -z "$(comm -12 <(losses "$WORK/$1" | sort) <(losses "$WORK/$2" | sort))"; }
expect "a window of 8 changes every step's loss" differ none w8
expect "window 8: -np 3 = -np 2, bitwise" diff <(losses "$WORK/w8") <(losses "$WORK/w8np3")
expect "a window on layer 0 alone differs from none and from both layers'" \
    bash -c "$(declare -f losses differ); WORK=$WORK; differ mixed none && differ mixed w8"
# Throughput counts a window's real work: 12 dim x seq per layer, a sliding layer's seq scaled by
# the share of the causal pairs it keeps (2 layers, dim 64, rows of 32: window 8 keeps 224 of
# 512, so each layer's 12 x 64 x 32 = 24576 becomes 10752).
fpt() { grep -o '"flops_per_token":[^,}]*' "$WORK/$1/metrics.jsonl" | head -1 | cut -d: -f2; }
expect "flops_per_token: a window as long as the rows counts as none ($(fpt none), $(fpt long))" \
    test "$(fpt none)" = "$(fpt long)"
expect "flops_per_token: window 8 on both layers counts 2 x (24576 - 10752) fewer ($(fpt none) -> $(fpt w8))" \
    awk -v a="$(fpt none)" -v b="$(fpt w8)" 'BEGIN {exit !(a - b == 27648)}'
expect "flops_per_token: window 8 on one layer counts half that fewer ($(fpt mixed))" \
    awk -v a="$(fpt none)" -v b="$(fpt mixed)" 'BEGIN {exit !(a - b == 13824)}'
refused_dry unknown 'model.layer_types: layer 1 is "local": not full_attention, sliding_attention or linear_attention$' \
    model.sliding_window=8 'model.layer_types="full_attention,local"'
refused_dry count 'model.layer_types: lists 3 layers; model.layers = 2$' model.sliding_window=8 \
    'model.layer_types="full_attention,full_attention,full_attention"'
refused_dry no_window 'model.layer_types: layer 0 is sliding_attention, but model.sliding_window is 0$' \
    "$MIXED"
refused_dry negative 'model.sliding_window: -1 is out of range' model.sliding_window=-1
refused_dry linear_dims 'model.layer_types: layer 0 is linear_attention, but model.linear_k_heads, linear_v_heads, linear_k_dim and linear_v_dim are not all set$' \
    'model.layer_types="linear_attention,full_attention"'
refused_dry gva 'model.linear_v_heads: 3 is not a multiple of model.linear_k_heads = 2' \
    'model.layer_types="linear_attention,full_attention"' model.linear_k_heads=2 \
    model.linear_v_heads=3 model.linear_k_dim=8 model.linear_v_dim=8
refused_dry export 'export_dir: no Hugging Face architecture we write has this model.s fields .*sliding_window 8 on the layers of model.layer_types' \
    model.sliding_window=8 "$MIXED" "export_dir=\"$WORK/export\""
if have_gpu; then
    small_config cuda "$WORK/gpu.cfg"
    sed -i -e 's/^steps = .*/steps = 6;/' -e 's/interval = .*/interval = 6;/' "$WORK/gpu.cfg"
    run_job gw8 2 "$WORK/gpu.cfg" model.sliding_window=8 "$MIXED" || show_log gw8
    run_job gw8np3 3 "$WORK/gpu.cfg" model.sliding_window=8 "$MIXED" || show_log gw8np3
    expect "cuda: 6 steps" test "$(losses "$WORK/gw8" 2>/dev/null | wc -l)" -eq 6
    expect "cuda, window on layer 0: -np 3 = -np 2, bitwise" diff <(losses "$WORK/gw8") <(losses "$WORK/gw8np3")
    expect "cuda, window on layer 0: each loss within 2% of the cpu's" awk -F: '
        NR == FNR {cpu[FNR] = $NF; next}
        {d = $NF - cpu[FNR]; if (d < 0) d = -d; if (d > 0.02 * cpu[FNR]) bad = 1}
        END {exit bad || FNR != 6}' <(losses "$WORK/mixed") <(losses "$WORK/gw8")
fi
finish
