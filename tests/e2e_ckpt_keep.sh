#!/usr/bin/env bash
# checkpoint.keep = 2 with interval 5 over 20 steps leaves step_000015 and step_000020, and
# nothing else in the folder is touched.
source "$(dirname "$0")/e2e_lib.sh" "$@"
sed -e "s|\"../data/|\"$SRC/data/|" -e 's|interval = 10;|interval = 5; keep = 2;|' \
    "$SRC/configs/test-small.cfg" >"$WORK/keep.cfg"
mkdir -p "$WORK/run/step_000003.replaced-99" "$WORK/run/step_00001" "$WORK/run/.step_000004.tmp"
echo mine >"$WORK/run/notes.txt"
run_job run 3 "$WORK/keep.cfg" || show_log run
expect "the run took 20 steps" test "$(losses "$WORK/run" | wc -l)" -eq 20
expect "exactly step_000015 and step_000020 remain" \
    test "$(cd "$WORK/run" && ls -d step_[0-9][0-9][0-9][0-9][0-9][0-9] | tr '\n' ' ')" = \
    "step_000015 step_000020 "
expect "LATEST names step_000020" grep -qx step_000020 "$WORK/run/LATEST"
expect "what is not ours stays" test -f "$WORK/run/notes.txt" -a -d "$WORK/run/step_00001" \
    -a -d "$WORK/run/step_000003.replaced-99" -a -d "$WORK/run/.step_000004.tmp"
"$MTRUN" -np 3 "$WORK/keep.cfg" --out "$WORK/run" --resume "$WORK/run/step_000015" \
    >"$WORK/resume.log" 2>&1 || show_log resume
# metrics.jsonl is appended to: steps 16-20 twice, and bitwise the same both times.
expect "a resume under keep = 2 still resumes bitwise" \
    test "$(losses "$WORK/run" | wc -l)/$(losses "$WORK/run" | sort -u | wc -l)" = 25/20
sed -i 's|keep = 2;|keep = -1;|' "$WORK/keep.cfg"
expect "checkpoint.keep = -1 is refused by name" bash -c \
    "'$MTRUN' -np 3 '$WORK/keep.cfg' --out '$WORK/bad' >'$WORK/bad.log' 2>&1; [ \$? -eq 2 ] && grep -q 'checkpoint.keep' '$WORK/bad.log'"
finish
