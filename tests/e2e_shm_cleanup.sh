#!/usr/bin/env bash
# Nothing of a job outlives it: no /dev/shm leftovers after a run that succeeded, nor after one
# whose optimizer crashed, nor after kill -9 of mpirun or of mtrun itself (Open MPI's own
# segments included), whether mtrun cleans up after the job or the ranks run under plain mpirun;
# and mtrun returns only when no rank of its job runs any more.
# Only this test's own jobs are checked (their job ids, their configs in $WORK): other jobs may
# be running on the machine.
source "$(dirname "$0")/e2e_lib.sh" "$@"
small_config "$E2E_BACKEND" "$WORK/base.cfg"
run_job ok 3 "$WORK/base.cfg" --stop-at 3 || show_log ok
expect "a successful run leaves nothing in /dev/shm" no_leftovers ok
MT_FAULT_ABORT_AT_STEP=2 run_job crash 3 "$WORK/base.cfg"
status=$?
expect "a run whose optimizer aborts exits non-zero (got $status)" test $status -ne 0
expect "the crashed run leaves nothing in /dev/shm" no_leftovers crash

# start NAME: a long job in the background ($pid: mtrun's), once it has logged a step and saved
# a checkpoint (LATEST: the resume below needs one; on a loaded machine the save can follow the
# step's line by seconds).
sed 's/^steps = .*/steps = 100000;/; s/^  interval = .*/  interval = 1;/' "$WORK/base.cfg" \
    >"$WORK/long.cfg"
start() {
    "$MTRUN" -np 3 "$WORK/long.cfg" --out "$WORK/$1" >"$WORK/$1.log" 2>&1 &
    pid=$!
    for i in $(seq 1 1200); do
        grep -q '^step' "$WORK/$1.log" && [ -s "$WORK/$1/LATEST" ] && return
        sleep 0.05
    done
}

# kill -9 of mpirun: mtrun ends the ranks mpirun left and returns only when none is left, so
# that a --resume right after cannot race them in the run folder.
start killed
pkill -9 -P "$pid" -x mpirun
t0=$(date +%s%N)
wait "$pid"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
left=$(ranks_of "$WORK/long.cfg")
latest=$(cat "$WORK/killed/LATEST" 2>/dev/null)
expect "after kill -9 of mpirun, mtrun exits non-zero (rc $rc)" test "$rc" -ne 0
expect "when mtrun returns ($ms ms after), no rank of its job is left (${left:-none})" test -z "$left"
expect "nothing of the job is left in /dev/shm, Open MPI's segments included" no_leftovers killed
"$MTRUN" -np 3 "$WORK/long.cfg" --resume "$WORK/killed" --stop-at $((10#${latest#step_} + 2)) \
    >"$WORK/killed-resume.log" 2>&1
rc=$?
expect "a --resume right after it runs alone in the folder (rc $rc)" test "$rc" -eq 0
show_log killed-resume | grep -q 'another job' && show_log killed-resume

# kill -9 of mtrun: mpirun gets SIGTERM, the ranks die with mpirun, and mtrun's janitor removes
# the job's folder once mpirun has let go of it.
start orphaned
job=$(job_id orphaned)
kill -9 "$pid"
t0=$(date +%s%N)
for i in $(seq 1 100); do
    [ -z "$(ranks_of "$WORK/long.cfg")" ] && [ -z "$(job_leftovers "$job")" ] && break
    sleep 0.05
done
ms=$((($(date +%s%N) - t0) / 1000000))
wait "$pid" 2>/dev/null
expect "after kill -9 of mtrun no rank is left (after $ms ms)" test -z "$(ranks_of "$WORK/long.cfg")"
expect "after kill -9 of mtrun its job left nothing in /dev/shm (after $ms ms)" \
    test -n "$job" -a -z "$(job_leftovers "$job")"
expect "nor any Open MPI daemon of it" bash -c "! pgrep -f '[m]pirun.*$WORK/long.cfg'"

# A folder whose mtrun and janitor were both killed (kill -9 of the whole process tree): the next
# mtrun of the same user reaps it, and only it: a folder whose `alive` lock is held stays.
dead=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
live=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
for j in "$dead" "$live"; do
    mkdir -m 700 "/dev/shm/mtc-$j" && touch "/dev/shm/mtc-$j/alive" "/dev/shm/mtc-$j-0"
done
flock "/dev/shm/mtc-$live/alive" sleep 30 &
holder=$!
ino=$(stat -c %i "/dev/shm/mtc-$live/alive")
for i in $(seq 1 100); do grep -q ":$ino " /proc/locks && break; sleep 0.05; done
run_job reaper 3 "$WORK/base.cfg" --stop-at 1 || show_log reaper
# (Any mtrun of this user may be the one that reaps it: other jobs may start meanwhile.)
expect "the next mtrun reaps a dead job's folder and its regions" \
    test -z "$(job_leftovers "$dead")"
expect "and leaves a live job's alone" test -d "/dev/shm/mtc-$live" -a -e "/dev/shm/mtc-$live-0"
stop_holder "$holder"
rm -rf "/dev/shm/mtc-$live" "/dev/shm/mtc-$live-0" "/dev/shm/mtc-$dead" "/dev/shm/mtc-$dead-0"

# Under plain mpirun nobody cleans up after the ranks: they must have unlinked the regions
# themselves as soon as every rank had mapped them. The job id is chosen here so that the check
# looks at this job's names only.
bindir=$(dirname "$MTRUN")
root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
raw_job=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
MT_JOB_ID=$raw_job MT_FAULT_ABORT_AT_STEP=2 mpirun $root --oversubscribe -np 3 \
    -x MT_FAULT_ABORT_AT_STEP -x MT_JOB_ID "$bindir/mt-rank" "$WORK/base.cfg" --out "$WORK/raw" \
    >"$WORK/raw.log" 2>&1
expect "ranks under plain mpirun that crash leave nothing in /dev/shm" \
    test -z "$(job_leftovers "$raw_job")"
expect "the crash happened after the regions were made (step 1 logged)" grep -q '"step":1,' "$WORK/raw/metrics.jsonl"
finish
