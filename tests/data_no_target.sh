#!/usr/bin/env bash
# Data that holds no target (every token context only: labels all -100, a mask of zeros) in a
# split the job reads is refused by mtrun before any rank starts, in one line naming the file and
# the split, exit 2, instead of training on a loss of 0 with only weight decay moving the
# weights: the whole stream, the training head when the targets are all in the held-out tail,
# and the tail when evaluation reads it. One such shard beside others with targets trains.
# usage: data_no_target.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 2;/' "$WORK/base.cfg"
mkdir -p "$WORK/none" "$WORK/mixed"
# MTCTOKS1 version 2 shards of the demo text: none/a.bin and none/b.bin all context only,
# mixed/ one of those and one all targets, tail.bin targets in its last 5% only (the 10% tail
# held out for validation), head.bin targets in its first 80% only.
python3 - "$SRC/data/tinyshakespeare.txt" "$WORK" <<'PY'
import struct, sys
t = open(sys.argv[1], "rb").read()[:20000]
def shard(path, bit, lo=0, hi=None):
    hi = len(t) if hi is None else hi
    mask = bytearray((len(t) + 7) // 8)
    for i in range(lo, hi):
        mask[i >> 3] |= bit << (i & 7)
    head = (b"MTCTOKS1" + struct.pack("<IIQI", 2, 2, len(t), 1)).ljust(256, b"\0")
    open(path, "wb").write(head + struct.pack(f"<{len(t)}H", *t) + bytes(mask))
w = sys.argv[2]
shard(f"{w}/none/a.bin", 0)
shard(f"{w}/none/b.bin", 0)
shard(f"{w}/mixed/a.bin", 0)
shard(f"{w}/mixed/b.bin", 1)
shard(f"{w}/tail.bin", 1, len(t) * 95 // 100)
shard(f"{w}/head.bin", 1, 0, len(t) * 80 // 100)
PY
# refused NAME REGEX ARGS...: exit 2, one line on stderr matching REGEX, no checkpoint.
refused() {
    local name=$1 regex=$2 rc
    shift 2
    "$MTRUN" -np 2 "$WORK/base.cfg" --out "$WORK/$name" data.format=tokens "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err"
    rc=$?
    expect "$name: exit code 2 (got $rc), one line: $(cat "$WORK/$name.err")" \
        bash -c "[ $rc -eq 2 ] && [ \$(wc -l <'$WORK/$name.err') -eq 1 ] &&
                 grep -Eq -- '$regex' '$WORK/$name.err' && [ ! -e '$WORK/$name/step_000002' ]"
}
refused one_shard "data.path: .*none/a.bin: no target token in its training split .*nothing to train on" \
    data.path="$WORK/none/a.bin"
refused two_shards "data.path: .*none: no target token in its training split" data.path="$WORK/none"
refused val_path "data.val_path: .*none/b.bin: no target token in its validation split .*nothing to evaluate" \
    data.path="$WORK/mixed" data.val_path="$WORK/none/b.bin"
refused train_path "data.path: .*none/b.bin: no target token in its training split" \
    data.path="$WORK/none/b.bin" data.val_path="$WORK/mixed"
refused tail_only "data.path: .*tail.bin: no target token in its training split \(tokens 1 to 18000 of 20000\)" \
    data.path="$WORK/tail.bin"
refused head_only_eval "data.path: .*head.bin: no target token in its validation split \(tokens 18001 to 20000 of 20000\)" \
    data.path="$WORK/head.bin" eval.interval=1
expect "no rank started for a refused split (no run folder)" test ! -e "$WORK/tail_only"
run_job mixed 2 "$WORK/base.cfg" data.format=tokens data.path="$WORK/mixed" || show_log mixed
expect "a shard without targets beside one with them trains" test -f "$WORK/mixed/step_000002/state.bin"
finish
