#!/usr/bin/env bash
# DeepSeek-V3 and the GLM models on the GPU machine (multi-head latent attention, DeepSeek's
# sigmoid router): each argument one part, output under $OUT, carrying .deb and .anchors (a copy
# of ../shared/anchors).
#   peer    full-width slices at 65,536 tokens a step beside the peer (bench/run_moe.sh:
#           moe_torch.py, PyTorch + transformers all on the GPU, through bench/moe_peer.py), ours
#           on the layers the peer fits: GLM-4.7-Flash's first 6 layers, or 5 where the peer's 6
#           run out of GPU memory (moe-glm47flash-*l), and GLM-4.5-Air's first 2
#           (moe-glm45air-2l; its 3 are past 80 GB in the peer's fp32 state); the peer's
#           micro-batches of MT_PEER_MICROS rows (default 2 then 1), MT_PEER_STEPS steps
#           (default 5)
#   peer47, peerair  one of those two pairs
#   order47, orderair  ours on that pair's slice with the gradient ring's updates in arrival
#           order (MT_RING_ORDER=arrival, run-NAME-arrival), to set beside the same slice by
#           urgency (the default) from peer47 / peerair in the same call
#   slices  DeepSeek-V3 from its 2- and 3-layer slices, its own first layers, all dense (none of
#           its MoE layers fits the GPU or the host: bench/configs/slice-deepseek-v3-2l.cfg)
#   busy    moe-glm47flash-6l at the batch where its plan on this machine (125 GiB host) puts the
#           GPU 95% busy, rounded up to whole micro-batches (bench/lib.sh busy_at_break_even: 9
#           of 16,384 tokens, a step of 2.82 s planned): the GPU's busy share against the plan
#   tier    GLM-4.7-Flash with every byte of state on disk: its first 6 layers, the most whose
#           state fits the disk (bench/configs/tier-glm47flash-6l.cfg: 52.06 GiB of it; the whole
#           model's is 440.2 GiB), 3 steps through bench/run_tier.sh (dd, the plans, the steps,
#           the disk's peak use) without its rerun in host memory
#   usage: OUT=... bench/run_deepseek.sh [peer | peer47 | peerair] [order47] [orderair] [slices]
#          [busy] [tier]
set -u
cd "$(dirname "$0")/.."
source bench/device-build.sh
source bench/lib.sh
export MT_PEER_MICROS=${MT_PEER_MICROS:-2 1} MT_PEER_STEPS=${MT_PEER_STEPS:-5}
export MT_MOE_BENCH_LIMIT=${MT_MOE_BENCH_LIMIT:-150}

# The number after "TFLOP/s " in a line
tflops_of() { sed -n 's/.* TFLOP\/s \([0-9.]*\) .*/\1/p' | head -n 1; }

# The peer on the first of LAYERS... that it fits, then ours on as many layers (CONFIG-Nl), and
# ours over the peer; fewer layers only when the peer ran out of GPU memory, ours on the most
# when it failed otherwise.
peer_then_ours() {
    local shape=$1 config=$2 layers log
    shift 2
    for layers in "$@"; do
        log=$OUT/peer-$shape-$layers.log
        bash bench/run_moe.sh "peer-$shape:$layers" 2>&1 | grep -vE "^build:"
        grep -q "^MOE" "$log" && break
        grep -q "OutOfMemoryError\|out of memory" "$log" || { layers=$1; break; }
        echo "peer $shape: $layers layers do not fit the GPU"
    done
    bash bench/run_moe.sh "$config-${layers}l" 2>&1 | grep -vE "^build:"
    local ours peer
    ours=$(python3 bench/summarize.py "$OUT/run-$config-${layers}l" 2>/dev/null | tflops_of)
    peer=$(grep "^MOE" "$OUT/peer-$shape-$layers.log" | tflops_of)
    [ -n "$ours" ] && [ -n "$peer" ] &&
        awk -v o="$ours" -v p="$peer" -v c="$config-${layers}l" \
            'BEGIN {printf "RATIO %s: ours %.1f TFLOP/s / the peer %.1f = %.2fx\n", c, o, p, o / p}'
}

for what in "$@"; do
    case $what in
    peer)
        peer_then_ours glm47flash moe-glm47flash 6 5
        peer_then_ours glm45air_hub moe-glm45air 2 ;;
    peer47) peer_then_ours glm47flash moe-glm47flash 6 5 ;;
    peerair) peer_then_ours glm45air_hub moe-glm45air 2 ;;
    order47 | orderair)
        name=moe-glm47flash-6l
        [ "$what" = orderair ] && name=moe-glm45air-2l
        MT_RING_ORDER=arrival MT_BENCH_TAG=arrival timeout -s TERM "$MT_MOE_BENCH_LIMIT" \
            bench/run_bench.sh build "$OUT" "$name" 2>&1 | grep -vE "^ +L[0-9]" ;;
    slices)
        timeout -s TERM 300 bench/run_slices.sh build "$OUT" deepseek-v3 2>&1 | grep -vE "^ +L[0-9]" ;;
    busy) busy_at_break_even moe-glm47flash-6l ;;
    tier)
        MT_TIER_RAM=0 timeout -s TERM 300 bench/run_tier.sh build "$OUT" tier-glm47flash-6l 2>&1 |
            grep -vE "^ +L[0-9]" ;;
    *) echo "unknown part $what (peer, peer47, peerair, order47, orderair, slices, busy, tier)" ;;
    esac
    echo "-- $what done at $(($(date +%s) - t0)) s"
done
