#!/usr/bin/env bash
# Qwen3.5-family folders (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3NextForCausalLM,
# Qwen3_5ForConditionalGeneration) without torch: tests/hf_qwen35_fixture.py writes them with the
# standard library, test_hf imports and exports them, hf_qwen35_check.py checks the export against
# the folder independently:
# - each class in F32 and BF16, exported as float32 (many shards) and bfloat16, re-imported
#   bitwise (test_hf); the export's tensors are the source's in the hub's layout (Qwen3-Next's
#   fused in_proj_qkvz and in_proj_ba, the conv1d's [C, 1, K], Qwen3.5-MoE's experts per expert
#   or fused as the hub stores them), the vision tower and mtp.*
#   carried byte for byte, a VLM's config.json kept around its text_config; a text class's
#   tensors nested under model.language_model.* as a VLM's (transformers saves them so after
#   loading a VLM checkpoint) read, and exported as model.*, which every loader takes;
# - refusals, exit 2 and one line naming the file: an unknown layer_types entry, value heads not
#   a multiple of key heads, a missing linear_attn tensor, wrong shapes (plain, conv1d, fused
#   projections and experts),
#   a VLM without text_config, with a tie_word_embeddings that disagrees or a top-level
#   quantization_config we do not read, RoPE we do not do;
# - with MTRUN: `mtrun --dry-run` takes a train.cfg whose model_dir is each folder, and refuses a
#   model.* key that disagrees with it in one line.
# usage: hf_qwen35.sh TEST_HF TESTS_DIR [MTRUN]
set -u
TEST_HF=$1
T=$2
FAMILY=hf_qwen35
source "$T/hf_lib.sh" # WORK, FAILED, pass, fail, roundtrip, refuse
for f in qwen3_5 qwen3_5_moe qwen3_next qwen3_5_vl; do
    roundtrip $f 60000 float32 --family $f --mtp
    roundtrip ${f}_bf16_source 5000000000 float32 --family $f --dtype bf16
    roundtrip ${f}_bf16_export 60000 bfloat16 --family $f --mtp
done
roundtrip qwen3_5_moe_fused 60000 float32 --family qwen3_5_moe --fused-experts --mtp
roundtrip qwen3_5_moe_fused_bf16 5000000000 bfloat16 --family qwen3_5_moe --fused-experts --dtype bf16
# a text class saved by transformers from a VLM checkpoint: its tensors stay nested
roundtrip qwen3_5_nested 60000 float32 --family qwen3_5 --nested
roundtrip qwen3_5_moe_nested 60000 bfloat16 --family qwen3_5_moe --nested --fused-experts
roundtrip qwen3_5_interval 60000 float32 --family qwen3_5 --unset layer_types \
    --set full_attention_interval=2
roundtrip qwen3_5_top_rotary 60000 float32 --family qwen3_5 --set partial_rotary_factor=0.5 \
    --set 'rope_parameters={"rope_type":"default","rope_theta":1000000.0}'
# rope_parameters without rope_type: "default", as transformers takes it
roundtrip qwen3_5_untyped_rope 60000 float32 --family qwen3_5 \
    --set 'rope_parameters={"rope_theta":1000000.0,"partial_rotary_factor":0.25}'
A0=model.layers.0.linear_attn
refuse types_kind 'config.json: layer_types\[1\] "sliding_attention" not supported \(linear_attention or full_attention\)' \
    --family qwen3_5 --set 'layer_types=["linear_attention","sliding_attention","linear_attention","full_attention"]'
refuse types_length "config.json: layer_types must list num_hidden_layers = 4 entries" \
    --family qwen3_next --set 'layer_types=["linear_attention"]'
refuse value_heads "config.json: linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2" \
    --family qwen3_5 --set linear_num_value_heads=3
refuse missing_dt_bias "no tensor $A0.dt_bias \(config.json needs it\)" --family qwen3_5 --drop $A0.dt_bias
refuse missing_qkvz "no tensor $A0.in_proj_qkvz.weight \(config.json needs it\)" \
    --family qwen3_next --drop $A0.in_proj_qkvz.weight
refuse conv_shape "tensor $A0.conv1d.weight has shape \[97, 1, 4\], config.json needs \[96, 1, 4\]" \
    --family qwen3_5 --shape $A0.conv1d.weight
