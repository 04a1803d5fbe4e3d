#!/usr/bin/env bash
# The NVMe tier on the GPU machine: dd's O_DIRECT rates on the disk that holds storage.dir (the
# repository's tier/ folder), the plan of bench/configs/tier-10b.cfg with and without the tier,
# then 3 steps of it with the tier (bench/run_bench.sh), with each optimizer rank's own read
# and write rates (MT_STORAGE_INFO=1); then the same for tier-adam-1b (m and v on disk too).
# A config with storage.master (tier-master-3b: every byte of state on disk) is also run with
# everything in host memory, and the two runs' losses compared: they must be the same bits
# (MT_TIER_RAM=0 skips that rerun).
# Usage: bench/run_tier.sh BUILD_DIR OUT_DIR [config names, default tier-10b tier-adam-1b]
set -u
BUILD=$1
OUT=$2
shift 2
names=${*:-tier-10b tier-adam-1b}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
dir=$here/../tier
mkdir -p "$dir"
df -h "$dir" | tail -n 1
echo "dd, 8 GiB in 16 MiB blocks, O_DIRECT:"
dd if=/dev/zero of="$dir/dd.bin" bs=16M count=512 oflag=direct conv=fdatasync 2>&1 | tail -n 1
dd if="$dir/dd.bin" of=/dev/null bs=16M iflag=direct 2>&1 | tail -n 1
rm -f "$dir/dd.bin"
np=${MT_BENCH_NP:-5}
# The bytes in use on storage.dir's disk: the tier's files have no names (unlinked once open)
disk_used_bytes() { df -B1 --output=used "$dir" | tail -n 1 | tr -d ' '; }
for name in $names; do
    cfg=$here/configs/$name.cfg
    echo "== $name"
    echo "plan without the tier:"
    "$BUILD/bin/mtrun" --plan -np "$np" "$cfg" storage.grads=false storage.adam=false \
        storage.master=false 2>&1 |
        grep -E '^host total|host memory  |^mtrun:'
    echo "plan with it:"
    "$BUILD/bin/mtrun" --plan -np "$np" "$cfg" 2>&1 |
        grep -E '^host total|NVMe tier|a step at|storage.dir  |host memory  |  step  |^mtrun:'
    disk_base=$(disk_used_bytes)
    track_peak "$OUT/disk-peak-$name" disk_used_bytes &
    sampler=$!
    MT_STORAGE_INFO=1 "$here/run_bench.sh" "$BUILD" "$OUT" "$name"
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    awk -v b="$disk_base" '{printf "disk peak (df used on storage.dir, less the %.1f GiB before): %.2f GiB\n", b / 2^30, ($1 - b) / 2^30}' "$OUT/disk-peak-$name"
    grep -E '^storage: ' "$OUT/bench-$name.log"
    ls -A "$dir" | head
    grep -qE '(^|[{; ])master *= *true' "$cfg" || continue
    [ "${MT_TIER_RAM:-1}" = 1 ] || continue # MT_TIER_RAM=0: no rerun in host memory
    echo "the same in host memory:"
    MT_BENCH_TAG=ram MT_BENCH_ARGS="storage.grads=false storage.adam=false storage.master=false" \
        "$here/run_bench.sh" "$BUILD" "$OUT" "$name"
    losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1/metrics.jsonl"; }
    if cmp -s <(losses "$OUT/run-$name") <(losses "$OUT/run-$name-ram"); then
        echo "losses: bitwise the same ($(losses "$OUT/run-$name" | wc -l) steps)"
    else
        echo "losses DIFFER:"; paste <(losses "$OUT/run-$name") <(losses "$OUT/run-$name-ram")
    fi
done
