#!/usr/bin/env bash
# model_dir and export_dir through the real launcher and ranks (CPU backend):
#  - the first-step loss of a run from a Hugging Face folder differs from a random-init run's
#    (the weights were used) and is bitwise the same at -np 2 and -np 3 (loading is sharding-
#    invariant), over all 3 steps;
#  - export_dir receives a valid, loadable Hugging Face folder (fp32: bitwise the final master
#    weights; bfloat16: those rounded), refused when it is not empty;
#  - the same for a Qwen2 folder (q/k/v biases) with Llama 3.1's rope_scaling, exported as a Qwen2
#    with its rope_scaling;
#  - bad weights and a model.* key that disagrees with config.json exit with code 2 and one line.
# usage: hf_e2e.sh MTRUN SRC TEST_HF
source "$(dirname "$0")/e2e_lib.sh" "$@"
TEST_HF=$3
T=$SRC/tests
python3 "$T/hf_fixture.py" "$WORK/llama" --dtypes mixed --shards 2
# test-small.cfg without its model block (model_dir supplies it), 3 steps, absolute data path
sed -e "s|\"\.\./data/|\"$SRC/data/|" -e 's/^steps *=.*/steps = 3;/' "$SRC/configs/test-small.cfg" |
    awk '/^model = {/{skip=1} !skip{print} skip&&/^};/{skip=0}' >"$WORK/base.cfg"
{ cat "$WORK/base.cfg"; echo 'model_dir = "llama";'; } >"$WORK/hf.cfg"
{ cat "$WORK/hf.cfg"; echo 'export_dir = "exported";'; } >"$WORK/export.cfg"
{ cat "$WORK/hf.cfg"; echo 'export_dir = "exported-bf16";'; echo 'export_dtype = "bfloat16";'; } \
    >"$WORK/export-bf16.cfg"
sed -e "s|\"\.\./data/|\"$SRC/data/|" -e 's/^steps *=.*/steps = 3;/' \
    "$SRC/configs/test-small.cfg" >"$WORK/random.cfg"

run_job random 2 "$WORK/random.cfg" || show_log random
run_job np2 2 "$WORK/export-bf16.cfg" || show_log np2
run_job np3 3 "$WORK/export.cfg" || show_log np3
expect "model_dir run at -np 2 ran 3 steps" test "$(losses "$WORK/np2" | wc -l)" -eq 3
expect "-np 3 losses are bitwise those of -np 2" diff <(losses "$WORK/np2") <(losses "$WORK/np3")
first() { losses "$1" | head -1 | sed 's/.*"loss"://'; }
expect "first loss from model_dir ($(first "$WORK/np2")) differs from random init ($(first "$WORK/random"))" \
    test "$(first "$WORK/np2")" != "$(first "$WORK/random")"
expect "export_dir is a valid Hugging Face folder" python3 "$T/hf_check.py" "$WORK/exported"
expect "export_dir loads back" "$TEST_HF" check "$WORK/exported"
# The shards, in order, hold every group's flat fp32 master weights back to back: the same
# bytes as the master arrays of the final checkpoint (state.bin: 64 KiB header, then master,
# m, v of each group).
export_is_master() { # [EXPORT RUN]
    local out=${1:-$WORK/exported} run=${2:-$WORK/np3}
    python3 - "$out" "$run/$(cat "$run/LATEST")/state.bin" <<'PY'
import glob, struct, sys
data = b""
for f in sorted(glob.glob(sys.argv[1] + "/model-*.safetensors")):
    blob = open(f, "rb").read()
    data += blob[8 + struct.unpack("<Q", blob[:8])[0]:]
st = open(sys.argv[2], "rb").read()
n_groups = struct.unpack("<q", st[8:16])[0]
numel = struct.unpack(f"<{n_groups}Q", st[16:16 + 8 * n_groups])
off, master = 65536, b""
for n in numel:
    master += st[off:off + 4 * n]
    off += 12 * n
sys.exit(0 if master == data else 1)
PY
}
expect "exported weights are bitwise the final checkpoint's fp32 master weights" export_is_master
# -np 2 trained the same fp32 weights; its bf16 export holds them rounded as torch rounds.
expect "the -np 2 bfloat16 export is the -np 3 fp32 export rounded to bf16" \
    python3 "$T/hf_check.py" "$WORK/exported-bf16" --bf16 --against "$WORK/exported"
expect "no temporary export folder is left" test ! -e "$WORK/exported.export-tmp"

