#!/bin/sh
# mtrun --plan: every byte count of the plan against an expectation computed here, in awk, from
# the config values and the layout rules (shm/layout.c, runtime/optimizer/optimizer.c,
# runtime/engine/engine.c, transfer_cuda.c), not by calling the code. The backends' own buffers
# (their working sets: runtime/plan/buffers.h's lists) are the plan's figures here: the ctest
# plan_matches_allocation measures them against what the backends allocate.
#   configs/test-small.cfg -np 3: cpu backend, host bytes of every rank by kind
#   configs/7b.cfg -np 5:         cuda backend, host bytes by kind and GPU bytes by kind, with
#                                 fp32 gradient slots and again with bf16 ones
#   the NVMe tier:                storage.dir's bytes (per rank, gradients, moments, windows);
#                                 120B, 175B and 405B fit their hosts with it
#   the step estimate:            within 15% of the steps measured on the H200 (100B, 120B, 7B,
#                                 the MoE benches, every byte on disk at 1.1B and 3.4B); the
#                                 disk's break-even
#   configs/qwen3-30b-a3b.cfg:    Mixture of Experts (the host side of moe_cuda.c's routing
#                                 statistics), head_dim != dim / heads and qk_norm; the
#                                 active parameters and the break-even of the GPU's wait
# usage: plan_numbers.sh MTRUN REPO_ROOT
set -u
MTRUN=$1
ROOT=$2
command -v python3 >/dev/null || { echo "SKIPPED: python3 is missing (it reads the JSON)"; exit 77; }
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT" || exit 1
failures=0
# A build with the CUDA backend says so in --version; its ranks load cuBLASLt.
CUDA_BUILD=0
"$MTRUN" --version | grep -q 'backends: cpu, cuda' && CUDA_BUILD=1
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# Flattens the --plan --json object into "path value" lines: ranks.1.master 217088.
flatten() {
    python3 -c '
import json, sys
def walk(p, v):
    if isinstance(v, dict):
        for k, x in v.items(): walk(p + [k], x)
    elif isinstance(v, list):
        for i, x in enumerate(v): walk(p + [str(i)], x)
    else:
        print(".".join(p), json.dumps(v))
walk([], json.load(sys.stdin))'
}

# The plan's own value at PATH, from the flattened JSON in $GOT_FILE.
got() { awk -v k="$1" '$1 == k { print $2 }' "$GOT_FILE"; }

