#!/usr/bin/env bash
# Issue 17's sanity figure: the CPU backend on one node against N virtual nodes (MT_TEST_NODES)
# on this host, tiny.cfg with backend "cpu", the same global batch. Prints the median tokens/s
# of steps 5..STEPS of each run and whether their losses are bitwise the same. Not a target:
# virtual nodes share this host's cores.
# usage: bench/run_dp_cpu.sh [NODES] [STEPS]   (from the repository root, after make)
set -euo pipefail
nodes=${1:-2}
steps=${2:-20}
out=$(mktemp -d /tmp/mt-dp-bench.XXXXXX)
sed -e 's|"\.\./data/|"'"$PWD"'/data/|' -e 's/^backend = .*/backend = "cpu";/' configs/tiny.cfg \
    >"$out/tiny.cfg"
build/bin/mtrun -np 3 "$out/tiny.cfg" --out "$out/one" --stop-at "$steps" >"$out/one.log" 2>&1
MT_TEST_NODES=$nodes build/bin/mtrun -np $((3 * nodes)) "$out/tiny.cfg" --out "$out/many" \
    --stop-at "$steps" >"$out/many.log" 2>&1
# the same with Adam's moments split across the nodes (optimizer.shard_across_nodes)
sed 's/^optimizer = {/optimizer = {\n  shard_across_nodes = true;/' "$out/tiny.cfg" >"$out/split.cfg"
MT_TEST_NODES=$nodes build/bin/mtrun -np $((3 * nodes)) "$out/split.cfg" --out "$out/split" \
    --stop-at "$steps" >"$out/split.log" 2>&1
for run in one many split; do
    python3 - "$out/$run/metrics.jsonl" "$run" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] >= 5]
print(f"{sys.argv[2]}: {len(t)} steps, median {statistics.median(t):.0f} tok/s "
      f"(min {min(t):.0f}, max {max(t):.0f})")
PY
done
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1/metrics.jsonl"; }
for run in many split; do
    if cmp -s <(losses "$out/one") <(losses "$out/$run"); then echo "$run losses: bitwise one's"
    else echo "$run losses: DIFFER from one's"; fi
done
rm -rf "$out"
