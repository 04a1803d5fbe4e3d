#!/usr/bin/env bash
# Memory modes change only speed and memory: with recompute = "auto" (internals kept in spare
# memory), "always" (every layer recomputed in the backward), some kept and some recomputed,
# and with the boundary activations offloaded to host memory, the per-step losses are bitwise
# equal. On the CPU backend always; on the CUDA backend too when a GPU is present.
source "$(dirname "$0")/e2e_lib.sh" "$@"
backends=cpu
if have_gpu; then backends="cpu cuda"; fi
for be in $backends; do
    for mode in auto always partial offload; do
        small_config "$be" "$WORK/$be-$mode.cfg"
        [ $mode = always ] && echo 'recompute = "always";' >>"$WORK/$be-$mode.cfg"
        # partial: some passes kept, the others recomputed, within one layer too
        [ $mode = partial ] && export MT_KEEP_MAX=3
        [ $mode = offload ] && export MT_KEEP_MAX=1 &&
            echo 'offload_activations = "always";' >>"$WORK/$be-$mode.cfg"
        run_job "$be-$mode" 3 "$WORK/$be-$mode.cfg" --stop-at 8 || show_log "$be-$mode"
        unset MT_KEEP_MAX
    done
    kept=$(grep -o 'keeping the internals of [0-9]* of [0-9]*' "$WORK/$be-auto.log")
    echo "$be: $kept"
    expect "$be auto keeps every layer's internals" \
        awk -v s="$kept" 'BEGIN { split(s, w, " "); exit !(w[5] > 0 && w[5] == w[7]) }'
    expect "$be always keeps none" grep -q 'keeping the internals of 0 of' "$WORK/$be-always.log"
    expect "$be ran 8 steps" test "$(losses "$WORK/$be-auto" | wc -l)" -eq 8
    expect "$be partial keeps 3" grep -q 'keeping the internals of 3 of' "$WORK/$be-partial.log"
    expect "$be losses are bitwise equal with and without kept internals" \
        cmp -s <(losses "$WORK/$be-auto") <(losses "$WORK/$be-always")
    expect "$be losses are bitwise equal with some kept" \
        cmp -s <(losses "$WORK/$be-partial") <(losses "$WORK/$be-always")
    expect "$be offload run offloaded" grep -q 'offloading the boundary activations' \
        "$WORK/$be-offload.log"
    expect "$be losses are bitwise equal with the activations offloaded" \
        cmp -s <(losses "$WORK/$be-offload") <(losses "$WORK/$be-always")
done
finish
