#!/usr/bin/env bash
# What the open issues still need from the GPU machine, in one call on whichever card comes,
# output under $OUT:
# - an H200: gpt-oss-120b's first layer beside the peer, which does not fit it on an H100
#   (bench/run_gptoss.sh peer), then Qwen3.5-27B's 4 layers at 131,072 tokens in what is left
#   of the call (bench/run_qwen35.sh long);
# - an H100: GLM-4.7-Flash's first 6 layers with the gradient ring's updates in arrival order,
#   then by urgency beside the peer (bench/run_deepseek.sh order47 peer47), the ring's CUDA bits
#   (e2e_grad_ring), and the slice at its plan's break-even (bench/run_deepseek.sh busy).
#   usage: OUT=... bench/run_pending.sh
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
free -g | head -n 2
t0=$(date +%s)
left() { echo $((560 - ($(date +%s) - t0))); }
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    MT_PEER_MICROS="4 2 1" MT_PEER_STEPS=4 MT_PEER_LIMIT=170 bash bench/run_gptoss.sh peer 2>&1 |
        tail -n 40
    echo "left $(left) s"
    [ "$(left)" -gt 200 ] && timeout "$(($(left) - 10))" bash bench/run_qwen35.sh long 2>&1 | tail -n 30
else
    export MT_MOE_BENCH_LIMIT=200 MT_PEER_STEPS=4 MT_PEER_LIMIT=160
    bash bench/run_deepseek.sh order47 peer47 2>&1 | tail -n 45
    (cd build && timeout 100 ctest -R "^e2e_grad_ring$" --output-on-failure 2>&1 |
        grep -E "cuda|FAIL|Passed|Failed" | head)
    echo "left $(left) s"
    MT_MOE_BENCH_LIMIT=$(($(left) - 10)) bash bench/run_deepseek.sh busy 2>&1 | tail -n 12
fi
echo "ALLDONE at $(($(date +%s) - t0)) s"
