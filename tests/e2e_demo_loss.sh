#!/usr/bin/env bash
# The demo config trains: its loss ends below a threshold, it writes a checkpoint and prints
# generated text. Byte-level Tiny Shakespeare starts near ln(256) = 5.55.
source "$(dirname "$0")/e2e_lib.sh" "$@"
run_job demo 4 "$SRC/configs/tiny.cfg" || show_log demo
last=$(losses "$WORK/demo" | tail -1 | sed 's/.*"loss"://')
expect "final training loss $last < 2.6" awk -v l="$last" 'BEGIN{exit !(l < 2.6)}'
eval_last=$(grep -o '"eval_loss":[^}]*' "$WORK/demo/metrics.jsonl" | tail -1 | sed 's/.*://')
expect "final eval loss $eval_last < 2.7" awk -v l="$eval_last" 'BEGIN{exit !(l < 2.7)}'
expect "a final checkpoint exists" test -f "$WORK/demo/$(cat "$WORK/demo/LATEST" 2>/dev/null)/state.bin"
expect "a text sample is printed" grep -q '^sample after step' "$WORK/demo.log"
finish
