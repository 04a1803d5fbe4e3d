#!/usr/bin/env bash
# metrics.jsonl stays JSON Lines whatever happens to the disk:
# - a run folder on a disk that fills up mid-run (a 16 KiB tmpfs: needs root to mount): the job
#   trains on, says once, in one line, that a record could not be written, and every line of
#   metrics.jsonl is whole JSON (a record goes out in one write, or not at all);
# - a metrics.jsonl that ends in a cut line (from a run that could not finish it): --resume says
#   so in one line and removes it before it appends, so every line is whole JSON again.
# usage: e2e_metrics_full.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 4;/; s/^  interval = .*/  interval = 2;/' "$WORK/base.cfg"
all_json() { python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$1"; }

mkdir -p "$WORK/small"
if mount -t tmpfs -o size=16k tmpfs "$WORK/small" 2>/dev/null; then
    trap 'umount "$WORK/small" 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
    sed 's/^steps = .*/steps = 200;/; s/^  interval = .*/  interval = 0;/' "$WORK/base.cfg" \
        >"$WORK/long.cfg"
    run_job full 2 "$WORK/long.cfg" --out "$WORK/small/run"
    rc=$?
    expect "a disk that fills up under metrics.jsonl does not stop training (rc $rc)" \
        test "$rc" -eq 0 || show_log full
    expect "it is said once, in one line" \
        test "$(grep -c '^metrics: .*/metrics.jsonl: a record could not be written (No space left on device)' "$WORK/full.log")" -eq 1
    expect "and every line of metrics.jsonl is whole JSON" all_json "$WORK/small/run/metrics.jsonl"
    umount "$WORK/small"
else
    echo "SKIPPED: full disk (mounting a tmpfs needs root)"
fi

run_job cut 2 "$WORK/base.cfg" || show_log cut
printf '{"step":5,"loss":3.14' >>"$WORK/cut/metrics.jsonl"
sed 's/^steps = .*/steps = 6;/' "$WORK/base.cfg" >"$WORK/more.cfg"
run_job resumed 2 "$WORK/more.cfg" --resume "$WORK/cut" --out "$WORK/cut"
rc=$?
expect "--resume over a cut last line trains on (rc $rc)" test "$rc" -eq 0 || show_log resumed
expect "it says in one line that it removed the cut record" \
    test "$(grep -c '^metrics: .*/metrics.jsonl ended in a record cut short (21 bytes' "$WORK/resumed.log")" -eq 1
expect "and every line of metrics.jsonl is whole JSON" all_json "$WORK/cut/metrics.jsonl"
expect "with the steps of both runs" test "$(grep -c '"step":' "$WORK/cut/metrics.jsonl")" -ge 6
finish
