#!/usr/bin/env bash
# A Mixture-of-Experts model on the CPU backend, through the real mtrun: bitwise-identical
# per-step losses and load-balancing losses across -np 2, 3 and 5, 2 nodes, and a resume (10
# steps, resume, 10 more), with 16 experts, top 2, and 16 tokens a micro-batch, so that some
# experts get no tokens (expert_load in metrics.jsonl says how many); the loss falls. The same
# (but the nodes) for gpt-oss's router and experts: router bias, softmax over the top k, expert
# biases, clamped SwiGLU; and for DeepSeek-V3's sigmoid router, its frozen correction bias and
# ungated shared experts. Then Hugging Face folders (tests/hf_moe_fixture.py): Mixtral,
# Qwen2-MoE and OLMoE import, export and re-import bitwise (test_hf roundtrip, found beside
# mtrun), and refusals, each one line with exit 2: num_experts_per_tok > num_experts, a missing
# expert tensor, an expert tensor of the wrong shape, clip_qkv (OLMoE), router_jitter_noise
# (Mixtral), Llama4ForCausalLM.
source "$(dirname "$0")/e2e_lib.sh" "$@"
CFG=$WORK/moe.cfg
cat >"$CFG" <<CFGEOF
model = {
  dim = 32; layers = 3; heads = 4; kv_heads = 2; ffn_dim = 64;
  experts = 16; top_k = 2; moe_ffn_dim = 24; norm_topk_prob = true; shared_ffn_dim = 16;
  dense_layers = "0"; qk_norm = "head";
  router_aux = true; router_aux_coef = 0.01;
};
data = { path = "$SRC/data/tinyshakespeare.txt"; };
batch = { micro_batch = 2; micro_batches = 2; seq_len = 8; };
optimizer = { lr = 3e-3; };
steps = 20;
backend = "cpu";
checkpoint = { interval = 10; };
CFGEOF
# gpt-oss's router and experts: the router's bias and the softmax over the top k, the experts'
# biases and the clamped SwiGLU, every layer MoE.
OSS=$WORK/oss.cfg
sed -e 's/^  experts = 16;.*/  experts = 8; top_k = 2; moe_ffn_dim = 24; moe_names = "gpt_oss";/' \
    -e 's/^  dense_layers = .*/  router_softmax = "top_k"; router_bias = true; expert_bias = true; swiglu_limit = 7.0;/' \
    "$CFG" >"$OSS"
# DeepSeek-V3's MoE: the sigmoid router with a correction bias, 2 of 4 groups, top 2, scale
# 2.5, two ungated shared experts; no load-balancing loss (transformers has none for it).
DS=$WORK/deepseek.cfg
sed -e 's/^  dense_layers = .*/  moe_names = "deepseek"; router_score = "sigmoid"; router_correction = true;\
  router_groups = 4; router_topk_groups = 2; router_scale = 2.5; shared_gate = false;/' \
    -e 's/^  router_aux = .*//' "$CFG" >"$DS"
# The per-step aux losses, as written.
auxes() { grep -o '"aux_loss":[^,]*' "$1/metrics.jsonl"; }
# bitwise NAME CONFIG: 20 steps at -np 2, 3 and 5 ($WORK/NAME-np*) with bitwise the same losses
# and aux losses, each reporting both; a run stopped at step 10 and resumed at -np 3 gives the
# uninterrupted run's bits; the loss falls.
bitwise() {
    local name=$1 cfg=$2 np
    for np in 2 3 5; do
        run_job $name-np$np $np "$cfg" || { show_log $name-np$np; expect "$name: -np $np job succeeds" false; }
    done
    for np in 2 3 5; do # (empty lists would compare equal below)
        expect "$name: -np $np ran 20 steps" test "$(losses "$WORK/$name-np$np" 2>/dev/null | wc -l)" -eq 20
    done
    expect "$name: every step reports aux_loss and expert_load" test \
        "$(grep -c '"aux_loss":[0-9.e+-]*,"expert_load":\[{' "$WORK/$name-np2/metrics.jsonl")" -eq 20
    for np in 3 5; do
        expect "$name: -np $np losses are bitwise those of -np 2" \
            diff <(losses "$WORK/$name-np2") <(losses "$WORK/$name-np$np")
        expect "$name: -np $np aux losses are bitwise those of -np 2" \
            diff <(auxes "$WORK/$name-np2") <(auxes "$WORK/$name-np$np")
    done
    run_job $name-split 3 "$cfg" --stop-at 10 || show_log $name-split
    "$MTRUN" -np 3 "$cfg" --out "$WORK/$name-split" --resume "$WORK/$name-split" \
        >"$WORK/$name-resume.log" 2>&1 || show_log $name-resume
    expect "$name: the resumed run has 20 steps" test "$(losses "$WORK/$name-split" 2>/dev/null | wc -l)" -eq 20
    expect "$name: resumed losses (steps 1-20) are bitwise the uninterrupted ones" \
        diff <(losses "$WORK/$name-np3") <(losses "$WORK/$name-split")
    expect "$name: resumed aux losses are bitwise the uninterrupted ones" \
        diff <(auxes "$WORK/$name-np3") <(auxes "$WORK/$name-split")
    local first last
    first=$(losses "$WORK/$name-np2" | head -1 | sed 's/.*"loss"://')
    last=$(losses "$WORK/$name-np2" | tail -1 | sed 's/.*"loss"://')
    expect "$name: loss falls over 20 steps ($first -> $last)" \
        awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a - 0.3)}'
}
bitwise moe "$CFG"
bitwise gpt_oss "$OSS"
bitwise deepseek "$DS"
# One streaming layer buffer (layer_buffers = 1, for layers too large for two: the next layer's
# fetch waits for the compute, a layer's gradients leave before the next backward): the same
# bits, also with the gradient ring and segments
run_job deepseek-lb1 3 "$DS" layer_buffers=1 || show_log deepseek-lb1
expect "deepseek: layer_buffers 1 gives the losses of 2, bitwise" \
    diff <(losses "$WORK/deepseek-np3") <(losses "$WORK/deepseek-lb1")
