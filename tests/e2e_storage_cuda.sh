#!/usr/bin/env bash
# The NVMe tier on the CUDA backend (skipped, exit 77, without a GPU): the compute rank's halves
# of the tier, its gradients written straight into the optimizer ranks' files a piece at a time
# (xfer_cuda_offload_tier) and, with storage.master, the weights fetched from the regions'
# weight rings or the bf16 copy on disk (xfer_cuda_fetch_tier), against the same CUDA job with
# everything in host memory, on a 10-group model (8 layers):
# - storage.grads (-np 2), and grads + adam + master (-np 3) in whole and in tiny pieces
#   (MT_TEST_PIECE_FLOATS: the embedding, the head and every layer cross piece boundaries),
#   with fp32 and bf16 gradient slots: the losses and the step 20 checkpoint bitwise;
# - the compute rank took pieces from both the weight ring and the copy (MT_STORAGE_INFO);
# - nothing is left in storage.dir or /dev/shm.
# usage: e2e_storage_cuda.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
require_gpu

small_config cuda "$WORK/base.cfg"
sed -i 's/layers   = 2;/layers   = 8;/' "$WORK/base.cfg"
sed -i 's/^optimizer = {/optimizer = {\n  grad_dtype = "fp32";/' "$WORK/base.cfg"
sed 's/grad_dtype = "fp32"/grad_dtype = "bf16"/' "$WORK/base.cfg" >"$WORK/bf16.cfg"
mkdir "$WORK/disk"
dir=storage.dir=$WORK/disk
tier="storage.grads=true storage.adam=true storage.master=true"
left=""
disk_empty() { [ -z "$(ls -A "$WORK/disk")" ]; }
tier_job() { # tier_job NAME NP CONFIG [mtrun args...]: run_job, noting what it left on the disk
    local rc
    run_job "$@"
    rc=$?
    disk_empty || left="$left $1"
    return "$rc"
}

run_job plain 3 "$WORK/base.cfg" || show_log plain
run_job plain16 3 "$WORK/bf16.cfg" || show_log plain16
tier_job grads 2 "$WORK/base.cfg" "$dir" storage.grads=true || show_log grads
# shellcheck disable=SC2086 # $tier: three overrides
MT_STORAGE_INFO=1 tier_job master 3 "$WORK/base.cfg" "$dir" $tier || show_log master
# shellcheck disable=SC2086
MT_TEST_PIECE_FLOATS=1024 MT_STORAGE_INFO=1 tier_job tmaster 3 "$WORK/base.cfg" "$dir" $tier ||
    show_log tmaster
# shellcheck disable=SC2086
MT_TEST_PIECE_FLOATS=1024 tier_job tbf16 2 "$WORK/bf16.cfg" "$dir" $tier || show_log tbf16

same() { # same A B: losses and step 20 checkpoint of runs A and B, bitwise
    [ "$(losses "$WORK/$1" | wc -l)" -eq 20 ] &&
        cmp -s <(losses "$WORK/$1") <(losses "$WORK/$2") &&
        cmp -s "$WORK/$1/step_000020/state.bin" "$WORK/$2/step_000020/state.bin"
}
expect "the jobs ran on the GPU" grep -q 'backend cuda' "$WORK/master.log"
expect "storage.grads (-np 2) = host memory (-np 3), bitwise" same grads plain
expect "grads, adam and master on disk (-np 3) = host memory, bitwise" same master plain
expect "the same in tiny pieces = host memory, bitwise" same tmaster plain
expect "bf16 slots in tiny pieces (-np 2) = host memory with bf16 slots, bitwise" same tbf16 plain16
took() { # took LOG: the compute rank's fetches, "RING COPY"
    sed -n 's/.*storage: compute: \([0-9]*\) pieces fetched from the weight ring, \([0-9]*\) from the bf16 copy.*/\1 \2/p' "$1" | head -n 1
}
read -r ring copy <<<"$(took "$WORK/tmaster.log")"
expect "the compute rank took pieces from the weight ring (${ring:-?}) and the copy (${copy:-?})" \
    test "${ring:-0}" -gt 0 -a "${copy:-0}" -gt 0
expect "storage.dir was empty after every run (not after:$left)" test -z "$left"
for name in grads master tmaster tbf16; do
    expect "$name left nothing in /dev/shm" no_leftovers "$name"
done
finish
