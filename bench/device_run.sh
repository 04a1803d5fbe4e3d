#!/usr/bin/env bash
# One call on the GPU machine: unpack the carried packages, build with CUDA, run the test
# suite (GPU tests included) and the benchmarks. Output under $OUT.
#   usage: bench/device_run.sh [tests | tests=REGEX] [bench-NAME...] [long-NAME[:STEPS]...]
#          [torch-NAME...] [attn[=T_LIST[/HD_LIST[/HEADS]]]] [bwdprof=T_LIST/HD_LIST/HEADS]
#          [ncu=T/HD/HEADS] [gemm[=7b|3b]] [dp=GPUS:NAME,NAME...] [slices[=100b|120b]]
#          [tier[=NAME]] [gdn[=T_LIST]] [gdnprof[=T]] [gdnsrc[=T]]
#   tests=REGEX runs only the ctests matching REGEX; torch-NAME runs bench/torch_baseline.py
#   (3b with activation checkpointing, as the anchors were measured). attn runs
#   attention_bench and attention_torch.py on the same shapes (e.g. attn=2048,8192/128; HEADS
#   overrides the bench's head count). bwdprof runs attention_bench_prof: where the fused
#   backward's CTAs spend their time. ncu profiles one fused backward with Nsight Compute. dp runs
#   bench/run_dp_gpu.sh: the bench configs on one GPU and over GPUS (e.g. dp=2:1b,3b). gemm runs
#   gemm_bench: the bench models' GEMM shapes with each algorithm cuBLASLt's heuristic offers.
#   slices runs bench/run_slices.sh: the 100B and 120B models from full-width slices. tier runs
#   bench/run_tier.sh: dd on the disk, then a model that fits the host only with the NVMe tier.
#   base=SRC builds the source tree SRC (e.g. `git archive REV` unpacked into a carried folder)
#   into build-base; then bitwise runs bench/bitwise_matrix.sh on the CUDA backend with both
#   builds and compares them byte for byte, and basebench-NAME runs bench-NAME with build-base
#   (its runs named NAME-base), so that a refactor's speed is compared in the same call.
#   gdn times our chunked gated delta rule and flash-linear-attention's on Qwen3.5's linear heads
#   (FLA's wheels carried in .whl, installed by the caller: the device README says how).
#   gdnprof profiles the delta rule's kernels of one forward and backward (T tokens, 32 value
#   heads over 16 key heads) with Nsight Compute: each kernel's time, throughputs, occupancy and
#   top stall, summed by kernel (bench/ncu_summary.py).
#   gdnsrc profiles one launch of each delta-rule kernel (prep, pass, out, dpass, pairs, rows) by
#   SASS instruction: each opcode's share of the warps' stall samples and of the instructions,
#   and the costliest instructions with their stall reasons (bench/ncu_source.py), in
#   $OUT/gdnsrc.txt.
#   ATTN_WINDOW=W: attn times a sliding window of W keys (ours alone: with ATTN_TORCH=0), e.g.
#   ATTN_TORCH=0 ATTN_WINDOW=128 bench/device_run.sh attn=2048,32768/64,128.
set -u
cd "$(dirname "$0")/.."
export CUBLASLT_LOG_LEVEL=${CUBLASLT_LOG_LEVEL:-1} # cuBLASLt says why, should a matmul fail
nvidia-smi -L; nproc; free -g | head -2
m=$(command -v mpirun) && echo "mpirun: $m -> $(readlink -f "$m") ($(head -c 2 "$(readlink -f "$m")" | od -An -c | tr -d ' '), $(mpirun --version 2>&1 | head -n 1))"
source bench/device-build.sh
# attn=T_LIST/HD_LIST/HEADS as attention_bench's arguments (args) and the heads alone (heads).
attn_args() {
    local spec=${1#=}
    args=() heads=""
    [ -n "$spec" ] && args=(--T "${spec%%/*}")
    [[ $spec == */* ]] && { spec=${spec#*/}; args+=(--hd "${spec%%/*}"); }
    [[ $spec == */* ]] && { heads=${spec#*/}; args+=(--H "$heads"); }
    return 0
}
for what in "$@"; do
    case $what in
    tests | tests=*)
        filter=(-E demo)
        [ "$what" != tests ] && filter=(-R "${what#tests=}")
        (cd build && ctest --output-on-failure -V "${filter[@]}" --timeout 300 >>"$OUT/ctest.log" 2>&1)
        grep -E "tests passed|tests failed|FAIL|\(Failed\)|Skipped|TFLOP|relative error|loss agrees|PASS: .*(kept|bitwise)" \
            "$OUT/ctest.log" | tail -70 ;;
    bench-*) bench/run_bench.sh build "$OUT" "${what#bench-}" ;;
    slices | slices=*)
        spec=${what#slices}; spec=${spec#=}
        bench/run_slices.sh build "$OUT" $spec ;;
    tier | tier=*)
        spec=${what#tier}; spec=${spec#=}
        bench/run_tier.sh build "$OUT" $spec ;;
    long-*) bench/run_long.sh build "$OUT" "${what#long-}" ;;
    base=*)
        t0=$(date +%s)
        cmake -S "${what#base=}" -B build-base -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake-base.log" 2>&1 &&
            cmake --build build-base -j16 >"$OUT/build-base.log" 2>&1 ||
            { grep -E "error" -A3 "$OUT/build-base.log" | head -30; exit 1; }
        echo "base build: $(( $(date +%s) - t0 )) s" ;;
    bitwise)
        bench/bitwise_matrix.sh build-base/bin /tmp/bw-base cuda >"$OUT/bitwise.log" 2>&1
        bench/bitwise_matrix.sh build/bin /tmp/bw-new cuda >>"$OUT/bitwise.log" 2>&1
        grep FAILED -A5 "$OUT/bitwise.log"
        bench/bitwise_matrix.sh --compare /tmp/bw-base /tmp/bw-new | tee -a "$OUT/bitwise.log" ;;
    basebench-*) MT_BENCH_TAG=base bench/run_bench.sh build-base "$OUT" "${what#basebench-}" ;;
    attn | attn=*)
        attn_args "${what#attn}"
        build/bin/attention_bench "${args[@]}" ${ATTN_PATHS:+--paths "$ATTN_PATHS"} \
            ${ATTN_WINDOW:+--window "$ATTN_WINDOW"} 2>&1 | tee -a "$OUT/attention.log"
        [ "${ATTN_TORCH:-1}" = 1 ] && [ -z "$heads" ] &&
            python3 bench/attention_torch.py "${args[@]}" 2>&1 | tee -a "$OUT/attention.log" ;;
    bwdprof=*)
        attn_args "${what#bwdprof}"
        build/bin/attention_bench_prof "${args[@]}" --paths wgmma 2>&1 | tee -a "$OUT/bwdprof.log" |
            grep -E "^ATTN|BWDPROF" | awk '!seen[$0]++' | head -40 ;;
    ncu=*)
        attn_args "${what#ncu}"
        log="$OUT/ncu-$(echo "${what#ncu=}" | tr / -).log"
        timeout 150 ncu --clock-control none --kernel-name regex:attn_bwd_tma --launch-skip 1 --launch-count 1 \
            --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
            --section WarpStateStats --section SchedulerStats \
            build/bin/attention_bench "${args[@]}" --paths wgmma >"$log" 2>&1
        grep -E "Duration|Throughput|Hit Rate|Issue Slots Busy|Warp Cycles Per Issued|Stall" "$log" | head -30 ;;
    gdnprof | gdnprof=*)
        spec=${what#gdnprof}; spec=${spec#=}
        log="$OUT/ncu-gdn.log"
        timeout 300 ncu --clock-control none --launch-count 42 \
            --kernel-name regex:"prep_kernel|pass_kernel|out_kernel|pairs_kernel|rows_kernel|dpass_kernel" \
            --section SpeedOfLight --section Occupancy --section WarpStateStats \
            --metrics regex:"^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$" \
            build/bin/test_gdn_cuda --bench --H 32 --HK 16 --T "${spec:-8192}" >"$log" 2>&1
        python3 bench/ncu_summary.py "$log" ;;
    gdnsrc | gdnsrc=*)
        spec=${what#gdnsrc}; spec=${spec#=}
        # the reports stay in /tmp (a call brings back 8 files); the summaries go to $OUT
        mkdir -p /tmp/gdnsrc
        for k in prep pass out dpass pairs rows; do # one launch each, the rule's first
            timeout 120 ncu --clock-control none --launch-count 1 --kernel-name "regex:(^|[^a-z])${k}_kernel" \
                --section SourceCounters --section WarpStateStats -f -o "/tmp/gdnsrc/$k" \
                build/bin/test_gdn_cuda --bench --H 32 --HK 16 --T "${spec:-8192}" \
                >"/tmp/gdnsrc/$k.log" 2>&1 || tail -n 5 "/tmp/gdnsrc/$k.log"
            ncu -i "/tmp/gdnsrc/$k.ncu-rep" --page source --csv --print-source sass \
                >"/tmp/gdnsrc/$k-sass.csv" 2>&1
            python3 bench/ncu_source.py "/tmp/gdnsrc/$k-sass.csv" "$k" | tee -a "$OUT/gdnsrc.txt"
        done ;;
    gemm | gemm=*)
        spec=${what#gemm}; spec=${spec#=}
        build/bin/gemm_bench --shapes "${spec:-all}" 2>&1 | tee -a "$OUT/gemm.log" | grep best ;;
    dp=*)
        spec=${what#dp=}
        bench/run_dp_gpu.sh build "$OUT" "${spec%%:*}" $(echo "${spec#*:}" | tr , " ") ;;
    gdn | gdn=*)
        # ours and flash-linear-attention's delta rule (carried wheels in .whl) on Qwen3.5's
        # linear heads (16 key heads of 128, 32 and 64 value heads), in the same call.
        spec=${what#gdn}; spec=${spec#=}
        for h in 32 64; do
            build/bin/test_gdn_cuda --bench --H $h --HK 16 --T "${spec:-8192,32768}" 2>&1 |
                tee -a "$OUT/gdn.log"
        done
        python3 bench/gdn_fla.py --T "${spec:-8192,32768}" --H 32,64 --HK 16 2>&1 |
            tee -a "$OUT/gdn.log" | grep -v Warning ;;
    torch-*)
        ckpt=()
        [ "${what#torch-}" != 1b ] && ckpt=(--checkpointing)
        python3 bench/torch_baseline.py "${what#torch-}" "${ckpt[@]}" >"$OUT/$what.log" 2>&1
        tail -n 3 "$OUT/$what.log" ;;
    esac
done
