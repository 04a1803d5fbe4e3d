#!/usr/bin/env bash
# One job per run folder: a second job given the --out (or --resume) folder of a running one is
# refused with one line naming the folder and the running job's pid, and changes nothing there;
# the first trains on to the end as if alone. Once it has ended, the folder is free again.
# usage: e2e_run_lock.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config "$E2E_BACKEND" "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 40;/; s/^  interval = .*/  interval = 20;/' "$WORK/base.cfg"
run_job alone 3 "$WORK/base.cfg" || show_log alone

# The first job's optimizer ranks take 50 ms a group, so it is still training when the second
# one starts.
MT_FAULT_SLOW_ADAMW_MS=50 "$MTRUN" -np 3 "$WORK/base.cfg" --out "$WORK/run" >"$WORK/first.log" 2>&1 &
pid=$!
for i in $(seq 1 1200); do grep -q '^step *2/' "$WORK/first.log" && break; sleep 0.05; done
for args in "--out $WORK/run" "--resume $WORK/run"; do
    "$MTRUN" -np 2 "$WORK/base.cfg" $args >"$WORK/second.out" 2>"$WORK/second.err"
    rc=$?
    expect "a second job with ${args%% *} of a running one exits 2 (was $rc)" test "$rc" -eq 2
    expect "with one line naming the folder and the running job's pid: $(cat "$WORK/second.err")" \
        bash -c "[ \$(wc -l <'$WORK/second.err') -eq 1 ] &&
                 grep -q -- '^mtrun: ${args%% *} $WORK/run: another job (pid $pid) is writing to this folder' '$WORK/second.err'"
    expect "and prints nothing else" test ! -s "$WORK/second.out"
done
still=$(kill -0 "$pid" 2>/dev/null && echo yes)
wait "$pid"
rc=$?
expect "the first job was still training then (${still:-no}), and ended well (rc $rc)" \
    test "$still" = yes -a "$rc" -eq 0
expect "its losses are those of the same job alone, bitwise" \
    diff <(losses "$WORK/alone") <(losses "$WORK/run")
expect "and so is its final checkpoint" \
    cmp -s "$WORK/alone/step_000040/state.bin" "$WORK/run/step_000040/state.bin"

sed 's/^steps = .*/steps = 44;/' "$WORK/base.cfg" >"$WORK/more.cfg"
run_job more 3 "$WORK/more.cfg" --resume "$WORK/run" --out "$WORK/run"
expect "once it has ended, the folder takes a job again (rc $?)" \
    grep -qx step_000044 "$WORK/run/LATEST"

# The lock is RUN/.lock, the job user's, mode 0600 (e2e_run_lock_user.sh: no other user can take
# it); nothing else is written into the folder for it.
expect "the run folder holds the lock file .lock (mode 0600) and nothing else of the lock's" \
    bash -c "[ \"\$(stat -c %a '$WORK/run/.lock')\" = 600 ] &&
             [ -z \"\$(ls -A '$WORK/run' | grep -v '^step_\|^LATEST$\|^metrics.jsonl$\|^events.out.tfevents\|^\.lock$')\" ]"
finish
