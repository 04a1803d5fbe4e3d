#!/usr/bin/env bash
# The same config and seed with -np 2, 3 and 5 gives bitwise-identical per-step losses.
source "$(dirname "$0")/e2e_lib.sh" "$@"
CFG=$SRC/configs/test-small.cfg
for np in 2 3 5; do
    run_job np$np $np "$CFG" || { show_log np$np; expect "-np $np job succeeds" false; }
done
expect "-np 2 ran 20 steps" test "$(losses "$WORK/np2" | wc -l)" -eq 20
expect "-np 3 losses are bitwise those of -np 2" diff <(losses "$WORK/np2") <(losses "$WORK/np3")
expect "-np 5 losses are bitwise those of -np 2" diff <(losses "$WORK/np2") <(losses "$WORK/np5")
first=$(losses "$WORK/np2" | head -1 | sed 's/.*"loss"://')
last=$(losses "$WORK/np2" | tail -1 | sed 's/.*"loss"://')
expect "loss falls over 20 steps ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a - 0.3)}'
finish
