#!/usr/bin/env bash
# The NVMe tier (storage.dir, storage.grads, storage.adam): an optimizer rank's gradient slots and
# Adam's m and v in O_DIRECT files on a local disk, through the real launcher and processes, on a
# 10-group model (8 layers), fp32 gradient slots, jobs of 20 steps checkpointed every 10 (10 and
# 5 under MT_E2E_QUICK, e2e_lib.sh's quick_steps):
# - the losses and checkpoints are bitwise those of the same job in host memory, with
#   storage.grads (-np 2), storage.adam (-np 3), both (-np 5), and storage.adam with the gradient
#   ring (optimizer.clip = 0) against the ring in memory;
# - the same with tiny pieces (MT_TEST_PIECE_FLOATS: 1024 floats, so that the embedding, the
#   head and every layer cross piece boundaries; bf16 slots make pieces of gradients start
#   inside a disk block, as do those of 2 nodes with the moments split between them): bitwise
#   the unsplit runs', -np 2, 3 and 5, and a checkpoint moves between tiny pieces and whole ones;
# - a checkpoint moves between the tiers: storage.grads stopped half way and resumed with
#   storage.adam, host memory resumed with both, both (killed) resumed in host memory: bitwise;
# - the plan line names the disk it takes in storage.dir;
# - nothing is ever left in storage.dir (the files are unlinked once open): after every run,
#   kill -9 of an optimizer rank included, which leaves nothing in /dev/shm either;
#   (with tiny pieces, in the middle of the step's writes to the tier);
# - a full disk ends the job in one line naming the group and storage.dir, exit non-zero, and
#   the previous checkpoint stays the latest, intact (gradients, and moments with tiny pieces);
# - storage.master (the master beside m and v, the weights through the regions' weight rings
#   and a bf16 copy on disk): bitwise host memory's with adam (-np 2), grads and adam (-np 3, 5),
#   whole and tiny pieces, the gradient ring, bf16 slots, 2 nodes, a non-finite step and an
#   export; the compute rank took pieces from both the ring and the copy; resumes host memory
#   -> master on disk -> host memory; kill -9 mid-write (nothing left, bitwise resume) and a
#   full disk under it (one line, the checkpoint before it intact); kill -9 of the compute rank as it writes
#   gradients into the files (nothing left, bitwise resume); refused without storage.adam and
#   with the state split across nodes;
# - every job ends by itself once its last step is done;
# - storage.dir on tmpfs, storage.grads without storage.dir, and storage.grads with the gradient
#   ring are refused in one line naming the field.
# usage: e2e_storage.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"

small_config cpu "$WORK/base.cfg"
quick_steps "$WORK/base.cfg" || { echo "FAIL: steps of base.cfg"; exit 1; }
sed -i 's/layers   = 2;/layers   = 8;/' "$WORK/base.cfg"
# fp32 slots always: "auto" could take bf16 ones, and the tier's runs are compared bitwise
sed -i 's/^optimizer = {/optimizer = {\n  grad_dtype = "fp32";/' "$WORK/base.cfg"
sed 's/^optimizer = {/optimizer = {\n  clip = 0.0;/' "$WORK/base.cfg" >"$WORK/ring.cfg"
sed 's/grad_dtype = "fp32"/grad_dtype = "bf16"/' "$WORK/base.cfg" >"$WORK/bf16.cfg"
mkdir "$WORK/disk"
dir=storage.dir=$WORK/disk
grads=storage.grads=true
adam=storage.adam=true

