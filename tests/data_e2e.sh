#!/usr/bin/env bash
# data.format "tokens" end to end: the demo text cut into three shards (ours uint16, llm.c's
# uint16, ours uint32) is the same token stream as the text itself, so a 5-step job on the
# shards must give bitwise the losses of the same job on the text with format "bytes".
# The same for shards written by tools/mt-shard. Also: mtrun refuses a bad shard before anything starts, with one line naming the file.
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

printf 'MTCTOKS2' > "$WORK/shards/part-9.bin" # sorts last: the other three are fine
"$MTRUN" -np 3 "$WORK/tokens.cfg" --out "$WORK/bad" > "$WORK/bad.out" 2> "$WORK/bad.err"
rc=$?
expect "a bad shard: exit code 2 (got $rc)" test "$rc" -eq 2
expect "a bad shard: one line on stderr naming it ($(head -c 300 "$WORK/bad.err"))" \
    test "$(wc -l < "$WORK/bad.err")" -eq 1 -a -n "$(grep 'part-9.bin: not a token shard' "$WORK/bad.err")"
finish
