#!/usr/bin/env bash
# Issue 14, item 5: Ctrl-C keeps the work.
# - A first SIGINT (or SIGTERM) to mtrun finishes the step under way, saves it, and ends with
#   exit code 130 (143); --resume then continues bitwise, to the uninterrupted run's result.
# - A second signal ends the job at once, and leaves no rank and nothing in /dev/shm.
# usage: e2e_stop.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 60;/; s/^  interval = .*/  interval = 1000;/' "$WORK/base.cfg"

# start NAME [mtrun args]: mtrun in the background on $WORK/base.cfg; waits for its 3rd step.
start() {
    local name=$1
    shift
    "$MTRUN" -np 3 "$WORK/base.cfg" --out "$WORK/$name" "$@" >"$WORK/$name.log" 2>&1 &
    pid=$!
    for i in $(seq 1 300); do grep -q '^step *3/' "$WORK/$name.log" && return; sleep 0.05; done
}

run_job full 3 "$WORK/base.cfg" || show_log full

start int
kill -INT "$pid"
wait "$pid"
rc=$?
expect "a first SIGINT ends the job with exit code 130 (was $rc)" test "$rc" -eq 130
stopped=$(sed -n 's/.*stopped on request after step \([0-9]*\),.*/\1/p' "$WORK/int.log")
expect "it finished a step and said which ($stopped)" test -n "$stopped"
expect "that step's checkpoint is there and LATEST names it" \
    grep -qx "$(printf 'step_%06d' "${stopped:-0}")" "$WORK/int/LATEST"
expect "it stopped early (before step 60)" test "${stopped:-60}" -lt 60
"$MTRUN" -np 2 "$WORK/base.cfg" --resume "$WORK/int" >"$WORK/int-resume.log" 2>&1 ||
    show_log int-resume
expect "--resume continues to the uninterrupted run's final state, bitwise" \
    cmp -s "$WORK/full/step_000060/state.bin" "$WORK/int/step_000060/state.bin"
expect "and its losses, bitwise" diff <(losses "$WORK/full") <(losses "$WORK/int")

start term
kill -TERM "$pid"
wait "$pid"
rc=$?
expect "a SIGTERM stops the same way, exit code 143 (was $rc)" test "$rc" -eq 143
expect "with a checkpoint" test -n "$(ls -d "$WORK"/term/step_* 2>/dev/null)"

# A launcher that keeps the signal to itself (here a wrapper script in mpirun's place, which
# ignores SIGUSR1): the stop file mtrun leaves in /dev/shm still stops the job after a step.
printf '#!/bin/sh\ntrap "" USR1\n"%s" "$@"\n' "$(command -v mpirun)" >"$WORK/mpirun-wrapper"
chmod +x "$WORK/mpirun-wrapper"
MT_MPIRUN="$WORK/mpirun-wrapper" start wrapped
kill -INT "$pid"
for i in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { show_log wrapped; kill -TERM "$pid"; }
wait "$pid"
rc=$?
stopped=$(sed -n 's/.*stopped on request after step \([0-9]*\),.*/\1/p' "$WORK/wrapped.log")
expect "through a launcher that keeps SIGUSR1: stopped after step ${stopped:-?}, exit $rc" \
    test -n "$stopped" -a "$rc" -eq 130
expect "and saved that step" grep -qx "$(printf 'step_%06d' "${stopped:-0}")" "$WORK/wrapped/LATEST"

before=$(shm_entries)
start twice
kill -INT "$pid"
sleep 0.05
kill -INT "$pid"
t0=$(date +%s)
wait "$pid"
rc=$?
expect "a second SIGINT aborts at once (exit $rc, $(($(date +%s) - t0)) s)" \
    test "$rc" -eq 130 -a $(($(date +%s) - t0)) -le 5
for i in $(seq 1 50); do pgrep -f "[m]t-rank $WORK/base.cfg" >/dev/null || break; sleep 0.1; done
expect "no rank is left after the abort" bash -c "! pgrep -f '[m]t-rank $WORK/base.cfg'"
expect "nothing is left in /dev/shm after the abort" test "$(shm_entries)" = "$before"
finish
