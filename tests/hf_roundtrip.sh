#!/usr/bin/env bash
# Load -> export -> load is bitwise, for single-file and sharded inputs, every dtype, tied and
# untied heads, and exports split into many shards; the exported values equal the fixture's as
# Python decodes them (F16 subnormals, infinities and NaN included). A bf16 export gives back
# the fixture rounded to bf16 as torch rounds, checked the same two ways.
# usage: hf_roundtrip.sh TEST_HF TESTS_DIR
set -u
TEST_HF=$1
T=$2
WORK=$(mktemp -d /tmp/mt-hf.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
run() { # run NAME MAX_SHARD_BYTES EXPORT_DTYPE FIXTURE-ARGS... : fixture, round trip, values
    local name=$1 max=$2 dtype=$3 bf=
    shift 3
    [ "$dtype" = bfloat16 ] && bf=--bf16
    python3 "$T/hf_fixture.py" "$WORK/$name" "$@" || { echo "FAIL $name: fixture"; FAILED=1; return; }
    if ! "$TEST_HF" roundtrip "$WORK/$name" "$WORK/$name.out" "$max" "$dtype"; then
        echo "FAIL $name: round trip"; FAILED=1; return
    fi
    local min=1
    [ "$max" -lt 100000 ] && min=3
    if python3 "$T/hf_check.py" "$WORK/$name.out" --against "$WORK/$name" --min-shards $min $bf; then
        echo "PASS $name"
    else
        echo "FAIL $name: exported values"; FAILED=1
    fi
}
run f32_single 5000000000 float32
run mixed_sharded 5000000000 float32 --dtypes mixed --shards 3
run specials_small_shards 60000 float32 --dtypes mixed --specials
run tied_sharded 60000 float32 --tied --shards 2
run bf16_export 60000 bfloat16 --dtypes mixed --specials --shards 2
run qwen2_llama3 60000 float32 --qwen2 --llama3 --dtypes mixed --shards 2
run llama3_bf16 5000000000 bfloat16 --llama3 --tied
run qwen2_yarn 60000 float32 --qwen2 --yarn # YaRN's rope_scaling, in any family, comes back
run mistral_window 60000 float32 --corrupt mistral_window # exported as Mistral, its window kept
run qwen2_window 60000 float32 --qwen2 --corrupt qwen2_window # layer 1's window as layer_types
run llama_bias 60000 float32 --llama-bias # Llama's attention_bias: q, k, v and o_proj biases
# An export into an existing, non-empty folder is refused.
mkdir -p "$WORK/full" && touch "$WORK/full/x"
if "$TEST_HF" roundtrip "$WORK/f32_single" "$WORK/full" 5000000000 2>"$WORK/err"; then
    echo "FAIL export over a non-empty folder succeeded"; FAILED=1
elif grep -q "not empty" "$WORK/err"; then
    echo "PASS non-empty export_dir refused: $(cat "$WORK/err")"
else
    echo "FAIL non-empty export_dir: $(cat "$WORK/err")"; FAILED=1
fi
exit $FAILED
