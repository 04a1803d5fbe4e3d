#!/usr/bin/env bash
# The same config and seed on backend cuda vs cpu: per-step losses of a tiny model agree
# within bf16 tolerance over 20 steps; the cuda run with the kernel-time profile on, whose report
# must account for the stream's time. Then a gpt-oss MoE (router bias, softmax over the top k,
# expert biases, clamped SwiGLU, the aux loss on): step 1 within 1%, every step within 5% (a
# top-k choice on a near tie may flip on bf16 rounding, and the curves part from there), and the
# aux losses within 5%. Then multi-head latent attention (a query rank, values of 16 padded to q's
# and k's 24 on the GPU, interleaved RoPE, YaRN with mscale_all_dim, packed documents): every
# step within 2%. Skipped (exit 77) without a usable GPU.
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
# gpt_oss BACKEND OUT: test-small.cfg with gpt-oss's MoE MLP on BACKEND
gpt_oss() {
    small_config "$1" "$2.tmp"
    sed -e '/ffn_dim *= *160;/a\
  experts = 8; top_k = 2; moe_ffn_dim = 48; moe_names = "gpt_oss"; router_softmax = "top_k";\
  router_bias = true; expert_bias = true; swiglu_limit = 7.0; router_aux = true;' "$2.tmp" >"$2"
}
gpt_oss cpu "$WORK/oss_cpu.cfg"
gpt_oss cuda "$WORK/oss_cuda.cfg"
run_job oss_cpu 3 "$WORK/oss_cpu.cfg" || show_log oss_cpu
run_job oss_cuda 3 "$WORK/oss_cuda.cfg" || show_log oss_cuda
expect "gpt-oss: the cuda run used the cuda backend" grep -q 'backend cuda' "$WORK/oss_cuda.log"
expect "gpt-oss: both runs logged 20 steps" \
    test "$(losses "$WORK/oss_cpu" | wc -l)" -eq 20 -a "$(losses "$WORK/oss_cuda" | wc -l)" -eq 20
auxes() { grep -o '"aux_loss":[^,]*' "$1/metrics.jsonl" | sed 's/.*://'; }
paste -d' ' <(losses "$WORK/oss_cpu" | sed 's/.*"loss"://') \
    <(losses "$WORK/oss_cuda" | sed 's/.*"loss"://') <(auxes "$WORK/oss_cpu") \
    <(auxes "$WORK/oss_cuda") >"$WORK/oss_pairs"
cat "$WORK/oss_pairs"
expect "gpt-oss: step 1's loss within 1%, every step's loss and aux loss within 5%" \
    awk 'function off(a, b, r, d) { d = a - b; if (d < 0) d = -d; return d > r * a }
         NR == 1 && off($1, $2, 0.01) { bad = 1 }
         off($1, $2, 0.05) || off($3, $4, 0.05) { bad = 1 }
         END { exit bad || NR != 20 }' "$WORK/oss_pairs"
mla_config cpu "$WORK/mla_cpu.cfg"
mla_config cuda "$WORK/mla_cuda.cfg"
run_job mla_cpu 3 "$WORK/mla_cpu.cfg" || show_log mla_cpu
run_job mla_cuda 3 "$WORK/mla_cuda.cfg" || show_log mla_cuda
expect "MLA: the cuda run used the cuda backend" grep -q 'backend cuda' "$WORK/mla_cuda.log"
paste -d' ' <(losses "$WORK/mla_cpu" | sed 's/.*"loss"://') \
    <(losses "$WORK/mla_cuda" | sed 's/.*"loss"://') >"$WORK/mla_pairs"
cat "$WORK/mla_pairs"
expect "MLA: every step's loss agrees within 2% over 20 steps" \
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 0.02 * $1) bad = 1 } END { exit bad || NR != 20 }' \
    "$WORK/mla_pairs"
finish
