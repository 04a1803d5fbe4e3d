#!/usr/bin/env bash
# mt-tokenize reads a JSONL line as Python's json reads it (json_parse_strict, which config.json
# shares): data after the object, or a second object on the line, is refused in one line naming
# FILE:LINE, as is "\u0000" (cJSON would cut the string there); a duplicate key keeps its last
# value, as a Python dict (and so HF datasets) does.
# usage: tokenize_json.sh MT_TOKENIZE
set -uo pipefail
mt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
echo '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": ["a b"]},
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}}' \
    >"$dir/tok.json"
refused() { # refused NAME WANT LINES: exit 1, one line holding WANT, no shard
    local name=$1 want=$2 rc
    printf '%s' "$3" >"$dir/$name.jsonl"
    "$mt" -q -t "$dir/tok.json" -o "$dir/$name" --jsonl "$dir/$name.jsonl" 2>"$dir/err"
    rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l <"$dir/err")" -eq 1 ] && grep -qF -- "$want" "$dir/err" &&
        ! ls "$dir/$name"_* >/dev/null 2>&1; then
        echo "ok   $name: $(cat "$dir/err")"
    else
        echo "FAIL $name: exit $rc, want one line with \"$want\":"; cat "$dir/err"; fail=1
    fi
}
refused trailing "trailing.jsonl:2: more data after the JSON value at line 1, column 15" \
    $'{"text": "ab"}\n{"text": "b"} x\n'
refused two_objects "two_objects.jsonl:1: more data after the JSON value at line 1, column 15" \
    $'{"text": "ab"}{"text": "b"}\n'
refused nul "nul.jsonl:1: \\u0000 in a string is not supported at line 1, column 12" \
    $'{"text": "a\\u0000b"}\n'
# The last of two "text" keys is the document, as json.loads gives it.
printf '{"text": "a", "text": "ab ab"}\n' >"$dir/dup.jsonl"
printf '{"text": "ab ab"}\n' >"$dir/last.jsonl"
"$mt" -q -t "$dir/tok.json" -o "$dir/dup" --jsonl "$dir/dup.jsonl" &&
    "$mt" -q -t "$dir/tok.json" -o "$dir/last" --jsonl "$dir/last.jsonl" &&
    cmp -s "$dir/dup_000000.bin" "$dir/last_000000.bin"
if [ $? -eq 0 ]; then echo "ok   duplicate key: the last value counts"; else
    echo "FAIL duplicate key: the shard is not the last value's"; fail=1; fi
[ $fail -eq 0 ] && echo "all cases passed"
exit $fail
