#!/usr/bin/env bash
# MoE on the GPU machine, in one call: build, the routing kernels against the CPU
# (test_moe_cuda), the CUDA MoE path against the CPU one on tiny models (moe_check.sh), then
# each named bench config (bench/configs/NAME.cfg) and, for peer-NAME, ../shared/anchors'
# moe_torch.py carried in .anchors/, through bench/moe_peer.py (qwen3moe:6 is the peer on 6
# layers, olmoe:16 the whole OLMoE-1B-7B, qwen35moe:4 and qwen35_27b:4 Qwen3.5's first 4 layers:
# bench/run_qwen35.sh, which says how the peer gets flash-linear-attention past its refusal on
# Hopper); MT_PEER_STEPS: the peer's steps (moe_torch.py's default, 6, when unset); MT_PEER_LIMIT:
# the seconds each of the peer's attempts may take (default 300); MT_PEER_SEQ: the peer's rows'
# tokens (default 2048), its accumulation then as many micro-batches as make 65,536 tokens a step.
#   usage: bench/run_moe.sh [check] [NAME...] [peer-SHAPE:LAYERS...] [gemm=qwen3moe|mixtral]
#          [ktime-NAME]     output under $OUT
set -u
cd "$(dirname "$0")/.."
source bench/device-build.sh
for what in "$@"; do
    case $what in
    check)
        build/bin/test_moe_cuda >"$OUT/moe_cuda.log" 2>&1; echo "test_moe_cuda exit $?"; tail -n 2 "$OUT/moe_cuda.log"
        bench/moe_check.sh build "$OUT" 2>&1 | tee "$OUT/moe_check.log" | grep -E "MOECHECK|rror|step +(1|12) " ;;
    gemm=*) # one expert's products standalone, with each of the heuristic's algorithms
        build/bin/gemm_bench --shapes "${what#gemm=}" --ranks 4 2>&1 | tee -a "$OUT/gemm.log" | grep -E "best|first" ;;
    ktime-*) # where the compute stream's time goes (MT_KERNEL_TIMES), 4 steps
        name=${what#ktime-}
        MT_KERNEL_TIMES=1 build/bin/mtrun --force -np 5 "bench/configs/$name.cfg" steps=4 \
            --out "$OUT/ktime-$name" >"$OUT/ktime-$name.log" 2>&1
        grep -iE "expert|gemm|moe|total|attention" "$OUT/ktime-$name.log" | head -40 ;;
    peer-*) # micro-batches of 8 x 2048, or of fewer rows (as many more of them) where 8 do not
        # fit the GPU: the same 65,536 tokens a step (MT_PEER_MICROS: the rows to try, in turn)
        spec=${what#peer-}
        extra=() # gpt-oss's sinks: transformers runs them in eager attention only
        [ "${spec%%:*}" = gptoss ] && extra=(--attn eager)
        log="$OUT/peer-$(echo "$spec" | tr : -).log"
        : >"$log"
        for micro in ${MT_PEER_MICROS:-8 4 2 1}; do # each attempt judged by its own output
            seq=${MT_PEER_SEQ:-2048}
            timeout "${MT_PEER_LIMIT:-300}" python3 bench/moe_peer.py .anchors "${spec%%:*}" --layers "${spec#*:}" \
                --micro $micro --seq $seq --accum $((65536 / seq / micro)) \
                ${MT_PEER_STEPS:+--steps $MT_PEER_STEPS} "${extra[@]}" >"$log.try" 2>&1
            cat "$log.try" >>"$log"
            grep -q "^MOE" "$log.try" && break
            grep -q "OutOfMemoryError\|out of memory" "$log.try" || break
            echo "peer ${spec}: micro-batch $micro does not fit the GPU" | tee -a "$log"
        done
        rm -f "$log.try"
        grep -E "^MOE|Error|error" "$log" | tail -n 3 ;;
    *) # each bench under a limit, and the host's free memory said first (a call that overran
        # its machine once came back with nothing)
        free -g | awk 'NR == 2 {print "host memory: " $7 " GiB available"}'
        timeout -s TERM "${MT_MOE_BENCH_LIMIT:-300}" bench/run_bench.sh build "$OUT" "$what" 2>&1 |
            grep -vE "^ +L[0-9]"
        grep -E '^\{"step":[0-9]+,"loss"' "$OUT/run-$what/metrics.jsonl" | tail -n 1 | cut -c1-600 ;; # the last step
    esac
    echo "-- $what done at $(( $(date +%s) - t0 )) s"
done
