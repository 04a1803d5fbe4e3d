#!/usr/bin/env bash
# Qwen3.5's hybrid layers on the CPU backend, through the real mtrun: three Gated DeltaNet layers
# (4 value heads over 2 key heads) and one of gated full attention, zero-centred norms, qk-norm
# per head, a quarter of each head rotated, rows of 80 tokens (the delta rule's chunks of 64 and a
# remainder) packing the text's lines as documents. 20 steps:
# - the loss falls;
# - -np 3 and -np 5 (8 steps) give the losses of -np 2 bitwise, and so does a run stopped at
#   step 10 and resumed;
# - the memory modes change no bit: every layer recomputed in the backward, with and without
#   the attention outputs (the delta rule's, on the linear layers) kept from the forward;
# - throughput counts the delta rule's FLOPs (plan_gdn_flops), not attention's, on its layers;
# - q/k/v biases with the output gate are refused in one line (q_proj's bias would need the
#   gates' rows).
# (The CUDA backend against this CPU one: e2e_cuda_parity.)
# usage: e2e_qwen35.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$@"
CFG=$WORK/qwen35.cfg
cat >"$CFG" <<CFGEOF
model = {
  dim = 32; layers = 4; heads = 4; kv_heads = 2; head_dim = 16; ffn_dim = 64;
  qk_norm = "head"; attn_output_gate = true; norm_zero_centered = true;
  partial_rotary_factor = 0.25;
  layer_types = "linear_attention,linear_attention,linear_attention,full_attention";
  linear_k_heads = 2; linear_v_heads = 4; linear_k_dim = 8; linear_v_dim = 8; linear_conv = 4;
};
data = { path = "$SRC/data/tinyshakespeare.txt"; pack = "documents"; eot = 10; };
batch = { micro_batch = 2; micro_batches = 2; seq_len = 80; };
optimizer = { lr = 3e-3; };
steps = 20;
backend = "cpu";
checkpoint = { interval = 10; };
CFGEOF
run_job np2 2 "$CFG" || show_log np2
run_job np3 3 "$CFG" || show_log np3
for r in np2 np3; do
    expect "$r ran 20 steps" test "$(losses "$WORK/$r" 2>/dev/null | wc -l)" -eq 20
done
expect "-np 3 losses are bitwise those of -np 2" diff <(losses "$WORK/np2") <(losses "$WORK/np3")
run_job np5 5 "$CFG" --stop-at 8 || show_log np5
expect "-np 5 losses (8 steps) are bitwise those of -np 2" \
    diff <(losses "$WORK/np2" | head -8) <(losses "$WORK/np5")
first=$(losses "$WORK/np2" | head -1 | sed 's/.*"loss"://')
last=$(losses "$WORK/np2" | tail -1 | sed 's/.*"loss"://')
expect "the loss falls over 20 steps ($first -> $last)" \
    awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a - 0.3)}'
run_job split 3 "$CFG" --stop-at 10 || show_log split
"$MTRUN" -np 3 "$CFG" --out "$WORK/split" --resume "$WORK/split" >"$WORK/resume.log" 2>&1 ||
    show_log resume
expect "the resumed run has 20 steps" test "$(losses "$WORK/split" 2>/dev/null | wc -l)" -eq 20
expect "resumed losses (steps 1-20) are bitwise the uninterrupted ones" \
    diff <(losses "$WORK/np2") <(losses "$WORK/split")
# recompute "always": no internals kept; with keep_attention 8 (4 layers x 2 micro-batches)
# every pass keeps its attention output, whose forward the backward then skips
run_job always 2 "$CFG" --stop-at 8 recompute='"always"' keep_attention=0 || show_log always
run_job kept_att 2 "$CFG" --stop-at 8 recompute='"always"' keep_attention=8 || show_log kept_att
expect "recompute always: 8 steps" test "$(losses "$WORK/always" 2>/dev/null | wc -l)" -eq 8
expect "keep_attention: the attention outputs were kept" \
    grep -q 'keeping the attention output of [1-9]' "$WORK/kept_att.log"
expect "recompute always, bitwise the losses of kept internals" \
    diff <(losses "$WORK/np2" | head -8) <(losses "$WORK/always")
expect "kept attention outputs, bitwise the same losses" \
    diff <(losses "$WORK/always") <(losses "$WORK/kept_att")
# 6 N + 12 dim seq for the one attention layer + 3 x each Gated DeltaNet layer's rule, forward:
# 4 value heads x (6 dk dv + 2 x 64 x (dk + dv)) = 4 x (384 + 2048) = 9728 (docs/performance.md)
params=$("$MTRUN" -np 2 "$CFG" --plan --json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["params"])')
fpt=$(grep -o '"flops_per_token":[^,}]*' "$WORK/np2/metrics.jsonl" | head -1 | cut -d: -f2)
expect "flops_per_token $fpt = 6 x $params + 12 x 32 x 80 + 3 x 3 x 9728" \
    awk -v f="$fpt" -v n="$params" 'BEGIN {exit !(n > 0 && f == 6 * n + 30720 + 87552)}'
refused_cfg gate_bias 'model.qkv_bias: not with model.attn_output_gate' "$CFG" model.qkv_bias=true
finish
