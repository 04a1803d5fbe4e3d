#!/usr/bin/env bash
# batch.seq_chunk: a layer's norms, projections and MLP (and, on the GPU, the head) run a chunk
# of tokens at a time, attention over the whole micro-batch. Chunks of 48 of the 128 tokens of
# a micro-batch (the last one short), with boundary segments too, train as the whole
# micro-batch does. The weight gradients then sum the chunks in another order, so not bitwise:
# per-step losses within 1e-4 on the CPU (fp32) and 0.2% on the GPU (bf16). A chunk the size of
# the micro-batch is bitwise the default, and segments bitwise the chunked run without them.
# On the CPU always; on the GPU too when there is one, and there within 2% of the CPU reference.
source "$(dirname "$0")/e2e_lib.sh" "$@"
backends=cpu
if have_gpu; then backends="cpu cuda"; fi
close() { # close A B TOLERANCE: every step's loss within a relative tolerance, 20 steps
    paste -d' ' <(losses "$WORK/$1" | sed 's/.*"loss"://') <(losses "$WORK/$2" | sed 's/.*"loss"://') |
        awk -v t="$3" '{ d = $1 - $2; if (d < 0) d = -d; if (d > t * $1) bad = 1; n++ }
                       END { exit bad || n != 20 }'
}
for be in $backends; do
    for run in whole c128 c48 c48seg; do
        small_config "$be" "$WORK/$be-$run.cfg"
        sed -i -e 's/layers   = 2;/layers   = 4;/' "$WORK/$be-$run.cfg"
        echo 'recompute = "always";' >>"$WORK/$be-$run.cfg"
        case $run in
        c128) sed -i -e 's/seq_len       = 32;/seq_len       = 32;\n  seq_chunk = 128;/' "$WORK/$be-$run.cfg" ;;
        c48*) sed -i -e 's/seq_len       = 32;/seq_len       = 32;\n  seq_chunk = 48;/' "$WORK/$be-$run.cfg" ;;
        esac
        [ $run = c48seg ] && echo 'boundary_every = 2;' >>"$WORK/$be-$run.cfg"
        run_job "$be-$run" 3 "$WORK/$be-$run.cfg" || show_log "$be-$run"
    done
    tol=1e-4
    [ "$be" = cuda ] && tol=0.002
    expect "$be: the chunked run logged 20 steps" test "$(losses "$WORK/$be-c48" | wc -l)" -eq 20
    expect "$be: a chunk of the whole micro-batch is bitwise the default" \
        cmp -s <(losses "$WORK/$be-whole") <(losses "$WORK/$be-c128")
    paste -d' ' <(losses "$WORK/$be-whole") <(losses "$WORK/$be-c48") | head -3
    expect "$be: chunks of 48 train within $tol of the whole micro-batch" close "$be-whole" "$be-c48" $tol
    expect "$be: chunked losses differ from the whole micro-batch's somewhere (the chunks ran)" \
        bash -c '! cmp -s <(grep -o "\"loss\":[^,]*" "$1") <(grep -o "\"loss\":[^,]*" "$2")' _ \
        "$WORK/$be-whole/metrics.jsonl" "$WORK/$be-c48/metrics.jsonl"
    expect "$be: segments are bitwise the chunked run without them" \
        cmp -s <(losses "$WORK/$be-c48") <(losses "$WORK/$be-c48seg")
done
if have_gpu; then
    expect "cuda chunks of 48 agree with the CPU reference within 2%" close cpu-c48 cuda-c48 0.02
fi
finish
