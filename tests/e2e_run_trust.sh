#!/usr/bin/env bash
# A folder the job writes into or resumes from must be one no other user can change: they could
# swap in checkpoints of their own, edit a manifest's settings (its checksum is no signature: any
# user can recompute it) to steer a --resume, or take what the job writes.
# - --out, storage.dir and export_dir in a folder another user owns, under one they own, through
#   their symbolic link, or in one every user (or a group) may write to without the sticky bit:
#   refused in one line naming the folder and why, exit 2, nothing written there;
# - a folder like /tmp (root's, sticky) is fine, as is one of the user's own;
# - --resume from a checkpoint another user can change (their folder, their manifest.json, a
#   manifest their group may write), with its settings edited to read a secret: refused in one
#   line, the last one, and its settings never applied, whether the job writes there or to an
#   --out of its own;
# - an export folder another user makes on the way while the job trains: the export is refused
#   at the end, and nothing is written into it;
# - the files a job writes take no more permissions than the user's umask gives (077: 0600 and
#   0700).
# Another user is root's setpriv to nobody: skipped (77) where the test is not root.
# usage: e2e_run_trust.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
    echo "SKIPPED: another user is simulated with setpriv as root (not root here, or no setpriv)"
    exit 77
fi
as_other() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$@"; }
other=$(id -u nobody)
chmod 755 "$WORK"
small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 2;/; s/^  interval = .*/  interval = 2;/' "$WORK/base.cfg"

mkdir -m 1777 "$WORK/shared"         # like /tmp: root's, sticky
as_other mkdir -m 0777 "$WORK/shared/exp"  # theirs, open to all
as_other mkdir -m 0755 "$WORK/shared/theirs"
as_other ln -s "$WORK" "$WORK/shared/link" # theirs, to a folder of root's
mkdir -m 0777 "$WORK/open"            # root's, but anyone may rename in it
mkdir -m 0775 "$WORK/grp"             # root's, its group may write

# refused NAME REGEX ARGS...: exit 2, nothing on stdout, one line on stderr matching REGEX.
refused() {
    local name=$1 regex=$2 rc
    shift 2
    "$MTRUN" -np 2 "$WORK/base.cfg" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    rc=$?
    expect "$name: refused (rc $rc) in one line: $(cat "$WORK/$name.err")" \
        bash -c "[ $rc -eq 2 ] && [ ! -s '$WORK/$name.out' ] && [ \$(wc -l <'$WORK/$name.err') -eq 1 ] &&
                 grep -Eq -- '$regex' '$WORK/$name.err'"
}
owned="belongs to uid $other \\(nobody\\), not to this user \\(uid 0\\)"

refused theirs "^mtrun: --out $WORK/shared/exp: $WORK/shared/exp $owned: .*use a folder only you can change" \
    --out "$WORK/shared/exp"
expect "and nothing was written into their folder" test -z "$(ls -A "$WORK/shared/exp")"
refused under "^mtrun: --out $WORK/shared/theirs/run: $WORK/shared/theirs $owned" \
    --out "$WORK/shared/theirs/run"
expect "and no folder was made in theirs" test -z "$(ls -A "$WORK/shared/theirs")"
refused link "$WORK/shared/link \\(a symbolic link\\) $owned" --out "$WORK/shared/link/run"
expect "and nothing was made through their link" test ! -e "$WORK/run"
refused open "^mtrun: --out $WORK/open/run: $WORK/open is writable by every user \\(mode 0777, not sticky\\)" \
    --out "$WORK/open/run"
refused group "$WORK/grp is writable by its group \\(mode 0775, not sticky\\)" --out "$WORK/grp/run"
expect "and no run folder was made in either" test ! -e "$WORK/open/run" -a ! -e "$WORK/grp/run"
refused storage "storage.dir: $WORK/shared/exp: $WORK/shared/exp $owned" \
    storage.dir="$WORK/shared/exp" storage.adam=true --out "$WORK/tier"
refused export "export_dir: $WORK/shared/theirs/model: $WORK/shared/theirs $owned" \
    export_dir="$WORK/shared/theirs/model" --out "$WORK/exported"

run_job sticky 2 "$WORK/base.cfg" --out "$WORK/shared/mine" || show_log sticky
expect "a folder of one's own in a sticky folder of root's (as /tmp) trains" \
    grep -qx step_000002 "$WORK/shared/mine/LATEST"

