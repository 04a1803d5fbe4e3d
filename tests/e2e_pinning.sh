#!/usr/bin/env bash
# Optimizer ranks that share a NUMA node split its CPUs: with MT_OPTIMIZER_INFO=1 each says
# where its threads went, and no CPU is pinned by two ranks. (On a host where mpirun leaves the
# ranks unbound across NUMA nodes nothing is pinned, and the test says so and skips.)
source "$(dirname "$0")/e2e_lib.sh" "$@"
cpus=$(nproc)
[ "$cpus" -ge 2 ] || { echo "SKIPPED: one CPU"; exit 77; }
np=$((cpus < 4 ? cpus + 1 : 5)) # one compute rank and up to four optimizers, one CPU each at least
MT_OPTIMIZER_INFO=1 run_job pin "$np" "$SRC/configs/tiny.cfg" --stop-at 1 --force || show_log pin
grep '^optimizer [0-9]*:' "$WORK/pin.log"
pinned=$(grep -c '^optimizer [0-9]*: .* pinned one per CPU' "$WORK/pin.log")
if [ "$pinned" -eq 0 ] && grep -q 'spans NUMA nodes' "$WORK/pin.log"; then
    echo "SKIPPED: ranks unbound across NUMA nodes here"
    exit 77
fi
expect "every optimizer rank pinned its threads" test "$pinned" -eq $((np - 1))
# "(cpus a..b)" per rank: expand the ranges and look for a CPU named twice
grep -o 'cpus [0-9]*\.\.[0-9]*' "$WORK/pin.log" | sed 's/cpus //; s/\.\./ /' |
    while read -r a b; do seq "$a" "$b"; done | sort -n >"$WORK/cpus"
expect "no CPU is pinned by two ranks" test -z "$(uniq -d "$WORK/cpus")"
expect "the ranks' CPUs are $((np - 1)) or more" test "$(wc -l <"$WORK/cpus")" -ge $((np - 1))
finish
