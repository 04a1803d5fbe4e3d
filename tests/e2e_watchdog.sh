#!/usr/bin/env bash
# Issue 14, item 4: a stopped rank does not hang the job. With watchdog_s = 3, kill -STOP of
# one optimizer rank ends the job within seconds, with a line naming the rank that waited,
# what for, and the rank and host it waited on; nothing is left running or in /dev/shm.
# usage: e2e_watchdog.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 100000;/; s/^  interval = .*/  interval = 0;/' "$WORK/base.cfg"
echo "watchdog_s = 3;" >>"$WORK/base.cfg"
ranks() { pgrep -f "[m]t-rank $WORK/base.cfg"; }

before=$(shm_entries)
"$MTRUN" -np 3 "$WORK/base.cfg" --out "$WORK/run" >"$WORK/run.log" 2>&1 &
pid=$!
for i in $(seq 1 300); do grep -q '^step *5/' "$WORK/run.log" && break; sleep 0.05; done
# The optimizer ranks are the ones whose environment says rank 1 or 2.
victim=""
for p in $(ranks); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=2' && victim=$p
done
expect "found optimizer rank 2's process" test -n "$victim"
kill -STOP "$victim"
t0=$(date +%s)
wait "$pid"
rc=$?
took=$(($(date +%s) - t0))
kill -CONT "$victim" 2>/dev/null # whatever is left of it may end now
expect "the job ends on its own (exit $rc after $took s, watchdog 3 s)" \
    test "$rc" -ne 0 -a "$took" -le 20
expect "the compute rank names the stopped rank, its host and what it waited for" grep -Eq \
    "watchdog: rank 0 \(on [^)]*\) heard nothing for 3 s while waiting for group [0-9]+'s weights at version [0-9]+ from rank 2 \(an optimizer rank, on [^)]*\)" \
    "$WORK/run.log"
for i in $(seq 1 50); do [ -z "$(ranks)" ] && break; sleep 0.1; done
expect "no rank is left" test -z "$(ranks)"
expect "nothing is left in /dev/shm" test "$(shm_entries)" = "$before"
finish
