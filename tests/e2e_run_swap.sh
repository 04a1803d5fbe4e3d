#!/usr/bin/env bash
# A run folder moved, and a link to another run put in its place, while a job trains: the job
# holds its folder open from the start, so it keeps writing its checkpoints, LATEST, pruning
# (checkpoint.keep) and metrics.jsonl into its own folder (now RUN.moved), and the other run is
# left exactly as it was.
# usage: e2e_run_swap.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 4;/; s/^  interval = .*/  interval = 2;/' "$WORK/base.cfg"
run_job other 2 "$WORK/base.cfg" || show_log other
snap() { (cd "$1" && find . -printf '%p %s %T@\n' | sort && find . -type f -exec sha256sum {} + | sort); }
before=$(snap "$WORK/other")

sed 's/^steps = .*/steps = 40;/' "$WORK/base.cfg" >"$WORK/long.cfg"
MT_FAULT_SLOW_ADAMW_MS=20 "$MTRUN" -np 2 "$WORK/long.cfg" --out "$WORK/run" checkpoint.keep=1 \
    >"$WORK/run.log" 2>&1 &
pid=$!
for i in $(seq 1 1200); do [ -s "$WORK/run/LATEST" ] && break; sleep 0.05; done
mv "$WORK/run" "$WORK/run.moved" && ln -s "$WORK/other" "$WORK/run"
wait "$pid"
rc=$?
expect "the job trains to its end (rc $rc)" test "$rc" -eq 0 || show_log run
expect "the other run is left exactly as it was" test "$(snap "$WORK/other")" = "$before"
expect "the job's checkpoints went on into its own folder: LATEST is step 40" \
    grep -qx step_000040 "$WORK/run.moved/LATEST"
expect "pruned there to one checkpoint" \
    test "$(ls -d "$WORK/run.moved"/step_* | wc -l)" -eq 1
expect "and metrics.jsonl has every step there" \
    test "$(grep -c '"step":' "$WORK/run.moved/metrics.jsonl")" -ge 40
finish