# --resume: their copy of a checkpoint, its settings edited to train on root's secret. The
# manifest's "self" checksum is not recomputed: the refusal comes before it is read.
echo "root's secret" >"$WORK/secret.txt"
chmod 600 "$WORK/secret.txt"
steer() { # FOLDER: its manifest's settings now read the secret
    python3 - "$1/step_000002/manifest.json" "$WORK/secret.txt" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["overrides"] = ["data.path=" + sys.argv[2]]
json.dump(m, open(sys.argv[1], "w"))
EOF
}
cp -a "$WORK/shared/mine" "$WORK/shared/stolen"
steer "$WORK/shared/stolen"
chown -R nobody "$WORK/shared/stolen"
# resumed NAME REGEX ARGS...: refused, and the refusal the last line of all mtrun said
resumed() {
    local name=$1 regex=$2 rc
    shift 2
    "$MTRUN" -np 2 "$WORK/base.cfg" "$@" steps=4 >"$WORK/$name.log" 2>&1
    rc=$?
    expect "$name: --resume refused (rc $rc), the refusal the last line: $(tail -n 1 "$WORK/$name.log")" \
        bash -c "[ $rc -eq 2 ] && tail -n 1 '$WORK/$name.log' | grep -Eq -- '$regex'"
    expect "$name: its settings are not applied" bash -c "! grep -q 'apply again\|secret' '$WORK/$name.log'"
}
resumed stolen "^mtrun: --resume $WORK/shared/stolen: $WORK/shared/stolen $owned: .*checksum is no signature" \
    --resume "$WORK/shared/stolen"
expect "and nothing was written there" test ! -e "$WORK/shared/stolen/step_000004"
resumed stolen_out "^mtrun: --resume $WORK/shared/stolen: .*copy it into a folder of your own" \
    --resume "$WORK/shared/stolen" --out "$WORK/elsewhere"
expect "nor into the --out folder" test ! -e "$WORK/elsewhere"
# root's folder, their manifest.json
cp -a "$WORK/shared/mine" "$WORK/planted"
steer "$WORK/planted"
chown nobody "$WORK/planted/step_000002/manifest.json"
resumed planted "$WORK/planted/step_000002/manifest.json $owned" --resume "$WORK/planted"
# root's manifest.json, which its group may write
chown root "$WORK/planted/step_000002/manifest.json"
chmod 664 "$WORK/planted/step_000002/manifest.json"
resumed group_manifest "manifest.json is writable by its group \\(mode 0664\\)" \
    --resume "$WORK/planted"

# An export folder another user makes while the job trains (nothing was there at the start):
# the export at the end is refused, nothing goes into their folder, and the job ends with exit 2.
sed 's/^steps = .*/steps = 6;/' "$WORK/base.cfg" >"$WORK/slow.cfg"
MT_FAULT_SLOW_ADAMW_MS=300 "$MTRUN" -np 2 "$WORK/slow.cfg" --out "$WORK/late" \
    export_dir="$WORK/shared/later/model" >"$WORK/late.log" 2>&1 &
pid=$!
for i in $(seq 1 1200); do grep -q '^step *1/' "$WORK/late.log" && break; sleep 0.05; done
as_other mkdir -m 0777 "$WORK/shared/later"
wait "$pid"
rc=$?
expect "an export folder they made meanwhile: the export is refused (rc $rc)" \
    bash -c "[ $rc -eq 2 ] && grep -Eq 'export_dir: $WORK/shared/later $owned' '$WORK/late.log'"
expect "and nothing was written into it" test -z "$(ls -A "$WORK/shared/later")"

# umask 077: every file and folder the job makes is the user's alone.
(umask 077 && "$MTRUN" -np 2 "$WORK/base.cfg" --out "$WORK/private" \
    export_dir="$WORK/private-export" >"$WORK/private.log" 2>&1) || show_log private
wide=$(find "$WORK/private" "$WORK/private-export" -perm /077)
expect "under umask 077 the checkpoint, export and logs are 0600 / 0700: ${wide:-none wider}" \
    bash -c "[ -z '$wide' ] && [ -f '$WORK/private/step_000002/state.bin' ] &&
             [ -f '$WORK/private-export/config.json' ]"
finish
