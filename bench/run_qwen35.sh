#!/usr/bin/env bash
# Qwen3.5 on the GPU machine (bench/RESULTS.md): each argument one part, output under $OUT.
#   peer    the first 4 layers (three Gated DeltaNet, one gated attention) of Qwen3.5-27B and of
#           Qwen3.5-35B-A3B at full width, 65,536 tokens a step (bench/configs/moe-qwen3.5-*-4l),
#           each beside the peer on the same layers (bench/moe_peer.py: qwen35_27b, and
#           moe_torch.py's qwen35moe), the peer's micro-batches of MT_PEER_MICROS rows (default 4,
#           2 then 1: 8 x 2048 tokens' logits over 248,320 words are 16 GB in fp32, beside 65 to
#           70 GB of the slice's weights, gradients and AdamW states) for the same 65,536 tokens;
#           each of the peer's attempts within MT_PEER_LIMIT seconds (default 450: it builds the
#           slice's 4 B parameters in fp32 on the host first, and an 80 GB card fits 1 row only)
#   peer27, peer35  one of those two pairs, each within one 10-minute call
#   slices  Qwen3.5-27B and Qwen3.5-35B-A3B from their 4- and 8-layer slices (bench/run_slices.sh)
#   long    4 layers of Qwen3.5-27B at 131,072 tokens, one step (bench/run_long.sh)
#   busy    those 4 layers of Qwen3.5-27B (moe-qwen3.5-27b-4l) at the batch where the plan on
#           this machine puts the GPU 95% busy, rounded up to whole micro-batches (bench/lib.sh
#           busy_at_break_even; on an 80 GB H100: 8 of 16,384 tokens, 131,072 a step, its fp32
#           master, m and v of the embedding and layer 0 kept on the host rather than the GPU;
#           GPU 54 GiB, host 56 GiB, a step of 7.9 s planned), 6 steps: the GPU's busy share
#           against the plan
#   rule    the delta rule's GPU checks (gdn_cuda_vs_cpu, the Qwen3.5 layer and model parity
#           against transformers), then, where they pass, its forward and backward beside
#           flash-linear-attention's at 8,192 and 32,768 tokens (32 value heads over 16 key heads
#           of 128) and at a training step's 8 rows of 2,048 (48 value heads), and the kernel
#           times of those 4 layers at one micro-batch (MT_KERNEL_TIMES: the rate the plan takes
#           for the rule, PLAN_GPU_GDN_FLOPS)
#   usage: OUT=... bench/run_qwen35.sh [rule] [peer | peer27 | peer35] [slices] [long] [busy]
# The peer's linear attention is flash-linear-attention's (FLA) when it imports: carry its wheels
# in .whl, install them into /tmp/site and run this with PYTHONPATH=/tmp/site; without it
# transformers runs its torch fallback, far slower (the peer's MOE line says which ran). FLA
# refuses its gated backward on Hopper with Triton 3.4 to 3.7.0, and the machine's Triton is 3.6:
# bench/moe_peer.py lifts the refusal as bench/gdn_fla.py does (fla.ops.common.chunk_o.
# TRITON_ABOVE_3_7_1 = True) and prints a line when it does.
set -u
cd "$(dirname "$0")/.."
source bench/device-build.sh
source bench/lib.sh
for what in "$@"; do
    case $what in
    peer | peer27 | peer35)
        python3 -c 'import fla, triton; print("FLA", fla.__version__, "Triton", triton.__version__)' 2>&1 |
            tail -n 1
        pairs=()
        [ "$what" != peer35 ] && pairs+=(moe-qwen3.5-27b-4l peer-qwen35_27b:4)
        [ "$what" != peer27 ] && pairs+=(moe-qwen3.5-35b-a3b-4l peer-qwen35moe:4)
        MT_PEER_MICROS=${MT_PEER_MICROS:-4 2 1} MT_PEER_LIMIT=${MT_PEER_LIMIT:-450} \
            bash bench/run_moe.sh "${pairs[@]}" 2>&1 | grep -vE "^build:" ;;
    rule)
        (cd build && ctest -j4 --timeout 300 --output-on-failure -R \
            "^(gdn_cuda_vs_cpu|layer_parity_qwen35_linear_cuda|hf_qwen35_parity_cuda|e2e_cuda_parity|plan_matches_allocation)$" \
            >"$OUT/rule-ctest.log" 2>&1)
        ok=$?
        grep -E "tests passed|tests failed|\(Failed\)|Timeout" "$OUT/rule-ctest.log"
        [ $ok = 0 ] || { grep -E "FAIL" "$OUT/rule-ctest.log" | head -20; exit 1; }
        build/bin/test_gdn_cuda --bench --H 32 --HK 16 --T 8192,32768 2>&1 | tee "$OUT/rule.log"
        python3 bench/gdn_fla.py --T 8192,32768 --H 32 --HK 16 2>&1 | grep -v Warning | tee -a "$OUT/rule.log"
        # a training step's shape: Qwen3.5-27B's 48 value heads, 8 rows of 2,048 tokens
        build/bin/test_gdn_cuda --bench --B 8 --H 48 --HK 16 --T 2048 2>&1 | tee -a "$OUT/rule.log"
        python3 bench/gdn_fla.py --B 8 --T 2048 --H 48 --HK 16 2>&1 | grep -v Warning | tee -a "$OUT/rule.log"
        MT_KERNEL_TIMES=1 timeout 150 build/bin/mtrun --force -np 5 bench/configs/moe-qwen3.5-27b-4l.cfg \
            --out /tmp/rule-kt steps=2 batch.micro_batches=1 2>&1 | grep -E "KTIME|TFLOP/s" | head -30 ;;
    slices) bench/run_slices.sh build "$OUT" qwen3.5-27b qwen3.5-35b-a3b 2>&1 | tail -n 50 ;;
    long) bench/run_long.sh build "$OUT" qwen3.5-27b-4l-128k 2>&1 | tail -n 25 ;;
    busy) busy_at_break_even moe-qwen3.5-27b-4l 240 6 ;;
    *) echo "run_qwen35.sh: $what: not a part (rule, peer, peer27, peer35, slices, long, busy)" >&2; exit 2 ;;
    esac
    echo "-- $what done at $(($(date +%s) - t0)) s"
done
