#!/usr/bin/env bash
# DeepSeek-V3-family folders (DeepseekV3ForCausalLM with q_lora_rank set and null,
# Glm4MoeForCausalLM, Glm4MoeLiteForCausalLM) without torch: tests/hf_deepseek_fixture.py writes
# them with the standard library, test_hf imports and exports them, hf_deepseek_check.py checks
# the export against the folder independently:
# - each class exported as float32 (many shards) and bfloat16, re-imported bitwise (test_hf); the
#   export's tensors are the source's, the MTP layer (model.layers.L.*) carried byte for byte;
# - block-scaled FP8 folders (F8_E4M3 with weight_scale_inv, grids cut short, an FP8 MTP layer):
#   each code times its block's scale, the MTP layer's FP8 weights so too (the export has no
#   quantization_config to read codes by), its other tensors' bytes kept, no scales;
# - refusals, exit 2 and one line naming the file: a router transformers does not compute
#   (scoring_func, topk_method, moe_layer_freq), n_shared_experts 0, FP8 of another block or
#   format, an FP8 weight without its scales or with scales of another grid (the MTP layer's
#   too, checked before training though only the export reads it), MLA's
#   attention_bias and a partial_rotary_factor, mlp_layer_types against first_k_dense_replace,
#   missing or misshapen MLA and shared-expert tensors, more experts than MOE_MAX_EXPERTS;
# - with MTRUN: `mtrun --dry-run` takes a train.cfg whose model_dir is each folder (a SKIP line
#   while config.c refuses MLA and DeepSeek's router: their layer parts are not built yet).
# usage: hf_deepseek.sh TEST_HF TESTS_DIR [MTRUN]
set -u
TEST_HF=$1
T=$2
FAMILY=hf_deepseek
source "$T/hf_lib.sh" # WORK, FAILED, pass, fail, roundtrip, refuse
for f in deepseek_v3 deepseek_v3_noq glm4_moe glm4_moe_lite; do
    roundtrip $f 60000 float32 --family $f --mtp
    roundtrip ${f}_bf16_export 5000000000 bfloat16 --family $f --mtp
done
roundtrip deepseek_v3_fp8 200000 float32 --family deepseek_v3 --fp8 --mtp
roundtrip deepseek_v3_noq_fp8 5000000000 bfloat16 --family deepseek_v3_noq --fp8 --mtp
roundtrip glm4_moe_lite_types 60000 float32 --family glm4_moe_lite --unset first_k_dense_replace \
    --set 'mlp_layer_types=["sparse","dense","sparse"]'
A=model.layers.1.self_attn
refuse scoring "config.json: scoring_func not supported \(only \"sigmoid\"" \
    --family deepseek_v3 --set 'scoring_func="softmax"'
refuse topk_method "config.json: topk_method not supported \(only \"noaux_tc\"" \
    --family deepseek_v3 --set 'topk_method="group_limited_greedy"'
refuse layer_freq "config.json: moe_layer_freq 2 not supported" --family deepseek_v3 \
    --set moe_layer_freq=2
refuse no_shared "config.json: n_shared_experts 0 not supported" --family glm4_moe \
    --set n_shared_experts=0
refuse fp8_block "config.json: quantization_config.weight_block_size not supported \(only \[128, 128\]\)" \
    --family deepseek_v3 --fp8 --set 'quantization_config={"quant_method":"fp8","weight_block_size":[64,64]}'
refuse fp8_fmt "config.json: quantization_config.fmt not supported \(only e4m3\)" \
    --family deepseek_v3 --fp8 --set 'quantization_config={"quant_method":"fp8","fmt":"e5m2"}'
refuse fp8_no_scale "tensor $A.kv_b_proj.weight: F8_E4M3 without its $A.kv_b_proj.weight_scale_inv" \
    --family deepseek_v3 --fp8 --drop $A.kv_b_proj.weight_scale_inv
M=model.layers.3.self_attn # the MTP layer's, carried (dequantized) to the export
refuse fp8_mtp_no_scale "tensor $M.kv_b_proj.weight: F8_E4M3 without its $M.kv_b_proj.weight_scale_inv" \
    --family deepseek_v3 --fp8 --mtp --drop $M.kv_b_proj.weight_scale_inv
