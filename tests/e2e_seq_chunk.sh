#!/usr/bin/env bash
# batch.seq_chunk on the CUDA backend: a layer's norms, projections, MLP and the head run a
# chunk of tokens at a time (attention over the whole micro-batch). Chunks of 48 of the 128
# tokens of a micro-batch (the last one short), with boundary segments too, train as the
# whole micro-batch does: per-step losses within 0.2% (the weight gradients sum the chunks in
# another order: not bitwise), and within the usual 2% of the CPU reference. A chunk the size
# of the micro-batch is bitwise the default. Skipped (exit 77) without a usable GPU.
source "$(dirname "$0")/e2e_lib.sh" "$@"
require_gpu
for run in whole c128 c48 c48seg; do
    small_config cuda "$WORK/$run.cfg"
    sed -i -e 's/layers   = 2;/layers   = 4;/' "$WORK/$run.cfg"
    echo 'recompute = "always";' >>"$WORK/$run.cfg"
    case $run in
    c128) sed -i -e 's/seq_len       = 32;/seq_len       = 32; seq_chunk = 128;/' "$WORK/$run.cfg" ;;
    c48*) sed -i -e 's/seq_len       = 32;/seq_len       = 32; seq_chunk = 48;/' "$WORK/$run.cfg" ;;
    esac
    [ $run = c48seg ] && echo 'boundary_every = 2;' >>"$WORK/$run.cfg"
    run_job "$run" 3 "$WORK/$run.cfg" || show_log "$run"
done
small_config cpu "$WORK/cpu.cfg"
sed -i -e 's/layers   = 2;/layers   = 4;/' "$WORK/cpu.cfg"
run_job cpu 3 "$WORK/cpu.cfg" || show_log cpu
expect "the chunked run logged 20 steps" test "$(losses "$WORK/c48" | wc -l)" -eq 20
expect "a chunk of the whole micro-batch is bitwise the default" \
    cmp -s <(losses "$WORK/whole") <(losses "$WORK/c128")
close() { # close A B TOLERANCE: every step's loss within a relative tolerance
    paste -d' ' <(losses "$WORK/$1" | sed 's/.*"loss"://') <(losses "$WORK/$2" | sed 's/.*"loss"://') |
        awk -v t="$3" '{ d = $1 - $2; if (d < 0) d = -d; if (d > t * $1) bad = 1; n++ }
                       END { exit bad || n != 20 }'
}
paste -d' ' <(losses "$WORK/whole") <(losses "$WORK/c48") <(losses "$WORK/c48seg") | head -5
expect "chunks of 48 train within 0.2% of the whole micro-batch" close whole c48 0.002
expect "segments on the GPU are bitwise the chunked run without them" \
    cmp -s <(losses "$WORK/c48") <(losses "$WORK/c48seg")
expect "chunks of 48 agree with the CPU reference within 2%" close cpu c48 0.02
finish
