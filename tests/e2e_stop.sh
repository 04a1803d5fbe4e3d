#!/usr/bin/env bash
# Issue 14, item 5: Ctrl-C keeps the work.
# - A first SIGINT (or SIGTERM) to mtrun finishes the step under way, saves it, and ends with
#   exit code 130 (143); --resume then continues bitwise, to the uninterrupted run's result.
# - A second signal ends the job at once, and leaves no rank and nothing in /dev/shm; one during
#   a save leaves no part of it.
# - SIGHUP (a closed terminal) is a SIGTERM; a stop file of another user steers nothing.
# usage: e2e_stop.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config "$E2E_BACKEND" "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 60;/; s/^  interval = .*/  interval = 1000;/' "$WORK/base.cfg"

# start NAME [mtrun args]: mtrun in the background on $WORK/base.cfg; waits for its 3rd step.
start() {
    local name=$1
    shift
    "$MTRUN" -np 3 "$WORK/base.cfg" --out "$WORK/$name" "$@" >"$WORK/$name.log" 2>&1 &
    pid=$!
    for i in $(seq 1 1200); do grep -q '^step *3/' "$WORK/$name.log" && return; sleep 0.05; done
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
    grep -qx "$(step_dir "${stopped:-0}")" "$WORK/int/LATEST"
expect "it stopped early (before step 60)" test "${stopped:-60}" -lt 60
"$MTRUN" -np 2 "$WORK/base.cfg" --resume "$WORK/int" >"$WORK/int-resume.log" 2>&1 ||
    show_log int-resume
expect "--resume continues to the uninterrupted run's final state, bitwise" \
    cmp -s "$WORK/full/step_000060/state.bin" "$WORK/int/step_000060/state.bin"
expect "and its losses, bitwise" diff <(losses "$WORK/full") <(losses "$WORK/int")

# SIGTERM, and SIGHUP (the terminal closed), stop the job the same way: after a step, with a
# checkpoint, exit code 128 + the signal.
for sig in TERM:143 HUP:129; do
    name=${sig%:*}
    start "$name"
    kill "-$name" "$pid"
    wait "$pid"
    rc=$?
    expect "a SIG$name stops the same way, exit code ${sig#*:} (was $rc)" test "$rc" -eq "${sig#*:}"
    expect "with a checkpoint" test -n "$(ls -d "$WORK/$name"/step_* 2>/dev/null)"
    expect "and leaves nothing in /dev/shm" no_leftovers "$name"
done

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
expect "and saved that step" grep -qx "$(step_dir "${stopped:-0}")" "$WORK/wrapped/LATEST"

# Ctrl-C twice, as a terminal sends it: to the process group, here mtrun's own (setsid). The
# optimizer ranks take 2 s per group update, so a step takes 8 s: finishing it would show.
slow_start() {
    MT_FAULT_SLOW_ADAMW_MS=2000 setsid "$MTRUN" -np 3 "$WORK/base.cfg" --out "$WORK/$1" \
        >"$WORK/$1.log" 2>&1 &
    pid=$!
    for i in $(seq 1 1200); do grep -q '^step *1/' "$WORK/$1.log" && return; sleep 0.05; done
}
for gap in 0.2 0.005; do
    slow_start "twice-$gap"
    kill -INT -- -"$pid"
    sleep "$gap"
    kill -INT -- -"$pid"
    t0=$(date +%s%N)
    wait "$pid"
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    expect "Ctrl-C twice ($gap s apart, to the group) aborts at once: exit $rc after $ms ms" \
        test "$rc" -eq 130 -a "$ms" -le 4000
    expect "it did not finish the step to save it" \
        bash -c "! ls -d '$WORK/twice-$gap'/step_* 2>/dev/null | grep -q ."
    expect "no rank is left after the abort" test -z "$(ranks_of "$WORK/base.cfg")"
    expect "nothing is left in /dev/shm after the abort" no_leftovers "twice-$gap"
done

# Ctrl-C twice during a save of the NVMe tier's moments (the leader pauses in it,
# MT_FAULT_SLOW_SAVE_MS): the save's hidden folder, as large as a checkpoint, is removed on the way
# out, and the tier's folder is left empty.
mkdir "$WORK/disk"
sed 's/^  interval = .*/  interval = 2;/' "$WORK/base.cfg" >"$WORK/save.cfg"
MT_FAULT_SLOW_SAVE_MS=20000 setsid "$MTRUN" -np 3 "$WORK/save.cfg" --out "$WORK/mid-save" \
    storage.dir="$WORK/disk" storage.adam=true >"$WORK/mid-save.log" 2>&1 &
pid=$!
for i in $(seq 1 1200); do [ -e "$WORK/mid-save/.step_000002.tmp/state.bin" ] && break; sleep 0.05; done
expect "a save is under way in its hidden folder" test -e "$WORK/mid-save/.step_000002.tmp"
kill -INT -- -"$pid"
sleep 0.2
kill -INT -- -"$pid"
wait "$pid"
rc=$?
expect "Ctrl-C twice during the save aborts (exit $rc)" test "$rc" -eq 130
expect "and its hidden folder is gone: $(ls -A "$WORK/mid-save" | tr '\n' ' ')" \
    bash -c "! ls -A '$WORK/mid-save' | grep -q '^\.step_.*\.tmp\$'"
expect "mtrun says it removed it" \
    grep -q "^mtrun: removed $WORK/mid-save/.step_000002.tmp, a save the job did not finish" \
    "$WORK/mid-save.log"
expect "nothing is left in storage.dir" test -z "$(ls -A "$WORK/disk")"
expect "nor in /dev/shm" no_leftovers mid-save

# Only the job's own user can ask it to stop: the stop file lives in the job's folder, mode 0700,
# and a file there that another user owns is ignored; one at the old place of /dev/shm, where
# anyone may write, steers nothing either. (A job long enough not to end on its own meanwhile:
# on a GPU 60 steps take a second.)
sed 's/^steps = .*/steps = 100000;/' "$WORK/base.cfg" >"$WORK/long.cfg"
"$MTRUN" -np 3 "$WORK/long.cfg" --out "$WORK/stranger" >"$WORK/stranger.log" 2>&1 &
pid=$!
for i in $(seq 1 1200); do grep -q '^step *3/' "$WORK/stranger.log" && break; sleep 0.05; done
job=$(job_id stranger)
folder_mode=$(stat -c %a "/dev/shm/mtc-$job" 2>/dev/null)
expect "the job's folder is private (mode ${folder_mode:-missing})" test "$folder_mode" = 700
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
    as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
    as_nobody touch "/dev/shm/mtc-$job-stop" 2>/dev/null
    expect "another user cannot create the stop file in the job's folder" \
        bash -c "! setpriv --reuid=65534 --regid=65534 --clear-groups touch /dev/shm/mtc-$job/stop 2>/dev/null"
    # made aside and renamed into place: the job never sees it owned by root
    touch "/dev/shm/mtc-$job/.stop-aside" && chown 65534:65534 "/dev/shm/mtc-$job/.stop-aside" &&
        mv -T "/dev/shm/mtc-$job/.stop-aside" "/dev/shm/mtc-$job/stop"
    steps_now=$(grep -c '^step' "$WORK/stranger.log")
    for i in $(seq 1 1200); do
        [ "$(grep -c '^step' "$WORK/stranger.log")" -ge $((steps_now + 5)) ] && break
        sleep 0.05
    done
    expect "a stop file owned by another user steers nothing: 5 more steps ran" \
        test "$(grep -c '^step' "$WORK/stranger.log")" -ge $((steps_now + 5))
    rm -f "/dev/shm/mtc-$job-stop" "/dev/shm/mtc-$job/stop"
else
    echo "SKIPPED (part): a stop file of another user needs root and setpriv to make"
fi
kill -TERM "$pid"
wait "$pid"
expect "the job's own SIGTERM still stops it, with a checkpoint" \
    test -n "$(ls -d "$WORK"/stranger/step_* 2>/dev/null)"
finish
