#!/usr/bin/env bash
# make fuzz: builds the libFuzzer targets with clang (build-fuzz/) and runs each for
# FUZZ_SECONDS (default 60), FUZZ_JOBS at a time (default: the core count). New inputs go to
# build-fuzz/corpus/<target> (the seeds in tests/fuzz/corpus are read, never written);
# a crash leaves its input in build-fuzz/crashes/<target>/ and makes this exit 1.
# usage: tests/fuzz/run.sh [TARGET...]   (default: all six)
set -uo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-$(nproc)}
B=build-fuzz
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(train_cfg config_json safetensors shard tokenizer manifest)

CC=clang cmake -S . -B $B -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMT_FUZZ=ON -DMT_CUDA=OFF >/dev/null ||
    { echo "fuzz: cmake failed (clang, libclang-rt-14-dev and libomp-dev are needed)"; exit 2; }
cmake --build $B -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null ||
    { echo "fuzz: build failed: cmake --build $B shows why"; exit 2; }

run_one() {
    local t=$1 log=$B/fuzz-$1.log
    mkdir -p $B/corpus/$t $B/crashes/$t
    ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 LSAN_OPTIONS=suppressions=tests/fuzz/lsan.supp \
        $B/bin/fuzz_$t -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 \
        -artifact_prefix=$B/crashes/$t/ $B/corpus/$t tests/fuzz/corpus/$t >"$log" 2>&1
    local rc=$? runs cov
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    [ -z "$runs" ] && runs=$(grep -oE '#[0-9]+' "$log" | tail -1 | tr -d '#')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
    if [ $rc -eq 0 ]; then
        printf 'fuzz %-12s %10s runs  %-10s corpus %4d files  no crash\n' "$t" "${runs:-?}" \
            "$cov" "$(ls $B/corpus/$t | wc -l)"
    else
        printf 'fuzz %-12s CRASH (exit %d): %s; input in %s\n' "$t" $rc \
            "$(grep -m1 -E 'ERROR|runtime error|SUMMARY' "$log")" "$B/crashes/$t/"
        echo "  keep the input as a regression: cp $B/crashes/$t/<file> tests/fuzz/crashes/$t/"
    fi
    return $rc
}

echo "fuzz: ${#targets[@]} targets, ${SECONDS_EACH} s each, $JOBS at a time (logs: $B/fuzz-*.log)"
export -f run_one
export B SECONDS_EACH
printf '%s\n' "${targets[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one {}'
