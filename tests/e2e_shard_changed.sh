#!/usr/bin/env bash
# A token shard changed under a running job: the compute rank reads each window with pread()
# and checks every id against model.vocab where it uses it, so the job ends with exit code 2 and
# one line naming the file. It once died of SIGBUS after a truncate, and trained on ids >= vocab
# written in place (exit 0, or SIGSEGV).
# usage: e2e_shard_changed.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 100000;/; s/^  interval = .*/  interval = 100000;/' "$WORK/base.cfg"
# shard NAME: the demo text's first 40,000 bytes as a uint16 shard (vocab 256, as the bytes).
shard() {
    python3 - "$SRC/data/tinyshakespeare.txt" "$WORK/$1" <<'PY'
import struct, sys
t = open(sys.argv[1], "rb").read()[:40000]
open(sys.argv[2], "wb").write((b"MTCTOKS1" + struct.pack("<IIQ", 1, 2, len(t))).ljust(256, b"\0") +
                              struct.pack(f"<{len(t)}H", *t))
PY
}

# changed NAME CHANGE REGEX: starts a job on shard NAME.bin, changes it (CHANGE, a command line
# given the file) once the job has trained a step, and expects exit 2 and REGEX in one line.
changed() {
    local name=$1 change=$2 regex=$3 pid rc
    shard "$name.bin"
    "$MTRUN" -np 2 "$WORK/base.cfg" --out "$WORK/$name" data.path="$WORK/$name.bin" \
        data.format=tokens >"$WORK/$name.log" 2>"$WORK/$name.err" &
    pid=$!
    for _ in $(seq 600); do
        grep -q '"step":2,' "$WORK/$name/metrics.jsonl" 2>/dev/null && break
        sleep 0.1
    done
    expect "$name: the job trained before the change" grep -q '"step":2,' "$WORK/$name/metrics.jsonl"
    bash -c "$change '$WORK/$name.bin'"
    for _ in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    kill -0 $pid 2>/dev/null && kill -INT $pid
    wait $pid
    rc=$?
    expect "$name: exit code 2 (got $rc), one line naming the file: $(cat "$WORK/$name.err")" \
        bash -c "[ $rc -eq 2 ] && [ \$(wc -l <'$WORK/$name.err') -eq 1 ] &&
                 grep -Eq -- '$regex' '$WORK/$name.err'"
}
changed cut "truncate -s 300" "cut.bin: changed while the job reads it: it ends before byte"
changed ids "python3 -c 'import sys; f = open(sys.argv[1], \"r+b\"); f.seek(256); f.write(b\"\\xff\" * 80000)'" \
    "ids.bin: token 65535 at index [0-9]+ is >= model.vocab = 256"
finish
