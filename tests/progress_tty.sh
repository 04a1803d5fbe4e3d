#!/bin/sh
# Progress output and the metrics record:
#  - on a terminal (a pty from script(1)) the compute rank redraws one live line per step with
#    carriage return + clear-to-end-of-line, with an ETA; eval lines and the sample print on
#    lines of their own and the live line is drawn again below them;
#  - with stdout in a file, one plain newline-terminated "step" line per step, no escapes;
#  - every line of metrics.jsonl parses as JSON and has the expected keys.
# usage: progress_tty.sh MTRUN REPO_ROOT
set -u
MTRUN=$1
ROOT=$2
command -v python3 >/dev/null || { echo "SKIPPED: python3 is missing (it reads the JSON)"; exit 77; }
if ! command -v script >/dev/null; then
    echo "SKIPPED: script(1) is missing (apt install bsdutils)"
    exit 77
fi
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
CR=$(printf '\r')
ESC=$(printf '\033')

# test-small with an eval every 2 steps and a short sample, so both print mid-run.
sed "s|\"\.\./data/|\"$ROOT/data/|" "$ROOT/configs/test-small.cfg" >"$TMP/run.cfg"
printf 'eval = { interval = 2; batches = 1; };\nsample_tokens = 16;\n' >>"$TMP/run.cfg"

# ---- on a terminal ----
script -qfec "'$MTRUN' -np 2 '$TMP/run.cfg' --out '$TMP/tty' --stop-at 4" /dev/null >"$TMP/tty.out" 2>&1 ||
    fail "the job on a pty failed: $(tail -n 5 "$TMP/tty.out")"
# The pty turns \n into \r\n; the live line is "\r ESC[K step ..." with no newline between steps.
live=$(tr -d '\n' <"$TMP/tty.out" | tr '\r' '\n' | grep -c "^$ESC\[Kstep [1-4]/20 | loss [0-9.]* |")
[ "$live" -ge 4 ] || fail "tty: $live live step lines (\\r ESC[K step N/20 ...), expected at least 4"
for n in 1 2 3 4; do
    tr '\r' '\n' <"$TMP/tty.out" | grep -q "^$ESC\[Kstep $n/20 | .*| ETA [0-9]*m[0-9][0-9]s" ||
        fail "tty: no redrawn line for step $n with an ETA"
done
# Steps 1 and 2 share one terminal line: the second overwrote the first instead of scrolling.
grep -q "step 1/20 .*$CR$ESC\[Kstep 2/20" "$TMP/tty.out" ||
    fail "tty: step 2 is not drawn over step 1 with \\r ESC[K"
grep -q "^step  *[0-9]*/20 | loss" "$TMP/tty.out" && fail "tty: plain step lines on a terminal"
# The eval result is a line of its own: the live line is cleared, the eval ends in a newline,
# and the live line comes back.
grep -q "$CR$ESC\[Keval at step 2 | val loss [0-9.]*$CR\$" "$TMP/tty.out" ||
    fail "tty: the eval at step 2 is not printed on a line of its own"
tr '\r' '\n' <"$TMP/tty.out" | grep -A 3 "eval at step 2" | grep -q "^$ESC\[Kstep 2/20" ||
    fail "tty: the live line is not redrawn after the eval line"
grep -q "^----$CR\$" "$TMP/tty.out" && grep -q "sample after step 4:" "$TMP/tty.out" ||
    fail "tty: the sample is not printed on lines of its own"
echo "ok   tty: live line redrawn per step with ETA; eval and sample on their own lines"

# ---- not a terminal ----
"$MTRUN" -np 2 "$TMP/run.cfg" --out "$TMP/plain" --stop-at 4 >"$TMP/plain.out" 2>&1 ||
    fail "the job with stdout in a file failed: $(tail -n 5 "$TMP/plain.out")"
grep -q "$CR\|$ESC" "$TMP/plain.out" && fail "plain: carriage returns or escapes in a log file"
steps=$(grep -c "^step  *[0-9]*/20 | loss [0-9.]* | .* | ETA [0-9]*m[0-9][0-9]s\$" "$TMP/plain.out")
[ "$steps" -eq 4 ] || fail "plain: $steps step lines, expected 4 (one per step)"
for n in 1 2 3 4; do
    grep -q "^step  *$n/20 |" "$TMP/plain.out" || fail "plain: no line for step $n"
done
grep -q "^step [0-9]*/20: " "$TMP/plain.out" && fail "plain: in-step progress in a step of milliseconds"
# a long step says how far it is (MT_PROGRESS_S: after that many seconds, every as many)
MT_PROGRESS_S=0 "$MTRUN" -np 2 "$TMP/run.cfg" --out "$TMP/prog" --stop-at 2 >"$TMP/prog.out" 2>&1 ||
    fail "the job with MT_PROGRESS_S=0 failed: $(tail -n 5 "$TMP/prog.out")"
grep -q "^step 1/20: forward, 2 of 2 layer passes, [0-9]*m[0-9][0-9]s in\$" "$TMP/prog.out" ||
    fail "progress: no line for the first step's forward"
grep -q "^step 2/20: backward, 2 of 2 layer passes, [0-9]*m[0-9][0-9]s in (the last step took [0-9]*m[0-9][0-9]s)\$" \
    "$TMP/prog.out" || fail "progress: no line for the second step's backward with the last step's time"
echo "ok   progress: a long step's forward and backward passes, with the last step's time"
grep -q "^eval at step 2 | val loss" "$TMP/plain.out" || fail "plain: no eval line"
echo "ok   plain: one newline-terminated step line per step, no escapes"

# ---- metrics.jsonl ----
for run in tty plain; do
    python3 - "$TMP/$run/metrics.jsonl" <<'EOF' || fail "$run: metrics.jsonl"
import json, sys
start_keys = {"event", "start_step", "end_step", "params", "optimizer_ranks", "backend",
              "tokens_per_step", "flops_per_token", "peak_flops"}
step_keys = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "step_s", "opt_wait_s",
             "tflops", "mfu"}
lines = open(sys.argv[1]).read().splitlines()
recs = [json.loads(l) for l in lines]  # every line must parse
bad = []
if not recs or recs[0].get("event") != "start" or not start_keys <= recs[0].keys():
    bad.append("first record is not a start event with %s" % sorted(start_keys))
steps = [r for r in recs if "loss" in r]
evals = [r for r in recs if "eval_loss" in r]
if [r["step"] for r in steps] != [1, 2, 3, 4]:
    bad.append("step records %s, expected 1..4" % [r["step"] for r in steps])
for r in steps:
    if not step_keys <= r.keys():
        bad.append("step %s lacks %s" % (r.get("step"), sorted(step_keys - r.keys())))
    elif not (r["loss"] > 0 and r["tokens_per_s"] > 0 and 0 <= r["opt_wait_s"] <= r["step_s"]):
        bad.append("step %s has implausible values %s" % (r["step"], r))
if [r["step"] for r in evals] != [2, 4]:
    bad.append("eval records at %s, expected [2, 4]" % [r["step"] for r in evals])
if bad:
    print("\n".join(bad))
    sys.exit(1)
print("ok   %s: metrics.jsonl: %d lines parse; start, 4 steps, 2 evals with the expected keys"
      % (sys.argv[1].split("/")[-2], len(recs)))
EOF
done

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