for lb in 1 2; do
    run_job ring-lb$lb 3 "$DS" layer_buffers=$lb boundary_every=2 optimizer.grad_slots=\"ring\" \
        optimizer.clip=0 || show_log ring-lb$lb
done
expect "deepseek, gradient ring, segments of 2: layer_buffers 1 gives the losses of 2, bitwise" \
    diff <(losses "$WORK/ring-lb2") <(losses "$WORK/ring-lb1")
expect "deepseek, gradient ring: 20 steps" test "$(losses "$WORK/ring-lb1" 2>/dev/null | wc -l)" -eq 20
# 2 nodes of 1 compute + 1 optimizer rank, a micro-batch each: the gradients and the aux loss's
# per-expert sums meet over nodes in a fixed tree, so the node count changes no bit either
MT_TEST_NODES=2 run_job nodes2 4 "$CFG" || show_log nodes2
expect "2 nodes ran 20 steps" test "$(losses "$WORK/nodes2" 2>/dev/null | wc -l)" -eq 20
expect "2 nodes: losses bitwise those of 1 node" diff <(losses "$WORK/moe-np2") <(losses "$WORK/nodes2")
expect "2 nodes: aux losses bitwise those of 1 node" diff <(auxes "$WORK/moe-np2") <(auxes "$WORK/nodes2")
expect "2 nodes: the step 20 checkpoint is 1 node's, bitwise" \
    cmp -s "$WORK/moe-np2/step_000020/state.bin" "$WORK/nodes2/step_000020/state.bin"
idle=$(grep -o '"idle":[0-9]*' "$WORK/moe-np2/metrics.jsonl" | awk -F: '{s += $2} END {print s + 0}')
expect "some experts got no tokens in some steps (idle expert-steps: $idle)" test "$idle" -gt 0
TEST_HF=$(dirname "$MTRUN")/test_hf
fixture() { python3 "$SRC/tests/hf_moe_fixture.py" "$WORK/hf/$1" "${@:2}"; }
for f in mixtral qwen2_moe olmoe; do
    fixture $f $f
    expect "$f: import, export, re-import bitwise" \
        "$TEST_HF" roundtrip "$WORK/hf/$f" "$WORK/hf/$f.out" 5000000000 float32
done
# A coefficient of 0 goes out as a float: transformers 5 refuses "router_aux_loss_coef": 0
fixture coef0 mixtral --set router_aux_loss_coef=0.0
"$TEST_HF" roundtrip "$WORK/hf/coef0" "$WORK/hf/coef0.out" 5000000000 float32 >/dev/null 2>&1
expect "router_aux_loss_coef 0 is exported as 0.0" \
    grep -qE '"router_aux_loss_coef":[[:space:]]*0\.0[,}]' "$WORK/hf/coef0.out/config.json"
# Qwen2-MoE without shared_expert_intermediate_size: transformers' default, a shared expert of
# 5632, whose tensors must be taken (and the size written out on export)
fixture shared_default qwen2_moe --unset shared_expert_intermediate_size
expect "qwen2_moe without shared_expert_intermediate_size: a shared expert of 5632, round trip" \
    "$TEST_HF" roundtrip "$WORK/hf/shared_default" "$WORK/hf/shared_default.out" 5000000000 float32
expect "qwen2_moe without shared_expert_intermediate_size: exported as 5632" \
    grep -qE '"shared_expert_intermediate_size":[[:space:]]*5632[,}]' \
    "$WORK/hf/shared_default.out/config.json"
# refuse NAME PATTERN FIXTURE-ARGS...: mtrun on the folder exits 2 with one line matching PATTERN
refuse() {
    local name=$1 pattern=$2
    shift 2
    fixture "$name" "$@"
    printf 'model_dir = "%s";\ndata = { path = "%s"; };\n%s\n' "$WORK/hf/$name" \
        "$SRC/data/tinyshakespeare.txt" 'batch = { micro_batch = 1; micro_batches = 1; seq_len = 8; };
optimizer = { lr = 1e-3; }; steps = 1; backend = "cpu";' >"$WORK/hf/$name.cfg"
    "$MTRUN" -np 2 "$WORK/hf/$name.cfg" --out "$WORK/hf/run-$name" >"$WORK/hf/$name.log" 2>&1
    local rc=$?
    expect "refused, exit 2, one line: $name ($(head -c 160 "$WORK/hf/$name.log"))" \
        test "$rc" -eq 2 -a "$(wc -l <"$WORK/hf/$name.log")" -eq 1 -a \
        -n "$(grep -E "$pattern" "$WORK/hf/$name.log")"
}
refuse top_k 'num_experts_per_tok 5 is more than' mixtral --set num_experts_per_tok=5
refuse missing 'experts\.2\.w2' mixtral --drop model.layers.1.block_sparse_moe.experts.2.w2.weight
refuse shape 'experts\.1\.w3' mixtral --shape model.layers.0.block_sparse_moe.experts.1.w3.weight
refuse clip 'clip_qkv' olmoe --set clip_qkv=8.0
refuse jitter 'router_jitter_noise' mixtral --set router_jitter_noise=0.1
refuse shared0 'shared_expert_intermediate_size, is not supported' qwen2_moe --set shared_expert_intermediate_size=0
refuse llama4 'Llama4ForCausalLM not supported \(chunked attention' mixtral --set 'architectures=["Llama4ForCausalLM"]'
finish
