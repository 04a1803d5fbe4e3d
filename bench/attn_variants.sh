#!/usr/bin/env bash
# Attention kernel variants compared in one call on the GPU (issue 16). Each VARIANT is a bench
# build and optional settings, BIN[:VAR=VALUE,VAR=VALUE...]: BIN `bench` is attention_bench,
# another word attention_bench_BIN (bench/kernels.cmake: prof), a path (with a /) that
# executable, e.g. one built from an earlier commit's tree; the settings are the
# kernels' MT_ATTN_* variables (MT_ATTN_BWD_ORDER=asc, MT_ATTN_CHAIN_RESIDENT=16,
# MT_ATTN_FWD_GROUP=0, ...). Variants alternate per shape, so that the machine's drift between
# calls falls on all of them alike. Each line ends with the GPU's mean SM clock (MHz) and power
# (W) while the kernels ran (nvidia-smi every 100 ms; the samples over 60% of the run's highest
# power, so that the host's set-up stays out): a variant slower at the same clock lost the time
# in its instructions, not to the card. ATTN_PATHS picks the kernel path (default wgmma; mma
# is the path of GPUs other than Hopper), ATTN_ARGS adds arguments (e.g. "--docs 1024").
#   usage: bench/attn_variants.sh BUILD T_LIST HD_LIST HEADS VARIANT...
#   e.g.   bench/attn_variants.sh build 131072 100,128 8 bench bench:MT_ATTN_CHAIN_RESIDENT=33
set -eu
build=$1 Ts=$2 hds=$3 heads=$4
shift 4
samples=$(mktemp)
trap 'rm -f "$samples"' EXIT
for T in ${Ts//,/ }; do
    for hd in ${hds//,/ }; do
        for v in "$@"; do
            bin=${v%%:*} settings=()
            [ "$v" != "$bin" ] && IFS=, read -r -a settings <<<"${v#*:}"
            exe=$build/bin/attention_bench
            [ "$bin" != bench ] && exe=${exe}_$bin
            [[ $bin == */* ]] && exe=$bin
            nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 \
                >"$samples" 2>/dev/null &
            sampler=$!
            line=$(env "${settings[@]}" "$exe" --T "$T" --hd "$hd" --H "$heads" --paths "${ATTN_PATHS:-wgmma}" ${ATTN_ARGS:-} |
                grep "^ATTN" | sed "s/  */ /g")
            kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null || true
            card=$(awk -F', *' '{c[NR] = $1; p[NR] = $2; if ($2 > pmax) pmax = $2}
                END {for (i in p) if (p[i] > 0.6 * pmax) {cs += c[i]; ps += p[i]; n++}
                     if (n) printf "%.0f MHz %.0f W (%d busy samples)", cs / n, ps / n, n}' "$samples")
            echo "VARIANT $v ${line#ATTN } | $card"
        done
    done
done