# expected CFG NP CUDA: "path value" lines for the same paths, from the config's numbers.
# The config is read with a plain "key = value;" scan: the two configs set every model and
# batch key explicitly or use the schema defaults written below.
expected() {
    awk -v NP="$2" -v CUDA="$3" -v GB="${4:-4}" -v DGSET="${5:-}" -v CUDABUILD="$CUDA_BUILD" \
        -v CPUBACK="$(got compute_host.backend)" -v GPUBACK="$(got gpu.backend)" \
        -v CPUATT="$(got compute_host.attention)" -v GPUATT="$(got gpu.attention)" \
        -v GPUHOST="$(got gpu.backend_host)" '
    function up(x, a) { return int((x + a - 1) / a) * a }
    function min(a, b) { return a < b ? a : b }
    function out(k, v) { printf "%s %.0f\n", k, v }
    /^[ \t]*[a-z_]+[ \t]*=/ {
        line = $0; sub(/#.*/, "", line); gsub(/[ \t;]/, "", line)
        split(line, kv, "="); gsub(/"/, "", kv[2]); cfg[kv[1]] = kv[2]
    }
    END {
        D = cfg["dim"]; L = cfg["layers"]; H = cfg["heads"]; F = cfg["ffn_dim"]
        KVH = ("kv_heads" in cfg) ? cfg["kv_heads"] : H
        V = ("vocab" in cfg) ? cfg["vocab"] : 256
        tied = ("tied_embeddings" in cfg) ? (cfg["tied_embeddings"] == "true") : 1
        B = cfg["micro_batch"]; M = cfg["micro_batches"]; T = cfg["seq_len"]
        hd = ("head_dim" in cfg && cfg["head_dim"] > 0) ? cfg["head_dim"] : D / H
        Q = H * hd; KV = KVH * hd; n = B * T
        # Mixture of Experts (every layer, as in the configs checked): E experts of MF, top TK
        E = ("experts" in cfg) ? cfg["experts"] : 0; TK = ("top_k" in cfg) ? cfg["top_k"] : 2
        MF = ("moe_ffn_dim" in cfg) ? cfg["moe_ffn_dim"] : F; LM = E > 0 ? L : 0
        QKN = ("qk_norm" in cfg) ? cfg["qk_norm"] : "none"
        # parameter groups: embedding, L decoder layers, head (final norm [+ lm_head]); an MoE
        # layer has the router [E, D] and E x 3 expert matrices instead of the dense MLP;
        # qk_norm adds a q and a k weight (head: head_dim each; all: the whole projections)
        mlp = E > 0 ? E * D + 3 * E * MF * D : 3 * F * D
        layer = D + Q * D + 2 * KV * D + D * Q + D + mlp
        layer += QKN == "head" ? 2 * hd : QKN == "all" ? Q + KV : 0
        G = L + 2; numel[0] = V * D; numel[G - 1] = D + (tied ? 0 : V * D)
        for (g = 1; g <= L; g++) numel[g] = layer
        params = 0; for (g = 0; g < G; g++) params += numel[g]
        out("params", params); out("groups", G)
        # control block: magic, size, 4 int32, then 2 x 1024 int64 sequence numbers; one page-rounded header
        header = up(8 + 8 + 16 + 2 * 1024 * 8, 4096)
        K = NP - 1
        # every rank process: 16 MiB (MPI, UCX, OpenMP), 96 MiB more in a CUDA build (cuBLASLt;
        # a job on the GPU runs one, whatever build plans it),
        # and the compute rank of a GPU job 256 MiB more (its CUDA context): plan.h, measured
        proc = 16 * 1048576 + (CUDABUILD || CUDA ? 96 * 1048576 : 0); proc0 = proc + (CUDA ? 268435456 : 0)
        # optimizer.device_groups = auto: none on the cpu; on cuda the embedding and the first
        # ceil(L / 8) layers, whose state lives on the GPU (no slots, no private m and v)
        # (the GPU plan is there for a cpu job too, for reference: the unlimited auto choice)
        nl = int((L + 7) / 8); DGGPU = 1 + nl
        if (DGSET != "") { DGGPU = DGSET; nl = DGGPU > 1 ? DGGPU - 1 : 0 } # what the GPU has room for
        DG = CUDA ? DGGPU : 0
        # gradient slots: one per group, or with optimizer.clip = 0 (grad_slots "auto") a ring
        # of min(4, groups with slots) entries, each the largest slice
        CLIP = ("clip" in cfg) ? cfg["clip"] : 1
        RING = (CLIP == 0) ? 4 : 0
        out("grad_ring", RING)
        # the NVMe tier (storage.grads, storage.adam): the regions keep no gradient slots (the
        # compute rank writes them to the files a piece at a time, from one piece of host memory
        # on the CPU, two pinned on CUDA: each at most the largest slice, else 16M elements
        # rounded to 2048), no m and v, and windows of 4 pieces: a piece is at most
        # 16M floats (64 MiB) of the slice of a group, each buffer one page-rounded piece of every
        # array (m and v; the gradients a page more, a piece may start inside one), the largest
        # of those it holds in a step; each group
        # area in the files is page-rounded (O_DIRECT)
        # storage.master: the master beside m and v in the file, plus a bf16 copy of the weights
        # (each group page-rounded); the window buffers hold a piece of master too, and one
        # bf16 piece and one fp32 (the bounce) more; the region holds 4 entries of a piece (at most the largest slice,
        # rounded to 16 floats) instead of the master, and the compute rank a page-rounded
        # bf16 piece (the same size) it reads the copy into
        TG = cfg["grads"] == "true"; TA = cfg["adam"] == "true"; TM = cfg["master"] == "true"
        dgrads = 0; dadam = 0; wins = 0; mostall = 0
        piece = 4 * 16777216 # the piece device-updated state moves through (64 MiB)
        for (k = 0; k < K; k++) {
            off = header; mv = 0; moving = DG > 0 ? piece : 0
            for (g = 0; g < G; g++) {
                lo = min(up(int(numel[g] * k / K), 64), numel[g])
                hi = min(up(int(numel[g] * (k + 1) / K), 64), numel[g])
                len[g] = hi - lo
                if (g < DG) continue
                if (!TM) off = up(off + 4 * len[g], 64)        # the fp32 master, in the region
                mv += up((len[g] ? len[g] : 1) * 4, 4096)      # m and v: each page-rounded
                tg[g] = up(GB * len[g], 4096); ta[g] = 2 * up(4 * len[g], 4096)
                if (TM) ta[g] += up(4 * len[g], 4096) + up(2 * len[g], 4096)
            }
            kg = 0; ka = 0; most = 0
            for (g = DG; g < G; g++) { kg += tg[g]; ka += ta[g]; if (len[g] > most) most = len[g] }
            if (most > mostall) mostall = most
            pc = min(most ? most : 1, 16777216)
            if (TM) off += 4 * 4 * up(min(most, 16777216), 16) # the weight ring
            # window buffer b holds the pieces at positions b, b + 4, ... of the order of the update
            # (with the ring: the head, the layers down, the embedding; else by group), counted
            # from 0 each step: its pages are those of the largest piece it holds
            for (b = 0; b < 4; b++) wb[b] = 0
            p = 0
            for (i = 0; i < G; i++) {
                g = RING ? G - 1 - i : i
                if (g < DG) continue
                for (at = 0; at < len[g]; at += 16777216) {
                    x = min(len[g] - at, 16777216); if (x > wb[p % 4]) wb[p % 4] = x; p++
                }
            }
            win = TM ? up(2 * pc, 4096) + up(4 * pc, 4096) : 0 # the piece of the copy, the bounce
            for (b = 0; b < 4; b++)
                win += (TG ? up(GB * wb[b], 4096) + 4096 : 0) + (TA ? 2 * up(4 * wb[b], 4096) : 0) \
                       + (TM ? up(4 * wb[b], 4096) : 0)
            wins += win
            kdisk = (TG ? kg : 0) + (TA ? ka : 0); dgrads += TG ? kg : 0; dadam += TA ? ka : 0
            if (k == 0) out("disk.per_rank", kdisk)
            if (TA) mv = 0
            grad0 = up(off, 4096); each = grad0; big = 0
            for (g = DG; g < G; g++) { each = up(each + GB * len[g], 64); if (GB * len[g] > big) big = GB * len[g] }
            ring = grad0 + min(4, G - DG) * up(big, 4096) # entries page-rounded (O_DIRECT)
            total = TG ? grad0 : up(RING ? ring : each, 4096)
            other += up(RING || TG ? each : ring, 4096) - grad0
            r = "ranks." (k + 1) "."
            out(r "master", grad0 - header); out(r "adam_m", mv); out(r "adam_v", mv)
            out(r "grads", total - grad0); out(r "control", header); out(r "moving", moving)
            out(r "compute", 0); out(r "process", proc); out(r "total", 2 * mv + total + moving + win + proc)
            state += grad0 - header + 2 * mv + moving + win; shared += total - grad0 + header
            regions += total
        }
        # the compute rank: weight/gradient buffers for embedding + head + the 2-layer ring
        res = numel[0] + numel[G - 1] + 2 * layer
        # boundary_every k: boundaries 0, k, 2k, ... and the k - 1 of one segment
        BE = ("boundary_every" in cfg && cfg["boundary_every"] > 0) ? cfg["boundary_every"] : 1
        if (BE > L) BE = L
        acts = 4 * (int(L / BE) + BE) * M * n * D; dres = 4 * M * n * D
        # The buffers the backends allocate for themselves (compute_host.backend, gpu.backend)
        # are lists of the plan (runtime/plan/buffers.h), which the ctest
        # plan_matches_allocation measures against what the backends allocate: taken from the
        # plan here, not derived again. The working set adds, on the CPU, the token ids of the
        # engine (inputs and targets, every micro-batch)
        cpu_work = CPUBACK + 4 * 2 * M * n
        out("compute_host.weights", 4 * res); out("compute_host.grads", 4 * res)
        out("compute_host.activations", acts); out("compute_host.residual", dres)
        out("compute_host.working", cpu_work)
        # keep_attention: explicit N (at most L x M); auto keeps none where layers are kept whole
        # (recompute "auto", unchunked) or the memory is not known (the CPU), else as many as
        # fit: all of them in these checks (1 TB of GPU, or layers kept whole); the bytes of a
        # slot are those of its list (the plan figure, measured by plan_matches_allocation)
        KA = ("keep_attention" in cfg) ? cfg["keep_attention"] : -1
        RC = ("recompute" in cfg) ? cfg["recompute"] : "auto"
        att_cpu = KA >= 0 ? min(KA, L * M) : 0; cpu_att = CPUATT
        out("compute_host.att_slots", att_cpu)
        out("compute_host.total", 8 * res + acts + dres + cpu_work + cpu_att)
        # the same on the GPU: bf16 weights; the buffers of the backend (its working sets and
        # the cuBLASLt workspace); the reduce scratch and squared norms of the transfer; the
        # 64 MiB staging area of the fp32 master; with bf16 slots, the two bf16 pieces the
        # leaving gradients are rounded through: the largest leaving group, at most 16M
        r = ("seq_chunk" in cfg && cfg["seq_chunk"] > 0) ? cfg["seq_chunk"] : 16384; if (r > n) r = n
        out_piece = 0; for (g = DGGPU; g < G; g++) if (numel[g] > out_piece) out_piece = numel[g]
        gpu_work = GPUBACK + 8 * 1024 + 4 * 8 + 64 * 1048576 + (GB == 2 ? 4 * min(out_piece, 16777216) : 0)
        # the GPU updates the embedding and the first ceil(L / 8) layers itself (fp32 master,
        # m, v); those layers have buffers of their own
        own = numel[0] + nl * layer; resg = res + nl * layer
        out("gpu.weights", 2 * resg); out("gpu.grads", 4 * resg); out("gpu.activations", acts)
        out("gpu.residual", dres); out("gpu.working", gpu_work)
        out("gpu.optimizer", 12 * own); out("gpu.device_groups", DGGPU)
        keeps = RC != "always" && r == n
        att = KA >= 0 ? min(KA, L * M) : keeps ? 0 : L * M
        gpu_att = GPUATT
        out("gpu.att_slots", att)
        out("gpu.total", 6 * resg + acts + dres + gpu_work + 12 * own + gpu_att)
        out("compute_host.optimizer", 0); out("compute_host.device_groups", 0)
        # on CUDA: the token ids of the engine, the host piece that the state of the
        # GPU-updated groups moves through, and the host memory of the backend (its pinned
        # losses, the MoE routing statistics: gpu.backend_host, a list of the plan)
        compute = CUDA ? 8 * M * n + (DG > 0 ? piece : 0) + GPUHOST : 8 * res + acts + dres + cpu_work + cpu_att
        gpc = min(mostall ? mostall : 1, up(16777216, 2048))
        tier0 = (TG ? (CUDA ? 2 : 1) * up(GB * gpc, 4096) : 0) \
                + (TM ? up(2 * (mostall < 16777216 ? up(mostall, 16) : 16777216), 4096) : 0)
        wins += tier0; state += tier0
        out("other_slots_grads", other)
        out("disk.grads", dgrads); out("disk.adam", dadam); out("disk.total", dgrads + dadam)
        out("disk.windows", wins)
        out("ranks.0.compute", compute); out("ranks.0.process", proc0)
        out("ranks.0.total", compute + tier0 + proc0); out("ranks.0.master", 0)
        out("optimizer_state", state); out("shared", shared); out("regions", regions)
        out("host", state + shared + compute + proc0 + K * proc)
    }' "$1"
}

# check NAME CFG NP CUDA [GRAD_BYTES [DEVICE_GROUPS | plan]]: the JSON plan holds exactly the expected
# value at every expected path. MEM_LIMIT and GPU_MEM, when set, are the host and GPU given.
check() {
    name=$1 cfg=$2 np=$3 cuda=$4 gb=${5:-4} dg=${6:-}
    # Pretend the host is big enough, so that --plan exits 0 wherever this runs.
    MT_PLAN_MEM_LIMIT=${MEM_LIMIT:-10000000000000} MT_PLAN_SHM_LIMIT=10000000000000 \
        MT_PLAN_DISK_LIMIT=10000000000000 "$MTRUN" --plan --json -np "$np" ${GPU_MEM:-} "$cfg" >"$TMP/$name.json" 2>"$TMP/$name.err" ||
        { fail "$name: --plan --json exited with $?: $(cat "$TMP/$name.err")"; return; }
    flatten <"$TMP/$name.json" >"$TMP/$name.got" || { fail "$name: the JSON does not parse"; return; }
    GOT_FILE="$TMP/$name.got"
    [ "$dg" = plan ] && dg=$(got gpu.device_groups) # DG: the GPU's device groups as given
    expected "$cfg" "$np" "$cuda" "$gb" "$dg" >"$TMP/$name.want"
    bad=$(awk 'NR == FNR { got[$1] = $2; next }
               !($1 in got) { print "  " $1 ": missing, expected " $2; next }
               got[$1] != $2 { print "  " $1 ": " got[$1] ", expected " $2 }' \
              "$TMP/$name.got" "$TMP/$name.want")
    if [ -n "$bad" ]; then
        fail "$name: plan numbers differ from the hand computation:"
        echo "$bad"
    else
        echo "ok   $name: $(wc -l <"$TMP/$name.want") numbers match, host $(grep '^host ' "$TMP/$name.got" | cut -d' ' -f2) bytes"
    fi
    grep -q '^backend "'"$( [ "$cuda" = 1 ] && echo cuda || echo cpu)"'"$' "$TMP/$name.got" ||
        fail "$name: wrong backend in $(grep '^backend' "$TMP/$name.got")"
}

check test-small configs/test-small.cfg 3 0
GPU_MEM=--gpu-mem=1T # room: the auto choices are the unlimited ones computed below
check 7b configs/7b.cfg 5 1
sed 's/^optimizer = {/optimizer = { grad_dtype = "bf16";/' configs/7b.cfg >"$TMP/7b-bf16.cfg"
check 7b-bf16 "$TMP/7b-bf16.cfg" 5 1 2
# Long context: the 7B at 131,072 tokens, micro-batch 1, every 4th boundary kept (8 + 4 slots)
# and chunks of 4096 tokens: attention's buffers for the whole sequence, the rest for a chunk.
sed -e 's/micro_batch *= *[0-9]*;/micro_batch = 1;/' -e 's/micro_batches *= *[0-9]*;/micro_batches = 1;/' \
    -e 's/seq_len *= *[0-9]*;/seq_len = 131072;\n  seq_chunk = 4096;/' configs/7b.cfg >"$TMP/7b-long.cfg"
echo 'boundary_every = 4;' >>"$TMP/7b-long.cfg"
grep -q 'seq_chunk = 4096' "$TMP/7b-long.cfg" || fail "7b-long: the config edit did not take"
check 7b-long "$TMP/7b-long.cfg" 5 1
# Head dim 100 (the 3.4B's 3200 / 32): the attention scratch holds padded copies of q, k, v and
# dout.
sed -e 's/dim *= *4096;/dim = 3200;/' -e 's/ffn_dim *= *11008;/ffn_dim = 8640;/' configs/7b.cfg \
    >"$TMP/3b-hd100.cfg"
grep -q 'ffn_dim = 8640' "$TMP/3b-hd100.cfg" || fail "3b-hd100: the config edit did not take"
check 3b-hd100 "$TMP/3b-hd100.cfg" 5 1
# Mixture of Experts: Qwen3-30B-A3B's shape (128 experts of 768, top 8; head dim 128 with dim 2048,
# so q is twice dim wide; qk_norm per head) on the GPU, and OLMoE-1B-7B's (qk_norm over the whole
# projections) on the CPU reference. The streaming buffers hold the largest layer, the working
# set adds the MoE buffers, and the step estimate's compute counts the active parameters: all
# but E - top_k experts of each layer, 3 x moe_ffn_dim x dim each. With 1T free, device_groups
# "auto" puts more layers on the GPU, where the optimizer ranks bound the step: the bytes are
# checked for the plan's own count (device_groups_auto checks the choice).
check qwen3-30b-a3b configs/qwen3-30b-a3b.cfg 5 1 4 plan
sed 's/^backend *= *"cuda";/backend = "cpu";/' configs/olmoe-1b-7b.cfg >"$TMP/olmoe-cpu.cfg"
grep -q '^backend = "cpu";' "$TMP/olmoe-cpu.cfg" || fail "olmoe-cpu: the config edit did not take"
check olmoe-cpu "$TMP/olmoe-cpu.cfg" 3 0
awk '/^params /{p=$2} /^estimate.active_params /{a=$2} /^estimate.stream_break_even_tokens /{b=$2}
     END { want = p - 48 * (128 - 8) * 3 * 768 * 2048
           if (a != want) { print "active parameters " a ", expected " want; exit 1 }
           if (!(b > 65536)) { print "break-even " b " tokens a step, expected more than 65,536"; exit 1 } }' \
    "$TMP/qwen3-30b-a3b.got" >"$TMP/moe.err" && echo "ok   qwen3-30b-a3b: active parameters by hand, the GPU waits below the break-even" ||
    fail "qwen3-30b-a3b: $(cat "$TMP/moe.err")"
# The 100B and 120B configs on a 1.5 TB host and a 141 GB GPU: 100B fits with bf16 slots (auto
# takes them: fp32 ones do not fit), and the GPU holds the embedding's state and layer 0's (a
# layer of 1.1B parameters, 18 bytes each, fits the quarter of free memory the first may take). 120B
# trains with optimizer.clip = 0: its gradient slots are a ring of 4 groups' and it fits, at most
# 12.3 bytes a parameter in all (grad_dtype "auto" keeps fp32 slots, which fit). With clip 1.0
# it does not fit (--plan exits 2), and the refusal offers clip = 0; its numbers are checked all
# the same.
GPU_MEM=--gpu-mem=141G MEM_LIMIT=1500000000000 check 100b configs/100b.cfg 5 1 2 2
GPU_MEM=--gpu-mem=141G MEM_LIMIT=1500000000000 check 120b configs/120b.cfg 5 1 4 1
perparam=$(awk '/^host /{h=$2} /^params /{p=$2} END{printf "%.3f", h / p}' "$TMP/120b.got")
awk -v b="$perparam" 'BEGIN { exit !(b <= 12.3) }' ||
    fail "120b with the ring: $perparam bytes/param, more than 12.3"
echo "ok   120b with the ring: $perparam bytes/param"
sed 's/^  clip *= *0.0;.*/  clip = 1.0;/' configs/120b.cfg >"$TMP/120b-clip1.cfg"
grep -q '^  clip = 1.0;' "$TMP/120b-clip1.cfg" || fail "120b-clip1: the config edit did not take"
MT_PLAN_MEM_LIMIT=1500000000000 MT_PLAN_SHM_LIMIT=10000000000000 \
    "$MTRUN" --plan -np 5 --gpu-mem 141G "$TMP/120b-clip1.cfg" >"$TMP/120b.txt" 2>"$TMP/120b.err"
[ $? -eq 2 ] || fail "120b with clip 1.0 on 1.5 TB: --plan did not exit 2"
grep -q "does not fit in host memory" "$TMP/120b.err" || fail "120b-clip1: $(cat "$TMP/120b.err")"
grep -q "it fits with optimizer.clip = 0" "$TMP/120b.err" ||
    fail "120b with clip 1.0 on 1.5 TB: the refusal does not offer optimizer.clip = 0: $(cat "$TMP/120b.err")"
GPU_MEM=--gpu-mem=141G MEM_LIMIT=1800000000000 check 120b-clip1 "$TMP/120b-clip1.cfg" 5 1 2 1

# The NVMe tier: the disk's bytes (per rank and in all), the regions without slots and the windows by
# hand; storage.dir is this check's own folder. test-small with grads and adam on disk, bf16
# slots; then 120B with clip 1.0 and storage.grads (fp32 slots: grad_dtype "auto" keeps them
# where they fit) fits 1.5 TB at most 12.3 bytes a parameter.
mkdir -p "$TMP/disk"
tier_cfg() { # CFG GRADS ADAM OUT: CFG with a storage section on lines of their own
    { cat "$1"; printf 'storage = {\n  dir = "%s";\n  grads = %s;\n  adam = %s;\n};\n' \
        "$TMP/disk" "$2" "$3"; } | sed "s|\"\.\./data/|\"$ROOT/data/|" >"$4"
}
tier_cfg configs/test-small.cfg true true "$TMP/small-tier.cfg"
sed -i 's/^optimizer = {/optimizer = { grad_dtype = "bf16";/' "$TMP/small-tier.cfg"
grep -q 'grad_dtype = "bf16"' "$TMP/small-tier.cfg" || fail "small-tier: the config edit did not take"
GPU_MEM=--disk-bw=2G check small-tier "$TMP/small-tier.cfg" 3 0 2
# the same with storage.master
sed 's/^  adam = true;/  adam = true;\n  master = true;/' "$TMP/small-tier.cfg" >"$TMP/small-master.cfg"
grep -q '^  master = true;' "$TMP/small-master.cfg" || fail "small-master: the config edit did not take"
GPU_MEM=--disk-bw=2G check small-master "$TMP/small-master.cfg" 3 0 2
# and with the gradient ring (clip 0, the slots in memory): the windows' pass in the ring's order
sed 's/^  grads = true;/  grads = false;/; s/^  lr = 2e-3;/  lr = 2e-3;\n  clip = 0.0;/' \
    "$TMP/small-master.cfg" >"$TMP/small-ring.cfg"
grep -q '^  clip = 0.0;' "$TMP/small-ring.cfg" || fail "small-ring: the config edit did not take"
GPU_MEM=--disk-bw=2G check small-ring "$TMP/small-ring.cfg" 3 0 2
tier_cfg "$TMP/120b-clip1.cfg" true false "$TMP/120b-tier.cfg"
GPU_MEM="--gpu-mem=141G --disk-bw=2G" MEM_LIMIT=1500000000000 check 120b-tier "$TMP/120b-tier.cfg" 5 1 4 1
perparam=$(awk '/^host /{h=$2} /^params /{p=$2} END{printf "%.3f", h / p}' "$TMP/120b-tier.got")
awk -v b="$perparam" 'BEGIN { exit !(b <= 12.3) }' ||
    fail "120b with clip 1.0 and storage.grads: $perparam bytes/param, more than 12.3"
grep -q '^fits true' "$TMP/120b-tier.got" && echo "ok   120b with clip 1.0 and storage.grads: $perparam bytes/param of host memory" ||
    fail "120b with clip 1.0 and storage.grads does not fit 1.5 TB"

# 175B fits a 1 TB host and 405B a 2 TB one with Adam's moments and the gradient slots on disk
# (the configs' storage.dir is a placeholder: this check's folder stands in, its free space
# pretended). --plan exits 0 only when everything fits.
for big in 175b:1000000000000 405b:2000000000000; do
    name=${big%%:*} mem=${big#*:}
    MT_PLAN_MEM_LIMIT=$mem MT_PLAN_SHM_LIMIT=$mem MT_PLAN_DISK_LIMIT=10000000000000 \
        "$MTRUN" --plan -np 5 --gpu-mem 141G --disk-bw 10G "configs/$name.cfg" \
        storage.dir="$TMP/disk" >"$TMP/$name.txt" 2>&1 &&
        echo "ok   $name with storage.grads and storage.adam fits $mem bytes: $(grep -o '[0-9.]* bytes/param' "$TMP/$name.txt" | head -n 1)" ||
        fail "$name on $mem bytes of host: $(grep -E '^mtrun:|does not fit' "$TMP/$name.txt" | head -n 2)"
done

# With storage.master too (all of the state on disk): 175B and 120B (clip 1.0) fit 128 GB of
# host, 405B 256 GB.
for big in 175b:128000000000: 405b:256000000000: 120b:128000000000:optimizer.clip=1.0; do
    name=${big%%:*} rest=${big#*:}
    mem=${rest%%:*} extra=${rest#*:}
    MT_PLAN_MEM_LIMIT=$mem MT_PLAN_SHM_LIMIT=$mem MT_PLAN_DISK_LIMIT=10000000000000 \
        "$MTRUN" --plan -np 5 --gpu-mem 141G --disk-bw 10G "configs/$name.cfg" \
        storage.dir="$TMP/disk" storage.grads=true storage.adam=true storage.master=true \
        $extra >"$TMP/$name-master.txt" 2>&1 &&
        echo "ok   $name with storage.master fits $mem bytes: $(grep -o '[0-9.]* bytes/param' "$TMP/$name-master.txt" | head -n 1)" ||
        fail "$name with storage.master on $mem bytes of host: $(grep -E '^mtrun:|does not fit' "$TMP/$name-master.txt" | head -n 2)"
    # the tier's host bytes (the windows and the compute rank's pieces, and the regions' weight
    # rings, which hold nothing else with storage.master) stay within 16 GiB at any size
    tier=$(MT_PLAN_MEM_LIMIT=$mem MT_PLAN_SHM_LIMIT=$mem MT_PLAN_DISK_LIMIT=10000000000000 \
        "$MTRUN" --plan --json -np 5 --gpu-mem 141G --disk-bw 10G "configs/$name.cfg" \
        storage.dir="$TMP/disk" storage.grads=true storage.adam=true storage.master=true $extra |
        python3 -c 'import json, sys; p = json.load(sys.stdin); print(p["disk"]["windows"] + p["regions"])')
    [ -n "$tier" ] && [ "$tier" -le $((16 << 30)) ] &&
        echo "ok   $name with storage.master: the tier holds $tier bytes of host memory, at most 16 GiB" ||
        fail "$name with storage.master: the tier holds ${tier:-?} bytes of host memory, over 16 GiB"
done

# Short of host memory, the refusal offers the tier's smallest change that fits: 175B (its
# config has the gradient slots and the moments on disk) on 128 GB needs the master there too.
MT_PLAN_MEM_LIMIT=128000000000 MT_PLAN_SHM_LIMIT=128000000000 MT_PLAN_DISK_LIMIT=10000000000000 \
    "$MTRUN" --plan -np 5 --gpu-mem 141G --disk-bw 10G configs/175b.cfg storage.dir="$TMP/disk" \
    >"$TMP/175b-refused.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "does not fit in host memory.*; it fits with storage.master = true and storage.dir on a local disk: the gradient slots, Adam's m and v and the fp32 master then live in files there" "$TMP/175b-refused.txt" &&
    echo "ok   175b on 128 GB without storage.master: refused (exit 2), offering storage.master" ||
    fail "175b on 128 GB without storage.master (rc $rc): $(head -c 600 "$TMP/175b-refused.txt")"

# The step estimate against steps measured on the H200 (bench/RESULTS.md, 2026-12-04: the
# measured steps beside the estimate): the 100B and 120B full-width slices extrapolated to the
# full models (43.48 s at fa07b2a, 35.7 s at eb0ea84), planned with the slices' settings, and the
# 7B bench (5.41-5.50 s, 77e6bee and dfa8f08), each within 15%. The MoE benches and slices
# (2026-12-05, d9e635e, the ring), planned for the 139 GiB the compute rank found free there,
# with the device groups they ran with (the lead: "auto" adds layers since).
step_near() { # NAME MEASURED_S CFG [OVERRIDES...]: the estimate within 15% of the measured step
    name=$1 want=$2 cfg=$3
    shift 3
    MT_PLAN_MEM_LIMIT=1500000000000 MT_PLAN_SHM_LIMIT=100000000000000 \
        "$MTRUN" --plan --json -np 5 --gpu-mem "${gpu_mem:-141G}" "$cfg" "$@" >"$TMP/est-$name.json" 2>&1 ||
        { fail "$name: --plan --json exited with $?: $(head -n 2 "$TMP/est-$name.json")"; return; }
    got=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["estimate"]["step_s"])' \
        <"$TMP/est-$name.json") || { fail "$name: no estimate.step_s"; return; }
    awk -v g="$got" -v w="$want" 'BEGIN { d = g / w - 1; exit !(d < 0.15 && d > -0.15) }' &&
        echo "ok   $name: estimate $got s a step, measured $want s" ||
        fail "$name: estimate $got s a step, measured $want s: more than 15% apart"
}
slices="recompute=always keep_attention=0 optimizer.device_groups=1"
step_near 100b-step 43.48 configs/100b.cfg $slices
step_near 120b-step 35.7 configs/120b.cfg $slices
step_near 7b-bench-step 5.407 bench/configs/bench-7b.cfg
step_near 7b-bench-step 5.495 bench/configs/bench-7b.cfg
gpu_mem=139G
step_near qwen3moe-6l-step 1.656 bench/configs/moe-qwen3-6l.cfg optimizer.device_groups=2
step_near qwen3moe-6l-114k-step 2.006 bench/configs/moe-qwen3-6l-be.cfg optimizer.device_groups=2
step_near mixtral-2l-step 1.492 bench/configs/moe-mixtral-2l.cfg optimizer.device_groups=1 # as it ran
step_near olmoe-step 2.333 bench/configs/moe-olmoe.cfg optimizer.device_groups=3
# the same Mixtral layers with layer 0 updated on the GPU (device_groups auto; 77daa3a), at 65,536
# tokens and at the break-even, 81,920
step_near mixtral-2l-auto-step 0.992 bench/configs/moe-mixtral-2l.cfg optimizer.device_groups=2
step_near mixtral-2l-be-step 1.118 bench/configs/moe-mixtral-2l-be.cfg optimizer.device_groups=2
step_near qwen3moe-slice-4l-step 1.352 bench/configs/slice-qwen3-30b-a3b-4l.cfg
step_near mixtral-slice-4l-step 2.230 bench/configs/slice-mixtral-8x7b-4l.cfg
# every byte of state on disk (2026-12-05, ab7a6e8), at the rate each job's own plan probed:
# above the disk's break-even (the step is compute's) and far below it (the step is the disk's)
mkdir -p "$TMP/tier"
export MT_PLAN_DISK_LIMIT=10000000000000
step_near tier-master-1b-32k-step 32.155 bench/configs/tier-master-1b-32k.cfg \
    storage.dir="$TMP/tier" --disk-bw 2090000000
step_near tier-master-3b-step 40.400 bench/configs/tier-master-3b.cfg storage.dir="$TMP/tier" \
    --disk-bw 2200000000
unset MT_PLAN_DISK_LIMIT
gpu_mem=141G

# The disk's break-even is the PCIe and optimizer one's rule with the disk's share in the step: at
# least that one, and where the disk bounds the step, about half as many tokens on a disk twice
# as fast (175B with every byte on disk).
disk_break_even() { # RATE: estimate.break_even_tokens and stream_break_even_tokens
    MT_PLAN_MEM_LIMIT=128000000000 MT_PLAN_SHM_LIMIT=128000000000 MT_PLAN_DISK_LIMIT=10000000000000 \
        "$MTRUN" --plan --json -np 5 --gpu-mem 141G --disk-bw "$1" configs/175b.cfg \
        storage.dir="$TMP/disk" storage.master=true |
        python3 -c 'import json, sys; e = json.load(sys.stdin)["estimate"]
print(e["break_even_tokens"], e["stream_break_even_tokens"])'
}
set -- $(disk_break_even 10000000000) $(disk_break_even 20000000000)
awk -v a="${1:-0}" -v s="${2:-0}" -v b="${3:-0}" 'BEGIN { exit !(a > s && s > 0 && b / a > 0.4 && b / a < 0.6) }' &&
    echo "ok   175b's disk break-even: $1 tokens at 10 GB/s, $3 at 20, the GPU's own $2" ||
    fail "175b's disk break-even: $1 tokens at 10 GB/s, $3 at 20, the GPU's own $2"

# The human plan shows the same total, exactly, and the parts an operator looks for.
host=$(grep '^host ' "$TMP/test-small.got" | cut -d' ' -f2)
grouped=$(echo "$host" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta')
"$MTRUN" --plan -np 3 configs/test-small.cfg >"$TMP/plan.txt" 2>&1 || fail "--plan exited with $?"
grep -q "^host total .*($grouped bytes)" "$TMP/plan.txt" || fail "--plan does not show host total $grouped bytes"
for want in '^rank  role' '^   0  compute' '^   2  optimizer' '^total ' 'bytes/param' \
    '^step time estimate (rates measured' 'at 10 GFLOP/s\|GFLOP/s per core' '^  host memory' '^  /dev/shm'; do
    grep -q "$want" "$TMP/plan.txt" || fail "--plan output has no line matching '$want'"
done
MT_PLAN_MEM_LIMIT=10000000000000 MT_PLAN_SHM_LIMIT=10000000000000 \
    "$MTRUN" --plan -np 5 --gpu-mem 141G configs/7b.cfg >"$TMP/plan7b.txt" 2>&1
grep -q '^compute rank buffers (cuda backend: GPU bytes)' "$TMP/plan7b.txt" || fail "7b: no GPU section"
grep -q 'PCIe .* at 55 GB/s' "$TMP/plan7b.txt" || fail "7b: no PCIe estimate"
grep -q 'GPU memory   needs .* free (--gpu-mem): ok' "$TMP/plan7b.txt" ||
    fail "7b: the GPU check is not shown: $(grep 'GPU memory' "$TMP/plan7b.txt")"
echo "ok   the human plan shows the totals, the table, the estimate and the checks"

# bf16 slots: the GPU rounds the leaving gradients through two pieces on one node, not over
# nodes, whose fp32 sums are rounded on the host (plan_leaving_bytes)
gpu_working() { # NODES: the GPU's working bytes of 7b.cfg with bf16 slots over that many nodes
    MT_TEST_NODES=$1 MT_PLAN_MEM_LIMIT=10000000000000 MT_PLAN_SHM_LIMIT=10000000000000 \
        "$MTRUN" --plan --json -np 4 --gpu-mem 141G configs/7b.cfg optimizer.grad_dtype=bf16 |
        head -n 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["gpu"]["working"])'
}
one_node=$(gpu_working 1) two_nodes=$(gpu_working 2)
[ -n "$one_node" ] && [ -n "$two_nodes" ] && [ "$one_node" -gt "$two_nodes" ] &&
    echo "ok   bf16 slots: the rounding pieces on one node ($one_node B), none over two ($two_nodes)" ||
    fail "bf16 slots: the GPU's working bytes on one node ($one_node) not above two nodes' ($two_nodes)"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
