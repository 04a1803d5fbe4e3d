#!/usr/bin/env bash
# Loss masks end to end (MTCTOKS1 version 2, docs/data-format.md), on the CPU backend:
# - the demo text as a version 2 shard whose mask marks every token a target trains bitwise like
#   the same text as a version 1 shard (the mask path changes nothing where nothing is masked);
# - with every third line context only, the step's target count in metrics.jsonl is the one
#   computed here from data.c's windows (mirrored in tests/mtparity.py), the losses differ from
#   the unmasked ones, and they are bitwise the same at -np 2 and 3 and across a resume;
# - a mask cut short, and unknown flags, are refused in one line naming the file.
# usage: data_masks.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
command -v python3 >/dev/null || { echo "SKIPPED: python3 is missing (it writes the shards)"; exit 77; }
TEXT=$SRC/data/tinyshakespeare.txt

# plain.bin (version 1), ones.bin (version 2, every bit set), masked.bin (every third line's
# bytes context only), short.bin (masked.bin less its last byte), flags.bin (flags 3).
python3 - "$TEXT" "$WORK" <<'PY' || { echo "FAIL: cannot write the shards"; exit 1; }
import struct, sys
tokens = open(sys.argv[1], "rb").read()
def shard(version, mask=None, flags=1):
    head = b"MTCTOKS1" + struct.pack("<IIQ", version, 2, len(tokens))
    if version == 2:
        head += struct.pack("<I", flags)
    body = struct.pack(f"<{len(tokens)}H", *tokens)
    if mask is not None:
        bits = bytearray((len(tokens) + 7) // 8)
        for i, m in enumerate(mask):
            bits[i >> 3] |= m << (i & 7)
        body += bytes(bits)
    return head.ljust(256, b"\0") + body
mask, line = [], 0
for t in tokens:
    mask.append(0 if line % 3 == 2 else 1)
    line += t == 10
out = sys.argv[2]
open(f"{out}/plain.bin", "wb").write(shard(1))
open(f"{out}/ones.bin", "wb").write(shard(2, [1] * len(tokens)))
open(f"{out}/masked.bin", "wb").write(shard(2, mask))
open(f"{out}/short.bin", "wb").write(shard(2, mask)[:-1])
open(f"{out}/flags.bin", "wb").write(shard(2, mask, flags=3))
open(f"{out}/mask.txt", "w").write("".join(map(str, mask)))
PY

# data.path and data.val_path name the same shard: all of it trains (data.c's n_train = n).
small_config cpu "$WORK/base.cfg"
for name in plain ones masked short flags; do
    sed -e "s|^  path *=.*|  path = \"$name.bin\"; val_path = \"$name.bin\"; format = \"tokens\";|" \
        -e 's/^steps = .*/steps = 6;/' -e 's/interval = .*/interval = 3;/' \
        "$WORK/base.cfg" >"$WORK/$name.cfg"
    grep -q "path = \"$name.bin\"" "$WORK/$name.cfg" || { echo "FAIL: config edit"; exit 1; }
done
targets() { grep -o '"targets":[0-9]*' "$1/metrics.jsonl" | cut -d: -f2; }

run_job plain 3 "$WORK/plain.cfg" || { show_log plain; expect "the version 1 job succeeds" false; }
run_job ones 3 "$WORK/ones.cfg" || { show_log ones; expect "the all-targets job succeeds" false; }
run_job masked 3 "$WORK/masked.cfg" || { show_log masked; expect "the masked job succeeds" false; }
run_job masked2 2 "$WORK/masked.cfg" || { show_log masked2; expect "the masked job at -np 2 succeeds" false; }
run_job part 3 "$WORK/masked.cfg" --stop-at 3 || { show_log part; expect "the masked job to step 3 succeeds" false; }
run_job part 2 "$WORK/masked.cfg" --resume "$WORK/part" ||
    { show_log part; expect "its resume succeeds" false; }

expect "6 steps ran" test "$(losses "$WORK/plain" | wc -l)" -eq 6
expect "an all-targets mask trains bitwise like no mask" diff <(losses "$WORK/plain") <(losses "$WORK/ones")
# test-small: 2 micro-batches of 4 x 32 tokens
expect "without a mask every token is a target (256 a step)" \
    test "$(targets "$WORK/plain" | sort -u)" = 256
python3 - "$SRC/tests" "$WORK" >"$WORK/want-targets" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import mtparity
mask = [int(c) for c in open(sys.argv[2] + "/mask.txt").read()]
seed = 1337
for step in range(6):  # test-small.cfg: seed 1337, micro_batch 4, micro_batches 2, seq_len 32
    print(sum(sum(row) for m in range(2)
              for row in mtparity.batch(mask, seed, step, m, 4, 32, len(mask))[1]))
PY
expect "the masked steps' target counts are data.c's windows' ($(targets "$WORK/masked" | tr '\n' ' '))" \
    diff <(targets "$WORK/masked") "$WORK/want-targets"
expect "masked losses differ from the unmasked ones" \
    test -z "$(comm -12 <(losses "$WORK/plain" | sort) <(losses "$WORK/masked" | sort))"
expect "masked: -np 2 = -np 3, bitwise" diff <(losses "$WORK/masked") <(losses "$WORK/masked2")
expect "masked: stopped at 3 and resumed = uninterrupted, bitwise" \
    diff <(losses "$WORK/masked") <(losses "$WORK/part")

for bad in short flags; do
    "$MTRUN" -np 3 "$WORK/$bad.cfg" --out "$WORK/$bad" >"$WORK/$bad.out" 2>"$WORK/$bad.err"
    rc=$?
    expect "$bad.bin: exit code 2 (got $rc)" test "$rc" -eq 2
    expect "$bad.bin: one line naming the file ($(head -c 300 "$WORK/$bad.err"))" \
        test "$(wc -l <"$WORK/$bad.err")" -eq 1 -a -n "$(grep "$bad.bin: " "$WORK/$bad.err")"
done
grep -q "with the target mask" "$WORK/short.err"
expect "the short mask's line says the mask is part of the size" test $? -eq 0
grep -q "unknown shard flags 0x3" "$WORK/flags.err"
expect "the unknown flags are named" test $? -eq 0
finish
