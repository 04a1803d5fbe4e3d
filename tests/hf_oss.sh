#!/usr/bin/env bash
# gpt-oss folders (GptOssForCausalLM) without torch: tests/hf_oss_fixture.py writes them with the
# standard library, test_hf imports and exports them, hf_oss_check.py checks the export against
# the folder independently (MXFP4 dequantized in Python):
# - fused experts in F32 and BF16, MXFP4 experts: import, export (float32 and bfloat16, many
#   shards), re-import bitwise; the export's tensors are the source's, in the hub's layout;
# - refusals, exit 2 and one line naming the file: shapes that disagree with config.json (fused
#   and MXFP4 tensors), sliding_window 0 or less, bad layer_types, quantization we do not read,
#   swiglu_alpha, yarn without its factor, an MXFP4 scale of 255;
# - with MTRUN: `mtrun --dry-run` takes a train.cfg whose model_dir is a gpt-oss folder (plain and
#   MXFP4), and refuses a model.* key that disagrees with it in one line.
# usage: hf_oss.sh TEST_HF TESTS_DIR [MTRUN]
set -u
TEST_HF=$1
T=$2
FAMILY=hf_oss
source "$T/hf_lib.sh" # WORK, FAILED, pass, fail, roundtrip, refuse
roundtrip f32 60000 float32
roundtrip bf16_source 5000000000 float32 --dtype bf16
roundtrip bf16_export 60000 bfloat16
roundtrip mxfp4 60000 float32 --mxfp4 --dtype bf16
roundtrip mxfp4_bf16 5000000000 bfloat16 --mxfp4
roundtrip full_layers 5000000000 float32 --set 'layer_types=["full_attention","full_attention"]'
L0=model.layers.0.mlp.experts
L1=model.layers.1.mlp.experts
refuse window_0 "config.json: sliding_window must be a positive integer or null" --set sliding_window=0
refuse window_negative "config.json: sliding_window must be a positive integer or null" --set sliding_window=-8
refuse types_kind 'config.json: layer_types\[1\] "chunked_attention" not supported' \
    --set 'layer_types=["sliding_attention","chunked_attention"]'
refuse types_length "config.json: layer_types must list num_hidden_layers = 2 entries" \
    --set 'layer_types=["sliding_attention"]'
refuse types_no_window "config.json: layer_types\[0\] is sliding_attention, but there is no window" \
    --set sliding_window=null
refuse gate_up_shape "model.safetensors: tensor $L0.gate_up_proj has shape \[5, 64, 64\], config.json needs \[4, 64, 64\]" \
    --shape $L0.gate_up_proj
refuse down_shape "tensor $L1.down_proj has shape \[5, 32, 64\], config.json needs \[4, 32, 64\]" --shape $L1.down_proj
refuse bias_shape "tensor $L0.down_proj_bias has shape \[5, 64\], config.json needs \[4, 64\]" --shape $L0.down_proj_bias
refuse fused_width "tensor $L0.gate_up_proj has shape \[4, 64, 64\], config.json needs \[4, 64, 128\]" \
    --set intermediate_size=64
refuse missing_sinks "no tensor model.layers.1.self_attn.sinks \(config.json needs it\)" --drop model.layers.1.self_attn.sinks
refuse mxfp4_blocks "tensor $L1.down_proj_blocks has shape \[5, 64, 1, 16\], config.json needs \[4, 64, 1, 16\]" \
    --mxfp4 --shape $L1.down_proj_blocks
refuse mxfp4_scales "tensor $L0.gate_up_proj_scales has shape \[5, 64, 2\], config.json needs \[4, 64, 2\]" \
    --mxfp4 --shape $L0.gate_up_proj_scales
refuse mxfp4_config "tensor $L0.gate_up_proj_blocks has shape \[4, 64, 2, 16\], config.json needs \[4, 128, 2, 16\]" \
    --mxfp4 --set intermediate_size=64
refuse mxfp4_missing_scales "no tensor $L0.down_proj_scales \(config.json needs it\)" --mxfp4 --drop $L0.down_proj_scales
refuse mxfp4_scale_255 "tensor $L1.down_proj_blocks: 32 values infinite or under scale 255" roundtrip \
    --mxfp4 --scale255 $L1.down_proj_scales
refuse quant_method "config.json: quantization_config quant_method awq not supported" \
    --set 'quantization_config={"quant_method":"awq"}'
refuse swiglu_alpha "config.json: swiglu_alpha not supported \(only 1.702\)" --set swiglu_alpha=1.5
refuse yarn_factor "config.json: rope_scaling.factor must be a positive number \(rope_type yarn\)" \
    --set 'rope_scaling={"rope_type":"yarn","original_max_position_embeddings":64}'
MTRUN=${3:-}
[ -n "$MTRUN" ] || exit $FAILED
# test-small.cfg without its model block, with model_dir
SRC=$(cd "$T/.." && pwd)
sed -e "s|\"\.\./data/|\"$SRC/data/|" "$SRC/configs/test-small.cfg" |
    awk '/^model = {/{skip=1} !skip{print} skip&&/^};/{skip=0}' >"$WORK/base.cfg"
for dir in f32 mxfp4; do
    { cat "$WORK/base.cfg"; echo "model_dir = \"$dir\";"; } >"$WORK/$dir.cfg"
    if "$MTRUN" -np 2 "$WORK/$dir.cfg" --dry-run >"$WORK/out" 2>&1; then
        pass "mtrun --dry-run takes the $dir gpt-oss folder"
    else
        fail "mtrun --dry-run refuses the $dir gpt-oss folder: $(cat "$WORK/out")"
    fi
done
{ cat "$WORK/base.cfg"; echo 'model_dir = "f32";'; echo 'model = { swiglu_limit = 5.0; };'; } >"$WORK/bad.cfg"
"$MTRUN" -np 2 "$WORK/bad.cfg" --dry-run >/dev/null 2>"$WORK/err"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] &&
    grep -q "model.swiglu_limit: disagrees with $WORK/f32/config.json" "$WORK/err"; then
    pass "a model.* key that disagrees with the folder: $(cat "$WORK/err")"
else
    fail "a disagreeing model.swiglu_limit: exit $rc, $(cat "$WORK/err")"
fi
exit $FAILED
