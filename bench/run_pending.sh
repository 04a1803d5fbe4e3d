#!/usr/bin/env bash
# What the open issues still need from the GPU machine, in one call on whichever card comes,
# output under $OUT, and last, in what time is left, the two tests against transformers that
# have not run on the machine's transformers since their fix (gdn_ops_parity,
# hf_oss_transformers):
# - an H200: gpt-oss-120b's first layer beside the peer, which does not fit it on an H100
#   (bench/run_gptoss.sh peer), then in what is left of the call the same slice with its layer
#   updated on the GPU too (optimizer.device_groups 2: 58 GB of fp32 state, which "auto" leaves
#   on the host);
# - an H100: Qwen3.5-35B-A3B's first 2 layers beside the peer (moe-qwen3.5-35b-a3b-2l: the
#   peer's 4 would not fit the card; flash-linear-attention's wheels carried in .whl), then,
#   where time is left, ours again with layer 1 updated on the GPU too (optimizer.device_groups
#   3: "auto" takes the embedding and layer 0), and the delta rule at a training step's shape
#   beside FLA's.
# MT_PENDING_PART picks another part on an H100 instead:
#   glm   GLM-4.7-Flash's first 6 layers beside the peer (bench/run_deepseek.sh peer47), then
#         with layers 1 and 2 updated on the GPU too (optimizer.device_groups 3 and 4), and where
#         its forward waits for the optimizer ranks (a trace of steps 4 and 5);
#   tier  GLM-4.7-Flash's largest slice with every byte of its state on disk;
#   busy  Qwen3.5-27B's first 4 layers at the plan's break-even (bench/run_qwen35.sh busy).
#   usage: OUT=... [MT_PENDING_S=SECONDS] [MT_PENDING_PART=glm|tier|busy] bench/run_pending.sh
set -u
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
free -g | head -n 2
pending_t0=$(date +%s)
left() { echo $((${MT_PENDING_S:-560} - ($(date +%s) - pending_t0))); } # MT_PENDING_S: the call's seconds
if ls .whl/*.whl >/dev/null 2>&1; then # flash-linear-attention for the Qwen3.5 peer and rule
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
source bench/device-build.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    MT_PEER_MICROS="2 1" MT_PEER_STEPS=4 MT_PEER_LIMIT=200 bash bench/run_gptoss.sh peer 2>&1 |
        tail -n 40
    echo "left $(left) s"
    [ "$(left)" -gt 120 ] && MT_BENCH_ARGS="optimizer.device_groups=2" MT_BENCH_TAG=dev2 \
        timeout "$(($(left) - 5))" bench/run_bench.sh build "$OUT" moe-gptoss-1l 2>&1 |
        grep -E "^/root|exit|plan:"
    true
elif [ "${MT_PENDING_PART:-}" = tier ]; then # GLM-4.7-Flash's largest slice, every byte on disk
    timeout "$(($(left) - 10))" bash bench/run_deepseek.sh tier 2>&1 | tail -n 40
elif [ "${MT_PENDING_PART:-}" = busy ]; then
    timeout "$(($(left) - 10))" bash bench/run_qwen35.sh busy 2>&1 | tail -n 30
elif [ "${MT_PENDING_PART:-}" = glm ]; then
    export MT_MOE_BENCH_LIMIT=150 MT_PEER_STEPS=4 MT_PEER_LIMIT=160
    bash bench/run_deepseek.sh peer47 2>&1 | grep -E "RATIO|^/root|^MOE|^build:|done at"
    for v in dev3:optimizer.device_groups=3 dev4:optimizer.device_groups=4 trace:trace_steps=[4,5]; do
        MT_BENCH_TAG=${v%%:*} MT_BENCH_ARGS=${v#*:} timeout 120 \
            bench/run_bench.sh build "$OUT" moe-glm47flash-6l 2>&1 | grep -E "^/root|exit|plan:"
    done
    python3 bench/trace_summary.py "$OUT/run-moe-glm47flash-6l-trace/trace.json" 2>&1 | head -n 30
else # Qwen3.5-35B-A3B's 2 layers beside the peer, then the delta rule at a step's shape
    MT_MOE_BENCH_LIMIT=150 MT_PEER_MICROS="2 1" MT_PEER_STEPS=3 MT_PEER_LIMIT=150 \
        bash bench/run_moe.sh moe-qwen3.5-35b-a3b-2l peer-qwen35moe:2 2>&1 |
        grep -vE "^rank [0-9]|bytes/param" | tail -n 30
    echo "left $(left) s" # then with both layers updated on the GPU too, not the host
    [ "$(left)" -gt 130 ] && MT_BENCH_ARGS="optimizer.device_groups=3" MT_BENCH_TAG=dev3 \
        timeout "$(($(left) - 10))" bench/run_bench.sh build "$OUT" moe-qwen3.5-35b-a3b-2l 2>&1 |
        grep -E "^/root|exit|plan:|^step"
    echo "left $(left) s"
    if [ "$(left)" -gt 60 ]; then
        timeout 25 build/bin/test_gdn_cuda --bench --B 8 --H 48 --HK 16 --T 2048 2>&1 | tail -n 4
        timeout 30 python3 bench/gdn_fla.py --B 8 --T 2048 --H 48 --HK 16 2>&1 | grep -v Warning |
            tail -n 4
    fi
fi
echo "left $(left) s"
if [ "$(left)" -gt 40 ]; then # the tests against transformers not run since their fix
    (cd build && timeout $(($(left) - 10)) ctest --output-on-failure -R \
        "^(gdn_ops_parity|hf_oss_transformers)$" >"$OUT/pending-ctest.log" 2>&1)
    grep -E "tests passed|tests failed|Passed|\(Failed\)|Timeout|Skipped" "$OUT/pending-ctest.log" | head
fi
echo "ALLDONE at $(($(date +%s) - pending_t0)) s"
