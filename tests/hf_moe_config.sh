#!/usr/bin/env bash
# MoE config.json keys read as transformers 5 reads them (tests/hf_moe_fixture.py folders of 4
# experts, checked by test_hf against their tensors):
# - the number of experts given under both names: the config class's attribute_map alias wins
#   (it is set after the class's own field), in either order in the file; Qwen2-MoE has no alias
#   and reads num_experts only;
# - a Qwen3-MoE folder without head_dim: hidden / heads, and its export reads back bitwise;
# - an int field written as a float (4.0) is refused, as transformers' strict config refuses it;
# - a layer listed twice in mlp_only_layers is taken, as transformers takes it.
# usage: hf_moe_config.sh TEST_HF TESTS_DIR
set -u
TEST_HF=$1
T=$2
FAMILY=hf_moe
source "$T/hf_lib.sh" # WORK, FAILED, pass, fail, refuse (tests/hf_moe_fixture.py's folders)
# accept NAME FIXTURE-ARGS...: test_hf check takes the folder
accept() {
    local name=$1
    shift
    python3 "$T/hf_moe_fixture.py" "$WORK/$name" "$@" || exit 1
    if "$TEST_HF" check "$WORK/$name" >/dev/null 2>"$WORK/err"; then
        pass "$name is taken"
    else
        fail "$name is refused: $(cat "$WORK/err")"
    fi
}
# family, its own key, the attribute_map's other name, and its router (one row per expert)
for row in "mixtral num_local_experts num_experts block_sparse_moe.gate" \
    "qwen3_moe num_experts num_local_experts mlp.gate" \
    "olmoe num_experts num_local_experts mlp.gate"; do
    set -- $row
    fam=$1 own=$2 alias=$3 router=$4
    accept "$fam-alias_first" $fam --unset $own --set $alias=4 --set $own=8
    accept "$fam-alias_last" $fam --set $own=8 --set $alias=4
    refuse "$fam-alias_8" "model\.layers\.0\.$router\.weight has shape \[4, 32\], config\.json needs \[8, 32\]" $fam --set $own=4 --set $alias=8
    refuse "$fam-float" "$own must be an integer, not the float 4" $fam --set $own=4.0
done
accept qwen2_moe-local_ignored qwen2_moe --set num_local_experts=8
refuse qwen2_moe-local_only "num_experts missing \(Qwen2MoeForCausalLM reads no num_local_experts\)" \
    qwen2_moe --unset num_experts --set num_local_experts=4
refuse olmoe-eos_float "eos_token_id must be a token id" olmoe --set eos_token_id=2.0
# a layer listed twice in mlp_only_layers is one dense layer (transformers asks `in`), written once
accept qwen2_moe-dense_twice qwen2_moe --set 'mlp_only_layers=[0,0]'
refuse qwen2_moe-dense_float "mlp_only_layers must list layer indices" qwen2_moe --set 'mlp_only_layers=[0.0]'
# Qwen3-MoE without head_dim (as its save_pretrained writes it): hidden / heads = 8
accept qwen3_moe-no_head_dim qwen3_moe
if grep -q head_dim "$WORK/qwen3_moe-no_head_dim/config.json"; then
    fail "the qwen3_moe fixture has a head_dim"
elif "$TEST_HF" roundtrip "$WORK/qwen3_moe-no_head_dim" "$WORK/out" 5000000000 float32 >"$WORK/log" 2>&1; then
    pass "qwen3_moe without head_dim: import, export, re-import bitwise"
else
    fail "qwen3_moe without head_dim round trip: $(cat "$WORK/log")"
fi
exit $FAILED
