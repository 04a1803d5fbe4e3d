#!/bin/sh
# mt-plot: renders a PNG (checked by its magic bytes) from the metrics of a short real run and
# from a hand-written record with a resumed (repeated) step; a missing run folder or metrics
# file is one clear line and exit 2; --help works.
# usage: plot_png.sh MT_PLOT MTRUN REPO_ROOT
set -u
PLOT=$1
MTRUN=$2
ROOT=$3
command -v gnuplot >/dev/null || { echo "SKIPPED: no gnuplot (apt install gnuplot-nox)"; exit 77; }
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
is_png() { [ "$(od -An -tx1 -N8 "$1" | tr -d ' \n')" = "89504e470d0a1a0a" ]; }

sed "s|\"\.\./data/|\"$ROOT/data/|" "$ROOT/configs/test-small.cfg" >"$TMP/run.cfg"
printf 'eval = { interval = 2; batches = 1; };\n' >>"$TMP/run.cfg"
"$MTRUN" -np 2 "$TMP/run.cfg" --out "$TMP/run" --stop-at 4 >"$TMP/run.log" 2>&1 ||
    fail "the run failed: $(tail -n 5 "$TMP/run.log")"

# Default output: RUN_DIR/metrics.png.
msg=$("$PLOT" "$TMP/run" 2>&1) || fail "mt-plot RUN_DIR exited with $?: $msg"
is_png "$TMP/run/metrics.png" || fail "RUN_DIR/metrics.png is not a PNG"
printf '%s\n' "$msg" | grep -q "wrote .*metrics.png (4 steps, 2 evals)" || fail "mt-plot said: $msg"
# An explicit output path.
"$PLOT" "$TMP/run" "$TMP/out.png" >/dev/null 2>&1 || fail "mt-plot RUN_DIR OUT.png exited with $?"
is_png "$TMP/out.png" || fail "OUT.png is not a PNG"
[ "$(wc -c <"$TMP/out.png")" -gt 10000 ] || fail "OUT.png is suspiciously small"
echo "ok   a short run plots to a PNG: $msg"

# A resumed run's record: two start events, step 3 logged twice, a non-JSON line.
mkdir "$TMP/resumed"
cat >"$TMP/resumed/metrics.jsonl" <<'JSON'
{"event":"start","start_step":0,"end_step":4,"params":102720,"optimizer_ranks":1,"backend":"cpu"}
{"step":1,"loss":5.5,"lr":0.001,"grad_norm":2.0,"tokens_per_s":9000.0,"step_s":0.03,"opt_wait_s":0.001}
{"step":2,"loss":5.4,"lr":0.002,"grad_norm":2.2,"tokens_per_s":15000.0,"step_s":0.02,"opt_wait_s":0.001}
{"step":2,"eval_loss":5.45}
{"step":3,"loss":5.2,"lr":0.002,"grad_norm":2.0,"tokens_per_s":15000.0,"step_s":0.02,"opt_wait_s":0.001}
{"event":"start","start_step":2,"end_step":6,"params":102720,"optimizer_ranks":2,"backend":"cpu"}
{"step":3,"loss":5.21,"lr":0.002,"grad_norm":2.0,"tokens_per_s":14000.0,"step_s":0.02,"opt_wait_s":0.001}
garbage that is not json
{"step":4,"loss":5.0,"lr":0.002,"grad_norm":2.0,"tokens_per_s":14500.0,"step_s":0.02,"opt_wait_s":0.001}
JSON
msg=$("$PLOT" "$TMP/resumed" 2>&1) || fail "resumed record: exited with $?: $msg"
is_png "$TMP/resumed/metrics.png" || fail "resumed record: no PNG"
printf '%s\n' "$msg" | grep -q "(4 steps, 1 evals)" || fail "resumed record: $msg (expected 4 distinct steps)"
echo "ok   a resumed record (a step logged twice, a bad line) plots its 4 distinct steps"

# A Mixture-of-Experts record: a third panel, the aux loss and the worst layer's max/mean (the
# largest of the layers' values: 3.5 at step 2), and a plain record has none.
mkdir "$TMP/moe"
cat >"$TMP/moe/metrics.jsonl" <<'JSON'
{"event":"start","start_step":0,"end_step":3,"params":130000,"optimizer_ranks":1,"backend":"cpu"}
{"step":1,"loss":5.5,"lr":0.001,"grad_norm":2.0,"tokens_per_s":9000.0,"step_s":0.03,"opt_wait_s":0.001,"aux_loss":2.031,"expert_load":[{"max_over_mean":2.5000,"idle":3},{"max_over_mean":1.2500,"idle":0}]}
{"step":2,"loss":5.3,"lr":0.002,"grad_norm":2.1,"tokens_per_s":9500.0,"step_s":0.03,"opt_wait_s":0.001,"aux_loss":2.020,"expert_load":[{"max_over_mean":1.5000,"idle":1},{"max_over_mean":3.5000,"idle":2}]}
{"step":3,"loss":5.1,"lr":0.002,"grad_norm":2.0,"tokens_per_s":9600.0,"step_s":0.03,"opt_wait_s":0.001,"aux_loss":2.010,"expert_load":[{"max_over_mean":1.1000,"idle":0},{"max_over_mean":1.0500,"idle":0}]}
JSON
msg=$(MT_PLOT_KEEP="$TMP/moe-data" "$PLOT" "$TMP/moe" 2>&1) || fail "MoE record: exited with $?: $msg"
is_png "$TMP/moe/metrics.png" || fail "MoE record: no PNG"
printf '%s\n' "$msg" | grep -q "(3 steps, 0 evals, routing)" || fail "MoE record: $msg"
[ "$(cat "$TMP/moe-data/routing.dat" 2>/dev/null)" = "$(printf '1 2.031 2.5000\n2 2.020 3.5000\n3 2.010 1.1000')" ] ||
    fail "MoE record: the routing panel's data: $(cat "$TMP/moe-data/routing.dat" 2>&1)"
printf '%s\n' "$("$PLOT" "$TMP/run" 2>&1)" | grep -q "routing" && fail "a dense run got a routing panel"
echo "ok   a MoE record plots a routing panel (aux loss, the worst layer's max/mean): $msg"

# errors: exit 2, one line on stderr naming the path
expect_error() { # NAME REGEX ARGS...
    name=$1 regex=$2
    shift 2
    "$PLOT" "$@" >"$TMP/o" 2>"$TMP/e"
    rc=$?
    if [ "$rc" -ne 2 ] || [ "$(wc -l <"$TMP/e")" -ne 1 ] || ! grep -Eq "$regex" "$TMP/e"; then
        fail "$name: exit $rc, stderr: $(cat "$TMP/e")"
    else
        echo "ok   $name: $(cat "$TMP/e")"
    fi
}
expect_error "missing run folder" "^mt-plot: $TMP/nope: no such run folder$" "$TMP/nope"
mkdir "$TMP/empty"
expect_error "missing metrics file" "^mt-plot: $TMP/empty/metrics.jsonl: missing" "$TMP/empty"
expect_error "a file, not a folder" "not a folder" "$TMP/out.png"
: >"$TMP/empty/metrics.jsonl"
expect_error "no steps yet" "no step records yet" "$TMP/empty"
expect_error "no arguments" "^mt-plot: missing RUN_DIR \\(usage: mt-plot RUN_DIR"
"$PLOT" --help | grep -q "^usage: mt-plot RUN_DIR \[OUT.png\]" || fail "--help has no usage line"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
