#!/usr/bin/env bash
# kill -9 of mpirun mid-run: mtrun's last line says that mpirun itself was killed, and does not
# point at rank messages above that nobody wrote.
# usage: e2e_mpirun_killed.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 2000;/; s/^  interval = .*/  interval = 0;/' "$WORK/base.cfg"
MT_FAULT_SLOW_ADAMW_MS=20 "$MTRUN" -np 2 "$WORK/base.cfg" --out "$WORK/run" >"$WORK/run.log" 2>&1 &
pid=$!
for i in $(seq 1 1200); do grep -q '^step *2/' "$WORK/run.log" && break; sleep 0.05; done
mpirun=$(for c in $(pgrep -P "$pid"); do [ "$(cat /proc/$c/comm)" != mtrun-janitor ] && echo "$c"; done | head -n 1)
[ -n "$mpirun" ] && kill -9 "$mpirun"
wait "$pid"
rc=$?
expect "the job ends with 137 (was $rc)" test "$rc" -eq 137
expect "mtrun says mpirun itself was killed: $(grep '^mtrun: the job' "$WORK/run.log")" \
    grep -q '^mtrun: the job ended abnormally: mpirun itself was killed by signal 9 (Killed)' "$WORK/run.log"
expect "and points at no messages above" bash -c "! grep -q 'messages are above' '$WORK/run.log'"
expect "nothing is left in /dev/shm" no_leftovers run
finish
