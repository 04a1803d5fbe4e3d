#!/usr/bin/env bash
# Trains the bench configs on the GPU machine and prints one summary line per config.
# Usage: bench/run_bench.sh BUILD_DIR OUT_DIR [config names...]   (default: 1b 3b 7b)
# A name is bench/configs/bench-NAME.cfg, or bench/configs/NAME.cfg (the slices). The run's
# host peak, in bytes, goes to OUT_DIR/run-NAME.host-peak. MT_BENCH_ARGS: overrides for every
# run (word-split); MT_BENCH_TAG: a suffix for the runs' names (NAME-TAG), so that a variant of
# a config keeps the first run's files.
set -u
BUILD=$1
OUT=$2
shift 2
names=${*:-1b 3b 7b}
here=$(cd "$(dirname "$0")" && pwd)
np=${MT_BENCH_NP:-5}
read -r -a extra <<<"${MT_BENCH_ARGS:-}"
for config in $names; do
    cfg=$here/configs/bench-$config.cfg
    [ -f "$cfg" ] || cfg=$here/configs/$config.cfg
    name=$config${MT_BENCH_TAG:+-$MT_BENCH_TAG}
    log=$OUT/bench-$name.log
    rm -rf "$OUT/run-$name"
    stop=()
    [ -n "${MT_BENCH_STOP:-}" ] && stop=(--stop-at "$MT_BENCH_STOP")
    # The host bytes the job holds: peak of MemTotal - MemAvailable (shared regions included:
    # tmpfs pages are not available) over the run, less what it was before, sampled every second.
    used() { awk '/^MemTotal:/ {t = $2} /^MemAvailable:/ {a = $2} END {print (t - a) * 1024}' /proc/meminfo; }
    base=$(used)
    (peak=0; while :; do
        now=$(used); [ "$now" -gt "$peak" ] && peak=$now
        echo "$peak" >"$OUT/peak-$name"; sleep 1; done) &
    sampler=$!
    # --force: the GPU machines grow their RAM on demand, so MemAvailable at start undercounts.
    /usr/bin/time -v "$BUILD/bin/mtrun" --force -np "$np" "$cfg" --out "$OUT/run-$name" "${stop[@]}" \
        "${extra[@]}" >"$log" 2>&1
    rc=$?
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    echo "== $name (exit $rc)"
    awk -v b="$base" '{printf "host peak (MemTotal - MemAvailable, less the %.1f GiB before): %.2f GiB\n", b / 2^30, ($1 - b) / 2^30}' "$OUT/peak-$name"
    awk -v b="$base" '{printf "%.0f\n", $1 - b}' "$OUT/peak-$name" >"$OUT/run-$name.host-peak"
    grep -E '^compute rank|^step' "$log" | tail -n 4
    grep -E "Maximum resident|Elapsed|KTIME|kernel times" "$log"
    grep -E 'bytes/param' "$log" | head -n 2
    python3 "$here/summarize.py" "$OUT/run-$name"
    if [ -f "$OUT/run-$name/trace.json" ]; then # where the forward waited on the optimizers
        python3 "$here/trace_summary.py" "$OUT/run-$name/trace.json" >"$OUT/trace-$name.txt"
        grep -vE '^ +L[0-9]' "$OUT/trace-$name.txt"
    fi
done
