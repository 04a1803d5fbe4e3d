#!/bin/sh
# mtrun --help, --version and --dry-run: exit 0 and print what they promise.
# usage: launcher_dry_run.sh MTRUN REPO_ROOT
set -u
MTRUN=$1
ROOT=$2
fail() { echo "FAIL $*"; exit 1; }

help=$("$MTRUN" --help) || fail "--help exited with $?"
printf '%s\n' "$help" | grep -q '^usage: mtrun' || fail "--help has no usage line"
printf '%s\n' "$help" | grep -q -- '-np N' || fail "--help does not explain -np"
echo "ok   --help"

version=$("$MTRUN" --version) || fail "--version exited with $?"
printf '%s\n' "$version" | grep -Eq '^mtrun \(MegaTrain-C\) [0-9]' || fail "--version printed '$version'"
echo "ok   --version: $version"

cd "$ROOT" || exit 1
line=$("$MTRUN" --dry-run -np 5 configs/test-small.cfg) || fail "--dry-run exited with $?"
echo "     $line"
[ "$(printf '%s\n' "$line" | wc -l)" -eq 1 ] || fail "--dry-run printed more than one line"
case " $line " in *" -np 5 "*) ;; *) fail "no '-np 5' in the mpirun line" ;; esac
case "$line" in *"/mt-rank configs/test-small.cfg"*) ;; *) fail "no 'mt-rank CONFIG' in the mpirun line" ;; esac
case "$line" in *" -x MT_JOB_ID "*) ;; *) fail "MT_JOB_ID is not passed to the ranks" ;; esac
printf '%s\n' "$line" | grep -Eq '^MT_JOB_ID=[0-9a-f]{32} ' || fail "no 32-hex-digit job id"
if [ "$(nproc)" -lt 5 ]; then # 5 ranks on fewer cores: Open MPI must be told
    case "$line" in *" --oversubscribe "*) ;; *) fail "no --oversubscribe with 5 ranks on $(nproc) cores" ;; esac
    echo "ok   --oversubscribe on $(nproc) cores"
fi
echo "ok   --dry-run"
