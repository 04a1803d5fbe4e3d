#!/usr/bin/env bash
# What each rank process holds in host memory, by kind, while a job trains: the measurement
# behind plan.h's PLAN_RANK_PROCESS_BYTES, PLAN_RANK_CUDA_LIBS_BYTES and
# PLAN_CUDA_HOST_CONTEXT_BYTES. Private = RssAnon + RssShmem (what the rank adds to the host;
# RssFile is the libraries' pages, shared through the page cache).
#   usage: bench/rank_rss.sh BUILD_DIR BACKEND [NP]   (configs/test-small.cfg, 10,000 steps)
set -u
BUILD=$1 BACKEND=$2 NP=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed -e "s/^backend = .*/backend = \"$BACKEND\";/" -e "s|\"\.\./data/|\"$here/data/|" \
    -e 's/^steps = .*/steps = 10000;/' "$here/configs/test-small.cfg" >"$work/rss.cfg"
"$BUILD/bin/mtrun" -np "$NP" "$work/rss.cfg" --out "$work/run" >"$work/log" 2>&1 &
pid=$!
for i in $(seq 1 600); do grep -q '^step *20/' "$work/log" && break; sleep 0.1; done
echo "rank_rss: $("$BUILD/bin/mtrun" --version), backend $BACKEND, -np $NP, $(date -u +%F)"
for p in $(pgrep -f "^[^ ]*/mt-rank $work/rss.cfg"); do
    rank=$(tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    awk -v r="$rank" '/^(VmRSS|RssAnon|RssFile|RssShmem):/ {v[$1] = $2}
        END {printf "rank %s: private %.1f MiB (anon %.1f, shmem %.1f), file %.1f, VmRSS %.1f\n",
             r, (v["RssAnon:"] + v["RssShmem:"]) / 1024, v["RssAnon:"] / 1024,
             v["RssShmem:"] / 1024, v["RssFile:"] / 1024, v["VmRSS:"] / 1024}' "/proc/$p/status"
done | sort
kill -INT "$pid"; sleep 0.2; kill -INT "$pid"
wait "$pid" 2>/dev/null
