#!/usr/bin/env bash
# Issue 14, item 2: nothing trains on NaN.
# - A model_dir whose weights hold Inf or NaN is refused, naming the tensor and the element.
# - A step whose gradient norm is not finite (MT_FAULT_NAN_GRAD_STEPS puts a NaN in the head's
#   gradients) changes no weight and no Adam moment: its checkpoint is bitwise the previous
#   step's; metrics.jsonl stays JSON (null, "skipped"); the run goes on, and a resume across the
#   skipped step is bitwise the uninterrupted run (the skip count is checkpointed).
# - optimizer.max_bad_steps bad steps in a row end the job with exit code 3, a line saying so,
#   and a checkpoint of the last good state.
# usage: e2e_nonfinite.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
T=$SRC/tests

# Non-finite input weights.
python3 "$T/hf_fixture.py" "$WORK/bad" --dtypes mixed --specials
sed -e "s|\"\.\./data/|\"$SRC/data/|" -e 's/^steps *=.*/steps = 2;/' "$SRC/configs/test-small.cfg" |
    awk '/^model = {/{skip=1} !skip{print} skip&&/^};/{skip=0}' >"$WORK/hf.cfg"
echo 'model_dir = "bad";' >>"$WORK/hf.cfg"
run_job badw 3 "$WORK/hf.cfg"
expect "Inf/NaN weights in model_dir are refused (the job fails)" test ! -e "$WORK/badw/step_000002"
expect "the refusal names the tensor and the element" grep -q \
    "tensor model.layers.0.self_attn.q_proj.weight: element 3 is infinite: non-finite weights are refused" \
    "$WORK/badw.log"

# The state of a checkpoint: state.bin past its 64 KiB header (which names the step it holds).
same_state() { cmp -s <(tail -c +65537 "$1") <(tail -c +65537 "$2"); }

# One bad step (step 3 of 6), checkpoints every step.
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 6;/; s/^  interval = .*/  interval = 1;/' "$WORK/base.cfg"
MT_FAULT_NAN_GRAD_STEPS=3 run_job one 3 "$WORK/base.cfg" || show_log one
run_job clean 3 "$WORK/base.cfg" || show_log clean
expect "a bad step: the run still ends normally" test -f "$WORK/one/step_000006/state.bin"
expect "a bad step changes nothing: the step-3 state is bitwise the step-2 one" \
    same_state "$WORK/one/step_000002/state.bin" "$WORK/one/step_000003/state.bin"
expect "steps before it are the clean run's, bitwise" \
    cmp -s "$WORK/one/step_000002/state.bin" "$WORK/clean/step_000002/state.bin"
expect "metrics.jsonl is JSON, with the step marked skipped and its norm null" python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = [r for r in rows if r.get("skipped")]
assert len(bad) == 1 and bad[0]["step"] == 3 and bad[0]["grad_norm"] is None, bad
assert bad[0]["skipped_steps"] == 1' "$WORK/one/metrics.jsonl"
# Resume at step 4 (after the skip) with another -np: bitwise the uninterrupted run.
MT_FAULT_NAN_GRAD_STEPS=3 run_job split 3 "$WORK/base.cfg" --stop-at 4 || show_log split
"$MTRUN" -np 2 "$WORK/base.cfg" --out "$WORK/split" --resume "$WORK/split" \
    >"$WORK/split-resume.log" 2>&1 || show_log split-resume
expect "resumed after a skipped step: the final checkpoint is the uninterrupted run's" \
    cmp -s "$WORK/one/step_000006/state.bin" "$WORK/split/step_000006/state.bin"
expect "the skip count is in the checkpoint's manifest" \
    grep -q '"skipped_steps":[[:space:]]*1' "$WORK/split/step_000004/manifest.json"

# Bad from step 2 on, max_bad_steps = 3: steps 2-4 are bad, the job ends after step 4.
sed 's/^optimizer = {/optimizer = {\n  max_bad_steps = 3;/' "$WORK/base.cfg" >"$WORK/bad3.cfg"
MT_FAULT_NAN_GRAD_STEPS=2-6 run_job stop 3 "$WORK/bad3.cfg"
rc=$?
expect "3 bad steps in a row end the job with exit code 3 (was $rc)" test "$rc" -eq 3
expect "it says why, and where the last good state is" grep -q \
    "stopped after step 4: 3 steps in a row had a non-finite gradient norm (optimizer.max_bad_steps) and changed nothing; the checkpoint of step 4 holds the last good state" \
    "$WORK/stop.log"
expect "the step-4 checkpoint is the last good state (step 1's), bitwise" \
    same_state "$WORK/stop/step_000001/state.bin" "$WORK/stop/step_000004/state.bin"
expect "no step 5 was run" test ! -e "$WORK/stop/step_000005"
finish
