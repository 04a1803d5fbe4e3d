#!/usr/bin/env bash
# The run lock is the job's user's alone. Another user who can read a run folder:
# - flocks the folder itself (what the lock once was) and RUN/.lock: neither blocks a --resume
#   there, and RUN/.lock cannot even be opened by them (mode 0600);
# - plants RUN/.lock of their own in a folder everyone may write to: the job is refused in one
#   line naming the file's uid, exit 2, and the file stays theirs.
# Another user is root's setpriv to nobody: skipped (77) where the test is not root.
# usage: e2e_run_lock_user.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
    echo "SKIPPED: another user is simulated with setpriv as root (not root here, or no setpriv)"
    exit 77
fi
as_other() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$@"; }
chmod 755 "$WORK"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 2;/; s/^  interval = .*/  interval = 2;/' "$WORK/base.cfg"
sed 's/^steps = .*/steps = 4;/' "$WORK/base.cfg" >"$WORK/more.cfg"
run_job run 2 "$WORK/base.cfg" || show_log run
chmod 755 "$WORK/run"

as_other flock -x "$WORK/run" sleep 30 &
held=$!
trap 'stop_holder $held; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
for i in $(seq 1 200); do grep -q "FLOCK.*:$(stat -c %i "$WORK/run")\$" /proc/locks && break; sleep 0.02; done
expect "the other user cannot open the lock file" \
    bash -c "! setpriv --reuid=nobody --regid=$(id -g nobody) --clear-groups flock -n '$WORK/run/.lock' true 2>/dev/null"
"$MTRUN" -np 2 "$WORK/more.cfg" --resume "$WORK/run" >"$WORK/resume.log" 2>&1
rc=$?
expect "their flock on the folder does not block --resume (rc $rc)" \
    bash -c "[ $rc -eq 0 ] && grep -qx step_000004 '$WORK/run/LATEST'" || show_log resume
stop_holder "$held"

mkdir -m 1777 "$WORK/open"
as_other touch "$WORK/open/.lock"
"$MTRUN" -np 2 "$WORK/base.cfg" --out "$WORK/open" >"$WORK/open.out" 2>"$WORK/open.err"
rc=$?
expect "a lock file another user planted refuses the job (rc $rc)" test "$rc" -eq 2
expect "in one line naming its uid: $(cat "$WORK/open.err")" \
    bash -c "[ \$(wc -l <'$WORK/open.err') -eq 1 ] &&
             grep -q -- '^mtrun: --out $WORK/open: its lock file .lock belongs to uid $(id -u nobody), not to this user' '$WORK/open.err'"
expect "and it is left as it was, theirs, and nothing else is written there" \
    bash -c "[ \"\$(stat -c %U '$WORK/open/.lock')\" = nobody ] && [ \"\$(ls -A '$WORK/open')\" = .lock ]"
finish
