#!/usr/bin/env bash
# Attention sinks (model.attn_sinks: gpt-oss's learned logit per query head in each softmax) on
# the CUDA backend, through the real mtrun, on a small Mixture-of-Experts model (gpt-oss's
# shape): 6 steps of finite losses; -np 3 = -np 2 bitwise (the sinks' gradient sums in a fixed
# order); the sinks change every step's loss (they start random, not zero); the same with a
# sliding window on one layer of two and packed documents (lines); and each loss within 2% of the
# CPU reference's on the same job. The kernels against the CPU reference: attention_cuda_vs_cpu.
# Skipped (exit 77) without a usable GPU.
# usage: e2e_cuda_sinks.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$@"
require_gpu
CFG=$WORK/sinks.cfg
cat >"$CFG" <<CFGEOF
model = {
  dim = 32; layers = 2; heads = 4; kv_heads = 2; ffn_dim = 64;
  experts = 4; top_k = 2; moe_ffn_dim = 32;
};
data = { path = "$SRC/data/tinyshakespeare.txt"; };
batch = { micro_batch = 2; micro_batches = 2; seq_len = 32; };
optimizer = { lr = 3e-3; };
steps = 6;
backend = "cuda";
CFGEOF
SINKS=model.attn_sinks=true
MASKS=(model.sliding_window=8 'model.layer_types="sliding_attention,full_attention"'
    'data.pack="documents"' data.eot=10)
run_job plain 2 "$CFG" || show_log plain
run_job sinks 2 "$CFG" "$SINKS" || show_log sinks
run_job sinks3 3 "$CFG" "$SINKS" || show_log sinks3
run_job masks 2 "$CFG" "${MASKS[@]}" || show_log masks
run_job masked 2 "$CFG" "$SINKS" "${MASKS[@]}" || show_log masked
run_job masked3 3 "$CFG" "$SINKS" "${MASKS[@]}" || show_log masked3
sed -e 's/^backend = .*/backend = "cpu";/' "$CFG" >"$WORK/cpu.cfg"
run_job cpu 2 "$WORK/cpu.cfg" "$SINKS" "${MASKS[@]}" || show_log cpu
finite() { losses "$WORK/$1" | awk -F: '$NF ~ /^[0-9.]+(e[-+]?[0-9]+)?$/ && $NF < 100 {n++} END {exit n != 6}'; }
differ() { test -z "$(comm -12 <(losses "$WORK/$1" | sort) <(losses "$WORK/$2" | sort))"; }
for r in plain sinks sinks3 masks masked masked3; do
    expect "$r: 6 finite losses" finite "$r"
done
expect "sinks: -np 3 = -np 2, bitwise" diff <(losses "$WORK/sinks") <(losses "$WORK/sinks3")
expect "sinks change every step's loss" differ plain sinks
expect "sinks with a window and packed documents: -np 3 = -np 2, bitwise" \
    diff <(losses "$WORK/masked") <(losses "$WORK/masked3")
expect "sinks change every step's loss with a window and packed documents" differ masks masked
expect "each loss within 2% of the cpu's, sinks with a window and packed documents" awk -F: '
    NR == FNR {cpu[FNR] = $NF; next}
    {d = $NF - cpu[FNR]; if (d < 0) d = -d; if (d > 0.02 * cpu[FNR]) bad = 1}
    END {exit bad || FNR != 6}' <(losses "$WORK/cpu") <(losses "$WORK/masked")
finish
