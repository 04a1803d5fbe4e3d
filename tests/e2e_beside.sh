#!/usr/bin/env bash
# The tests share the machine: the end-to-end tests that look at /dev/shm, processes and signals
# pass while another job of the same user trains beside them, and that job trains on through
# them untouched (its folder, its regions, its ranks), then stops on its SIGTERM with a
# checkpoint as usual.
# The job beside is throttled (its optimizer ranks sleep 100 ms a group) so that it takes little
# of a 2-core machine.
# usage: e2e_beside.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/beside.cfg"
sed -i 's/^steps = .*/steps = 1000000;/; s/^  interval = .*/  interval = 1000000;/' \
    "$WORK/beside.cfg"
MT_FAULT_SLOW_ADAMW_MS=100 "$MTRUN" -np 2 "$WORK/beside.cfg" --out "$WORK/beside" \
    >"$WORK/beside.log" 2>&1 &
pid=$!
for i in $(seq 1 1200); do grep -q '^step *1/' "$WORK/beside.log" && break; sleep 0.05; done
job=$(job_id beside)
expect "the job beside is training (job ${job:-?})" test -n "$job" -a -n "$(job_leftovers "$job")"

here=$(dirname "$0")
for t in e2e_shm_cleanup e2e_stop e2e_watchdog e2e_run_lock; do
    bash "$here/$t.sh" "$MTRUN" "$SRC" >"$WORK/$t.out" 2>&1
    rc=$?
    expect "$t passes beside it ($(tail -n 1 "$WORK/$t.out"))" test "$rc" -eq 0
    [ "$rc" -eq 0 ] || grep -E "FAIL|^----" -A3 "$WORK/$t.out" | head -40
done

steps=$(grep -c '^step' "$WORK/beside.log")
expect "the job beside trained on through them ($steps steps) and still runs" \
    kill -0 "$pid"
expect "its folder in /dev/shm is still there" test -d "/dev/shm/mtc-$job"
kill -TERM "$pid"
wait "$pid"
rc=$?
expect "its own SIGTERM stops it with a checkpoint (rc $rc)" \
    bash -c "[ $rc -eq 143 ] && ls -d '$WORK'/beside/step_* >/dev/null 2>&1"
expect "and it leaves nothing behind" test -z "$(job_leftovers "$job")"
finish
