#!/usr/bin/env bash
# key=value settings after the config (mtrun -np 3 train.cfg optimizer.lr=1e-3 steps=6):
# - they win over the file: the run is bitwise the run of a file that says the same;
# - the schema checks them as it checks the file: unknown keys (with "did you mean"), types,
#   ranges and the rules between fields, each refused in one line that names the override;
# - the plan line shows them and each checkpoint's manifest records them;
# - --resume applies them again (bitwise the uninterrupted run), and a setting given with
#   --resume wins over the recorded one; a refusal after them is the last line.
# usage: e2e_overrides.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i 's/^  interval = .*/  interval = 4;/' "$WORK/base.cfg"
# The same settings written into the file: the reference.
sed -e 's/^steps = .*/steps = 8;/' -e 's/lr = 2e-3;/lr = 1e-3;/' -e 's/seq_len *= *32;/seq_len = 48;/' \
    "$WORK/base.cfg" >"$WORK/edited.cfg"
grep -q 'seq_len = 48' "$WORK/edited.cfg" && grep -q 'lr = 1e-3' "$WORK/edited.cfg" ||
    echo "note: the edit of the reference config did not take"
run_job edited 3 "$WORK/edited.cfg" || show_log edited
OVR=(optimizer.lr=1e-3 batch.seq_len=48 steps=8)
run_job over 3 "$WORK/base.cfg" "${OVR[@]}" || show_log over
expect "overrides train bitwise what the edited file trains" \
    diff <(losses "$WORK/edited") <(losses "$WORK/over")
expect "and save the same state" \
    cmp -s "$WORK/edited/step_000008/state.bin" "$WORK/over/step_000008/state.bin"
expect "the plan line names them" \
    grep -q '^mtrun: plan: .*; with optimizer.lr=1e-3 batch.seq_len=48 steps=8;' "$WORK/over.log"
expect "the checkpoint's manifest records them" python3 -c "
import json, sys
m = json.load(open('$WORK/over/step_000008/manifest.json'))
sys.exit(m.get('overrides') != ['optimizer.lr=1e-3', 'batch.seq_len=48', 'steps=8'])"

# refused NAME REGEX ARGS...: exit 2, nothing on stdout, one line on stderr matching REGEX.
refused() {
    local name=$1 regex=$2 rc
    shift 2
    "$MTRUN" -np 3 "$WORK/base.cfg" --out "$WORK/$name" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    rc=$?
    expect "$name: refused in one line: $(cat "$WORK/$name.err")" \
        bash -c "[ $rc -eq 2 ] && [ ! -s '$WORK/$name.out' ] && [ \$(wc -l <'$WORK/$name.err') -eq 1 ] &&
                 grep -Eq -- '$regex' '$WORK/$name.err' && [ ! -e '$WORK/$name' ]"
}
refused unknown "base.cfg: override optimizer.lrr=1: optimizer.lrr: unknown key \(did you mean optimizer.lr\?\)$" optimizer.lrr=1
refused group "override optimizer=1: optimizer: a group of settings" optimizer=1
refused type "override model.layers=two: model.layers: expected an integer, got .two.$" model.layers=two
refused float_for_int "override steps=2.5: steps: expected an integer, got a number$" steps=2.5
refused range "override optimizer.lr=20: optimizer.lr: 20 is out of range: must be in \(0, 10\]$" optimizer.lr=20
refused choice "override backend=gpu: backend: \"gpu\" is not one of" backend=gpu
refused rule "override optimizer.warmup_steps=50: optimizer.warmup_steps: 50 is more than steps = 20$" optimizer.warmup_steps=50
refused shape "override model.dim=66: model.dim: 66 is not divisible by model.heads = 4 \(or set model.head_dim\)$" model.dim=66
refused no_key "override =3: expected group.key=value$" =3

# --resume: 4 steps with the overrides, then a resume that names none of them trains on with
# them, to the uninterrupted run's state.
run_job part 3 "$WORK/base.cfg" "${OVR[@]}" --stop-at 4 || show_log part
"$MTRUN" -np 3 "$WORK/base.cfg" --resume "$WORK/part" >"$WORK/part-resume.log" 2>&1 ||
    show_log part-resume
expect "--resume says it applies the checkpoint's settings again" grep -q \
    '^mtrun: --resume: the checkpoint.s settings apply again: optimizer.lr=1e-3 batch.seq_len=48 steps=8$' \
    "$WORK/part-resume.log"
expect "and its run is the uninterrupted one, bitwise" \
    cmp -s "$WORK/over/step_000008/state.bin" "$WORK/part/step_000008/state.bin"
expect "losses too" diff <(losses "$WORK/over") <(losses "$WORK/part")
# A refusal on --resume is the last line, after the line of the checkpoint's settings.
"$MTRUN" -np 3 "$WORK/base.cfg" --resume "$WORK/part" optimizer.lr=20 >"$WORK/part-bad.log" 2>&1
rc=$?
expect "--resume with a bad setting is refused (rc $rc), the refusal last: $(tail -n 1 "$WORK/part-bad.log")" \
    bash -c "[ $rc -eq 2 ] && tail -n 1 '$WORK/part-bad.log' | grep -q 'optimizer.lr: 20 is out of range' &&
             grep -q '^mtrun: --resume: the checkpoint.s settings apply again' '$WORK/part-bad.log'"
# A setting given with --resume wins over the recorded one.
run_job part2 3 "$WORK/base.cfg" "${OVR[@]}" --stop-at 4 || show_log part2
"$MTRUN" -np 3 "$WORK/base.cfg" --resume "$WORK/part2" steps=10 >"$WORK/part2-resume.log" 2>&1 ||
    show_log part2-resume
expect "a setting given with --resume wins: steps=10 ran to step 10" \
    grep -qx step_000010 "$WORK/part2/LATEST"
expect "and the others still apply" python3 -c "
import json, sys
m = json.load(open('$WORK/part2/step_000010/manifest.json'))
sys.exit(m.get('overrides') != ['optimizer.lr=1e-3', 'batch.seq_len=48', 'steps=10'])"
finish