# Qwen2 with llama3 rope_scaling: the biases stream, shard and train like any weight.
python3 "$T/hf_fixture.py" "$WORK/qwen2" --qwen2 --llama3 --shards 2
sed 's/"llama"/"qwen2"/' "$WORK/hf.cfg" >"$WORK/qwen2.cfg"
{ cat "$WORK/qwen2.cfg"; echo 'export_dir = "qwen2-out";'; } >"$WORK/qwen2-export.cfg"
run_job qwen2_np2 2 "$WORK/qwen2.cfg" || show_log qwen2_np2
run_job qwen2_np3 3 "$WORK/qwen2-export.cfg" || show_log qwen2_np3
expect "Qwen2 run at -np 2 ran 3 steps" test "$(losses "$WORK/qwen2_np2" | wc -l)" -eq 3
expect "Qwen2: -np 3 losses are bitwise those of -np 2" \
    diff <(losses "$WORK/qwen2_np2") <(losses "$WORK/qwen2_np3")
expect "Qwen2 export is a valid folder" python3 "$T/hf_check.py" "$WORK/qwen2-out"
expect "Qwen2 export holds the final master weights, biases included" \
    export_is_master "$WORK/qwen2-out" "$WORK/qwen2_np3"
expect "Qwen2 export's config.json: Qwen2ForCausalLM with the fixture's rope_scaling" python3 -c "
import json, sys
a, b = (json.load(open(sys.argv[i] + '/config.json')) for i in (1, 2))
sys.exit(not (b['architectures'] == ['Qwen2ForCausalLM'] and a['rope_scaling'] == b['rope_scaling']))
" "$WORK/qwen2" "$WORK/qwen2-out"
expect "Qwen2 export loads back" "$TEST_HF" check "$WORK/qwen2-out"

# expect_error NAME REGEX CFG NP: exit code 2 and one line on stderr that matches
expect_error() {
    local name=$1 regex=$2 cfg=$3 np=$4
    "$MTRUN" -np "$np" "$cfg" --out "$WORK/$name" >"$WORK/$name.out" 2>"$WORK/$name.err"
    local rc=$?
    expect "$name: exit code 2 (got $rc)" test $rc -eq 2
    expect "$name: one line matching /$regex/: $(head -c 300 "$WORK/$name.err")" \
        bash -c "[ \$(wc -l <'$WORK/$name.err') -eq 1 ] && grep -Eq -- '$regex' '$WORK/$name.err'"
}
expect_error export_not_empty "exported already exists and is not empty" "$WORK/export.cfg" 3
python3 "$T/hf_fixture.py" "$WORK/broken" --shards 2 --corrupt truncated
sed 's/"llama"/"broken"/' "$WORK/hf.cfg" >"$WORK/broken.cfg"
expect_error truncated_weights "broken/model-00002-of-00002.safetensors: .*truncated" "$WORK/broken.cfg" 3
{ cat "$WORK/hf.cfg"; echo 'model = { dim = 128; };'; } >"$WORK/conflict.cfg"
expect_error conflicting_model_key "model.dim: disagrees with .*llama/config.json" "$WORK/conflict.cfg" 2
python3 "$T/hf_fixture.py" "$WORK/gpt2" --corrupt arch
sed 's/"llama"/"gpt2"/' "$WORK/hf.cfg" >"$WORK/gpt2.cfg"
expect_error unsupported_arch "gpt2/config.json: architecture GPT2LMHeadModel" "$WORK/gpt2.cfg" 2
# Special token ids: train.cfg may give those config.json lacks, not contradict those it has.
cp -r "$WORK/llama" "$WORK/nospecial"
python3 -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); c.pop('bos_token_id'); \
c.pop('eos_token_id'); json.dump(c, open(p, 'w'))" "$WORK/nospecial/config.json"
{ sed 's/"llama"/"nospecial"/' "$WORK/hf.cfg"; echo 'model = { eos_token_id = 10; };'; } >"$WORK/eos.cfg"
expect "an eos id from train.cfg where config.json has none" "$MTRUN" --dry-run -np 2 "$WORK/eos.cfg"
{ cat "$WORK/hf.cfg"; echo 'model = { eos_token_id = 10; };'; } >"$WORK/eos-conflict.cfg"
expect_error conflicting_eos "model.eos_token_id: disagrees with .*llama/config.json" \
    "$WORK/eos-conflict.cfg" 2
# Only these jobs' own names: other jobs may be running on the machine. (Most refusals come from
# mtrun before a job exists; those that got as far as a job id are checked.)
jobs=$(grep -ho 'job [0-9a-f]\{32\}' "$WORK"/*.out | cut -d' ' -f2)
left=$(for j in $jobs; do job_leftovers "$j"; done)
expect "the refused jobs ($(echo $jobs | wc -w)) left no shared memory behind" \
    test -z "$left"
finish
