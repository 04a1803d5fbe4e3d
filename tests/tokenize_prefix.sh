#!/usr/bin/env bash
# mt-tokenize -o PREFIX never leaves a mixed set of shards: an earlier run's PREFIX_*.bin is
# refused (exit 2, one line) unless --force, which replaces the whole set, removing the old
# shards the new run does not rewrite; a run that fails keeps the earlier set as it was. An
# empty input says so (exit 2). A run holds PREFIX.lock while it writes: a second run onto the
# same PREFIX meanwhile is refused (exit 2, one line), a link planted at PREFIX.lock is refused
# and not followed, and a lock file a killed run left behind is taken. A missing folder is named
# as the user gave it, not by a temporary file's name.
# usage: tokenize_prefix.sh MT_TOKENIZE
set -uo pipefail
mt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
echo '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": ["a b"]},
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}}' \
    >"$dir/tok.json"
printf 'ab ab ab ab ab ab ab ab' >"$dir/long.txt" # 15 tokens: 8 shards of 2
printf 'ab ab' >"$dir/short.txt"                   # 3 tokens: 2 shards
printf 'a\xff' >"$dir/bad.txt"
: >"$dir/empty.txt"
printf '\n\n' >"$dir/blank.jsonl"
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
# refused CODE WANT ARGS...: that exit code and one line on stderr holding WANT.
refused() {
    local code=$1 want=$2 rc
    shift 2
    "$mt" -q -t "$dir/tok.json" "$@" 2>"$dir/err"
    rc=$?
    if [ $rc -eq "$code" ] && [ "$(wc -l <"$dir/err")" -eq 1 ] && grep -qF -- "$want" "$dir/err"; then
        echo "ok   refused: $(cat "$dir/err")"
    else
        echo "FAIL mt-tokenize $*: exit $rc (want $code), want one line with \"$want\":"
        cat "$dir/err"
        fail=1
    fi
}
sums() { (cd "$dir" && cat out_*.bin | md5sum); }

"$mt" -q -t "$dir/tok.json" -o "$dir/out" --shard-tokens 2 "$dir/long.txt" || fail=1
check "the first run writes 8 shards" [ "$(ls "$dir"/out_*.bin | wc -l)" -eq 8 ]
before=$(sums)
refused 2 "out: 8 shards of an earlier run ($dir/out_*.bin) are there; give another -o, or --force" \
    -o "$dir/out" --shard-tokens 2 "$dir/short.txt"
check "a refused run changes nothing" [ "$(sums)" = "$before" ]
refused 1 "bad.txt" -o "$dir/out" --force --shard-tokens 2 "$dir/short.txt" "$dir/bad.txt"
check "a failed --force run keeps the earlier set whole" [ "$(sums)" = "$before" ]
check "and leaves no temporary file" [ -z "$(ls "$dir" | grep '\.tmp\.')" ]
"$mt" -q -t "$dir/tok.json" -o "$dir/out" --force --shard-tokens 2 "$dir/short.txt" || fail=1
"$mt" -q -t "$dir/tok.json" -o "$dir/fresh" --shard-tokens 2 "$dir/short.txt" || fail=1
check "--force leaves the new run's 2 shards alone" [ "$(ls "$dir"/out_*.bin | wc -l)" -eq 2 ]
check "and they are a fresh run's" cmp -s <(cat "$dir"/out_*.bin) <(cat "$dir"/fresh_*.bin)
refused 2 "empty.txt: empty: no document" -o "$dir/e1" "$dir/empty.txt"
refused 2 "blank.jsonl: no document: the file holds only blank lines" -o "$dir/e2" --jsonl "$dir/blank.jsonl"
check "empty inputs write nothing" [ -z "$(ls "$dir" | grep '^e[12]_')" ]
check "no run leaves its lock file" [ -z "$(ls "$dir" | grep '\.lock$')" ]

refused 2 "$dir/nodir/x: its folder $dir/nodir: No such file or directory" -o "$dir/nodir/x" "$dir/short.txt"
check "the missing folder's line names no temporary file" bash -c "! grep -q '\.bin\.tmp' '$dir/err'"

# Two runs onto one PREFIX: run A reads a FIFO, which it opens only once it holds race.lock, so
# the test's open of the FIFO for writing returns when A holds it (a run that never opens it
# hangs the test until ctest's timeout).
mkfifo "$dir/fifo"
"$mt" -q -t "$dir/tok.json" -o "$dir/race" "$dir/fifo" 2>"$dir/race_a.err" &
a=$!
exec 3>"$dir/fifo"
refused 2 "$dir/race: another mt-tokenize run is writing shards there (it holds $dir/race.lock); wait for it to end, or give another -o" \
    -o "$dir/race" "$dir/short.txt"
printf 'ab ab ab' >&3
exec 3>&-
wait $a
rc=$?
check "the first run ends well (exit $rc): $(cat "$dir/race_a.err")" [ $rc -eq 0 ]
printf 'ab ab ab' >"$dir/race.txt"
"$mt" -q -t "$dir/tok.json" -o "$dir/alone" "$dir/race.txt" || fail=1
check "its shards are its own, not the refused run's" cmp -s "$dir/race_000000.bin" "$dir/alone_000000.bin"
check "and it leaves no lock file" [ ! -e "$dir/race.lock" ]

ln -s "$dir/victim" "$dir/linked.lock"
refused 2 "$dir/linked: $dir/linked.lock is a link or not a plain file, not mt-tokenize's lock: remove it" \
    -o "$dir/linked" "$dir/short.txt"
check "the link is not followed" [ ! -e "$dir/victim" ]
: >"$dir/stale.lock" # left by a killed run: nobody holds it
"$mt" -q -t "$dir/tok.json" -o "$dir/stale" "$dir/short.txt" 2>"$dir/err"
check "a lock file nobody holds is taken ($(cat "$dir/err"))" [ -e "$dir/stale_000000.bin" ]
[ $fail -eq 0 ] && echo "all cases passed"
exit $fail