# tier_job NAME NP CONFIG [mtrun args...]: run_job, with a bound: a job still there after 90 s
# (180 s under the sanitizers, MT_E2E_QUICK: a 2-node job's last checkpoint from the tier took
# longer on a loaded 2-core machine) is asked to stop and then aborted (mtrun's second signal),
# and named in $hung. Names the runs after which storage.dir was not empty in $left. Returns
# mtrun's exit code.
bound=$([ -n "${MT_E2E_QUICK:-}" ] && echo 180 || echo 90)
hung=""
left=""
disk_empty() { [ -z "$(ls -A "$WORK/disk")" ]; }
tier_job() {
    local name=$1 np=$2 cfg=$3 rc
    shift 3
    "$MTRUN" -np "$np" "$cfg" --out "$WORK/$name" "$@" >"$WORK/$name.log" 2>&1 &
    local pid=$!
    for i in $(seq 1 $((bound * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        echo "$name did not end within $bound s: aborting it"
        hung="$hung $name"
        kill -INT "$pid"
        sleep 1
        kill -INT "$pid"
    fi
    wait "$pid"
    rc=$?
    disk_empty || left="$left $name"
    return "$rc"
}

run_job plain 3 "$WORK/base.cfg" || show_log plain
tier_job grads 2 "$WORK/base.cfg" "$dir" "$grads" || show_log grads
tier_job adam 3 "$WORK/base.cfg" "$dir" "$adam" || show_log adam
tier_job both 5 "$WORK/base.cfg" "$dir" "$grads" "$adam" || show_log both
run_job ring 3 "$WORK/ring.cfg" || show_log ring
tier_job ringadam 3 "$WORK/ring.cfg" "$dir" "$adam" || show_log ringadam
# a checkpoint across the tiers: storage.grads -> storage.adam, host memory -> both
tier_job gstop 3 "$WORK/base.cfg" "$dir" "$grads" --stop-at "$HALF" || show_log gstop
tier_job gres 2 "$WORK/base.cfg" "$dir" "$adam" --resume "$WORK/gstop" || show_log gres
run_job pstop 3 "$WORK/base.cfg" --stop-at "$HALF" || show_log pstop
tier_job pres 3 "$WORK/base.cfg" "$dir" "$grads" "$adam" --resume "$WORK/pstop" || show_log pres
# tiny pieces: 1000 floats, rounded up to 1024 (a disk block of floats)
tiny() { MT_TEST_PIECE_FLOATS=1000 MT_STORAGE_INFO=1 tier_job "$@"; }
tiny tgrads 2 "$WORK/base.cfg" "$dir" "$grads" || show_log tgrads
tiny tadam 3 "$WORK/base.cfg" "$dir" "$adam" || show_log tadam
tiny tboth 5 "$WORK/base.cfg" "$dir" "$grads" "$adam" || show_log tboth
tiny tringadam 3 "$WORK/ring.cfg" "$dir" "$adam" || show_log tringadam
run_job pbf16 3 "$WORK/bf16.cfg" || show_log pbf16
tiny tbf16 3 "$WORK/bf16.cfg" "$dir" "$grads" "$adam" || show_log tbf16
tiny tstop 5 "$WORK/base.cfg" "$dir" "$grads" "$adam" --stop-at "$HALF" || show_log tstop
tier_job tres 3 "$WORK/base.cfg" "$dir" "$grads" "$adam" --resume "$WORK/tstop" || show_log tres
tiny tres2 2 "$WORK/base.cfg" "$dir" "$adam" --resume "$WORK/gstop" || show_log tres2
# 2 nodes, the moments split between them (a piece of gradients starts inside a block)
sed 's/^optimizer = {/optimizer = {\n  shard_across_nodes = true;/' "$WORK/base.cfg" >"$WORK/split.cfg"
MT_TEST_NODES=2 tiny tsplit 6 "$WORK/split.cfg" "$dir" "$grads" "$adam" || show_log tsplit
# storage.master: the fp32 master in the tier beside m and v, with and without the gradients
master=storage.master=true
tiny tmaster2 2 "$WORK/base.cfg" "$dir" "$adam" "$master" || show_log tmaster2
tiny tmaster3 3 "$WORK/base.cfg" "$dir" "$grads" "$adam" "$master" || show_log tmaster3
tiny tmaster5 5 "$WORK/base.cfg" "$dir" "$grads" "$adam" "$master" || show_log tmaster5
tier_job master3 3 "$WORK/base.cfg" "$dir" "$grads" "$adam" "$master" || show_log master3
tiny tringmaster 3 "$WORK/ring.cfg" "$dir" "$adam" "$master" || show_log tringmaster
tiny tbf16master 3 "$WORK/bf16.cfg" "$dir" "$grads" "$adam" "$master" || show_log tbf16master
# a step whose norm is not finite (nothing updated: the next forward reads the copy), and an
# export, which reads the master from the tier
MT_FAULT_NAN_GRAD_STEPS=3 run_job nanplain 3 "$WORK/base.cfg" export_dir="$WORK/exp-plain" ||
    show_log nanplain
MT_FAULT_NAN_GRAD_STEPS=3 tiny nanmaster 3 "$WORK/base.cfg" "$dir" "$adam" "$master" \
    export_dir="$WORK/exp-master" || show_log nanmaster
MT_TEST_NODES=2 tiny tnodesmaster 6 "$WORK/base.cfg" "$dir" "$grads" "$adam" "$master" ||
    show_log tnodesmaster
# across the tiers: host memory -> the master on disk -> host memory
tiny mres 5 "$WORK/base.cfg" "$dir" "$grads" "$adam" "$master" --resume "$WORK/pstop" \
    || show_log mres
tiny mstop 3 "$WORK/base.cfg" "$dir" "$adam" "$master" --stop-at "$HALF" || show_log mstop
run_job mres2 2 "$WORK/base.cfg" --resume "$WORK/mstop" || show_log mres2

last=$(step_dir "$STEPS")
half=$(step_dir "$HALF")
expect "$STEPS steps ran" test "$(losses "$WORK/plain" | wc -l)" -eq "$STEPS"
same() { cmp -s <(losses "$WORK/$1") <(losses "$WORK/$2") &&
    cmp -s "$WORK/$1/$last/state.bin" "$WORK/$2/$last/state.bin"; }
# resumed STOP RES: STOP's losses then RES's are host memory's, and so is RES's last checkpoint
resumed() { cmp -s <(losses "$WORK/$1"; losses "$WORK/$2") <(losses "$WORK/plain") &&
    cmp -s "$WORK/$2/$last/state.bin" "$WORK/plain/$last/state.bin"; }
expect "storage.grads (-np 2) = host memory (-np 3): losses and checkpoint, bitwise" same grads plain
expect "storage.adam (-np 3) = host memory, bitwise" same adam plain
expect "storage.grads and storage.adam (-np 5) = host memory, bitwise" same both plain
expect "storage.adam with the gradient ring = the ring in host memory, bitwise" same ringadam ring
expect "storage.grads stopped at $HALF (-np 3), resumed with storage.adam (-np 2) = host memory" \
    cmp -s <(losses "$WORK/gstop"; losses "$WORK/gres") <(losses "$WORK/plain")
expect "its step $HALF checkpoint is host memory's" \
    cmp -s "$WORK/gstop/$half/state.bin" "$WORK/plain/$half/state.bin"
expect "its step $STEPS checkpoint (moments taken from the tier) is host memory's" \
    cmp -s "$WORK/gres/$last/state.bin" "$WORK/plain/$last/state.bin"
expect "host memory stopped at $HALF, resumed with both tiers = host memory, bitwise, and its last checkpoint" \
    resumed pstop pres
expect "tiny pieces: optimizer 0 of -np 5 updates more pieces than the 10 groups" \
    grep -q '^storage: optimizer 0: \([2-9][0-9]\|[0-9]\{3,\}\) pieces of at most 1024 floats' \
    "$WORK/tboth.log"
expect "tiny pieces, storage.grads (-np 2) = host memory, bitwise" same tgrads plain
expect "tiny pieces, storage.adam (-np 3) = host memory, bitwise" same tadam plain
expect "tiny pieces, both (-np 5) = host memory, bitwise" same tboth plain
expect "tiny pieces, storage.adam with the gradient ring = the ring in host memory" \
    same tringadam ring
expect "tiny pieces, both with bf16 slots (-np 3) = bf16 slots in host memory, bitwise" \
    same tbf16 pbf16
expect "tiny pieces stopped at $HALF (-np 5), resumed with whole pieces (-np 3) = host memory, and its last checkpoint" \
    resumed tstop tres
expect "storage.grads stopped at $HALF, resumed with tiny pieces of storage.adam = host memory, and its last checkpoint" \
    resumed gstop tres2
expect "tiny pieces, 2 nodes with the moments split between them = host memory, bitwise" \
    same tsplit plain
expect "storage.master, tiny pieces, adam (-np 2) = host memory, bitwise" same tmaster2 plain
expect "storage.master, tiny pieces, grads and adam (-np 3) = host memory, bitwise" \
    same tmaster3 plain
expect "storage.master, tiny pieces, grads and adam (-np 5) = host memory, bitwise" \
    same tmaster5 plain
expect "storage.master, whole pieces (-np 3) = host memory, bitwise" same master3 plain
expect "storage.master with the gradient ring = the ring in host memory, bitwise" \
    same tringmaster ring
expect "storage.master with bf16 slots = bf16 slots in host memory, bitwise" \
    same tbf16master pbf16
expect "storage.master on 2 nodes = host memory, bitwise" same tnodesmaster plain
expect "storage.master with a non-finite step = host memory's, bitwise" same nanmaster nanplain
expect "storage.master: its export (from the tier) = host memory's, file for file" \
    diff -r "$WORK/exp-plain" "$WORK/exp-master"
expect "storage.master: the compute rank took pieces from the weight ring and from the copy" \
    grep -q '^storage: compute: [1-9][0-9]* pieces fetched from the weight ring, [1-9][0-9]* from the bf16 copy' \
    "$WORK/tmaster3.log"
expect "host memory stopped at $HALF, resumed with the master on disk (-np 5) = host memory, and its last checkpoint" \
    resumed pstop mres
expect "the master on disk stopped at $HALF, resumed in host memory (-np 2) = host memory, and its last checkpoint" \
    resumed mstop mres2
expect "the tier run's plan line names the disk it takes in storage.dir" \
    grep -q '^mtrun: plan: .*; disk [0-9.]* [KMG]*i*B in storage.dir at ' "$WORK/both.log"
expect "the host memory run's does not" sh -c "! grep -q 'in storage.dir' '$WORK/plain.log'"
# The metrics: each step's bytes to and from storage.dir, every rank's. With everything on disk
# (fp32 slots) a step writes 18 B/param (gradients 4, master, m and v 12, the bf16 copy 2) and
# reads 16 of them back, and the copy of the layers the backward fetches again (the last ones
# are still there from the forward); steps 3 to the last are checked, in steady state, the
# reads with room for the read-ahead of one step to fall in the next.
steady=$((STEPS - 2))
params=$(grep -o '"params":[0-9]*' "$WORK/master3/metrics.jsonl" | head -n 1 | cut -d: -f2)
disk_sums() { # disk_sums RUN: the written and read GB of steps 3 to the last, summed
    awk -F'"disk_write_GB":' '/"step":/ && !/"step":[12],/ { split($2, w, /[,}]/); wr += w[1] }
        { if (match($0, /"disk_read_GB":[0-9.]*/)) { v = substr($0, RSTART + 15, RLENGTH - 15);
          if ($0 ~ /"step":/ && $0 !~ /"step":[12],/) rd += v } } END { print wr, rd }' \
        "$1/metrics.jsonl"
}
read -r wrote readb <<<"$(disk_sums "$WORK/master3")"
expect "the metrics say each step wrote 18 B/param to storage.dir (steps 3-$STEPS: $wrote GB of $params params)" \
    awk -v w="$wrote" -v n="$params" -v s="$steady" \
    'BEGIN { e = 18 * s * n / 1e9; exit !(w > 0.9 * e && w < 1.3 * e) }'
expect "and read 14-24 B/param ($readb GB)" \
    awk -v r="$readb" -v n="$params" -v s="$steady" \
    'BEGIN { exit !(r > 14 * s * n / 1e9 && r < 24 * s * n / 1e9) }'
expect "the log shows the tier's rates a step" grep -q '^ *| storage.dir read [0-9.]* GB/s | written [0-9.]* GB/s' "$WORK/master3.log"
expect "a run in host memory has no disk metrics" sh -c "! grep -q disk_ '$WORK/plain/metrics.jsonl'"

# The kills and full disks come two and three steps after the checkpoint of step HALF.
kill_step=$((HALF + 2))
full_step=$((HALF + 3))
# was_killed WHAT NAME RC: job NAME, killed at step kill_step, ended non-zero and left nothing
# behind, its checkpoint of step HALF the latest; after_kill WHAT RES: its resume RES ran the
# steps after HALF as host memory did, to the last checkpoint
was_killed() {
    expect "kill -9 of $1 ends the job non-zero (rc $3)" test "$3" -ne 0
    expect "it left nothing in storage.dir" disk_empty
    expect "nor in /dev/shm" no_leftovers "$2"
    expect "its latest checkpoint is step $HALF" grep -qx "$half" "$WORK/$2/LATEST"
}
after_kill() {
    expect "resumed $1: steps $((HALF + 1))..$STEPS = host memory's, bitwise" \
        cmp -s <(losses "$WORK/$2") <(losses "$WORK/plain" | tail -n $((STEPS - HALF)))
    expect "its step $STEPS checkpoint is host memory's" \
        cmp -s "$WORK/$2/$last/state.bin" "$WORK/plain/$last/state.bin"
}
# half_intact RUN: RUN's checkpoint of step HALF is host memory's, bitwise
half_intact() { cmp -s "$WORK/$1/$half/state.bin" "$WORK/plain/$half/state.bin"; }
half_kept() { half_is_latest "$1" && half_intact "$1"; }

# kill -9 of optimizer 0 at kill_step with both tiers and tiny pieces, while moments it has just
# updated are being written (MT_TEST_STORAGE_KILL_AT_STEP): the files go with it.
MT_TEST_STORAGE_KILL_AT_STEP=$kill_step tiny killed 3 "$WORK/base.cfg" "$dir" "$grads" "$adam"
was_killed "an optimizer rank" killed $?
tier_job killres 2 "$WORK/base.cfg" --resume "$WORK/killed" || show_log killres
after_kill "in host memory" killres

# A disk that fills at full_step (optimizer 0's writes fail with ENOSPC).
MT_TEST_STORAGE_FULL_AT_STEP=$full_step tier_job full 3 "$WORK/base.cfg" "$dir" "$grads"
rc=$?
expect "a full disk ends the job non-zero (rc $rc)" test "$rc" -ne 0
expect "one line says which group, where, and that the disk is full" \
    test "$(grep -c "storage.dir: writing group [0-9]*'s gradients to $WORK/disk failed: No space left on device (the disk is full)" "$WORK/full.log")" -eq 1
expect "nothing after step $HALF was saved: step $HALF is the latest" half_is_latest full
expect "and it is intact: host memory's step $HALF checkpoint, bitwise" half_intact full
expect "the full disk's job left nothing in storage.dir" disk_empty
expect "nor in /dev/shm" no_leftovers full
# The same with the moments on disk in tiny pieces: their write back fails.
MT_TEST_STORAGE_FULL_AT_STEP=$full_step tiny afull 3 "$WORK/base.cfg" "$dir" "$adam"
rc=$?
expect "a full disk under the moments ends the job non-zero (rc $rc)" test "$rc" -ne 0
expect "one line says which group's moments, where, and that the disk is full" \
    test "$(grep -c "storage.dir: writing group [0-9]*'s Adam moments to $WORK/disk failed: No space left on device (the disk is full)" "$WORK/afull.log")" -eq 1
expect "step $HALF is the latest, and it is host memory's, bitwise" half_kept afull

# kill -9 with the master on disk, mid-write, and a full disk under it
MT_TEST_STORAGE_KILL_AT_STEP=$kill_step tiny mkilled 3 "$WORK/base.cfg" "$dir" "$adam" "$master"
was_killed "an optimizer rank with the master on disk" mkilled $?
tiny mkillres 3 "$WORK/base.cfg" "$dir" "$adam" "$master" --resume "$WORK/mkilled" ||
    show_log mkillres
after_kill "with the master on disk" mkillres
# kill -9 of the compute rank right after it wrote a piece of kill_step's gradients into an
# optimizer rank's file (MT_TEST_STORAGE_KILL_COMPUTE_AT_STEP), every byte of state on disk
MT_TEST_STORAGE_KILL_COMPUTE_AT_STEP=$kill_step tiny ckilled 3 "$WORK/base.cfg" "$dir" "$grads" "$adam" \
    "$master"
was_killed "the compute rank mid-write" ckilled $?
tiny ckillres 3 "$WORK/base.cfg" "$dir" "$grads" "$adam" "$master" --resume "$WORK/ckilled" ||
    show_log ckillres
after_kill "with everything on disk" ckillres
MT_TEST_STORAGE_FULL_AT_STEP=$full_step tiny mfull 3 "$WORK/base.cfg" "$dir" "$adam" "$master"
rc=$?
expect "a full disk under the master ends the job non-zero (rc $rc)" test "$rc" -ne 0
expect "one line says which group's master and moments, where, and that the disk is full" \
    test "$(grep -c "storage.dir: writing group [0-9]*'s \(master and Adam moments\|bf16 copy of the weights\) to $WORK/disk failed: No space left on device (the disk is full)" "$WORK/mfull.log")" -eq 1
expect "step $HALF is the latest, and it is host memory's, bitwise" half_kept mfull

expect "storage.dir was empty after every run (not after:$left)" test -z "$left"
expect "every job ended by itself once its steps were done (hung:$hung)" test -z "$hung"

# Refusals: one line, naming the field.
refused() { # refused NAME PATTERN OVERRIDES...: mtrun --plan refuses in one line matching PATTERN
    local name=$1 pattern=$2
    shift 2
    "$MTRUN" --plan -np 3 "$WORK/base.cfg" "$@" >"$WORK/$name.log" 2>&1 && return 1
    [ "$(wc -l <"$WORK/$name.log")" -eq 1 ] && grep -q "$pattern" "$WORK/$name.log"
}
expect "storage.dir on tmpfs is refused" \
    refused tmpfs 'storage.dir: /dev/shm is on tmpfs.*the tier needs a local disk' \
    storage.dir=/dev/shm "$adam"
expect "storage.grads without storage.dir is refused, naming both" \
    refused nodir 'storage.grads: needs storage.dir, a folder on a local disk' "$grads"
expect "storage.grads with the gradient ring (optimizer.clip = 0) is refused" \
    refused ringgrads 'storage.grads: the gradient ring (optimizer.clip = 0)' \
    "$dir" "$grads" optimizer.clip=0
expect "storage.master without storage.adam is refused" \
    refused nomaster 'storage.master: needs storage.adam = true' "$dir" "$master"
expect "storage.master with the state split across nodes is refused" \
    refused splitmaster 'storage.master: does not work with optimizer.shard_across_nodes' \
    "$dir" "$adam" "$master" optimizer.shard_across_nodes=true
finish
