#!/usr/bin/env bash
# gpt-oss on the GPU machine (bench/RESULTS.md): each argument one part, output under $OUT.
#   peer       moe-gptoss-1l (gpt-oss-120b's first layer at full width, 65,536 tokens a step)
#              beside moe_torch.py's gptoss on the same layer (eager attention: its sinks), the
#              peer's micro-batches of MT_PEER_MICROS rows (default 2 then 1: 8 x 2048 tokens'
#              logits alone are 13 GB in fp32) for the same 65,536 tokens a step
#   slices20   gpt-oss-20b from its 2- and 4-layer slices (bench/run_slices.sh)
#   slices120  gpt-oss-120b from its 1- and 2-layer slices
#   busy       the 4-layer gpt-oss-20b slice at its plan's 95%-busy batch, rounded up to whole
#              micro-batches (bench/lib.sh busy_at_break_even: 11, 180,224 tokens a step, a
#              step of 3.92 s planned): the GPU's busy share against the plan
#   usage: OUT=... bench/run_gptoss.sh [peer] [slices20] [slices120] [busy]
set -u
cd "$(dirname "$0")/.."
source bench/device-build.sh
source bench/lib.sh
for what in "$@"; do
    case $what in
    peer)
        MT_PEER_MICROS=${MT_PEER_MICROS:-2 1} bash bench/run_moe.sh moe-gptoss-1l peer-gptoss:1 2>&1 |
            grep -vE "^build:" ;;
    slices20) bench/run_slices.sh build "$OUT" gpt-oss-20b 2>&1 | tail -n 25 ;;
    slices120) bench/run_slices.sh build "$OUT" gpt-oss-120b 2>&1 | tail -n 25 ;;
    busy) busy_at_break_even slice-gpt-oss-20b-4l ;;
    *) echo "run_gptoss.sh: $what: not a part (peer, slices20, slices120, busy)" >&2; exit 2 ;;
    esac
    echo "-- $what done at $(($(date +%s) - t0)) s"
done
