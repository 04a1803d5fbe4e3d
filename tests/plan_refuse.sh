#!/bin/sh
# A job that does not fit is refused before anything starts: exit code 2, nothing on stdout,
# one line on stderr that names what it needs and what is available, and the change that fits;
# the change it names really fits. --plan prints the plan and exits 2 the same way. A job that
# fits prints its plan in one line before it starts; both say when storage.dir is set but unused.
# usage: plan_refuse.sh MTRUN REPO_ROOT
set -u
MTRUN=$1
ROOT=$2
command -v python3 >/dev/null || { echo "SKIPPED: python3 is missing (it reads the JSON)"; exit 77; }
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT" || exit 1
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# fp32 gradient slots: with "auto" a job that does not fit with them is planned with bf16 ones
# (checked at the end).
CFG=$TMP/test-small.cfg
sed "s|\"\.\./data/|\"$ROOT/data/|; s/^optimizer = {/optimizer = {\n  grad_dtype = \"fp32\";/" \
    configs/test-small.cfg >"$CFG"
group() { echo "$1" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta'; }

need=$(MT_PLAN_MEM_LIMIT=10000000000000 "$MTRUN" --plan --json -np 3 $CFG |
       python3 -c 'import json, sys; print(json.load(sys.stdin)["host"])') || { echo "FAIL no plan"; exit 1; }

# refused NAME LIMIT MTRUN-ARGS...: mtrun must exit 2 with one line on stderr and nothing on
# stdout; the line is left in $TMP/NAME.err.
refused() {
    name=$1 limit=$2
    shift 2
    MT_PLAN_MEM_LIMIT=$limit "$MTRUN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    rc=$?
    [ "$rc" -eq 2 ] || fail "$name: exit code $rc, expected 2"
    [ -s "$TMP/$name.out" ] && fail "$name: printed on stdout: $(head -c 200 "$TMP/$name.out")"
    [ "$(wc -l <"$TMP/$name.err")" -eq 1 ] || fail "$name: $(wc -l <"$TMP/$name.err") lines on stderr, expected 1"
    echo "     $name: $(cat "$TMP/$name.err")"
}

# 1 MB: less than the model state, so no batch setting helps.
refused tiny-limit 1000000 -np 3 $CFG --out "$TMP/run1"
msg=$(cat "$TMP/tiny-limit.err")
for want in "^mtrun: .*test-small.cfg with -np 3 does not fit in host memory" \
    "needs [0-9.]* [KM]iB ($(group "$need") bytes" "optimizer state [0-9.]* [KM]iB" \
    "gradient slots [0-9.]* KiB" "compute rank [0-9.]* [KM]iB" \
    "976.6 KiB (1,000,000 bytes) is available (MT_PLAN_MEM_LIMIT)" \
    "no batch setting helps" "smaller model or a host with more memory"; do
    printf '%s\n' "$msg" | grep -q -- "$want" || fail "tiny-limit: no '$want' in the message"
done
[ -e "$TMP/run1" ] && fail "tiny-limit: the refused job created its run folder"
echo "ok   refused under MT_PLAN_MEM_LIMIT=1000000, with the numbers"

# Every rank is a process before it is a shard: MPI, UCX and the libraries' private pages count
# (plan.h's measured PLAN_RANK_PROCESS_BYTES). 8 ranks of this tiny model need more for their
# processes than for the model, and a limit between the two refuses them, naming the processes.
plan8=$(MT_PLAN_MEM_LIMIT=10000000000000 "$MTRUN" --plan --json -np 8 $CFG |
        python3 -c 'import json, sys; j = json.load(sys.stdin); print(j["host"], j["total"]["process"])')
need8=${plan8% *} proc8=${plan8#* }
[ "$proc8" -gt $((need8 / 2)) ] || fail "8 ranks: processes $proc8 of $need8 bytes, expected most"
refused processes $((need8 - proc8 / 2)) -np 8 $CFG --out "$TMP/run-np8"
grep -q "8 rank processes [0-9.]* MiB" "$TMP/processes.err" ||
    fail "processes: the rank processes are not named: $(cat "$TMP/processes.err")"
echo "ok   8 ranks refused for their processes' memory ($proc8 of $need8 bytes)"

# One byte short: fewer micro-batches fit, and the message says so.
refused one-short $((need - 1)) -np 3 $CFG --out "$TMP/run2"
msg=$(cat "$TMP/one-short.err")
printf '%s\n' "$msg" | grep -q "it fits with batch.micro_batches = 1" ||
    fail "one-short: no 'it fits with batch.micro_batches = 1' in the message"
printf '%s\n' "$msg" | grep -q "($(group $((need - 1))) bytes) is available" ||
    fail "one-short: the available bytes are not named"
# The suggestion must really fit: the same limit with micro_batches = 1 passes.
sed "s/micro_batches = 2;/micro_batches = 1;/" $CFG >"$TMP/fewer.cfg"
MT_PLAN_MEM_LIMIT=$((need - 1)) "$MTRUN" --plan -np 3 "$TMP/fewer.cfg" >/dev/null 2>"$TMP/fewer.err" ||
    fail "the suggested micro_batches = 1 does not fit either: $(cat "$TMP/fewer.err")"
echo "ok   one byte short: suggests batch.micro_batches = 1, which fits"

# --plan: the plan on stdout, the verdict on stderr, exit 2.
MT_PLAN_MEM_LIMIT=1000000 "$MTRUN" --plan -np 3 $CFG >"$TMP/plan.out" 2>"$TMP/plan.err"
rc=$?
[ "$rc" -eq 2 ] || fail "--plan of a job that does not fit: exit code $rc, expected 2"
grep -q "DOES NOT FIT" "$TMP/plan.out" || fail "--plan does not mark the failed check"
grep -q "does not fit in host memory" "$TMP/plan.err" || fail "--plan: no verdict on stderr"
echo "ok   --plan exits 2 and shows the failed check"

# /dev/shm too small: refused with the size to grow it to.
MT_PLAN_SHM_LIMIT=100000 "$MTRUN" -np 3 $CFG >"$TMP/shm.out" 2>"$TMP/shm.err"
rc=$?
[ "$rc" -eq 2 ] || fail "small /dev/shm: exit code $rc, expected 2"
grep -q "does not fit in /dev/shm: the shared regions need .* (100,000 bytes) is free.*mount -o remount,size=" \
    "$TMP/shm.err" || fail "small /dev/shm: message was '$(cat "$TMP/shm.err")'"
echo "ok   small /dev/shm refused: $(cat "$TMP/shm.err")"

# --force starts it anyway; a job that fits prints its plan in one line first.
MT_PLAN_MEM_LIMIT=1000000 "$MTRUN" --force -np 2 $CFG --out "$TMP/forced" --stop-at 1 >"$TMP/forced.log" 2>&1 ||
    fail "--force: the job failed: $(tail -n 5 "$TMP/forced.log")"
"$MTRUN" -np 2 $CFG --out "$TMP/fits" --stop-at 1 >"$TMP/fits.log" 2>&1 ||
    fail "a job that fits failed: $(tail -n 5 "$TMP/fits.log")"
head -n 1 "$TMP/fits.log" | grep -q '^mtrun: plan: 0.10M params, host .* B/param (optimizer state' ||
    fail "a job does not start with its plan line: $(head -n 1 "$TMP/fits.log")"
head -n 1 "$TMP/fits.log" | grep -q 'estimated .*/step' || fail "the plan line has no step estimate"
echo "ok   --force runs it; a job that fits starts with: $(head -n 1 "$TMP/fits.log")"

# storage.dir without storage.grads or storage.adam holds nothing: --plan and the job's plan
# line say so.
"$MTRUN" --plan -np 3 $CFG storage.dir="$TMP" >"$TMP/unused.out" 2>&1 ||
    fail "--plan with an unused storage.dir: $(tail -n 3 "$TMP/unused.out")"
grep -q "^NVMe tier: off; storage.dir $TMP is set but unused" "$TMP/unused.out" ||
    fail "--plan does not say storage.dir is unused"
"$MTRUN" -np 2 $CFG storage.dir="$TMP" --out "$TMP/unused" --stop-at 1 >"$TMP/unused.log" 2>&1 ||
    fail "a job with an unused storage.dir failed: $(tail -n 3 "$TMP/unused.log")"
head -n 1 "$TMP/unused.log" | grep -q '^mtrun: plan: .*; storage.dir unused (no storage.grads or storage.adam)' ||
    fail "the plan line does not say storage.dir is unused: $(head -n 1 "$TMP/unused.log")"
grep -q 'storage.dir unused\|set but unused' "$TMP/fits.log" "$TMP/plan.out" &&
    fail "a job without storage.dir is said to leave it unused"
echo "ok   storage.dir without storage.grads or storage.adam: the plan says it is unused"

# GPU memory: mtrun plans with --gpu-mem (or nvidia-smi) and refuses what does not fit; the
# compute rank checks again before it allocates (MT_DEVICE_FREE_BYTES stands in for its free
# memory, also on the cpu backend) and ends the job with the same kind of line, exit 2, and
# nothing left in /dev/shm.
MT_PLAN_MEM_LIMIT=10000000000000 MT_PLAN_SHM_LIMIT=10000000000000 \
    "$MTRUN" --plan -np 5 --gpu-mem 8G configs/7b.cfg >"$TMP/gpu.out" 2>"$TMP/gpu.err"
rc=$?
[ "$rc" -eq 2 ] || fail "7b with --gpu-mem 8G: exit code $rc, expected 2"
grep -q "7b.cfg: the compute rank's buffers need .* of GPU memory (activations .*), 7.50 GiB is free (--gpu-mem, less 512.0 MiB for the CUDA context); fewer batch.micro_batches" \
    "$TMP/gpu.err" || fail "7b with --gpu-mem 8G: message was '$(cat "$TMP/gpu.err")'"
grep -q "GPU memory   needs .* 8.00 GiB free (--gpu-mem): DOES NOT FIT" "$TMP/gpu.out" ||
    fail "7b with --gpu-mem 8G: --plan does not mark the GPU check"
echo "ok   --gpu-mem 8G: 7b refused by the plan: $(cat "$TMP/gpu.err")"
# The activations' choice leaves room for the pieces the leaving gradients are rounded through:
# 175B with its gradients and moments on disk fits an 80 GB GPU. And a layer too large for two
# streaming buffers takes one (layer_buffers "auto"): DeepSeek-V3's 11 B-parameter MoE layers and
# Kimi K2's 17 B ones fit what an H200 leaves free (139 GiB), their bf16 gradient slots filled a
# piece at a time rather than from a whole layer's bf16 copy.
# (The disk's free space may fail its own check here: only the GPU's is read.)
gpu_plan() {
    MT_PLAN_MEM_LIMIT=10000000000000 MT_PLAN_SHM_LIMIT=10000000000000 "$MTRUN" --plan -np 5 \
        --gpu-mem "$1" "$2" backend='"cuda"' optimizer.clip=1.0 storage.dir="$TMP" \
        storage.grads=true storage.adam=true >"$TMP/$3.out" 2>&1
}
gpu_plan 80G configs/175b.cfg 175b
grep -q "GPU memory   needs .* 80.00 GiB free (--gpu-mem): ok" "$TMP/175b.out" ||
    fail "175b on 80G: $(grep 'GPU memory  ' "$TMP/175b.out")"
for big in deepseek-v3 kimi-k2; do
    gpu_plan 139G configs/$big.cfg $big
    grep -q "embedding + head + 1 streaming layer," "$TMP/$big.out" &&
        grep -q "GPU memory   needs .* 139.0 GiB free (--gpu-mem): ok" "$TMP/$big.out" ||
        fail "$big on 139G: $(grep -E 'streaming|GPU memory  ' "$TMP/$big.out")"
done
echo "ok   175B fits 80 GB with bf16 gradient pieces counted; DeepSeek-V3 and Kimi K2 fit 139 GiB with one layer buffer"
MT_DEVICE_FREE_BYTES=1000000 "$MTRUN" -np 3 $CFG --out "$TMP/small-device" >"$TMP/dev.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "compute rank with 1 MB of device memory: exit code $rc, expected 2"
grep -q "^mt-rank: .*test-small.cfg: the compute rank's buffers need .* of device memory (activations .*), 976.6 KiB is free (MT_DEVICE_FREE_BYTES)" \
    "$TMP/dev.log" || fail "compute rank refusal: $(grep mt-rank "$TMP/dev.log")"
job=$(grep -o 'job [0-9a-f]\{32\}' "$TMP/dev.log" | cut -d' ' -f2)
# only this job's names: other jobs may be running beside this test
[ -n "$job" ] && ! ls -d /dev/shm/mtc-"$job"* >/dev/null 2>&1 || fail "the refused job left /dev/shm entries"
echo "ok   the compute rank refuses buffers that do not fit its device: $(grep '^mt-rank' "$TMP/dev.log")"

# grad_dtype = "auto": a job one byte short with fp32 slots starts with bf16 ones, and says so;
# mt-rank is told which (--grad-dtype).
sed 's/grad_dtype = "fp32"/grad_dtype = "auto"/' $CFG >"$TMP/auto.cfg"
MT_PLAN_MEM_LIMIT=$((need - 1)) "$MTRUN" -np 3 "$TMP/auto.cfg" --out "$TMP/auto" --stop-at 1 \
    >"$TMP/auto.log" 2>&1 || fail "auto, one byte short of fp32 slots: $(tail -n 3 "$TMP/auto.log")"
head -n 1 "$TMP/auto.log" | grep -q 'bf16 gradient slots' ||
    fail "auto did not take bf16 slots: $(head -n 1 "$TMP/auto.log")"
MT_PLAN_MEM_LIMIT=$((need - 1)) "$MTRUN" --dry-run -np 3 "$TMP/auto.cfg" | grep -q -- '--grad-dtype bf16' ||
    fail "mt-rank is not told --grad-dtype bf16"
"$MTRUN" --dry-run -np 3 "$TMP/auto.cfg" | grep -q -- '--grad-dtype fp32' ||
    fail "with room, auto does not keep fp32 slots"
echo "ok   grad_dtype auto: fp32 slots when they fit, bf16 when only those fit"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
