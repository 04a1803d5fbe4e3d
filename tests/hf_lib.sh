# Shared by the tests of Hugging Face folders made without torch (hf_oss.sh, hf_qwen35.sh,
# hf_moe_config.sh): sourced after setting TEST_HF (tests/test_hf), T (the tests folder) and
# FAMILY (the name of the fixture writer, tests/FAMILY_fixture.py, and of its checker,
# tests/FAMILY_check.py). Makes WORK (removed at exit) and FAILED, and defines:
#   pass / fail MESSAGE
#   roundtrip NAME MAX_SHARD_BYTES DTYPE FIXTURE-ARGS...: the fixture's folder through test_hf
#     roundtrip (import, export, re-import bitwise), then the checker on the export
#   refuse NAME PROBLEM-REGEX [roundtrip] FIXTURE-ARGS...: test_hf check (or roundtrip) exits 2
#     with one line naming the folder and matching PROBLEM-REGEX
WORK=$(mktemp -d "/tmp/mt-$FAMILY.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILED=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILED=1; }
roundtrip() {
    local name=$1 max=$2 dtype=$3 bf=
    shift 3
    [ "$dtype" = bfloat16 ] && bf=--bf16
    python3 "$T/${FAMILY}_fixture.py" "$WORK/$name" "$@" || exit 1
    if ! "$TEST_HF" roundtrip "$WORK/$name" "$WORK/$name.out" "$max" "$dtype" >"$WORK/log" 2>&1; then
        fail "$name: round trip: $(cat "$WORK/log")"
    elif python3 "$T/${FAMILY}_check.py" "$WORK/$name.out" "$WORK/$name" $bf >"$WORK/log" 2>&1; then
        pass "$name: $(cat "$WORK/log")"
    else
        fail "$name: $(cat "$WORK/log")"
    fi
}
refuse() {
    local name=$1 problem=$2 how=check rc
    shift 2
    [ "${1:-}" = roundtrip ] && how=roundtrip && shift
    python3 "$T/${FAMILY}_fixture.py" "$WORK/$name" "$@" || exit 1
    if [ $how = check ]; then
        "$TEST_HF" check "$WORK/$name" >/dev/null 2>"$WORK/err"
    else
        "$TEST_HF" roundtrip "$WORK/$name" "$WORK/$name.out" 5000000000 >/dev/null 2>"$WORK/err"
    fi
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q "$WORK/$name/" "$WORK/err" &&
        grep -Eq -- "$problem" "$WORK/err"; then
        pass "$name: $(cat "$WORK/err")"
    else
        fail "$name: exit $rc, '$(cat "$WORK/err")' does not say /$problem/ in one line"
    fi
}
