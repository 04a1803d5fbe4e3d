#!/usr/bin/env bash
# trace_steps out of order or out of range: mtrun refuses the config (exit 2) before anything
# starts, with exactly one line on stderr that names the key.
source "$(dirname "$0")/e2e_lib.sh" "$@"
sed "s|\"\.\./data/|\"$SRC/data/|" "$SRC/configs/test-small.cfg" >"$WORK/base.cfg"

# refused DESCRIPTION VALUE REGEX: trace_steps = VALUE must fail with a line matching REGEX.
refused() {
    local what=$1 value=$2 regex=$3
    { cat "$WORK/base.cfg"; echo "trace_steps = $value;"; } >"$WORK/bad.cfg"
    "$MTRUN" -np 3 "$WORK/bad.cfg" --out "$WORK/run" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    sed 's/^/    /' "$WORK/err"
    expect "$what: exit code 2" test "$rc" -eq 2
    expect "$what: one line on stderr" test "$(wc -l <"$WORK/err")" -eq 1
    expect "$what: the line names the key and the problem" grep -Eq "$regex" "$WORK/err"
    expect "$what: nothing ran" test ! -e "$WORK/run/metrics.jsonl"
}

refused "first after last" "[3, 2]" 'bad\.cfg:[0-9]+: trace_steps: \[3, 2\]: the first step is after the last'
refused "past the last step" "[2, 21]" 'bad\.cfg:[0-9]+: trace_steps: \[2, 21\] goes past steps = 20'
refused "step 0" "[0, 2]" 'bad\.cfg:[0-9]+: trace_steps: 0 is out of range'
refused "one number" "[2]" 'bad\.cfg:[0-9]+: trace_steps: expected two steps \[first, last\], got 1'
refused "not an array" "2" 'bad\.cfg:[0-9]+: trace_steps: expected an array of two steps'
finish
