#!/usr/bin/env bash
# The attention output projection's bias (model.o_bias, Llama's attention_bias with
# model.qkv_bias), on the CPU backend through the real mtrun: it trains, its losses differ from
# the model without it, -np 2 = -np 3 bitwise, and a stop and resume is bitwise the run that
# was not stopped (the checkpoint records o_bias; a resume without it is refused). With a GPU:
# the CUDA backend, which has no o_proj bias yet, refuses it in one line, exit 2.
# usage: e2e_o_bias.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i -e 's/^steps = .*/steps = 6;/' -e 's/interval = .*/interval = 3;/' "$WORK/base.cfg"
BIAS=(model.qkv_bias=true model.o_bias=true)
run_job plain 2 "$WORK/base.cfg" || show_log plain
run_job bias 2 "$WORK/base.cfg" "${BIAS[@]}" || show_log bias
run_job bias3 3 "$WORK/base.cfg" "${BIAS[@]}" || show_log bias3
run_job part 2 "$WORK/base.cfg" "${BIAS[@]}" --stop-at 3 || show_log part
run_job part 2 "$WORK/base.cfg" --resume "$WORK/part" || show_log part
expect "6 steps with the biases" test "$(losses "$WORK/bias" 2>/dev/null | wc -l)" -eq 6
# (zeros at first, as transformers initializes them: step 1's loss is the same)
expect "the biases change the losses after step 1" \
    test -z "$(comm -12 <(losses "$WORK/plain" | tail -n +2 | sort) <(losses "$WORK/bias" | tail -n +2 | sort))"
expect "-np 3 = -np 2, bitwise" diff <(losses "$WORK/bias") <(losses "$WORK/bias3")
expect "stopped at 3 and resumed = uninterrupted, bitwise" diff <(losses "$WORK/bias") <(losses "$WORK/part")
expect "the checkpoint records o_bias" grep -Eq '"o_bias":[[:space:]]*true' "$WORK/bias/step_000006/manifest.json"
"$MTRUN" -np 2 "$WORK/base.cfg" --out "$WORK/nobias" --resume "$WORK/bias/step_000003" \
    model.o_bias=false >"$WORK/nobias.out" 2>"$WORK/nobias.err"
rc=$?
expect "a resume of it without o_bias is refused, exit 2 ($rc: $(tail -n 1 "$WORK/nobias.err"))" \
    bash -c "[ $rc -eq 2 ] && grep -q 'o_bias' '$WORK/nobias.err'"
if have_gpu; then
    small_config cuda "$WORK/gpu.cfg"
    "$MTRUN" -np 2 "$WORK/gpu.cfg" --out "$WORK/gpu" "${BIAS[@]}" >"$WORK/gpu.out" 2>"$WORK/gpu.err"
    rc=$?
    expect "cuda refuses o_bias, exit 2 ($rc), naming it" \
        bash -c "[ $rc -eq 2 ] && grep -q 'model.o_bias.*not on the CUDA backend yet' '$WORK/gpu.err' '$WORK/gpu.out'"
fi
finish