refuse fp8_scale_grid "tensor $A.o_proj.weight_scale_inv: F32 \[2, 1\] expected" \
    --family deepseek_v3 --fp8 --shape $A.o_proj.weight_scale_inv
refuse mla_bias "config.json: attention_bias = true not supported \(MLA's biases on q_a_proj" --family deepseek_v3 \
    --set attention_bias=true
refuse mla_partial "config.json: partial_rotary_factor not supported with MLA" \
    --family glm4_moe_lite --set partial_rotary_factor=0.5
refuse lite_types "config.json: first_k_dense_replace 1 disagrees with mlp_layer_types" \
    --family glm4_moe_lite --set 'mlp_layer_types=["dense","dense","sparse"]'
refuse lite_kind "config.json: mlp_layer_types\[1\] must be dense or sparse" \
    --family glm4_moe_lite --set 'mlp_layer_types=["dense","moe","sparse"]'
refuse missing_kv_b "no tensor $A.kv_b_proj.weight \(config.json needs it\)" \
    --family deepseek_v3 --drop $A.kv_b_proj.weight
refuse kv_a_shape "tensor $A.kv_a_proj_with_mqa.weight has shape \[41, 64\], config.json needs \[40, 64\]" \
    --family glm4_moe_lite --shape $A.kv_a_proj_with_mqa.weight
refuse q_proj_noq "no tensor model.layers.0.self_attn.q_proj.weight \(config.json needs it\)" \
    --family deepseek_v3 --set q_lora_rank=null
refuse missing_shared "no tensor model.layers.2.mlp.shared_experts.up_proj.weight" \
    --family glm4_moe --drop model.layers.2.mlp.shared_experts.up_proj.weight
refuse missing_correction "no tensor model.layers.1.mlp.gate.e_score_correction_bias" \
    --family deepseek_v3 --drop model.layers.1.mlp.gate.e_score_correction_bias
refuse many_experts "config.json: n_routed_experts 1024 is out of range: at most" \
    --family deepseek_v3 --set n_routed_experts=1024
refuse v32 "config.json: architecture DeepseekV32ForCausalLM not supported \(DeepSeek Sparse Attention" \
    --family deepseek_v3 --set 'architectures=["DeepseekV32ForCausalLM"]' --set index_topk=2048
refuse glm5 "config.json: architecture GlmMoeDsaForCausalLM not supported \(GLM-5's sparse attention" \
    --family glm4_moe_lite --set 'architectures=["GlmMoeDsaForCausalLM"]'
refuse v4 "config.json: architecture DeepseekV4ForCausalLM not supported \(compressed sparse attention and hyper-connections" \
    --family deepseek_v3 --set 'architectures=["DeepseekV4ForCausalLM"]'
refuse index_topk "config.json: index_topk not supported \(sparse attention" \
    --family deepseek_v3 --set index_topk=2048
refuse hc_mult "config.json: hc_mult not supported \(hyper-connections" \
    --family glm4_moe_lite --set hc_mult=4
refuse compress "config.json: compress_ratios not supported \(DeepSeek-V4's compressed attention" \
    --family deepseek_v3 --set 'compress_ratios=[0, 4, 128]'

MTRUN=${3:-}
[ -n "$MTRUN" ] || exit $FAILED
# test-small.cfg without its model block, with model_dir
SRC=$(cd "$T/.." && pwd)
sed -e "s|\"\.\./data/|\"$SRC/data/|" "$SRC/configs/test-small.cfg" |
    awk '/^model = {/{skip=1} !skip{print} skip&&/^};/{skip=0}' >"$WORK/base.cfg"
for dir in deepseek_v3 deepseek_v3_noq glm4_moe glm4_moe_lite deepseek_v3_fp8; do
    { cat "$WORK/base.cfg"; echo "model_dir = \"$dir\";"; } >"$WORK/$dir.cfg"
    if "$MTRUN" -np 2 "$WORK/$dir.cfg" --dry-run >"$WORK/out" 2>&1; then
        pass "mtrun --dry-run takes the $dir folder"
    elif grep -q "is not built yet" "$WORK/out"; then
        echo "SKIP mtrun --dry-run $dir: $(tail -1 "$WORK/out")"
    else
        fail "mtrun --dry-run refuses the $dir folder: $(cat "$WORK/out")"
    fi
done
exit $FAILED
