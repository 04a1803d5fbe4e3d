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
source "$here/lib.sh"
np=${MT_BENCH_NP:-5}
read -r -a extra <<<"${MT_BENCH_ARGS:-}"
# Each rank process's proportional set (PSS: a shared page counted in part by each process that
# maps it), its private and shared-memory parts, sampled with the host peak: where the host bytes
# go, against --plan's table of host memory by rank.
rank_sample() {
    for pid in $(pgrep -f 'bin/mt-rank'); do
        rank=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        [ -n "$rank" ] && awk -v r="$rank" '/^Pss:/ {p = $2} /^Pss_Anon:/ {a = $2}
            /^Pss_Shmem:/ {s = $2} END {print r, p, a, s}' "/proc/$pid/smaps_rollup" 2>/dev/null
    done
}
rank_peaks() {
    sort -n "$1" | awk '{if ($2 > p[$1]) p[$1] = $2; if ($3 > a[$1]) a[$1] = $3
        if ($4 > s[$1]) s[$1] = $4} END {for (r in p) printf "rank %s: PSS peak %.1f MiB" \
        " (private %.1f, shared memory %.1f, each its own peak)\n", r, p[r] / 1024, a[r] / 1024,
        s[r] / 1024}' | sort
}
for config in $names; do
    cfg=$here/configs/bench-$config.cfg
    [ -f "$cfg" ] || cfg=$here/configs/$config.cfg
    name=$config${MT_BENCH_TAG:+-$MT_BENCH_TAG}
    log=$OUT/bench-$name.log
    rm -rf "$OUT/run-$name"
    gpu_wait_idle
    stop=()
    [ -n "${MT_BENCH_STOP:-}" ] && stop=(--stop-at "$MT_BENCH_STOP")
    # The host bytes the job holds: peak of MemTotal - MemAvailable (shared regions included:
    # tmpfs pages are not available) over the run, less what it was before, sampled every second.
    base=$(host_used_bytes)
    : >"$OUT/ranks-$name"
    track_peak "$OUT/peak-$name" host_used_bytes &
    sampler=$!
    (while :; do rank_sample >>"$OUT/ranks-$name"; sleep 1; done) &
    ranks=$!
    # --force: the GPU machines grow their RAM on demand, so MemAvailable at start undercounts.
    /usr/bin/time -v "$BUILD/bin/mtrun" --force -np "$np" "$cfg" --out "$OUT/run-$name" "${stop[@]}" \
        "${extra[@]}" >"$log" 2>&1
    rc=$?
    kill "$sampler" "$ranks" 2>/dev/null; wait "$sampler" "$ranks" 2>/dev/null
    echo "== $name (exit $rc)"
    awk -v b="$base" '{printf "host peak (MemTotal - MemAvailable, less the %.1f GiB before): %.2f GiB\n", b / 2^30, ($1 - b) / 2^30}' "$OUT/peak-$name"
    awk -v b="$base" '{printf "%.0f\n", $1 - b}' "$OUT/peak-$name" >"$OUT/run-$name.host-peak"
    rank_peaks "$OUT/ranks-$name"
    grep -E '^compute rank|^step' "$log" | tail -n 4
    grep -E "Maximum resident|Elapsed|KTIME|kernel times" "$log"
    grep -E 'bytes/param' "$log" | head -n 2
    python3 "$here/summarize.py" "$OUT/run-$name"
    if [ -f "$OUT/run-$name/trace.json" ]; then # where the forward waited on the optimizers
        python3 "$here/trace_summary.py" "$OUT/run-$name/trace.json" >"$OUT/trace-$name.txt"
        grep -vE '^ +L[0-9]' "$OUT/trace-$name.txt"
    fi
done
