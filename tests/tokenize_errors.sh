#!/usr/bin/env bash
# mt-tokenize's command line: a tiny hand-written tokenizer.json encodes, and every error is
# one line that names the file (and the JSONL line), with no shard or temporary file left.
# usage: tokenize_errors.sh MT_TOKENIZE
set -uo pipefail
mt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

good='"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "<eot>": 4},
                "merges": ["a b"]},
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "added_tokens": [{"id": 4, "content": "<eot>", "special": true}]'
echo "{$good}" >"$dir/tok.json"
echo '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' >"$dir/wordpiece.json"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": null}' >"$dir/nomerges.json"
echo "{$good}" | sed 's/"<eot>": 4}/"<eot>": 4, "x": 20000000}/' >"$dir/bigid.json"
echo "{$good}" | sed 's/"id": 4,/"id": 4e12,/' >"$dir/bigadded.json"
echo "{$good}" | sed 's/"<eot>": 4}/"<eot>": 4, "Ċ": 5}/' >"$dir/newlines.json" # and "\n"
echo "{$good, \"normalizer\": {\"type\": \"Lowercase\"}}" >"$dir/lower.json"
printf 'ab ab<eot>b' >"$dir/doc.txt"
printf '{"text": "ab"}\n{"text": "b"}\n{"text": \n' >"$dir/badline.jsonl"
printf '{"text": "ab"}\n{"body": "b"}\n' >"$dir/nofield.jsonl"
printf 'ab\n' >"$dir/newline.txt"
printf 'a\xff' >"$dir/utf8.txt"
printf '{"input_ids": [0, 1, 2, 3], "labels": [-100, -100, 2, 3]}\n{"input_ids": [1, 2]}\n' >"$dir/ids.jsonl"
printf '{"input_ids": [0, 1]}\n{"input_ids": [0, 1], "labels": [0, 0]}\n' >"$dir/badlabel.jsonl"
printf '{"input_ids": [5]}\n' >"$dir/badid.jsonl"
printf '\n{"messages": [{"role": "robot", "content": "b"}]}\n' >"$dir/badchat.jsonl"
printf '{"messages": [{"role": "assistant", "content": "ab"}]}\n' >"$dir/mistral.jsonl"
# Invalid UTF-8 at byte 44 of a --chat line (the conversation rendered from it has it at
# another), and at byte 11 of a --jsonl line's second (its text at byte 1); a byte order mark in
# front of a line; invalid UTF-8 past the first 1 MiB piece of a text file encoded in pieces.
printf '{"messages": [{"role": "user", "content": "a\xffb"}]}\n' >"$dir/chatutf8.jsonl"
printf '{"text": "ab"}\n{"text": "a\xffb"}\n' >"$dir/textutf8.jsonl"
printf '\xef\xbb\xbf{"messages": [{"role": "user", "content": "ab"}]}\n' >"$dir/chatbom.jsonl"
printf '{"text": "ab"}\n\xef\xbb\xbf{"text": "b"}\n' >"$dir/bom.jsonl"
{ yes b | head -c 1100000; printf '\xff'; } >"$dir/big.txt"

