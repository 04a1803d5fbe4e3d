#!/usr/bin/env bash
# The attention output projection's bias (model.o_bias, Llama's attention_bias with
# model.qkv_bias), on the CPU backend through the real mtrun: it trains, its losses differ from
# the model without it, -np 2 = -np 3 bitwise, and a stop and resume is bitwise the run that
# was not stopped (the checkpoint records o_bias; a resume without it is refused). With a GPU:
# the CUDA backend trains it too (-np 3 = -np 2 bitwise), each loss within 2% of the CPU's.
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
    sed -e 's/^backend = .*/backend = "cuda";/' "$WORK/base.cfg" >"$WORK/gpu.cfg"
    run_job gpu 2 "$WORK/gpu.cfg" "${BIAS[@]}" || show_log gpu
    run_job gpu3 3 "$WORK/gpu.cfg" "${BIAS[@]}" || show_log gpu3
    run_job gpuplain 2 "$WORK/gpu.cfg" || show_log gpuplain
    expect "cuda: 6 steps with the biases" test "$(losses "$WORK/gpu" 2>/dev/null | wc -l)" -eq 6
    expect "cuda: the biases change the losses after step 1" \
        test -z "$(comm -12 <(losses "$WORK/gpuplain" | tail -n +2 | sort) <(losses "$WORK/gpu" | tail -n +2 | sort))"
    expect "cuda: -np 3 = -np 2, bitwise" diff <(losses "$WORK/gpu") <(losses "$WORK/gpu3")
    expect "cuda: each loss within 2% of the cpu's with the biases" awk -F: '
        NR == FNR {cpu[FNR] = $NF; next}
        {d = $NF - cpu[FNR]; if (d < 0) d = -d; if (d > 0.02 * cpu[FNR]) bad = 1}
        END {exit bad || FNR != 6}' <(losses "$WORK/bias") <(losses "$WORK/gpu")
fi
finish
