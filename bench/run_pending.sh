#!/usr/bin/env bash
# What the open issues still need from the GPU machine, in one call on whichever card comes,
# output under $OUT:
# - an H200: gpt-oss-120b's first layer beside the peer, which does not fit it on an H100
#   (bench/run_gptoss.sh peer), then in what is left of the call the same slice with its layer
#   updated on the GPU too (optimizer.device_groups 2: 58 GB of fp32 state, which "auto" leaves
#   on the host);
# - an H100: GLM-4.7-Flash's first 6 layers beside the peer (bench/run_deepseek.sh peer47), then
#   with layers 1 and 2 updated on the GPU too (optimizer.device_groups 3 and 4), and where its
#   forward waits for the optimizer ranks (a trace of steps 4 and 5, bench/trace_summary.py).
# MT_PENDING_PART=tier: on an H100, GLM-4.7-Flash's largest slice with every byte of its state
# on disk instead (bench/run_deepseek.sh tier).
#   usage: OUT=... [MT_PENDING_S=SECONDS] [MT_PENDING_PART=tier] bench/run_pending.sh
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
free -g | head -n 2
t0=$(date +%s)
left() { echo $((${MT_PENDING_S:-560} - ($(date +%s) - t0))); } # MT_PENDING_S: the call's seconds
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    MT_PEER_MICROS="2 1" MT_PEER_STEPS=4 MT_PEER_LIMIT=200 bash bench/run_gptoss.sh peer 2>&1 |
        tail -n 40
    echo "left $(left) s"
    [ "$(left)" -gt 120 ] && MT_BENCH_ARGS="optimizer.device_groups=2" MT_BENCH_TAG=dev2 \
        timeout "$(($(left) - 5))" bench/run_bench.sh build "$OUT" moe-gptoss-1l 2>&1 |
        grep -E "^/root|exit|plan:"
elif [ "${MT_PENDING_PART:-}" = tier ]; then # GLM-4.7-Flash's largest slice, every byte on disk
    timeout "$(($(left) - 10))" bash bench/run_deepseek.sh tier 2>&1 | tail -n 40
else
    export MT_MOE_BENCH_LIMIT=150 MT_PEER_STEPS=4 MT_PEER_LIMIT=160
    bash bench/run_deepseek.sh peer47 2>&1 | grep -E "RATIO|^/root|^MOE|^build:|done at"
    for v in dev3:optimizer.device_groups=3 dev4:optimizer.device_groups=4 trace:trace_steps=[4,5]; do
        MT_BENCH_TAG=${v%%:*} MT_BENCH_ARGS=${v#*:} timeout 120 \
            bench/run_bench.sh build "$OUT" moe-glm47flash-6l 2>&1 | grep -E "^/root|exit|plan:"
    done
    python3 bench/trace_summary.py "$OUT/run-moe-glm47flash-6l-trace/trace.json" 2>&1 | head -n 30
fi
echo "ALLDONE at $(($(date +%s) - t0)) s"