# expect_error WANT ARGS...: exit status 1, stderr exactly one line containing WANT.
expect_error() {
    local want=$1
    shift
    "$mt" -q -o "$dir/out" "$@" 2>"$dir/err"
    local rc=$? lines
    lines=$(wc -l <"$dir/err")
    if [ $rc -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$dir/err"; then
        echo "FAIL: mt-tokenize $*: exit $rc, $lines line(s), want \"$want\":"
        cat "$dir/err"
        fail=1
    fi
    if ls "$dir"/out_* >/dev/null 2>&1; then
        echo "FAIL: mt-tokenize $*: left $(ls "$dir"/out_*)"
        fail=1
        rm -f "$dir"/out_*
    fi
}

expect_error "$dir/absent.json: cannot open" -t "$dir/absent.json" "$dir/doc.txt"
expect_error "$dir/wordpiece.json: model type \"WordPiece\" is not supported" \
    -t "$dir/wordpiece.json" "$dir/doc.txt"
expect_error "$dir/nomerges.json: model has no \"merges\" array" -t "$dir/nomerges.json" "$dir/doc.txt"
expect_error "$dir/lower.json: normalizer \"Lowercase\" is not supported" -t "$dir/lower.json" "$dir/doc.txt"
expect_error "$dir/bigid.json: model.vocab: \"x\" has no valid id (0 to 2^24 - 1)" \
    -t "$dir/bigid.json" "$dir/doc.txt"
expect_error "$dir/bigadded.json: added_tokens[0] needs a content and an id (0 to 2^24 - 1)" \
    -t "$dir/bigadded.json" "$dir/doc.txt"
expect_error "$dir/missing.txt: cannot open" -t "$dir/tok.json" "$dir/missing.txt"
expect_error "$dir/badline.jsonl:3: not valid JSON" -t "$dir/tok.json" --jsonl "$dir/badline.jsonl"
expect_error "$dir/nofield.jsonl:2: no string field \"text\"" -t "$dir/tok.json" --jsonl "$dir/nofield.jsonl"
expect_error "$dir/newline.txt: byte 0x0a has no token in the vocab" -t "$dir/tok.json" "$dir/newline.txt"
expect_error "$dir/utf8.txt: invalid UTF-8 at byte 1" -t "$dir/tok.json" "$dir/utf8.txt"
expect_error "$dir/tok.json: --eot <nope>: no such token" -t "$dir/tok.json" --eot "<nope>" "$dir/doc.txt"
expect_error "$dir/tok.json: --append-eos: no end-of-text token" -t "$dir/tok.json" --append-eos "$dir/doc.txt"
expect_error "$dir/badlabel.jsonl:2: labels[1]: another token, expected -100 (not a target) or input_ids[1] = 1" \
    -t "$dir/tok.json" --jsonl "$dir/badlabel.jsonl"
expect_error "$dir/badid.jsonl:1: input_ids[0]: not a token id below the vocab size 5" \
    -t "$dir/tok.json" --jsonl "$dir/badid.jsonl"
expect_error "$dir/badchat.jsonl:2: messages[0]: role \"robot\" is not system, user or assistant" \
    -t "$dir/tok.json" --chat-format chatml "$dir/badchat.jsonl"
expect_error "$dir/mistral.jsonl:1: messages[0]: role \"assistant\": the mistral format alternates" \
    -t "$dir/tok.json" --chat-format mistral "$dir/mistral.jsonl"
expect_error "$dir/tokenizer_config.json: cannot open it; pass --chat-format chatml, llama3 or mistral" \
    -t "$dir/tok.json" --chat "$dir/badchat.jsonl"
expect_error "--chat-format vicuna: not chatml, llama3 or mistral" -t "$dir/tok.json" --chat-format vicuna "$dir/badchat.jsonl"
expect_error "$dir/chatutf8.jsonl:1: invalid UTF-8 at byte 44 of the line" \
    -t "$dir/tok.json" --chat-format chatml "$dir/chatutf8.jsonl"
expect_error "$dir/textutf8.jsonl:2: invalid UTF-8 at byte 11 of the line" \
    -t "$dir/tok.json" --jsonl "$dir/textutf8.jsonl"
expect_error "$dir/chatbom.jsonl:1: the line starts with a UTF-8 byte order mark (BOM), which Python's json refuses" \
    -t "$dir/tok.json" --chat-format chatml "$dir/chatbom.jsonl"
expect_error "$dir/bom.jsonl:2: the line starts with a UTF-8 byte order mark (BOM)" \
    -t "$dir/tok.json" --jsonl "$dir/bom.jsonl"
expect_error "$dir/big.txt: invalid UTF-8 at byte 1100000" -t "$dir/newlines.json" "$dir/big.txt"
expect_error "--shard-tokens: not a positive integer: 0" -t "$dir/tok.json" --shard-tokens 0 "$dir/doc.txt"

"$mt" --help | grep -q "usage: mt-tokenize" || { echo "FAIL: --help"; fail=1; }

# The good tokenizer: "ab ab<eot>b" + eot -> ab, Ġ, ab, <eot>, b, <eot> = 2 3 2 4 1 4 (uint16).
"$mt" -q -t "$dir/tok.json" -o "$dir/good" --eot "<eot>" "$dir/doc.txt" || fail=1
want=$(printf 'MTCTOKS1' | od -An -tx1 | tr -d ' \n')01000000020000000600000000000000
got=$(head -c 24 "$dir/good_000000.bin" | od -An -tx1 | tr -d ' \n')
[ "$got" = "$want" ] || { echo "FAIL: header $got, want $want"; fail=1; }
got=$(tail -c +257 "$dir/good_000000.bin" | od -An -tu2 | xargs)
[ "$got" = "2 3 2 4 1 4" ] || { echo "FAIL: tokens \"$got\", want \"2 3 2 4 1 4\""; fail=1; }
[ "$(stat -c %s "$dir/good_000000.bin" 2>/dev/null)" = 268 ] || { echo "FAIL: shard size"; fail=1; }

# Pre-tokenized lines: ids as they are, labels -100 context only. 0 1 2 3 | 1 2 with targets
# 0 0 1 1 | 1 1: version 2, flags 1, the mask byte 0b111100 after the tokens.
"$mt" -q -t "$dir/tok.json" -o "$dir/ids" --jsonl "$dir/ids.jsonl" || fail=1
want=$(printf 'MTCTOKS1' | od -An -tx1 | tr -d ' \n')02000000020000000600000000000000'01000000'
got=$(head -c 28 "$dir/ids_000000.bin" | od -An -tx1 | tr -d ' \n')
[ "$got" = "$want" ] || { echo "FAIL: masked header $got, want $want"; fail=1; }
got=$(tail -c +257 "$dir/ids_000000.bin" | head -c 12 | od -An -tu2 | xargs)
[ "$got" = "0 1 2 3 1 2" ] || { echo "FAIL: pre-tokenized ids \"$got\", want \"0 1 2 3 1 2\""; fail=1; }
got=$(tail -c 1 "$dir/ids_000000.bin" | od -An -tx1 | xargs)
[ "$got" = 3c ] || { echo "FAIL: mask byte $got, want 3c"; fail=1; }
[ "$(stat -c %s "$dir/ids_000000.bin" 2>/dev/null)" = 269 ] || { echo "FAIL: masked shard size"; fail=1; }
exit $fail
