#!/usr/bin/env bash
# 10 steps + resume + 10 steps gives losses bitwise identical to 20 uninterrupted steps,
# also when the resumed job has a different number of optimizer processes.
source "$(dirname "$0")/e2e_lib.sh" "$@"
CFG=$SRC/configs/test-small.cfg
run_job full 3 "$CFG" || show_log full
run_job split 3 "$CFG" --stop-at 10 || show_log split
expect "the first half wrote a checkpoint at step 10" test -f "$WORK/split/step_000010/manifest.json"
expect "a fresh run refuses to write over existing checkpoints" bash -c \
    "! '$MTRUN' -np 3 '$CFG' --out '$WORK/split' > '$WORK/refuse.log' 2>&1 && grep -q 'already holds checkpoints' '$WORK/refuse.log'"
"$MTRUN" -np 3 "$CFG" --out "$WORK/split" --resume "$WORK/split" >"$WORK/resume.log" 2>&1 ||
    show_log resume
expect "resumed losses (steps 1-20) are bitwise the uninterrupted ones" \
    diff <(losses "$WORK/full") <(losses "$WORK/split")
cp -r "$WORK/split" "$WORK/other"
rm -rf "$WORK/other/step_000020" "$WORK/other/metrics.jsonl"
echo step_000010 >"$WORK/other/LATEST"
"$MTRUN" -np 5 "$CFG" --out "$WORK/other" --resume "$WORK/other/step_000010" \
    >"$WORK/other.log" 2>&1 || show_log other
expect "resuming with -np 5 a checkpoint written with -np 3 continues bitwise" \
    diff <(losses "$WORK/full" | tail -10) <(losses "$WORK/other")
expect "the final checkpoint is step_000020" grep -qx step_000020 "$WORK/split/LATEST"
# --resume DIR without --out continues in DIR (issue 14), not in the config's checkpoint.dir.
run_job alone 3 "$CFG" --stop-at 10 || show_log alone
(cd "$WORK" && "$MTRUN" -np 3 "$CFG" --resume "$WORK/alone" >"$WORK/alone-resume.log" 2>&1) ||
    show_log alone-resume
expect "--resume without --out writes the new checkpoints into the resumed folder" \
    test -f "$WORK/alone/step_000020/state.bin"
expect "--resume without --out continues the resumed folder's metrics" \
    diff <(losses "$WORK/full") <(losses "$WORK/alone")
expect "--resume without --out leaves checkpoint.dir alone" test ! -e "$WORK/runs"
finish
