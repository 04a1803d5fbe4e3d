#!/usr/bin/env bash
# Every run also writes TensorBoard event files in its run folder (`tensorboard --logdir runs/`),
# with the scalars of metrics.jsonl: read back by an independent reader of the format always, and
# by TensorBoard's own EventAccumulator where the tensorboard package imports (python3, or
# MT_TENSORBOARD_PYTHON), including after a resume, whose steps repeat from the checkpoint's.
# usage: e2e_tensorboard.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
PY=${MT_TENSORBOARD_PYTHON:-python3}
run_job run 3 "$WORK/base.cfg" eval.interval=5 --stop-at 12 || show_log run
expect "the run folder holds one event file" \
    test "$(ls "$WORK/run" | grep -c '^events\.out\.tfevents\.')" -eq 1
# A resume from step 10, in the same folder: steps 11 and 12 run again.
"$MTRUN" -np 3 "$WORK/base.cfg" --resume "$WORK/run/step_000010" --out "$WORK/run" \
    >"$WORK/resumed.log" 2>&1 || show_log resumed
expect "a resume adds an event file" \
    test "$(ls "$WORK/run" | grep -c '^events\.out\.tfevents\.')" -eq 2
expect "the events hold metrics.jsonl's scalars (the format read independently)" \
    python3 "$SRC/tests/tensorboard_check.py" "$WORK/run" --reader own
"$PY" "$SRC/tests/tensorboard_check.py" "$WORK/run" --reader tensorboard
rc=$?
if [ "$rc" -eq 77 ]; then
    echo "SKIPPED (part): the tensorboard package is not installed for $PY"
else
    expect "TensorBoard's own reader loads them, equal to metrics.jsonl" test "$rc" -eq 0
fi
finish
