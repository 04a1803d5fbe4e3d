#!/usr/bin/env bash
# Long-context runs at micro-batch 1 on the GPU machine (bench/configs/long-NAME.cfg), one
# summary block each: tokens/s; TFLOP/s by our formula (6 N + 12 layers dim seq per token) and
# counting causal attention (6 N + 6 layers dim seq), neither counting recompute; peak GPU
# memory (nvidia-smi, sampled every second) and host memory; and the plan's prediction of the
# GPU bytes with the ratio measured / predicted.
# Usage: bench/run_long.sh BUILD_DIR OUT_DIR NAME[:STEPS]...   (STEPS: --stop-at)
set -u
BUILD=$1
OUT=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
np=${MT_BENCH_NP:-5}
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -n 1; }
for spec in "$@"; do
    name=${spec%%:*} stop=()
    [ "$spec" != "$name" ] && stop=(--stop-at "${spec#*:}")
    cfg=$here/configs/long-$name.cfg
    log=$OUT/long-$name.log
    rm -rf "$OUT/run-long-$name"
    "$BUILD/bin/mtrun" --force --plan --json -np "$np" "$cfg" >"$OUT/plan-$name.json" 2>/dev/null
    "$BUILD/bin/mtrun" --force --plan -np "$np" "$cfg" >"$OUT/plan-$name.txt" 2>&1
    base=$(host_used_bytes) gbase=$(gpu_used)
    track_peak "$OUT/peak-long-$name" host_used_bytes &
    sampler=$!
    track_peak "$OUT/gpu-peak-long-$name" gpu_used &
    gpu_sampler=$!
    /usr/bin/time -v "$BUILD/bin/mtrun" --force -np "$np" "$cfg" --out "$OUT/run-long-$name" \
        "${stop[@]}" >"$log" 2>&1
    rc=$?
    kill "$sampler" "$gpu_sampler" 2>/dev/null; wait "$sampler" "$gpu_sampler" 2>/dev/null
    echo "== long-$name (exit $rc)"
    grep -E '^compute rank: (keeping every|offloading)|^step|Elapsed' "$log" | tail -n 4
    python3 - "$OUT/run-long-$name" "$OUT/plan-$name.json" "$OUT/peak-long-$name" \
        "$OUT/gpu-peak-long-$name" "$base" "$gbase" "$cfg" <<'PY'
import json, re, sys
run, plan_path, peak_path, gpu_peak_path, base, gbase, cfg_path = sys.argv[1:8]
text = open(cfg_path).read()
L, D, S = (int(re.search(r"\b%s\s*=\s*(\d+)" % k, text).group(1)) for k in ("layers", "dim", "seq_len"))
steps = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"loss"' in l]
plan = json.load(open(plan_path))
host_peak, gpu_peak = (float(open(path).read()) for path in (peak_path, gpu_peak_path))
N = plan["params"]
last = steps[-1]
tps = last["tokens_per_s"]
ours = tps * (6 * N + 12 * L * D * S) / 1e12
causal = tps * (6 * N + 6 * L * D * S) / 1e12
predicted = (plan["gpu"]["total"] + 512 * 2**20) / 2**30  # + the CUDA context the plan assumes
measured = (gpu_peak - float(gbase)) / 1024
print(f"steps {len(steps)} step_s {last['step_s']:.1f} tokens/s {tps:.0f} TFLOP/s ours {ours:.1f} "
      f"causal {causal:.1f} loss {last['loss']:.4f}")
print(f"GPU peak {measured:.2f} GiB (nvidia-smi), plan {predicted:.2f} GiB: measured/plan "
      f"{measured / predicted:.3f}; host peak {(host_peak - float(base)) / 2**30:.2f} GiB, "
      f"plan {plan['host'] / 2**30:.2f} GiB")
PY
done
