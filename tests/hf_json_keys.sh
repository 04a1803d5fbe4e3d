#!/usr/bin/env bash
# config.json with a million keys in one object: read in linear time (a quadratic duplicate
# check takes hours at this size; 100k keys took 26 s), and a repeated key still keeps its last
# value at the first one's place, as Python's json does.
# usage: hf_json_keys.sh TEST_HF TESTS_DIR
set -u
TEST_HF=$1
T=$2
WORK=$(mktemp -d /tmp/mt-hf-keys.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
LIMIT_S=10
# many_keys NAME LAST-EOS: the fixture's config.json with 10^6 extra keys between a first
# eos_token_id of 1 and a last one of LAST-EOS.
many_keys() {
    rm -rf "$WORK/$1"
    python3 "$T/hf_fixture.py" "$WORK/$1" >/dev/null || exit 1
    python3 - "$WORK/$1/config.json" "$2" <<'PY' || exit 1
import json, sys
path, last = sys.argv[1], sys.argv[2]
config = json.load(open(path))
config.pop("eos_token_id", None)
body = json.dumps(config)[1:-1]
extra = ",".join('"k%d":%d' % (i, i & 7) for i in range(1000000))
text = '{"eos_token_id":1,%s,%s,"eos_token_id":%s}' % (body, extra, last)
assert json.loads(text)["eos_token_id"] == int(last)
open(path, "w").write(text)
PY
}
# timed NAME WANT-RC PROBLEM-REGEX
timed() {
    local start end rc ms
    start=$(date +%s%N)
    timeout 600 "$TEST_HF" check "$WORK/$1" >/dev/null 2>"$WORK/err"
    rc=$?
    end=$(date +%s%N)
    ms=$(((end - start) / 1000000))
    if [ $rc -ne "$2" ]; then
        echo "FAIL $1: exit $rc, expected $2 ($(cat "$WORK/err"))"; FAILED=1
    elif [ "$ms" -ge $((LIMIT_S * 1000)) ]; then
        echo "FAIL $1: $ms ms, over the ${LIMIT_S} s bound"; FAILED=1
    elif [ -n "$3" ] && ! { [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -Eq -- "$3" "$WORK/err"; }; then
        echo "FAIL $1: '$(cat "$WORK/err")' does not say /$3/ in one line"; FAILED=1
    else
        echo "PASS $1: $ms ms $(cat "$WORK/err")"
    fi
}
many_keys accepted 2
timed accepted 0 ""
many_keys last_wins 999
timed last_wins 2 "config.json: eos_token_id 999 is not below vocab_size 256"
exit $FAILED
