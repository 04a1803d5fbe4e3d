#!/usr/bin/env bash
# Integers beyond their field's C type are refused, shown as the user typed them, in the file and
# on the command line; every 64-bit seed is its own run (docs/configuration.md: seed is in
# [0, 2^64 - 1]). libconfig clamps an L literal past INT64_MAX and wraps one without L, which
# once made seed=18446744073709551615L the run of 9223372036854775807 and printed
# "steps: -1 is out of range" for steps=99999999999999999999.
# usage: config_int64.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"

refused() { refused_cfg "$@"; } # NAME REGEX CONFIG ARGS... (e2e_lib.sh)
INT="is out of range: must be in \[1, 2147483647\]$"
SEED="is out of range: must be in \[0, 18446744073709551615\]$"
B=$WORK/base.cfg
refused steps_past_64bit "override steps=99999999999999999999: steps: 99999999999999999999 $INT" "$B" steps=99999999999999999999
refused steps_int64_max "steps: 9223372036854775807 $INT" "$B" steps=9223372036854775807
refused watchdog_past_int "watchdog_s: 2147483648 $INT" "$B" watchdog_s=2147483648
refused seed_past_uint64 "seed: 18446744073709551616L $SEED" "$B" seed=18446744073709551616L
refused seed_far_past "seed: 9999999999999999999999L $SEED" "$B" seed=9999999999999999999999L
refused seed_negative "seed: -1 $SEED" "$B" seed=-1
# The same in the file, with its line.
line=$(grep -n '^steps' "$B" | cut -d: -f1)
sed "s/^steps = .*/steps = 99999999999999999999;/" "$B" >"$WORK/steps.cfg"
refused file_steps "steps.cfg:$line: steps: 99999999999999999999 $INT" "$WORK/steps.cfg"
sed "s/^steps = .*/steps = 20;\nseed = 18446744073709551616L;/" "$B" >"$WORK/seed.cfg"
refused file_seed "seed.cfg:$((line + 1)): seed: 18446744073709551616L $SEED" "$WORK/seed.cfg"
# Two seeds, two runs: the largest uint64 and INT64_MAX draw different data and weights.
sed -i 's/^steps = .*/steps = 1;/' "$B"
sed -i '/^checkpoint/,/}/s/^  interval = .*/  interval = 1;/' "$B"
for s in 9223372036854775807 18446744073709551615L; do
    run_job "seed_${s%L}" 2 "$B" seed=$s || show_log "seed_${s%L}"
done
expect "the full 64-bit seed is recorded as typed" grep -Eq '"seed":[[:space:]]*"18446744073709551615"' \
    "$WORK/seed_18446744073709551615/step_000001/manifest.json"
expect "and its run differs from INT64_MAX's" \
    bash -c "! cmp -s '$WORK/seed_9223372036854775807/step_000001/state.bin' '$WORK/seed_18446744073709551615/step_000001/state.bin'"
finish
