#!/usr/bin/env bash
# Bad Hugging Face folders: each must fail validation with exit code 2 and exactly one line
# that names the offending file and the problem.
# usage: hf_errors.sh TEST_HF TESTS_DIR
set -u
TEST_HF=$1
T=$2
WORK=$(mktemp -d /tmp/mt-hf.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
# expect NAME FILE-REGEX PROBLEM-REGEX FIXTURE-ARGS...
expect() {
    local name=$1 file=$2 problem=$3
    shift 3
    rm -rf "$WORK/d"
    python3 "$T/hf_fixture.py" "$WORK/d" "$@"
    "$TEST_HF" check "$WORK/d" >"$WORK/out" 2>"$WORK/err"
    local rc=$? msg
    msg=$(cat "$WORK/err")
    if [ $rc -ne 2 ]; then
        echo "FAIL $name: exit code $rc, expected 2 ($msg)"; FAILED=1
    elif [ "$(wc -l <"$WORK/err")" -ne 1 ]; then
        echo "FAIL $name: expected one line:"; sed 's/^/    /' "$WORK/err"; FAILED=1
    elif ! grep -Eq -- "$WORK/d/$file" "$WORK/err" || ! grep -Eq -- "$problem" "$WORK/err"; then
        echo "FAIL $name: '$msg' does not name $file and /$problem/"; FAILED=1
    else
        echo "PASS $name: $msg"
    fi
}
python3 "$T/hf_fixture.py" "$WORK/good" --dtypes mixed --shards 2
"$TEST_HF" check "$WORK/good" >/dev/null || { echo "FAIL the good fixture is refused"; FAILED=1; }
for m in mistral_ok mistral_window; do # a window longer than the rows, and one shorter
    python3 "$T/hf_fixture.py" "$WORK/$m" --corrupt $m
    "$TEST_HF" check "$WORK/$m" >/dev/null || { echo "FAIL Mistral ($m) is refused"; FAILED=1; }
done
# good: Qwen2 with its biases (also with a short window that use_sliding_window turns off, and
# one it turns on for layer 1 by max_window_layers), and Llama 3.1's rope_scaling
for good in "qwen2 --qwen2 --shards 2" "qwen2_window_off --qwen2 --corrupt qwen2_window_off" \
    "qwen2_window --qwen2 --corrupt qwen2_window" "llama_bias --llama-bias" \
    "llama3 --llama3" "qwen2_llama3 --qwen2 --llama3 --dtypes mixed"; do
    set -- $good
    name=$1
    shift
    python3 "$T/hf_fixture.py" "$WORK/$name" "$@"
    "$TEST_HF" check "$WORK/$name" >"$WORK/out" 2>&1 || { echo "FAIL $name is refused: $(cat "$WORK/out")"; FAILED=1; }
done
expect truncated model.safetensors "outside the file.*truncated" --corrupt truncated
expect truncated_shard model-00002-of-00002 "truncated" --shards 2 --corrupt truncated
expect overlap model.safetensors "overlap" --corrupt overlap
expect out_of_range model.safetensors "data_offsets outside" --corrupt out_of_range
expect short_header model.safetensors "truncated \(header of [0-9]+ bytes" --corrupt short_header
expect qwen2_types_bad config.json 'layer_types\[1\] "chunked_attention" not supported' --qwen2 --corrupt qwen2_types_bad
expect qwen2_types_number config.json "layer_types\[1\] is not a string" --qwen2 --corrupt qwen2_types_number
expect qwen2_types_nowindow config.json "layer_types\[0\] is sliding_attention, but there is no window" --qwen2 --corrupt qwen2_types_nowindow
expect big_header model.safetensors "over the 100 MB limit" --corrupt big_header
expect dtype model.safetensors "dtype I(16|32) not supported" --dtypes mixed --corrupt dtype
expect shape model.safetensors "up_proj.weight has shape \[159, 64\], config.json needs \[160, 64\]" --corrupt shape
expect missing_shard model-00003-of-00003.safetensors "missing shard" --shards 3 --corrupt missing_shard
expect arch config.json "architecture GPT2LMHeadModel not supported" --corrupt arch
expect rope config.json "rope_scaling type longrope not supported \(only llama3 and yarn\)" --corrupt rope
expect rope_key config.json "rope_scaling.factor must be a positive number \(rope_type llama3\)" --corrupt rope_key
expect rope_band config.json "high_freq_factor 1 must be greater than low_freq_factor 1" --corrupt rope_band
expect attention_bias model.safetensors "no tensor model.layers.0.self_attn.q_proj.bias \(config.json needs it\)" --corrupt attention_bias
expect missing_bias model.safetensors "no tensor model.layers.1.self_attn.v_proj.bias \(config.json needs it\)" --qwen2 --corrupt missing_bias
expect bias_shape model.safetensors "k_proj.bias has shape \[64\], config.json needs \[32\]" --qwen2 --corrupt bias_shape
expect head_dim model.safetensors "q_proj.weight has shape \[64, 64\], config.json needs \[128, 64\]" --corrupt head_dim
expect head_dim_huge config.json "head_dim 575806099 is out of range: at most 1024" --corrupt head_dim_huge
expect eos_range config.json "eos_token_id 256 is not below vocab_size 256" --corrupt eos_range
expect bias_tensor model.safetensors "unexpected tensor model.layers.0.self_attn.q_proj.bias" --corrupt bias_tensor
# a missing tensor: drop one from a single-file fixture by untying the config only
python3 "$T/hf_fixture.py" "$WORK/d" --tied >/dev/null
sed -i 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' "$WORK/d/config.json"
"$TEST_HF" check "$WORK/d" 2>"$WORK/err" >/dev/null
if [ $? -eq 2 ] && grep -q "model.safetensors: no tensor lm_head.weight" "$WORK/err"; then
    echo "PASS missing_tensor: $(cat "$WORK/err")"
else
    echo "FAIL missing_tensor: $(cat "$WORK/err")"; FAILED=1
fi
# config.json read as Python's json reads it (D18), and integers out of int's range said so.
# json_case NAME PROBLEM-REGEX PYTHON-EXPR: the config's text becomes the expression's value (t).
json_case() {
    local name=$1 problem=$2 edit=$3
    rm -rf "$WORK/d"
    python3 "$T/hf_fixture.py" "$WORK/d" >/dev/null
    python3 -c "import sys; p=sys.argv[1]; t=open(p).read(); open(p,'w').write($edit)" "$WORK/d/config.json"
    "$TEST_HF" check "$WORK/d" >/dev/null 2>"$WORK/err"
    local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q "$WORK/d/config.json" "$WORK/err" &&
        grep -Eq -- "$problem" "$WORK/err"; then
        echo "PASS $name: $(cat "$WORK/err")"
    else
        echo "FAIL $name: exit $rc, '$(cat "$WORK/err")' does not say /$problem/"; FAILED=1
    fi
}
json_case trailing "more data after the JSON value at line" "t + ' {}'"
json_case two_objects "more data after the JSON value" "t.replace(chr(10), ' ') + t.replace(chr(10), ' ')"
json_case nul_escape "u0000 in a string is not supported" "t.replace('\"LlamaForCausalLM\"', '\"Llama\\\\u0000ForCausalLM\"')"
json_case infinity "non-finite number" "t.replace('\"vocab_size\": 256', '\"vocab_size\": Infinity')"
json_case huge_number "vocab_size is not a finite number" "t.replace('\"vocab_size\": 256', '\"vocab_size\": 1e999')"
json_case vocab_2_31 "vocab_size = 2147483648 is out of range" "t.replace('\"vocab_size\": 256', '\"vocab_size\": 2147483648')"
# a UTF-8 byte order mark: Python's json refuses it (transformers reads the file as utf-8 text)
json_case bom "byte order mark \(BOM\) at the start is not valid JSON" "chr(0xfeff) + t"
# a duplicate key: the last one counts, as in Python (here the last is refused, the first good)
json_case duplicate_last "eos_token_id 999 is not below vocab_size 256" "t.replace('{', '{\"eos_token_id\": 1, ', 1).rstrip().rstrip('}') + ', \"eos_token_id\": 999}'"
exit $FAILED
