#!/usr/bin/env bash
# optimizer.device_groups moves the AdamW of the first parameter groups (embedding, layer 0, ...)
# from the optimizer ranks to the compute rank. Where a group is updated must change nothing:
# the per-step losses and the saved checkpoints are bitwise those of a run where the optimizer
# ranks update everything, across a resume (state handed back and forth at every save) and a
# change of -np; so are the exported Hugging Face weights (export_dir, fp32). On the CPU backend always; on the CUDA backend too when a GPU is present
# (its kernel repeats the CPU arithmetic operation for operation).
source "$(dirname "$0")/e2e_lib.sh" "$@"
backends=cpu
if have_gpu; then backends="cpu cuda"; fi
state() { echo "$WORK/$1/step_$(printf %06d "$2")/state.bin"; }
for be in $backends; do
    for n in 0 1 3; do
        small_config "$be" "$WORK/$be-$n.cfg"
        sed -i "s/lr = 2e-3;/lr = 2e-3; device_groups = $n;/" "$WORK/$be-$n.cfg"
        echo "export_dir = \"$be-export-$n\";" >>"$WORK/$be-$n.cfg"
    done
    run_job "$be-0" 3 "$WORK/$be-0.cfg" || show_log "$be-0"
    run_job "$be-1" 2 "$WORK/$be-1.cfg" || show_log "$be-1"
    run_job "$be-3" 3 "$WORK/$be-3.cfg" --stop-at 10 || show_log "$be-3"
    run_job "$be-3r" 4 "$WORK/$be-3.cfg" --resume "$WORK/$be-3" || show_log "$be-3r"
    expect "$be: the compute rank says it updates the embedding and layers 0-1" \
        grep -q 'AdamW of the embedding and layers 0-1 runs here' "$WORK/$be-3.log"
    expect "$be: by default (cpu) or as asked, the optimizer ranks update everything" \
        sh -c "! grep -q 'AdamW of the embedding' '$WORK/$be-0.log'"
    expect "$be ran 20 steps" test "$(losses "$WORK/$be-0" | wc -l)" -eq 20
    expect "$be losses are bitwise equal with the embedding updated by the compute rank" \
        cmp -s <(losses "$WORK/$be-1") <(losses "$WORK/$be-0")
    expect "$be losses are bitwise equal with 3 groups there, resumed at step 10 with another -np" \
        cmp -s <(losses "$WORK/$be-3"; losses "$WORK/$be-3r") <(losses "$WORK/$be-0")
    for s in 10 20; do
        expect "$be step $s checkpoint is bitwise the same (1 group)" \
            cmp -s "$(state "$be-1" $s)" "$(state "$be-0" $s)"
    done
    expect "$be step 10 checkpoint is bitwise the same (3 groups, --stop-at)" \
        cmp -s "$(state "$be-3" 10)" "$(state "$be-0" 10)"
    expect "$be step 20 checkpoint is bitwise the same (3 groups, resumed)" \
        cmp -s "$(state "$be-3r" 20)" "$(state "$be-0" 20)"
    expect "$be exported weights" ls "$WORK/$be-export-0/model-00001-of-00001.safetensors"
    for n in 1 3; do
        expect "$be exported weights are bitwise the same ($n groups)" \
            diff -r "$WORK/$be-export-$n" "$WORK/$be-export-0"
    done
done
finish
