#!/usr/bin/env bash
# The plan's probe of storage.dir's disk (launcher/host_probe.c), on a disk others share:
# - it writes at most an eighth of the free space, in 16 MiB blocks (and at most 256 MiB), and
#   nothing at all where that is under 32 MiB; the plan then says the rate was not measured and
#   why, and how to give it, rather than assuming one without a word;
# - its file has no name: a link planted at the name it once used (.mtrun-disk-probe-PID) is
#   neither followed nor a reason to assume a rate;
# - --disk-bw writes nothing.
# The small disks are ext4 images on loop devices, so the bytes written to each are counted by
# the kernel (lifetime_write_kbytes, read before and after); they need root, and are skipped
# with a reason without it.
# usage: plan_disk_probe.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/c.cfg"

# plan NAME DIR [ARGS...]: mtrun --plan with Adam's moments in DIR; output in $WORK/NAME.txt.
plan() {
    local name=$1 dir=$2
    shift 2
    "$MTRUN" --plan -np 3 "$WORK/c.cfg" storage.dir="$dir" storage.adam=true "$@" \
        >"$WORK/$name.txt" 2>&1
}
# The plan of $WORK/NAME.txt says either how the rate was measured or why it was not.
says_rate() {
    grep -qE 'measured: [0-9]+ MiB written and read|disk rate not measured \(.*\): assuming .*; set --disk-bw' \
        "$WORK/$1.txt"
}

# A link at the name the probe once used, with mtrun's own pid: sh execs mtrun in its place.
mkdir "$WORK/disk"
echo precious >"$WORK/target"
sh -c 'ln -s "$1" "$2/.mtrun-disk-probe-$$" && exec "$3" --plan -np 3 "$4" storage.dir="$2" \
    storage.adam=true' sh "$WORK/target" "$WORK/disk" "$MTRUN" "$WORK/c.cfg" >"$WORK/link.txt" 2>&1
expect "a plan beside a planted link runs" grep -q '^NVMe tier' "$WORK/link.txt"
expect "the link's target is untouched" test "$(cat "$WORK/target")" = precious
expect "the plan says how the rate was measured, or why not" says_rate link
expect "the probe leaves nothing in storage.dir but the link" \
    test "$(ls -A "$WORK/disk")" = "$(cd "$WORK/disk" && echo .mtrun-disk-probe-*)"

if [ "$(id -u)" -ne 0 ]; then
    echo "SKIPPED: the small disks (loop-mounted ext4 images need root)"
    finish
    exit
fi
trap 'umount "$WORK/d64" "$WORK/d512" 2>/dev/null; rm -rf "$WORK"' EXIT
# disk NAME SIZE: an ext4 image of SIZE mounted at $WORK/NAME; $written: its kernel counter.
disk() {
    truncate -s "$2" "$WORK/$1.img" && mkfs.ext4 -q -F "$WORK/$1.img" && mkdir "$WORK/$1" &&
        mount -o loop "$WORK/$1.img" "$WORK/$1" || return 1
    local dev
    dev=$(findmnt -no SOURCE "$WORK/$1")
    written=/sys/fs/ext4/${dev#/dev/}/lifetime_write_kbytes
}
kb() { cat "$written" 2>/dev/null || echo 0; }

if ! disk d64 64M; then
    echo "SKIPPED: the small disks (no loop device or mkfs.ext4 here)"
    finish
    exit
fi
[ -r "$written" ] || echo "SKIPPED: the bytes written (no $written)"
before=$(kb)
plan d64 "$WORK/d64"
expect "64 MiB disk: the plan says the rate was not measured, why, and what to do" grep -q \
    "disk rate not measured ([0-9.]* MiB free in storage.dir; the probe writes at most 1/8 of it and needs 32 MiB): assuming 2 GB/s; set --disk-bw" \
    "$WORK/d64.txt"
expect "64 MiB disk: the probe wrote nothing (kernel: $(($(kb) - before)) KiB, metadata)" \
    test $(($(kb) - before)) -le 1024
"$MTRUN" --plan --json -np 3 "$WORK/c.cfg" storage.dir="$WORK/d64" storage.adam=true \
    >"$WORK/d64.json" 2>&1
expect "64 MiB disk: --json says the rate was not measured" grep -q '"bw_measured":false' \
    "$WORK/d64.json"

disk d512 512M || { echo "FAIL: no second disk"; exit 1; }
free=$(($(stat -f -c '%a * %S' "$WORK/d512")))
want=$((free / 8 / (16 << 20) * 16)) # MiB: an eighth of the free space, in 16 MiB blocks
[ "$want" -gt 256 ] && want=256
before=$(kb)
plan d512 "$WORK/d512"
got=$(($(kb) - before))
expect "512 MiB disk ($((free >> 20)) MiB free): the probe measures on $want MiB" grep -q \
    "measured: $want MiB written and read, O_DIRECT" "$WORK/d512.txt"
expect "512 MiB disk: it wrote no more (kernel: $got KiB)" test "$got" -le $((want * 1024 + 1024))
expect "512 MiB disk: it left nothing" test "$(ls -A "$WORK/d512")" = lost+found
before=$(kb)
plan given "$WORK/d512" --disk-bw 3000000000
expect "--disk-bw: the plan takes it, and the probe writes nothing" \
    bash -c "grep -q 'at 3 GB/s (--disk-bw)' '$WORK/given.txt' && [ $(($(kb) - before)) -le 1024 ]"
finish
