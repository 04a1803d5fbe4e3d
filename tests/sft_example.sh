#!/usr/bin/env bash
# The fine-tuning walk-through of docs/huggingface.md, as written, on the CPU backend: a tiny
# Hugging Face model folder with a tokenizer and Qwen2's chat template (hf_fixture.py
# --tokenizer), conversations made from the demo text (a line asked for, the next one answered),
# mt-tokenize --chat, then configs/sft-example.cfg with model_dir and the paths set on the
# command line:
# - mt-tokenize tells ChatML from tokenizer_config.json and writes a masked shard;
# - the job trains on the assistant turns only (metrics.jsonl's targets below the tokens), the
#   loss falls, and evaluation runs;
# - the exported folder is a Hugging Face folder that mtrun takes back as model_dir.
# usage: sft_example.sh MTRUN REPO_ROOT MT_TOKENIZE
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
MT_TOKENIZE=$3
command -v python3 >/dev/null || { echo "SKIPPED: python3 is missing (it writes the model)"; exit 77; }
python3 "$SRC/tests/hf_fixture.py" "$WORK/model" --tokenizer || { echo "FAIL: fixture"; exit 1; }
python3 - "$SRC/data/tinyshakespeare.txt" "$WORK/chat.jsonl" <<'PY'
import json, sys
lines = [l.strip() for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
with open(sys.argv[2], "w") as f:
    for a, b in zip(lines[0:8000:2], lines[1:8000:2]):
        f.write(json.dumps({"messages": [{"role": "user", "content": "Next line after: " + a},
                                         {"role": "assistant", "content": b}]}) + "\n")
PY
mkdir -p "$WORK/chat"
"$MT_TOKENIZE" -q -t "$WORK/model/tokenizer.json" --chat -o "$WORK/chat/train" "$WORK/chat.jsonl" \
    >"$WORK/tokenize.log" 2>&1
expect "mt-tokenize --chat writes the shard ($(head -c 300 "$WORK/tokenize.log"))" \
    test -s "$WORK/chat/train_000000.bin"
expect "the shard is version 2, with a target mask" \
    test "$(od -An -tu4 -j8 -N4 "$WORK/chat/train_000000.bin" | xargs)" = 2

# The walk-through's config as shipped, with the paths of this test and a CPU-sized batch.
ARGS=(model_dir="$WORK/model" data.path="$WORK/chat" export_dir="$WORK/export"
      backend=cpu batch.micro_batch=4 batch.micro_batches=2 batch.seq_len=64 steps=30
      optimizer.lr=3e-3 optimizer.min_lr=3e-4 optimizer.warmup_steps=3 eval.interval=10
      eval.batches=2 checkpoint.interval=15)
run_job sft 3 "$SRC/configs/sft-example.cfg" "${ARGS[@]}" ||
    { show_log sft; expect "the fine-tuning job succeeds" false; }
first=$(losses "$WORK/sft" | head -n 1 | sed 's/.*"loss"://')
last=$(losses "$WORK/sft" | tail -n 1 | sed 's/.*"loss"://')
expect "30 steps ran" test "$(losses "$WORK/sft" | wc -l)" -eq 30
expect "the loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'
expect "only assistant tokens are targets (targets a step: $(grep -o '"targets":[0-9]*' \
    "$WORK/sft/metrics.jsonl" | head -n 3 | cut -d: -f2 | xargs), of 512 tokens)" \
    test -z "$(grep -o '"targets":[0-9]*' "$WORK/sft/metrics.jsonl" | cut -d: -f2 |
        awk '$1 <= 0 || $1 >= 512')"
expect "it evaluated" grep -q '"eval_loss"' "$WORK/sft/metrics.jsonl"
expect "the export is a Hugging Face folder" \
    test -s "$WORK/export/config.json" -a -n "$(ls "$WORK/export"/*.safetensors 2>/dev/null)"
run_job again 2 "$SRC/configs/sft-example.cfg" "${ARGS[@]}" model_dir="$WORK/export" \
    export_dir="$WORK/export2" steps=2 optimizer.warmup_steps=1 || show_log again
expect "mtrun takes the export back as model_dir" test -s "$WORK/export2/config.json"
finish
