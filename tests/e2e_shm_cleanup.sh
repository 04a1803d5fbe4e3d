#!/usr/bin/env bash
# No /dev/shm leftovers after a run that succeeded, nor after one whose optimizer crashed, nor
# after kill -9 of mpirun (Open MPI's own segments included),
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
# kill -9 of mpirun (issue 14, item 6): its own shared-memory segments are in mtrun's folder,
# which mtrun removes; the ranks end once their daemon is gone.
sed 's/^steps = .*/steps = 100000;/' "$CFG" >"$WORK/long.cfg"
vaders() { ls /dev/shm 2>/dev/null | grep '^vader_segment' | sort; }
vader_before=$(vaders)
"$MTRUN" -np 3 "$WORK/long.cfg" --out "$WORK/killed" >"$WORK/killed.log" 2>&1 &
mtrun_pid=$!
for i in $(seq 1 100); do grep -q '^step' "$WORK/killed.log" && break; sleep 0.1; done
pkill -9 -P "$mtrun_pid" -x mpirun
wait "$mtrun_pid"
ranks() { pgrep -f "[m]t-rank $WORK/long.cfg"; }
for i in $(seq 1 50); do ranks >/dev/null || break; sleep 0.1; done
expect "after kill -9 of mpirun no rank is left" test -z "$(ranks)"
expect "after kill -9 of mpirun nothing of the job is left in /dev/shm" \
    test "$(shm_entries)" = "$before" -a -z "$(comm -13 <(echo "$vader_before") <(vaders))"
expect "after kill -9 of mpirun Open MPI's segment folder is gone" \
    bash -c "! ls -d /dev/shm/mtc-*-mpi 2>/dev/null | grep -q ."
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
