#!/usr/bin/env bash
# Issue 18 on a host of several GPUs (nvidia-h200-x2): each bench config on one GPU, then
# data parallel over G GPUs (mtrun --gpus G, one compute rank and its optimizer ranks per GPU),
# with the same global batch; prints tokens/s of each (median of the steady steps, the leader
# counting every node's tokens), their ratio, whether the losses agree, where each compute rank
# runs (its GPU's NUMA node) and the host bytes.
# usage: bench/run_dp_gpu.sh BUILD_DIR OUT_DIR [G] [config names...]   (default: 2 1b 3b)
set -u
BUILD=$1
OUT=$2
gpus=${3:-2}
shift $(($# < 3 ? $# : 3))
names=${*:-1b 3b}
here=$(cd "$(dirname "$0")" && pwd)
np=${MT_BENCH_NP:-5} # ranks per GPU: 1 compute + 4 optimizer
steps=${MT_BENCH_STOP:-8}
source "$here/lib.sh"
median_tps() {
    python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
steps = [r for r in rows if "loss" in r]
t = [r["tokens_per_s"] for r in steps[2:] or steps]
print(f"{statistics.median(t):.1f}")
PY
}
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1/metrics.jsonl" | cut -d: -f3; }
run() { # run NAME CFG NP [mtrun args]: the job, its host peak, its summary
    local name=$1 cfg=$2 n=$3
    shift 3
    rm -rf "$OUT/run-$name"
    local base peak=0
    base=$(host_used_bytes)
    track_peak "$OUT/peak-$name" host_used_bytes &
    local sampler=$!
    "$BUILD/bin/mtrun" --force -np "$n" "$@" "$cfg" --out "$OUT/run-$name" --stop-at "$steps" \
        >"$OUT/$name.log" 2>&1
    echo "== $name (exit $?)"
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    peak=$(cat "$OUT/peak-$name")
    echo "host peak $(((peak - base) >> 30)) GiB; $(grep -h 'NUMA node' "$OUT/$name.log" | sort -u | tr '\n' ' ')"
    python3 "$here/summarize.py" "$OUT/run-$name"
}
for name in $names; do
    cfg=$here/configs/bench-$name.cfg
    run "$name-1gpu" "$cfg" "$np"
    run "$name-${gpus}gpu" "$cfg" $((np * gpus)) --gpus "$gpus"
    one=$(median_tps "$OUT/run-$name-1gpu") many=$(median_tps "$OUT/run-$name-${gpus}gpu")
    python3 -c "print(f'$name: 1 GPU $one tok/s, $gpus GPUs $many tok/s: {$many / $one:.3f}x (target 1.9x)')"
    python3 - "$OUT/run-$name-1gpu" "$OUT/run-$name-${gpus}gpu" <<'PY'
import json, sys
def losses(run):
    return [json.loads(l)["loss"] for l in open(f"{run}/metrics.jsonl") if '"loss"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and b else float("nan")
print(f"losses: {len(a)} and {len(b)} steps, worst relative difference {worst:.2e}")
PY
done
