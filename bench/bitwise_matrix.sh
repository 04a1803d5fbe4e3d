#!/usr/bin/env bash
# A refactor that must change no bit: the same small jobs, one per feature the layer kinds carry
# (dense, qk_norm per head and over the projection, q/k/v biases, llama3 RoPE, untied head, MoE
# with either hub naming and a shared expert, packed documents, chunked token-wise work, the
# gradient ring), run through mtrun by two builds, and their per-step losses and final
# checkpoints compared byte for byte.
# Usage: bench/bitwise_matrix.sh BIN_DIR OUT_DIR [cpu|cuda]   (writes OUT_DIR/NAME.losses, .sum)
#        bench/bitwise_matrix.sh --compare OUT_A OUT_B
set -u
if [ "${1:-}" = --compare ]; then
    bad=0
    for f in "$2"/*.losses; do
        n=$(basename "$f" .losses)
        if cmp -s "$f" "$3/$n.losses" && cmp -s "$2/$n.sum" "$3/$n.sum" && [ -s "$f" ]; then
            echo "same: $n ($(wc -l <"$f") steps)"
        else
            echo "DIFFERENT: $n"
            bad=1
        fi
    done
    exit $bad
fi
BIN=$1
OUT=$2
BACKEND=${3:-cpu}
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
base() { # base NAME MODEL_EXTRA [OTHER_SECTIONS]
    cat <<EOF
model = { dim = 64; layers = 3; heads = 4; kv_heads = 2; ffn_dim = 96; $2 };
data = { path = "$SRC/data/tinyshakespeare.txt"; $4 };
batch = { micro_batch = 2; micro_batches = 2; seq_len = 32; $5 };
optimizer = { lr = 3e-3; $6 };
steps = 6;
seed = 7;
backend = "$BACKEND";
checkpoint = { interval = 6; };
$3
EOF
}
declare -A CASES=(
    [dense]="|||||"
    [untied]="tied_embeddings = false;|||||"
    [qknorm_head]="qk_norm = \"head\";|||||"
    [qknorm_all]="qk_norm = \"all\";|||||"
    [qkv_bias]="qkv_bias = true;|||||"
    [llama3]="rope_scaling = { rope_type = \"llama3\"; factor = 8.0; low_freq_factor = 1.0; high_freq_factor = 4.0; original_max_position_embeddings = 16; };|||||"
    [moe_mlp]="experts = 8; top_k = 2; moe_ffn_dim = 24; norm_topk_prob = true; shared_ffn_dim = 16; dense_layers = \"0\"; qk_norm = \"head\"; router_aux = true; router_aux_coef = 0.01;|||||"
    [moe_bsm]="experts = 4; top_k = 2; moe_ffn_dim = 32; norm_topk_prob = true; moe_names = \"block_sparse_moe\";|||||"
    [moe_every]="experts = 4; top_k = 1; moe_ffn_dim = 32; moe_every = 2;|||||"
    [chunked]="||||seq_chunk = 16;|"
    [ring]="|||||clip = 0.0;"
    [packed]="|||pack = \"documents\"; eot = 10;||"
)
for name in "${!CASES[@]}"; do
    IFS='|' read -r model other data _ batch opt <<<"${CASES[$name]}"
    base "$name" "$model" "$other" "$data" "$batch" "$opt" >"$OUT/$name.cfg"
done
for name in $(printf '%s\n' "${!CASES[@]}" | sort); do
    rm -rf "$OUT/run-$name"
    if ! "$BIN/mtrun" -np 3 "$OUT/$name.cfg" --out "$OUT/run-$name" >"$OUT/$name.log" 2>&1; then
        echo "FAILED: $name (tail of $OUT/$name.log)"
        tail -n 5 "$OUT/$name.log"
        : >"$OUT/$name.losses"
        continue
    fi
    grep -o '"step":[0-9]*,"loss":[^,]*\|"aux_loss":[^,]*' "$OUT/run-$name/metrics.jsonl" \
        >"$OUT/$name.losses"
    sha256sum <"$OUT/run-$name/step_000006/state.bin" >"$OUT/$name.sum"
    echo "ran: $name"
done
