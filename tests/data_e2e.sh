#!/usr/bin/env bash
# data.format "tokens" end to end: the demo text cut into three shards (ours uint16, llm.c's
# uint16, ours uint32) is the same token stream as the text itself, so a 5-step job on the
# shards must give bitwise the losses of the same job on the text with format "bytes".
# The same for shards written by tools/mt-shard. Also: mtrun refuses a bad shard before anything starts, with one line naming the file.
# data.val_path: the text cut where data.val_fraction cuts it, head as data.path and tail as
# data.val_path, trains and evaluates bitwise like the whole text with val_fraction 0.1; another
# val_path gives other eval losses (the same training losses, the same at -np 2 and 3); a
# missing val_path is one line naming the key.
# usage: data_e2e.sh MTRUN REPO_ROOT TEST_DATA
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
TEST_DATA=$3
TEXT=$SRC/data/tinyshakespeare.txt
mkdir -p "$WORK/shards"
"$TEST_DATA" split "$TEXT" "$WORK/shards" || { echo "FAIL: cannot write shards"; exit 1; }

sed -e "s|\"\.\./data/tinyshakespeare.txt\"|\"$TEXT\"|" -e 's/^steps = .*/steps = 5;/' \
    -e 's/interval = .*/interval = 5;/' "$SRC/configs/test-small.cfg" > "$WORK/bytes.cfg"
sed -e "s|path = .*|path = \"$WORK/shards\"; format = \"tokens\";|" "$WORK/bytes.cfg" \
    > "$WORK/tokens.cfg"
grep -q 'format = "tokens"' "$WORK/tokens.cfg" || { echo "FAIL: config edit"; exit 1; }

run_job bytes 3 "$WORK/bytes.cfg" || { show_log bytes; expect "bytes job succeeds" false; }
run_job tokens 3 "$WORK/tokens.cfg" || { show_log tokens; expect "tokens job succeeds" false; }
expect "the bytes job ran 5 steps" test "$(losses "$WORK/bytes" | wc -l)" -eq 5
expect "tokens losses are bitwise those of bytes" diff <(losses "$WORK/bytes") <(losses "$WORK/tokens")

# tools/mt-shard's shards (llm.c's uint32 format here), named by a glob, read the same.
mkdir -p "$WORK/ms"
if python3 "$SRC/tools/mt-shard" --llmc --dtype uint32 --shard-tokens 300000 "$TEXT" \
    "$WORK/ms/shakespeare" > "$WORK/mt-shard.log" 2>&1; then
    sed -e "s|path = .*|path = \"$WORK/ms/shakespeare_*.bin\"; format = \"tokens\";|" \
        "$WORK/bytes.cfg" > "$WORK/glob.cfg"
    run_job glob 3 "$WORK/glob.cfg" || { show_log glob; expect "mt-shard job succeeds" false; }
    expect "mt-shard losses are bitwise those of bytes" diff <(losses "$WORK/bytes") <(losses "$WORK/glob")
else
    cat "$WORK/mt-shard.log"
    expect "tools/mt-shard writes the shards" false
fi

# data.val_path against the split it replaces.
evals() { grep -o '"step":[0-9]*,"eval_loss":[^,}]*' "$1/metrics.jsonl"; }
python3 - "$TEXT" "$WORK" <<'PY'
import sys
text = open(sys.argv[1], "rb").read()
cut = int(len(text) * (1.0 - 0.1))  # data.c: (size_t)(n * (1.0 - val_fraction)), in double
open(sys.argv[2] + "/head.txt", "wb").write(text[:cut])
open(sys.argv[2] + "/tail.txt", "wb").write(text[cut:])
open(sys.argv[2] + "/other.txt", "wb").write(text[:len(text) - cut])  # as long, other text
PY
{ cat "$WORK/bytes.cfg"; echo 'eval = { interval = 2; batches = 3; };'; } > "$WORK/split.cfg"
sed -e "s|path = .*|path = \"head.txt\"; val_path = \"tail.txt\";|" "$WORK/split.cfg" > "$WORK/val.cfg"
sed -e "s|tail.txt|other.txt|" "$WORK/val.cfg" > "$WORK/other.cfg"
grep -q 'val_path = "tail.txt"' "$WORK/val.cfg" || { echo "FAIL: config edit"; exit 1; }
run_job split 3 "$WORK/split.cfg" || { show_log split; expect "split job succeeds" false; }
run_job val 3 "$WORK/val.cfg" || { show_log val; expect "val_path job succeeds" false; }
run_job val2 2 "$WORK/val.cfg" || { show_log val2; expect "val_path job at -np 2 succeeds" false; }
run_job other 3 "$WORK/other.cfg" || { show_log other; expect "other val_path job succeeds" false; }
expect "the split job evaluated 3 times" test "$(evals "$WORK/split" | wc -l)" -eq 3
expect "val_path: training losses bitwise those of the split" diff <(losses "$WORK/split") <(losses "$WORK/val")
expect "val_path: eval losses bitwise those of the split" diff <(evals "$WORK/split") <(evals "$WORK/val")
expect "val_path: the same at -np 2" diff <(losses "$WORK/val"; evals "$WORK/val") <(losses "$WORK/val2"; evals "$WORK/val2")
expect "another val_path: the same training losses" diff <(losses "$WORK/val") <(losses "$WORK/other")
expect "another val_path: other eval losses ($(evals "$WORK/other" | tail -1) vs $(evals "$WORK/val" | tail -1))" \
    test -z "$(comm -12 <(evals "$WORK/val" | sort) <(evals "$WORK/other" | sort))"
sed -e "s|tail.txt|no-such.txt|" "$WORK/val.cfg" > "$WORK/noval.cfg"
"$MTRUN" -np 3 "$WORK/noval.cfg" --out "$WORK/noval" > "$WORK/noval.out" 2> "$WORK/noval.err"
rc=$?
expect "a missing val_path: exit code 2 (got $rc)" test "$rc" -eq 2
expect "a missing val_path: one line naming the key and the file ($(head -c 300 "$WORK/noval.err"))" \
    test "$(wc -l < "$WORK/noval.err")" -eq 1 -a -n "$(grep 'data.val_path: cannot open .*no-such.txt' "$WORK/noval.err")"

printf 'MTCTOKS2' > "$WORK/shards/part-9.bin" # sorts last: the other three are fine
"$MTRUN" -np 3 "$WORK/tokens.cfg" --out "$WORK/bad" > "$WORK/bad.out" 2> "$WORK/bad.err"
rc=$?
expect "a bad shard: exit code 2 (got $rc)" test "$rc" -eq 2
expect "a bad shard: one line on stderr naming it ($(head -c 300 "$WORK/bad.err"))" \
    test "$(wc -l < "$WORK/bad.err")" -eq 1 -a -n "$(grep 'part-9.bin: not a token shard' "$WORK/bad.err")"
finish
