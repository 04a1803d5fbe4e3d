#!/usr/bin/env bash
# The CUDA MoE path against the CPU reference on the GPU machine: the same tiny MoE models
# (every MoE feature: qk-norm per head with an explicit head_dim, or over the whole projection;
# a shared expert; a dense layer among MoE ones; the load-balancing loss joining the loss)
# trained 12 steps on each backend from the same seed; prints both loss curves, the aux losses
# and the largest relative difference. bf16 compute on the GPU: expect about 1e-2.
#   usage: bench/moe_check.sh BUILD_DIR OUT_DIR
set -u
BUILD=$1 OUT=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT/moe-check"
run() { # name backend extra-model-settings
    local dir=$OUT/moe-check/$1-$2
    cat >"$dir.cfg" <<CFG
model = { dim = 128; layers = 3; heads = 4; kv_heads = 2; ffn_dim = 192; vocab = 256;
          experts = 16; top_k = 4; moe_ffn_dim = 64; router_aux = true; router_aux_coef = 0.01;
          $3 };
data = { format = "bytes"; path = "$here/../data/tinyshakespeare.txt"; };
batch = { micro_batch = 4; micro_batches = 2; seq_len = 128; };
optimizer = { lr = 2e-3; warmup_steps = 2; };
steps = 12;
backend = "$2";
checkpoint = { interval = 0; };
CFG
    "$BUILD/bin/mtrun" -np 3 "$dir.cfg" --out "$dir" >"$dir.log" 2>&1 || { tail -5 "$dir.log"; return 1; }
}
compare() {
    python3 - "$OUT/moe-check/$1-cpu/metrics.jsonl" "$OUT/moe-check/$1-cuda/metrics.jsonl" "$1" <<'PY'
import json, sys
rows = [[json.loads(l) for l in open(p) if '"loss"' in l] for p in sys.argv[1:3]]
worst = 0
for a, b in zip(*rows):
    d = abs(a["loss"] - b["loss"]) / abs(a["loss"])
    worst = max(worst, d)
    print(f"{sys.argv[3]} step {a['step']:3d} loss cpu {a['loss']:.6f} cuda {b['loss']:.6f} "
          f"aux cpu {a.get('aux_loss', 0):.6f} cuda {b.get('aux_loss', 0):.6f} rel {d:.2e}")
print(f"MOECHECK {sys.argv[3]}: {len(rows[0])} steps, largest relative loss difference {worst:.3e}")
PY
}
for v in "head:qk_norm = \"head\"; head_dim = 48; shared_ffn_dim = 96; dense_layers = \"1\";" \
         "all:qk_norm = \"all\"; norm_topk_prob = false;" \
         "mixtral:moe_names = \"block_sparse_moe\"; moe_every = 1;"; do
    name=${v%%:*}
    run "$name" cpu "${v#*:}" && run "$name" cuda "${v#*:}" && compare "$name"
done
