#!/usr/bin/env bash
# Issue 14, item 9: what a run writes, on a disk that fills up, under a careless umask, and in
# a folder whose path is too long.
# - A full disk at a save: the job stops with a line that says the device is full and that the
#   partial save was removed, and no temporary folder is left (needs a tmpfs mount: root).
# - umask 000: nothing the run writes is world-writable.
# - A --out path too long for the files a run writes inside it is refused before training.
# usage: e2e_disk.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 4;/; s/^  interval = .*/  interval = 2;/' "$WORK/base.cfg"

# A 256 KiB tmpfs: state.bin alone is 1.2 MiB.
mkdir -p "$WORK/small"
if mount -t tmpfs -o size=256k tmpfs "$WORK/small" 2>/dev/null; then
    trap 'umount "$WORK/small" 2>/dev/null; rm -rf "$WORK"' EXIT
    run_job full 3 "$WORK/base.cfg" --out "$WORK/small/run"
    rc=$?
    expect "a full disk at a save ends the job (exit $rc)" test "$rc" -ne 0
    expect "it says the device is full and that the partial save was removed" grep -q \
        "state.bin: No space left on device (the device holding the checkpoint folder is full); the partial save .*step_000002.tmp was removed" \
        "$WORK/full.log"
    # Both optimizer ranks find the disk full at once. Each wrote its line a byte at a time to
    # unbuffered stderr, so mpirun's output could interleave them ("megatrain: megatrain: ..."),
    # which broke the line above now and then; now a line goes out in one write, and mtrun says
    # a line that several ranks said once.
    expect "and says it once, whole, though every optimizer rank found the disk full" \
        bash -c "[ \$(grep -c '^megatrain: checkpoint: .*No space left on device' '$WORK/full.log') -eq 1 ] &&
                 ! grep -q 'megatrain: megatrain:' '$WORK/full.log'"
    expect "no temporary folder is left behind" \
        bash -c "! ls -a '$WORK/small/run' | grep -q '^\.step_'"
    umount "$WORK/small"
else
    echo "SKIPPED: full disk (mounting a tmpfs needs root)"
fi

# umask 000: modes are set by the job, not left to the umask.
sed 's/^steps = .*/steps = 2;/' "$WORK/base.cfg" >"$WORK/trace.cfg"
echo "trace_steps = [1, 1];" >>"$WORK/trace.cfg"
(umask 000 && run_job open 3 "$WORK/trace.cfg") || show_log open
expect "under umask 000 the run wrote its files" \
    test -f "$WORK/open/trace.json" -a -f "$WORK/open/step_000002/state.bin"
expect "under umask 000 nothing the run wrote is world-writable" \
    test -z "$(find "$WORK/open" -perm -o+w)"

# A --out path of about 4034 bytes: under PATH_MAX, but not with a save's names inside.
long=$WORK
for i in $(seq 1 16); do long=$long/$(printf 'd%.0s' $(seq 1 250)); done # about 4034 bytes
"$MTRUN" -np 3 "$WORK/base.cfg" --out "$long" >"$WORK/long.log" 2>&1
rc=$?
expect "a --out path too long is refused with exit code 2 (was $rc)" test "$rc" -eq 2
expect "the refusal says why" grep -q -- "--out: a path of [0-9]* bytes, too long" "$WORK/long.log"
expect "nothing was trained into it" test ! -e "$long/metrics.jsonl"
finish
