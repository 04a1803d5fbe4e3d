#!/usr/bin/env bash
# Bad input is exit code 2 end to end, also when a rank is the one to find it (docs/running.md):
# a wrapper that retries on anything but 2 must not retry these.
# - backend = "cuda" where there is no CUDA (a build without it, or no device): refused by mtrun
#   before any rank starts (skipped where a GPU serves the job);
# - --resume of a run folder on a read-only mount: refused by mtrun before any rank starts (root
#   and a private mount namespace make the mount; skipped without them);
# - a token >= model.vocab in a shard, found by the compute rank as it loads the data;
# - NaN or Inf weights in model_dir, found by the optimizer rank that reads them.
# usage: e2e_bad_input_exit.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"

# exits_2 NAME REGEX MTRUN-ARGS...: exit code 2, and REGEX on one line of stderr; no "ended
# abnormally".
exits_2() {
    local name=$1 regex=$2 rc
    shift 2
    "$MTRUN" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    rc=$?
    expect "$name: exit code 2 (got $rc): $(grep -E -- "$regex" "$WORK/$name.err" | head -c 300)" \
        bash -c "[ $rc -eq 2 ] && grep -Eq -- '$regex' '$WORK/$name.err' &&
                 ! grep -q 'ended abnormally' '$WORK/$name.err'"
}

if have_gpu && "$MTRUN" --version | grep -q cuda; then
    echo "SKIPPED (this case): backend = \"cuda\" has a GPU here"
else
    exits_2 cuda_no_device 'backend = "cuda": (this build has no CUDA backend|no usable CUDA device)' \
        -np 2 "$WORK/base.cfg" --out "$WORK/cuda" backend=cuda
    expect "cuda_no_device: refused before any rank started (no run folder)" test ! -e "$WORK/cuda"
fi

# --resume on a read-only mount
sed -i 's/^steps = .*/steps = 4;/; s/^  interval = .*/  interval = 2;/' "$WORK/base.cfg"
if [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null; then
    run_job part 2 "$WORK/base.cfg" --stop-at 2 || show_log part
    unshare -m bash -c "mount --bind '$WORK/part' '$WORK/part' && mount -o remount,ro,bind '$WORK/part' &&
        '$MTRUN' -np 2 '$WORK/base.cfg' --resume '$WORK/part' >'$WORK/ro.out' 2>'$WORK/ro.err'
        echo \$? >'$WORK/ro.rc'"
    expect "--resume on a read-only mount: exit code 2 ($(cat "$WORK/ro.rc" 2>/dev/null)): $(cat "$WORK/ro.err")" \
        bash -c "[ \"\$(cat '$WORK/ro.rc')\" = 2 ] && [ \$(wc -l <'$WORK/ro.err') -eq 1 ] &&
                 grep -q 'part: the folder is on a read-only file system' '$WORK/ro.err'"
else
    echo "SKIPPED (this case): --resume on a read-only mount needs root and unshare -m"
fi

# A token >= model.vocab (256: test-small reads bytes) in a uint16 shard.
python3 - "$SRC/data/tinyshakespeare.txt" "$WORK/big.bin" <<'PY'
import struct, sys
t = list(open(sys.argv[1], "rb").read()[:20000])
t[12345] = 4000
open(sys.argv[2], "wb").write((b"MTCTOKS1" + struct.pack("<IIQ", 1, 2, len(t))).ljust(256, b"\0") +
                              struct.pack(f"<{len(t)}H", *t))
PY
exits_2 token_past_vocab "big.bin: token 4000 at index 12345 is >= model.vocab = 256" \
    -np 2 "$WORK/base.cfg" --out "$WORK/tok" data.path="$WORK/big.bin" data.format=tokens

# Inf and NaN weights (tests/hf_fixture.py --specials puts them in layer 0's q_proj).
python3 "$SRC/tests/hf_fixture.py" "$WORK/nanw" --dtypes mixed --specials
sed -e 's/^steps *=.*/steps = 2;/' "$WORK/base.cfg" |
    awk '/^model = {/{skip=1} !skip{print} skip&&/^};/{skip=0}' >"$WORK/hf.cfg"
echo "model_dir = \"$WORK/nanw\";" >>"$WORK/hf.cfg"
exits_2 nan_weights "q_proj.weight: element 3 is infinite: non-finite weights are refused" \
    -np 3 "$WORK/hf.cfg" --out "$WORK/nan"
finish
