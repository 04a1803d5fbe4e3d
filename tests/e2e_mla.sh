#!/usr/bin/env bash
# Multi-head latent attention through the real launcher (e2e_lib.sh's mla_config: a query rank,
# values narrower than q and k, interleaved RoPE, YaRN with mscale_all_dim, packed documents):
# the job trains (20 steps, the last loss below the first), and the memory modes change no bit:
# internals kept ("auto"), recomputed ("always"), and kept attention outputs beside recomputed
# internals give the same per-step losses. On the CPU backend always; on the CUDA backend too
# when a GPU is present.
source "$(dirname "$0")/e2e_lib.sh" "$@"
backends=cpu
if have_gpu; then backends="cpu cuda"; fi
for be in $backends; do
    for mode in auto always attention; do
        mla_config "$be" "$WORK/$be-$mode.cfg"
        [ $mode != auto ] && echo 'recompute = "always";' >>"$WORK/$be-$mode.cfg"
        [ $mode = attention ] && echo 'keep_attention = 2;' >>"$WORK/$be-$mode.cfg"
        run_job "$be-$mode" 3 "$WORK/$be-$mode.cfg" || show_log "$be-$mode"
    done
    expect "$be: the MLA job logged 20 steps" test "$(losses "$WORK/$be-auto" | wc -l)" -eq 20
    expect "$be: the last loss is below the first" \
        awk 'NR == 1 { first = $1 } END { exit !(NR == 20 && $1 < first - 0.5) }' \
        <(losses "$WORK/$be-auto" | sed 's/.*"loss"://')
    expect "$be: auto keeps internals" grep -q 'keeping the internals of [1-9]' "$WORK/$be-auto.log"
    expect "$be: losses bitwise equal with and without kept internals" \
        cmp -s <(losses "$WORK/$be-auto") <(losses "$WORK/$be-always")
    expect "$be: losses bitwise equal with kept attention outputs" \
        cmp -s <(losses "$WORK/$be-attention") <(losses "$WORK/$be-always")
done
finish
