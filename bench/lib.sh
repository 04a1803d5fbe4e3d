# Shell functions the GPU machine's bench scripts share: sourced, never run.

# The GPU machine's host memory, the figure its plans are made for: MemAvailable undercounts it
# at the start (the machine's RAM grows on demand, a balloon).
device_host_bytes=125000000000

# The host bytes in use now, MemTotal - MemAvailable (tmpfs pages count: they are not
# available), as a whole number: mawk's print writes one past 2^31 as 3e+10, which test's -gt
# refuses.
host_used_bytes() {
    awk '/^MemTotal:/ {t = $2} /^MemAvailable:/ {a = $2} END {printf "%.0f\n", (t - a) * 1024}' /proc/meminfo
}

# track_peak FILE COMMAND...: every second, COMMAND's output (a whole number), the highest so
# far written to FILE; run in the background, and killed when the job it watches ends.
track_peak() {
    local file=$1 peak=0 now
    shift
    while :; do
        now=$("$@")
        [ "${now:-0}" -gt "$peak" ] && peak=$now
        echo "$peak" >"$file"
        sleep 1
    done
}

# gpu_wait_idle [SECONDS]: waits (default up to 60 s) until no process computes on the GPU, and
# says who still does if one is left: a process that outlived its time limit (a peer killed
# with the script that started it) holds GPU memory for a while, and the next run's mtrun would
# refuse its buffers.
gpu_wait_idle() {
    local limit=${1:-60} left
    command -v nvidia-smi >/dev/null || return 0
    for ((i = 0; i < limit; i++)); do
        left=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader)
        [ -z "$left" ] && return 0
        sleep 1
    done
    echo "gpu_wait_idle: after ${limit} s the GPU still runs: $left"
}

# device_plan NAME [mtrun arguments...]: mtrun --plan -np 5 of bench/configs/NAME.cfg for the GPU
# machine's host, from the repository's root with the tree built in build/.
device_plan() {
    local name=$1
    shift
    MT_PLAN_MEM_LIMIT=$device_host_bytes build/bin/mtrun --plan -np 5 "bench/configs/$name.cfg" "$@"
}

# busy_at_break_even NAME [LIMIT_S] [STEPS]: bench/configs/NAME.cfg at the batch where its plan
# on this machine puts the GPU 95% busy (stream_break_even_tokens), rounded up to whole
# micro-batches, through bench/run_bench.sh (its run NAME-be under $OUT) within LIMIT_S seconds
# (default 200) and STEPS steps (--stop-at; default the config's); then the plan's balance and
# step at that batch: the GPU's busy share measured against the plan's.
busy_at_break_even() {
    local name=$1 limit=${2:-200} steps=${3:-} tokens micro n
    tokens=$(device_plan "$name" --json 2>/dev/null | python3 -c 'import json, math, sys
print(math.ceil(json.load(sys.stdin)["estimate"]["stream_break_even_tokens"]))' 2>/dev/null)
    micro=$(device_plan "$name" 2>/dev/null |
        sed -n 's/^batch: \([0-9]*\) sequences x \([0-9]*\) tokens.*/\1 \2/p' | awk '{print $1 * $2}')
    [ -n "$tokens" ] && [ -n "$micro" ] || { echo "busy $name: no plan"; return 1; }
    n=$(((tokens + micro - 1) / micro))
    echo "busy $name: the plan's 95% from $tokens tokens a step: $n micro-batches of $micro"
    MT_BENCH_ARGS="batch.micro_batches=$n" MT_BENCH_TAG=be MT_BENCH_STOP=$steps \
        timeout -s TERM "$limit" bench/run_bench.sh build "$OUT" "$name" 2>&1 | grep -vE "^ +L[0-9]"
    device_plan "$name" "batch.micro_batches=$n" 2>&1 | grep -E "balance|  step "
}
