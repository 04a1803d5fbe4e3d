#!/usr/bin/env bash
# Another user of the machine knows the job id as soon as the job starts (mpirun's arguments name
# the job's folder /dev/shm/mtc-<job>, and ps shows them) and creates, before the ranks do, the
# names a job once took: /dev/shm/mtc-<job>-s0..s4 (the optimizer ranks' regions),
# /dev/shm/mtc-<job>-stop, and mtc-<job>-n0-s<k>.grads in a storage.dir open to everyone. The
# job's names have a random part that no argument shows, so:
# - the job trains to its end (exit 0);
# - the other user's files are still there, theirs, and mtrun neither removed them nor counted
#   them as regions the job left behind; the job itself left nothing.
# Another user is root's setpriv to nobody: skipped (77) where the test is not root.
# usage: e2e_foreign_names.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
    echo "SKIPPED: another user is simulated with setpriv as root (not root here, or no setpriv)"
    exit 77
fi
as_other() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$@"; }
chmod 755 "$WORK"
mkdir -m 1777 "$WORK/disk"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 6;/; s/^  interval = .*/  interval = 3;/' "$WORK/base.cfg"

"$MTRUN" -np 5 "$WORK/base.cfg" --out "$WORK/run" "storage.dir=$WORK/disk" storage.grads=true \
    >"$WORK/run.log" 2>&1 &
pid=$!
# mtrun prints the job id just before it starts mpirun: the other user is that quick.
for i in $(seq 1 4000); do
    job=$(job_id run)
    [ -n "$job" ] && break
    sleep 0.005
done
planted=()
for k in 0 1 2 3 4; do planted+=("/dev/shm/mtc-$job-s$k" "$WORK/disk/mtc-$job-n0-s$k.grads"); done
planted+=("/dev/shm/mtc-$job-stop")
trap 'rm -f "${planted[@]}"; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
[ -n "$job" ] && as_other bash -c 'for f in "$@"; do : >"$f"; done' - "${planted[@]}"
wait "$pid"
rc=$?
expect "the job trains to its end beside names another user made first (rc $rc)" \
    bash -c "[ $rc -eq 0 ] && grep -qx step_000006 '$WORK/run/LATEST'" || show_log run
mine=0
for f in "${planted[@]}"; do [ "$(stat -c %U "$f" 2>/dev/null)" = nobody ] && mine=$((mine + 1)); done
expect "the other user's ${#planted[@]} files are still there, theirs ($mine)" \
    test "$mine" -eq "${#planted[@]}"
expect "mtrun says nothing of regions left behind" \
    bash -c "! grep -q 'left in /dev/shm\|removed' '$WORK/run.log'"
left=$(for f in /dev/shm/mtc-"$job"*; do [ -O "$f" ] && echo "$f"; done)
expect "the job left nothing of its own in /dev/shm: ${left:-nothing}" test -z "$left"
expect "nor in storage.dir" \
    test "$(find "$WORK/disk" -mindepth 1 -user root | wc -l)" -eq 0
finish
