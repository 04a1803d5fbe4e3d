#!/usr/bin/env bash
# optimizer.grad_dtype (issue 13): bf16 gradient slots through the real launcher and processes.
# - bf16 runs are bitwise the same across -np, across a stop and a resume with another -np, and
#   whichever rank updates a group (optimizer.device_groups 0 or 3, on the cpu backend too);
# - a checkpoint written with one grad_dtype resumes under the other: the first resumed step's
#   loss (weights of the checkpoint) is the uninterrupted run's, the later ones follow the new
#   slots;
# - bf16 slots halve the gradient bytes the plan counts, and the runs say which slots they use.
# usage: e2e_grad_dtype.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"

small_config cpu "$WORK/fp32.cfg"
sed -i 's/^optimizer = {/optimizer = {\n  grad_dtype = "fp32";/' "$WORK/fp32.cfg"
sed 's/grad_dtype = "fp32"/grad_dtype = "bf16"/' "$WORK/fp32.cfg" >"$WORK/bf16.cfg"
sed 's/^optimizer = {/optimizer = {\n  device_groups = 3;/' "$WORK/bf16.cfg" >"$WORK/bf16-dev3.cfg"

run_job b2 2 "$WORK/bf16.cfg" || show_log b2
run_job b4 4 "$WORK/bf16.cfg" || show_log b4
run_job bdev 3 "$WORK/bf16-dev3.cfg" || show_log bdev
run_job bstop 3 "$WORK/bf16.cfg" --stop-at 10 || show_log bstop
resume() { # resume NAME NP CONFIG: continue run dir NAME, log in NAME-resume.log
    "$MTRUN" -np "$2" "$3" --out "$WORK/$1" --resume "$WORK/$1" >"$WORK/$1-resume.log" 2>&1 ||
        show_log "$1-resume"
}
resume bstop 2 "$WORK/bf16.cfg"
run_job f2 2 "$WORK/fp32.cfg" || show_log f2

same_losses() { [ -n "$(losses "$WORK/$1")" ] && [ "$(losses "$WORK/$1")" = "$(losses "$WORK/$2")" ]; }
same_state() { cmp -s "$WORK/$1/step_000020/state.bin" "$WORK/$2/step_000020/state.bin"; }

expect "bf16 slots: -np 2 and -np 4 give the same losses, bitwise" same_losses b2 b4
expect "bf16 slots: -np 2 and -np 4 give the same checkpoint, bitwise" same_state b2 b4
expect "bf16 slots: device_groups 3 gives the losses of device_groups 0" same_losses b2 bdev
expect "bf16 slots: device_groups 3 gives the checkpoint of device_groups 0" same_state b2 bdev
expect "bf16 slots: stop at 10 (-np 3) + resume (-np 2) = the uninterrupted run" same_losses b2 bstop
expect "bf16 slots: the resumed run's final checkpoint is the uninterrupted one's" same_state b2 bstop
differ() { [ -n "$(losses "$WORK/$1")" ] && [ "$(losses "$WORK/$1")" != "$(losses "$WORK/$2")" ]; }
expect "bf16 slots change the run (losses differ from fp32 slots)" differ b2 f2

# fp32 checkpoint at step 10 resumed with bf16 slots, and the other way round.
run_job fstop 2 "$WORK/fp32.cfg" --stop-at 10 || show_log fstop
resume fstop 3 "$WORK/bf16.cfg"
run_job bstop2 2 "$WORK/bf16.cfg" --stop-at 10 || show_log bstop2
resume bstop2 3 "$WORK/fp32.cfg"
step_loss() { losses "$WORK/$1" | grep "\"step\":$2," | sed 's/.*"loss"://'; }
expect "fp32 checkpoint resumed with bf16 slots: step 11 is the fp32 run's" \
    bash -c "[ -n '$(step_loss fstop 11)' ] && [ '$(step_loss fstop 11)' = '$(step_loss f2 11)' ]"
expect "fp32 checkpoint resumed with bf16 slots: step 20 follows bf16 (not the fp32 run's)" \
    bash -c "[ -n '$(step_loss fstop 20)' ] && [ '$(step_loss fstop 20)' != '$(step_loss f2 20)' ]"
expect "bf16 checkpoint resumed with fp32 slots: step 11 is the bf16 run's" \
    bash -c "[ -n '$(step_loss bstop2 11)' ] && [ '$(step_loss bstop2 11)' = '$(step_loss b2 11)' ]"
expect "bf16 checkpoint resumed with fp32 slots: step 20 follows fp32 (not the bf16 run's)" \
    bash -c "[ -n '$(step_loss bstop2 20)' ] && [ '$(step_loss bstop2 20)' != '$(step_loss b2 20)' ]"

# On a GPU: the gradients that leave, rounded a piece at a time, and the in-place rounding of
# the groups that stay give the same bits (device_groups 0 and 3), and -np changes nothing; so do
# pieces of 2048 floats (MT_TEST_PIECE_FLOATS=1024, rounded up to whole 4 KiB blocks of bf16:
# shard_grads_piece), which every group crosses many times.
if have_gpu; then
    small_config cuda "$WORK/cuda.cfg"
    sed -i 's/^optimizer = {/optimizer = {\n  grad_dtype = "bf16";/' "$WORK/cuda.cfg"
    sed 's/^optimizer = {/optimizer = {\n  device_groups = 3;/' "$WORK/cuda.cfg" >"$WORK/cuda-dev3.cfg"
    sed -i 's/^optimizer = {/optimizer = {\n  device_groups = 0;/' "$WORK/cuda.cfg"
    run_job c0 3 "$WORK/cuda.cfg" || show_log c0
    run_job c3 2 "$WORK/cuda-dev3.cfg" || show_log c3
    expect "cuda, bf16 slots: device_groups 3 (-np 2) = device_groups 0 (-np 3), bitwise" \
        same_losses c0 c3
    expect "cuda, bf16 slots: the same checkpoint" same_state c0 c3
    MT_TEST_PIECE_FLOATS=1024 run_job cp 3 "$WORK/cuda.cfg" || show_log cp
    expect "cuda, bf16 slots: pieces of 2048 floats give the same losses, bitwise" same_losses c0 cp
    expect "cuda, bf16 slots: pieces of 2048 floats give the same checkpoint" same_state c0 cp
fi

# The plan: bf16 slots hold half the gradient bytes; the run's plan line names its slots.
plan_grads() {
    MT_PLAN_MEM_LIMIT=10000000000000 "$MTRUN" --plan --json -np 3 "$1" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["total"]["grads"])'
}
g32=$(plan_grads "$WORK/fp32.cfg")
g16=$(plan_grads "$WORK/bf16.cfg")
expect "the plan's bf16 gradient slots ($g16 B) are about half the fp32 ones ($g32 B)" \
    bash -c "[ -n '$g16' ] && [ $((2 * g16)) -le $((g32 + 8192)) ] && [ $g16 -lt $g32 ]"
expect "a bf16 run's plan line says bf16 gradient slots" grep -q "bf16 gradient slots" "$WORK/b2.log"
expect "an fp32 run's plan line says fp32 gradient slots" grep -q "fp32 gradient slots" "$WORK/f2.log"
finish