refuse qkv_shape "tensor $A0.in_proj_qkv.weight has shape \[97, 64\], config.json needs \[96, 64\]" \
    --family qwen3_5_moe --shape $A0.in_proj_qkv.weight
refuse qkvz_shape "tensor $A0.in_proj_qkvz.weight has shape \[129, 64\], config.json needs \[128, 64\]" \
    --family qwen3_next --shape $A0.in_proj_qkvz.weight
refuse ba_shape "tensor $A0.in_proj_ba.weight has shape \[9, 64\], config.json needs \[8, 64\]" \
    --family qwen3_next --shape $A0.in_proj_ba.weight
refuse gate_shape "tensor model.language_model.layers.1.self_attn.q_proj.weight has shape \[129, 64\], config.json needs \[128, 64\]" \
    --family qwen3_5_vl --shape model.language_model.layers.1.self_attn.q_proj.weight
refuse fused_shape "tensor model.layers.1.mlp.experts.gate_up_proj has shape \[5, 64, 64\], config.json needs \[4, 64, 64\]" \
    --family qwen3_5_moe --fused-experts --shape model.layers.1.mlp.experts.gate_up_proj
refuse fused_width "tensor model.layers.0.mlp.experts.gate_up_proj has shape \[4, 64, 64\], config.json needs \[4, 32, 64\]" \
    --family qwen3_5_moe --fused-experts --set moe_intermediate_size=16
refuse conv_taps "tensor $A0.conv1d.weight has shape \[96, 1, 4\], config.json needs \[96, 1, 3\]" \
    --family qwen3_5 --set linear_conv_kernel_dim=3
refuse vlm_no_text "config.json: text_config must be an object" --family qwen3_5_vl --unset top.text_config
refuse vlm_tie "config.json: text_config: tie_word_embeddings true disagrees with the top level's false" \
    --family qwen3_5_vl --set tie_word_embeddings=true
refuse vlm_quant "config.json: quantization_config quant_method bitsandbytes not supported" \
    --family qwen3_5_vl --set 'top.quantization_config={"quant_method":"bitsandbytes"}'
refuse vlm_text_key "config.json: text_config: hidden_size missing" --family qwen3_5_vl --unset hidden_size
refuse rope_yarn "config.json: rope_type yarn not supported for linear-attention models" --family qwen3_5 \
    --set 'rope_parameters={"rope_type":"yarn","factor":2.0,"original_max_position_embeddings":64}'
refuse rotary_odd "config.json: partial_rotary_factor 0.1 turns 1 of head_dim 16's elements: not an even number" \
    --family qwen3_5 --set 'rope_parameters={"rope_type":"default","partial_rotary_factor":0.1}'
MTRUN=${3:-}
[ -n "$MTRUN" ] || exit $FAILED
# test-small.cfg without its model block, with model_dir
SRC=$(cd "$T/.." && pwd)
sed -e "s|\"\.\./data/|\"$SRC/data/|" "$SRC/configs/test-small.cfg" |
    awk '/^model = {/{skip=1} !skip{print} skip&&/^};/{skip=0}' >"$WORK/base.cfg"
for dir in qwen3_5 qwen3_5_moe qwen3_next qwen3_5_vl qwen3_5_nested; do
    { cat "$WORK/base.cfg"; echo "model_dir = \"$dir\";"; } >"$WORK/$dir.cfg"
    if "$MTRUN" -np 2 "$WORK/$dir.cfg" --dry-run >"$WORK/out" 2>&1; then
        pass "mtrun --dry-run takes the $dir folder"
    else
        fail "mtrun --dry-run refuses the $dir folder: $(cat "$WORK/out")"
    fi
done
{ cat "$WORK/base.cfg"; echo 'model_dir = "qwen3_next";'; echo 'model = { linear_v_heads = 2; };'; } >"$WORK/bad.cfg"
"$MTRUN" -np 2 "$WORK/bad.cfg" --dry-run >/dev/null 2>"$WORK/err"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] &&
    grep -q "model.linear_v_heads: disagrees with $WORK/qwen3_next/config.json" "$WORK/err"; then
    pass "a model.* key that disagrees with the folder: $(cat "$WORK/err")"
else
    fail "a disagreeing model.linear_v_heads: exit $rc, $(cat "$WORK/err")"
fi
exit $FAILED
