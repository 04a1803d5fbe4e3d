#!/usr/bin/env bash
# DeepSeek's correction bias (mlp.gate.e_score_correction_bias) is a buffer in transformers,
# never trained: a tiny DeepseekV3ForCausalLM folder (tests/hf_deepseek_fixture.py: multi-head
# latent attention, the first layer dense, a random bias on each MoE layer; the router's sigmoid
# scores, the bias for the choice, 2 groups of which 1 is kept, scale 2.5) trained 4 steps with
# weight decay 0.1 through the real
# mtrun, exports each layer's bias bitwise as imported while the router's weights move; the
# same with the embedding and layers 0 and 1 (the first MoE one) updated by the compute rank
# (optimizer.device_groups), with the master, m and v in the NVMe tier (storage.master), and over
# 2 nodes. The biases are set as trained
# ones sit (about 2.5, apart by less than bf16's step there), and the layers read them in fp32
# (runtime/engine/frozen.h) whichever rank holds their master: these runs give bitwise the
# same losses, which a folder with the biases rounded to bf16 does not.
source "$(dirname "$0")/e2e_lib.sh" "$@"
python3 "$SRC/tests/hf_deepseek_fixture.py" "$WORK/hf" --family deepseek_v3
cp -r "$WORK/hf" "$WORK/hf-rounded"
# biases ROUND: each layer's e_score_correction_bias set in place, rounded to bf16 when ROUND is 1
biases() {
    python3 - "$1/model.safetensors" "$2" <<'PY'
import json, random, struct, sys
path, rounded = sys.argv[1], sys.argv[2] == "1"
raw = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
rng = random.Random(11)
for k, v in sorted(json.loads(raw[8:8 + n]).items()):
    if not k.endswith("e_score_correction_bias"):
        continue
    a, b = v["data_offsets"]
    vals = [2.5 + 0.02 * rng.gauss(0, 1) for _ in range((b - a) // 4)]
    if rounded:  # round to nearest even on bf16's 16 bits
        bits = [struct.unpack("<I", struct.pack("<f", x))[0] for x in vals]
        bits = [(u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000 for u in bits]
        vals = [struct.unpack("<f", struct.pack("<I", u))[0] for u in bits]
    raw[8 + n + a:8 + n + b] = struct.pack(f"<{len(vals)}f", *vals)
open(path, "wb").write(raw)
PY
}
biases "$WORK/hf" 0
biases "$WORK/hf-rounded" 1
# frozen NAME EXTRA-OPTIMIZER-KEYS [mtrun args...]: trains $WORK/hf into $WORK/NAME, exported to
# $WORK/NAME.out
frozen() {
    cat >"$WORK/$1.cfg" <<CFGEOF
model_dir = "${HF_DIR:-$WORK/hf}";
data = { path = "$SRC/data/tinyshakespeare.txt"; };
batch = { micro_batch = 2; micro_batches = 2; seq_len = 8; };
optimizer = { lr = 1e-2; weight_decay = 0.1; $2 };
steps = 4;
backend = "cpu";
export_dir = "$WORK/$1.out";
CFGEOF
    run_job "$1" "${NP:-3}" "$WORK/$1.cfg" "${@:3}" || show_log "$1"
    expect "$1: ran 4 steps" test "$(losses "$WORK/$1" 2>/dev/null | wc -l)" -eq 4
    expect "$1: every layer's e_score_correction_bias exported bitwise as imported" \
        python3 - "${HF_DIR:-$WORK/hf}/model.safetensors" "$WORK/$1.out" e_score_correction_bias same <<'PY'
import glob, json, struct, sys
def tensors(path):
    out = {}
    for f in [path] if path.endswith(".safetensors") else sorted(glob.glob(path + "/*.safetensors")):
        raw = open(f, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        for k, v in json.loads(raw[8:8 + n]).items():
            if k != "__metadata__":
                a, b = v["data_offsets"]
                out[k] = (v["dtype"], raw[8 + n + a:8 + n + b])
    return out
before, after, suffix, want = tensors(sys.argv[1]), tensors(sys.argv[2]), sys.argv[3], sys.argv[4]
names = [k for k in before if k.endswith(suffix)]
ok = bool(names) and all(k in after for k in names)  # an export without them proves nothing
same = [before[k] == after[k] for k in names if k in after]
print(f"{suffix}: {sum(same)} of {len(names)} exported unchanged")
sys.exit(0 if ok and (all(same) if want == "same" else not any(same)) else 1)
PY
    expect "$1: every router's weights moved" \
        python3 - "${HF_DIR:-$WORK/hf}/model.safetensors" "$WORK/$1.out" mlp.gate.weight moved \
        < <(sed -n '/^import glob/,/^sys.exit/p' "$0")
}
frozen host ""
frozen device "device_groups = 3;"
# the NVMe tier holding the master beside m and v, in pieces of 1000 floats that cut across the
# bias (each layer's group starts a new piece sequence)
mkdir "$WORK/disk"
MT_TEST_PIECE_FLOATS=1000 frozen tier "" storage.dir="$WORK/disk" storage.adam=true \
    storage.master=true
# 2 nodes of a compute and an optimizer rank: each node's compute rank gets its biases from its
# own node's optimizer rank
MT_TEST_NODES=2 NP=4 frozen nodes2 ""
HF_DIR=$WORK/hf-rounded frozen rounded ""
for run in device tier nodes2; do
    expect "$run: the losses of host, bitwise (the biases read in fp32 here too)" \
        diff <(losses "$WORK/host") <(losses "$WORK/$run")
done
differ() { ! diff -q "$@" >/dev/null; }
expect "the biases rounded to bf16 give other losses (the equalities above can fail)" \
    differ <(losses "$WORK/host") <(losses "$WORK/rounded")
finish
