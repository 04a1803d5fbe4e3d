#!/usr/bin/env bash
# Data that holds no target at all (every token context only: labels all -100, a mask of zeros)
# is refused in one line naming the file, exit 2, instead of training on a loss of 0 with only
# weight decay moving the weights. One such shard beside others with targets trains.
# usage: data_no_target.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 2;/' "$WORK/base.cfg"
mkdir -p "$WORK/none" "$WORK/mixed"
# MTCTOKS1 version 2 shards of the demo text: none/a.bin and none/b.bin all context only,
# mixed/ one of those and one all targets.
python3 - "$SRC/data/tinyshakespeare.txt" "$WORK" <<'PY'
import struct, sys
t = open(sys.argv[1], "rb").read()[:20000]
def shard(path, bit):
    head = (b"MTCTOKS1" + struct.pack("<IIQI", 2, 2, len(t), 1)).ljust(256, b"\0")
    open(path, "wb").write(head + struct.pack(f"<{len(t)}H", *t) + bytes([bit]) * ((len(t) + 7) // 8))
w = sys.argv[2]
shard(f"{w}/none/a.bin", 0)
shard(f"{w}/none/b.bin", 0)
shard(f"{w}/mixed/a.bin", 0)
shard(f"{w}/mixed/b.bin", 0xff)
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
refused one_shard "none/a.bin: no target token: the mask marks every token context only" \
    data.path="$WORK/none/a.bin"
refused two_shards "none: no target token in its 2 shards" data.path="$WORK/none"
refused val_path "none/b.bin: no target token" data.path="$WORK/mixed" data.val_path="$WORK/none/b.bin"
run_job mixed 2 "$WORK/base.cfg" data.format=tokens data.path="$WORK/mixed" || show_log mixed
expect "a shard without targets beside one with them trains" test -f "$WORK/mixed/step_000002/state.bin"
finish
