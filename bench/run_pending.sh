#!/usr/bin/env bash
# What the open issues still need from the GPU machine, in one call on whichever card comes,
# output under $OUT, after the GPU tests of what changed since the last call:
# - an H200: under MT_PENDING_PART=rule the rule part below first; then gpt-oss-120b's first
#   layer beside the peer, which does not fit it on an H100 (bench/run_gptoss.sh peer; "auto"
#   puts the layer's 58 GB of fp32 state on the GPU there), then Qwen3.5-27B's first 4 layers
#   at 131,072 tokens (bench/run_qwen35.sh long: the plan puts them at 87 GiB), as time allows;
# - an H100: Qwen3.5-35B-A3B from its 4- and 8-layer slices (bench/run_slices.sh: the whole
#   model beside its plan), then flash-linear-attention's delta rule at a training step's shape
#   (8 rows of 2,048, 48 value heads over 16 key heads) beside ours (FLA's wheels in .whl).
# MT_PENDING_PART picks another part on an H100 instead:
#   glm   GLM-4.7-Flash's first 6 layers beside the peer (bench/run_deepseek.sh peer47) with
#         optimizer.device_groups "auto", then with the embedding and layer 0 alone
#         (device_groups 2), Qwen3.5-35B-A3B's first 2 layers under "auto", and where time is
#         left Qwen3.5-27B's 4 layers at the plan's break-even (bench/run_qwen35.sh busy);
#   qwen  Qwen3.5-35B-A3B's first 2 layers beside the peer (moe-qwen3.5-35b-a3b-2l: the peer's 4
#         would not fit the card; flash-linear-attention's wheels carried in .whl), then with
#         layer 1 updated on the GPU too (optimizer.device_groups 3), and the delta rule at a
#         training step's shape beside FLA's;
#   tier  GLM-4.7-Flash's largest slice with every byte of its state on disk;
#   busy  Qwen3.5-27B's first 4 layers at the plan's break-even (bench/run_qwen35.sh busy);
#   oss   on an H200: gpt-oss-120b's first layer beside the peer first, then the rule part; on an
#         H100 the rule part;
#   air   GLM-4.5-Air's first 2 layers beside the peer (bench/run_deepseek.sh peerair) with
#         optimizer.device_groups "auto" (the embedding, head and both layers' AdamW on the GPU);
#   rule  the delta rule beside flash-linear-attention's (B 1, 16 key heads, 32 value heads, at
#         8,192 and 32,768 tokens), and beside a base tree's where .base holds one (carried),
#         then Nsight Compute's view of its kernels by source line (bench/device_run.sh
#         gdnsrc) and both rules at a training step's shape; on an H200 before the gpt-oss part.
#   usage: OUT=... [MT_PENDING_S=SECONDS] [MT_PENDING_PART=glm|qwen|tier|busy|air|rule|oss]
#          [MT_PENDING_FLA=0: the rule part without FLA's timing] bench/run_pending.sh
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
# Triton's compiled kernels from an earlier call (.triton/cache.tgz, carried; each call leaves
# its own in $OUT/0-triton-cache.tgz): FLA's first run at a new shape compiles for minutes
[ -f .triton/cache.tgz ] && mkdir -p ~/.triton && tar -xzf .triton/cache.tgz -C ~/.triton
source bench/device-build.sh
# first, the GPU's tests of what changed since the last calls (MT_PENDING_TESTS=0: none, where
# they passed on the same kernels before): the delta rule's backward on the forward's
# checkpoints (gdn_cuda_vs_cpu: the same bits as its own sweep), the plan's bytes
[ "${MT_PENDING_TESTS:-1}" = 1 ] && (cd build && timeout 300 ctest -j4 --timeout 280 --output-on-failure -R \
    "^(e2e_device_groups|plan_matches_allocation|e2e_grad_dtype|gdn_cuda_vs_cpu|layer_parity_qwen35_linear_cuda|hf_qwen35_parity_cuda|e2e_cuda_parity)$" \
    >"$OUT/pending-ctest.log" 2>&1) &&
    grep -E "tests passed|tests failed|\(Failed\)|Timeout|FAIL" "$OUT/pending-ctest.log" | head -n 20
