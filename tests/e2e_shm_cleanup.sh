#!/usr/bin/env bash
# No /dev/shm leftovers after a run that succeeded, nor after one whose optimizer crashed,
# whether mtrun cleans up after the job or the ranks run under plain mpirun.
source "$(dirname "$0")/e2e_lib.sh" "$@"
CFG=$SRC/configs/test-small.cfg
before=$(shm_entries)
run_job ok 3 "$CFG" --stop-at 3 || show_log ok
expect "a successful run leaves nothing in /dev/shm" test "$(shm_entries)" = "$before"
MT_FAULT_ABORT_AT_STEP=2 run_job crash 3 "$CFG"
status=$?
expect "a run whose optimizer aborts exits non-zero (got $status)" test $status -ne 0
expect "the crashed run leaves nothing in /dev/shm" test "$(shm_entries)" = "$before"
# Under plain mpirun nobody cleans up after the ranks: they must have unlinked the regions
# themselves as soon as every rank had mapped them.
bindir=$(dirname "$MTRUN")
root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
MT_FAULT_ABORT_AT_STEP=2 mpirun $root --oversubscribe -np 3 -x MT_FAULT_ABORT_AT_STEP \
    "$bindir/mt-rank" "$CFG" --out "$WORK/raw" >"$WORK/raw.log" 2>&1
expect "ranks under plain mpirun that crash leave nothing in /dev/shm" test "$(shm_entries)" = "$before"
expect "the crash happened after the regions were made (step 1 logged)" grep -q '"step":1,' "$WORK/raw/metrics.jsonl"
finish
