#!/usr/bin/env bash
# The fused attention backward's dq chain settings, compared in one call on the GPU (issue 16):
# each VARIANT is ORDER:RESIDENT, MT_ATTN_BWD_ORDER (rev: a CTA's query tiles from the last, the
# default; asc: from its first) and MT_ATTN_CHAIN_RESIDENT (the CTAs of a chain wanted on the GPU
# at once; 0: every kv head in one run). Variants alternate per shape, so that the machine's
# drift between calls falls on all of them alike.
#   usage: bench/attn_bwd_variants.sh BUILD T_LIST HD_LIST HEADS VARIANT...
set -eu
build=$1 Ts=$2 hds=$3 heads=$4
shift 4
for T in ${Ts//,/ }; do
    for hd in ${hds//,/ }; do
        for v in "$@"; do
            MT_ATTN_BWD_ORDER=${v%%:*} MT_ATTN_CHAIN_RESIDENT=${v#*:} \
                "$build/bin/attention_bench" --T "$T" --hd "$hd" --H "$heads" --paths wgmma |
                grep "^ATTN" | sed "s/^ATTN/VARIANT $v/; s/  */ /g"
        done
    done
done