# the delta rule beside flash-linear-attention's, on the H100's and H200's common shapes, and
# where .base/kernels/cuda holds other versions of some kernel files (carried), beside the tree
# built with those
rule_ab() {
    if [ -d .base/kernels/cuda ]; then
        rm -rf /tmp/base && mkdir -p /tmp/base
        tar --exclude=./build --exclude=./.deb --exclude=./.whl --exclude=./.base -cf - . |
            tar -xf - -C /tmp/base && cp .base/kernels/cuda/* /tmp/base/kernels/cuda/
        # a base from before the rows kernel's block sizes: its switch, doing nothing
        grep -q cuda_gated_delta_rows_warps /tmp/base/kernels/cuda/gated_delta_tc_grad.cu ||
            echo 'extern "C" void cuda_gated_delta_rows_warps(int) {}' \
                >>/tmp/base/kernels/cuda/gated_delta_tc_grad.cu
        (cmake -S /tmp/base -B /tmp/base/build -DCMAKE_BUILD_TYPE=Release &&
            cmake --build /tmp/base/build -j16 --target test_gdn_cuda) >"$OUT/base-build.log" 2>&1 ||
            tail -n 20 "$OUT/base-build.log"
        echo "base:"
        timeout 60 /tmp/base/build/bin/test_gdn_cuda --bench --H 32 --HK 16 --T 8192,32768 2>&1 |
            grep -E "^gdn  |^  [a-z]" | tee "$OUT/rule-base.txt"
        echo "this tree:"
    fi
    timeout 60 build/bin/test_gdn_cuda --bench --H 32 --HK 16 --T 8192,32768 2>&1 |
        grep -E "^gdn  |^  [a-z]" | tee "$OUT/rule-tree.txt"
    if [ -f "$OUT/rule-base.txt" ]; then # the same bits in both, in both modes?
        if diff <(grep bits "$OUT/rule-base.txt") <(grep bits "$OUT/rule-tree.txt") >/dev/null; then
            echo "digests: the same in both trees"
        else
            echo "digests: DIFFERENT"
        fi
    fi
    echo "left $(left) s"
    [ "${MT_PENDING_FLA:-1}" = 1 ] && [ "$(left)" -gt 120 ] && timeout "$(($(left) - 10))" \
        python3 -u bench/gdn_fla.py --kernels \
        --T 8192,32768 --H 32 --HK 16 2>&1 | grep -v Warning | tail -n 34
    echo "left $(left) s"
}
gptoss_peer() { # gpt-oss-120b's first layer beside the peer, which an H100 cannot hold
    MT_MOE_BENCH_LIMIT=130 MT_PEER_MICROS="2 1" MT_PEER_STEPS=4 MT_PEER_LIMIT=200 \
        bash bench/run_gptoss.sh peer 2>&1 | tail -n 40
    echo "left $(left) s"
}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    if [ "${MT_PENDING_PART:-}" = oss ]; then # gpt-oss's ratio first, then the rule beside FLA's
        gptoss_peer
        rule_ab
    else # under MT_PENDING_PART=rule the rule's part first (what lands needs its check); then
        # gpt-oss's layer beside the peer, and Qwen3.5-27B's 4 layers at 131,072 tokens (63
        # checkpoints a row), as time allows
        [ "${MT_PENDING_PART:-}" = rule ] && rule_ab
        [ "$(left)" -gt 330 ] && gptoss_peer
        [ "$(left)" -gt 200 ] && timeout "$(($(left) - 150))" bash bench/run_qwen35.sh long 2>&1 |
            tail -n 25
    fi
    true
elif [[ ${MT_PENDING_PART:-} =~ ^(rule|oss)$ ]]; then # on an H100, then where its time goes,
    rule_ab # and both rules at a training step's shape (8 rows of 2,048, 48 value heads)
    [ "$(left)" -gt 250 ] && timeout 220 bash bench/device_run.sh gdnsrc=8192 2>&1 |
        grep -A 14 -E "^(prep|pass|out|dpass|pairs|rows): "
    timeout 30 build/bin/test_gdn_cuda --bench --B 8 --H 48 --HK 16 --T 2048 2>&1 |
        grep -E "^gdn  |^  [a-z]"
    [ "$(left)" -gt 60 ] && timeout "$(($(left) - 25))" python3 -u bench/gdn_fla.py --B 8 \
        --T 2048 --H 48 --HK 16 2>&1 | grep -v Warning | tail -n 4
    true
elif [ "${MT_PENDING_PART:-}" = tier ]; then # GLM-4.7-Flash's largest slice, every byte on disk
    timeout "$(($(left) - 10))" bash bench/run_deepseek.sh tier 2>&1 | tail -n 40
elif [ "${MT_PENDING_PART:-}" = air ]; then
    MT_MOE_BENCH_LIMIT=150 MT_PEER_STEPS=4 MT_PEER_LIMIT=200 timeout "$(($(left) - 10))" \
        bash bench/run_deepseek.sh peerair 2>&1 | grep -E "RATIO|^/root|^MOE|^build:|done at"
    grep -rh "AdamW of the embedding" "$OUT" 2>/dev/null | sort | uniq -c | cut -c1-200
elif [ "${MT_PENDING_PART:-}" = busy ]; then
    timeout "$(($(left) - 10))" bash bench/run_qwen35.sh busy 2>&1 | tail -n 30
elif [ "${MT_PENDING_PART:-}" = qwen ]; then # Qwen3.5-35B-A3B's 2 layers beside the peer
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
        timeout 120 python3 -u bench/gdn_fla.py --B 8 --T 2048 --H 48 --HK 16 2>&1 |
            grep -v Warning | tail -n 4
    fi
elif [ "${MT_PENDING_PART:-}" = glm ]; then # GLM-4.7-Flash's 6 layers beside the peer with
    # device_groups "auto", then with the embedding and layer 0 alone (the lead auto took before)
    export MT_MOE_BENCH_LIMIT=150 MT_PEER_STEPS=4 MT_PEER_LIMIT=160
    bash bench/run_deepseek.sh peer47 2>&1 | grep -E "RATIO|^/root|^MOE|^build:|done at"
    MT_BENCH_TAG=dev2 MT_BENCH_ARGS=optimizer.device_groups=2 timeout 120 \
        bench/run_bench.sh build "$OUT" moe-glm47flash-6l 2>&1 | grep -E "^/root|exit"
    echo "left $(left) s" # Qwen3.5-35B-A3B's 2 layers under "auto" (both layers on the GPU?)
    [ "$(left)" -gt 100 ] && MT_BENCH_TAG=auto timeout 90 \
        bench/run_bench.sh build "$OUT" moe-qwen3.5-35b-a3b-2l 2>&1 | grep -E "^/root|exit"
    grep -rh "AdamW of the embedding" "$OUT" 2>/dev/null | sort | uniq -c | cut -c1-200
    echo "left $(left) s"
    [ "$(left)" -gt 280 ] && timeout "$(($(left) - 30))" bash bench/run_qwen35.sh busy 2>&1 | tail -n 12
else # Qwen3.5-35B-A3B from its 4- and 8-layer slices, then FLA's delta rule at a step's shape
    timeout 300 bench/run_slices.sh build "$OUT" qwen3.5-35b-a3b 2>&1 | grep -vE "^rank [0-9]" |
        tail -n 30
    echo "left $(left) s" # Triton compiles FLA's kernels for the shape first: unbuffered output
    [ "$(left)" -gt 90 ] && timeout "$(($(left) - 60))" python3 -u bench/gdn_fla.py --B 8 \
        --T 2048 --H 48 --HK 16 2>&1 | grep -v Warning | tail -n 6
    [ "$(left)" -gt 40 ] && timeout 30 build/bin/test_gdn_cuda --bench --B 8 --H 48 --HK 16 \
        --T 2048 2>&1 | tail -n 5
fi
# under 16 MiB comes back (a call brings the first 8 files by name): carry it as .triton/cache.tgz
[ -d ~/.triton/cache ] && tar -czf "$OUT/0-triton-cache.tgz" -C ~/.triton cache &&
    du -h "$OUT/0-triton-cache.tgz"
echo "ALLDONE at $(($(date +%s) - pending_t0)) s"
