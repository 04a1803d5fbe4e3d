#!/usr/bin/env bash
# Runs the AdamW benchmark (issue 4) and, where PyTorch is installed, PyTorch's fused CPU AdamW
# on the same number of parameters and threads; ends with one table. Builds nothing.
#
#   bench/run_adamw_bench.sh BUILD/bin/adamw_bench [PARAMS] [-- extra adamw_bench arguments]
#
# PARAMS: parameter count, K/M/G suffixes (default 256M; use 32M on a small machine).
# Environment: REPS (timed passes, default 5), TORCH_THREADS (default "1 all"), PYTHON (python3),
# OUT (a file to keep the raw output in; default a temporary file, printed at the end).
set -u
bench=${1:-}
if [ -z "$bench" ] || [ ! -x "$bench" ]; then
    echo "usage: $0 path/to/adamw_bench [PARAMS] [-- adamw_bench args]" >&2
    echo "(build it first: cmake --build BUILD --target adamw_bench)" >&2
    exit 2
fi
shift
params=256M
if [ $# -gt 0 ] && [ "$1" != "--" ]; then params=$1; shift; fi
[ "${1:-}" = "--" ] && shift
reps=${REPS:-5}
python=${PYTHON:-python3}
out=${OUT:-$(mktemp /tmp/adamw_bench.XXXXXX)}
cpus=$(nproc)

echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname): $bench --params $params --reps $reps $*"
"$bench" --params "$params" --reps "$reps" "$@" | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
    echo "adamw_bench failed (exit $rc)" >&2
    exit "$rc"
fi

# The number of parameters as the bench parsed it (K/M/G are powers of two there too).
n=$(awk '/^RESULT section=threads/ { for (i = 1; i <= NF; i++) if ($i ~ /^params=/) { sub("params=", "", $i); print $i; exit } }' "$out")
n=${n:-$(awk '/^RESULT/ { for (i = 1; i <= NF; i++) if ($i ~ /^params=/) { sub("params=", "", $i); print $i; exit } }' "$out")}

echo
torch_ok=0
if "$python" -c 'import torch' >/dev/null 2>&1; then
    torch_ok=1
    for t in ${TORCH_THREADS:-1 all}; do
        [ "$t" = all ] && t=$cpus
        echo "== PyTorch AdamW on CPU: $n params, $t thread(s)"
        "$python" - "$n" "$t" "$reps" <<'EOF' | tee -a "$out"
import sys, time, torch
n, threads, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(0)
p = torch.nn.Parameter(torch.empty(n).uniform_(-0.5, 0.5))
p.grad = torch.empty(n).normal_(0.0, 1e-3)
hp = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
mode = "fused"
try:
    opt = torch.optim.AdamW([p], fused=True, **hp)
    opt.step()  # warm-up; also where an unsupported fused CPU path raises
except Exception as e:  # torch < 2.4 has no fused CPU AdamW
    print(f"  fused=True not supported on CPU here ({type(e).__name__}: {str(e)[:120]}); using foreach")
    mode = "foreach"
    opt = torch.optim.AdamW([p], foreach=True, **hp)
    opt.step()
best = float("inf")
for _ in range(reps):
    t0 = time.perf_counter()
    opt.step()
    best = min(best, time.perf_counter() - t0)
print(f"  torch {torch.__version__} AdamW({mode}=True): {n / best / 1e9:.3f} G params/s, "
      f"{n * 28 / best / 1e9:.1f} GB/s at 28 B/param (no bf16 copy), best of {reps}")
print(f"TORCH mode={mode} version={torch.__version__} threads={threads} params={n} "
      f"seconds={best:.6f} gparams={n / best / 1e9:.4f} gbs={n * 28 / best / 1e9:.2f}")
EOF
    done
else
    echo "PyTorch not available: comparison not run"
fi

echo
echo "================ AdamW optimizer benchmark (issue 4): summary ================"
echo "host $(hostname), $cpus CPUs, $(date -u '+%Y-%m-%d %H:%M UTC'), params $n, best of $reps"
awk -v torch_ok="$torch_ok" '
function val(key,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == key) return kv[2] } return "" }
/^RESULT section=triad/ { triad[val("threads")] = sprintf("%.1f / %.1f", val("plain_gbs"), val("streaming_gbs")) }
/^RESULT section=threads/ { key = val("threads"); row[++nrow] = sprintf("%-34s %8s %12.3f %10.1f %9.0f%%", "ours " val("isa") " (stores: " val("nt") ")", "1 x " key, val("gparams"), val("gbs"), val("pct_triad")); rowt[nrow] = key }
/^RESULT section=nt/ { nt[++nnt] = sprintf("%-34s %8s %12.3f %10.1f %9.0f%%", "ours " val("isa") " (stores: " val("nt") ")", "1 x " val("threads"), val("gparams"), val("gbs"), val("pct_triad")) }
/^RESULT section=procs/ { pr[++npr] = sprintf("%-34s %8s %12.3f %10.1f", "ours " val("isa") ", " val("procs") " process(es)", val("procs") " x " val("threads"), val("gparams"), val("gbs")) }
/^TORCH/ { tr[++ntr] = sprintf("%-34s %8s %12.3f %10.1f  (28 B/param)", "torch " val("version") " AdamW(" val("mode") ")", "1 x " val("threads"), val("gparams"), val("gbs")) }
END {
    printf "%-34s %8s %12s %10s %10s\n", "", "procs x", "G params/s", "GB/s", "of triad"
    printf "%-34s %8s %12s %10s\n", "", "threads", "", "(30 B/p)"
    last = ""
    for (i = 1; i <= nrow; i++) {
        if (rowt[i] != last) { printf "%-34s %8s %12s %s  (GB/s, plain / streaming stores, 12 B/elem)\n", "STREAM triad", "1 x " rowt[i], "-", triad[rowt[i]]; last = rowt[i] }
        print row[i]
    }
    if (nnt) { print "-- store policies at the full thread count"; for (i = 1; i <= nnt; i++) print nt[i] }
    if (npr) { print "-- optimizer processes (fork; aggregate over the slowest; 28 B/param as the ranks move it, no bf16 copy)"; for (i = 1; i <= npr; i++) print pr[i] }
    print "-- PyTorch"
    if (ntr) for (i = 1; i <= ntr; i++) print tr[i]
    else if (torch_ok) print "PyTorch: no result (see the errors above)"
    else print "PyTorch not available: comparison not run"
}' "$out"
echo "(raw output: $out)"
