#!/usr/bin/env bash
# A stopped rank does not hang the job. With watchdog_s = 3, kill -STOP of one optimizer rank ends
# the job within seconds, with a line naming the rank that waited, what for, and the rank that
# stopped answering (its host and pid) - the stopped one, not a rank that only waits on it in the
# optimizers' collectives; nothing of the job is left running or in /dev/shm.
# Two trials: -np 3 stopping rank 2, -np 4 stopping rank 3 (the last rank, which the others wait
# on the most).
# usage: e2e_watchdog.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config "$E2E_BACKEND" "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 100000;/; s/^  interval = .*/  interval = 0;/' "$WORK/base.cfg"
echo "watchdog_s = 3;" >>"$WORK/base.cfg"

trial() { # trial NP VICTIM_RANK
    local np=$1 rank=$2 name="np$1-rank$2" victim="" p
    "$MTRUN" -np "$np" "$WORK/base.cfg" --out "$WORK/$name" >"$WORK/$name.log" 2>&1 &
    local pid=$!
    for i in $(seq 1 1200); do grep -q '^step *5/' "$WORK/$name.log" && break; sleep 0.05; done
    for p in $(ranks_of "$WORK/base.cfg"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank" &&
            victim=$p
    done
    expect "$name: found optimizer rank $rank's process" test -n "$victim"
    kill -STOP "$victim"
    local t0
    t0=$(date +%s)
    wait "$pid"
    local rc=$? took=$(($(date +%s) - t0))
    kill -CONT "$victim" 2>/dev/null # whatever is left of it may end now
    expect "$name: the job ends on its own (exit $rc after $took s, watchdog 3 s)" \
        test "$rc" -ne 0 -a "$took" -le 20
    expect "$name: the compute rank names the stopped rank $rank, its host and pid" grep -Eq \
        "watchdog: rank 0 \(on [^)]*\) heard nothing for 3 s while waiting for group [0-9]+'s weights at version [0-9]+ from rank $rank \(an optimizer rank, on [^,]*, pid $victim\), whose process is stopped" \
        "$WORK/$name.log" || show_log "$name"
    expect "$name: when mtrun returns no rank is left" test -z "$(ranks_of "$WORK/base.cfg")"
    expect "$name: nothing is left in /dev/shm" no_leftovers "$name"
}
trial 3 2
trial 4 3
finish
