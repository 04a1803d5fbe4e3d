#!/usr/bin/env bash
# Issue 14, items 1 and 8: symbolic links planted where a job writes its own files are never followed
# and nothing is deleted or written through them. Each case plants a link to a victim folder or
# file, runs a job, and checks that the victim is byte for byte what it was; the job either
# works around the link or stops with a line that names it.
# usage: e2e_planted_links.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"

small_config cpu "$WORK/base.cfg"
sed -i 's/^steps = .*/steps = 4;/; s/^  interval = .*/  interval = 2;/' "$WORK/base.cfg"

victim() { # a fresh victim folder with one file; prints nothing
    rm -rf "$WORK/victim"
    mkdir -p "$WORK/victim"
    echo "precious" >"$WORK/victim/file"
}
intact() { [ -f "$WORK/victim/file" ] && [ "$(cat "$WORK/victim/file")" = "precious" ] &&
    [ "$(ls "$WORK/victim" | wc -l)" -eq 1 ]; }
refused_naming() { grep -q "$2" "$WORK/$1.log" || { show_log "$1"; false; }; }

# 1. the checkpoint's temporary folder
victim
mkdir -p "$WORK/r1"
ln -s "$WORK/victim" "$WORK/r1/.step_000002.tmp"
run_job r1 3 "$WORK/base.cfg"
expect "checkpoint temp folder planted as a link: the victim folder is untouched" intact
expect "checkpoint temp folder planted as a link: the job says which link" \
    refused_naming r1 "r1/.step_000002.tmp is a symbolic link"

# 1b. the same with the ranks' standard error lost on the way: mtrun says the line from the
# rank's last words
victim
mkdir -p "$WORK/r1b"
ln -s "$WORK/victim" "$WORK/r1b/.step_000002.tmp"
MT_FAULT_MUTE_STDERR=1 run_job r1b 3 "$WORK/base.cfg"
expect "a dying rank's lost line is said by mtrun" \
    refused_naming r1b "r1b/.step_000002.tmp is a symbolic link"
expect "and said once" test "$(grep -c 'is a symbolic link' "$WORK/r1b.log")" -eq 1
expect "the last words do not stay in /dev/shm (nothing of the job does)" no_leftovers r1b

# 2. LATEST's temporary file
victim
mkdir -p "$WORK/r2"
ln -s "$WORK/victim/file" "$WORK/r2/.LATEST.tmp"
run_job r2 3 "$WORK/base.cfg"
expect "LATEST temp file planted as a link: the victim file is untouched" intact
expect "LATEST temp file planted as a link: the job says which link" \
    refused_naming r2 "r2/.LATEST.tmp is a symbolic link"

# 3. the export's temporary folder
victim
sed 's/^steps = .*/steps = 2;/' "$WORK/base.cfg" >"$WORK/export.cfg"
echo "export_dir = \"$WORK/exported\";" >>"$WORK/export.cfg"
ln -s "$WORK/victim" "$WORK/exported.export-tmp"
run_job r3 3 "$WORK/export.cfg"
expect "export temp folder planted as a link: the victim folder is untouched" intact
expect "export temp folder planted as a link: the job says which link" \
    refused_naming r3 "exported.export-tmp is a symbolic link"

# 4. metrics.jsonl
victim
mkdir -p "$WORK/r4"
ln -s "$WORK/victim/file" "$WORK/r4/metrics.jsonl"
run_job r4 3 "$WORK/base.cfg"
expect "metrics.jsonl planted as a link: the victim file is untouched" intact
expect "metrics.jsonl planted as a link: the job says so" \
    refused_naming r4 "metrics.jsonl: a symbolic link: not writing through it"

# 5. the trace's temporary file and this rank's part
victim
sed 's/^steps = .*/steps = 2;/' "$WORK/base.cfg" >"$WORK/trace.cfg"
echo "trace_steps = [1, 1];" >>"$WORK/trace.cfg"
mkdir -p "$WORK/r5"
ln -s "$WORK/victim/file" "$WORK/r5/trace.json.tmp"
run_job r5 3 "$WORK/trace.cfg"
expect "trace temp file planted as a link: the victim file is untouched" intact
expect "trace temp file planted as a link: the trace says which link" \
    refused_naming r5 "trace.json.tmp is a symbolic link"
expect "and no part of the trace is left behind" bash -c "! ls '$WORK/r5' | grep -q '^trace\.rank'"

# 6. checkpoint.keep's pruning: a link named like an old step folder is not a checkpoint
victim
mkdir -p "$WORK/r6"
ln -s "$WORK/victim" "$WORK/r6/step_000001"
sed 's/^  interval = .*/  interval = 1;\n  keep = 1;/' "$WORK/base.cfg" >"$WORK/keep.cfg"
run_job r6 3 "$WORK/keep.cfg" || show_log r6
expect "a link named step_000001 is not pruned through: the victim folder is untouched" intact
expect "the job with keep = 1 still ran to the end" test -f "$WORK/r6/step_000004/state.bin"

# Issue 14, item 8: strings from files echo as one line, control bytes escaped.
python3 "$SRC/tests/hf_fixture.py" "$WORK/evil" --corrupt arch_escape
sed -e "s|\"\.\./data/|\"$SRC/data/|" "$SRC/configs/test-small.cfg" |
    awk '/^model = {/{skip=1} !skip{print} skip&&/^};/{skip=0}' >"$WORK/evil.cfg"
echo "model_dir = \"$WORK/evil\";" >>"$WORK/evil.cfg"
"$MTRUN" -np 3 "$WORK/evil.cfg" >"$WORK/evil.out" 2>"$WORK/evil.err"
expect "a newline and an ANSI escape in config.json: one line on stderr" \
    test "$(wc -l <"$WORK/evil.err")" -eq 1
expect "the control bytes are shown escaped, not sent" bash -c \
    "grep -qF 'architecture Evil\\x0amtrun: all good\\x1b[31m not supported' '$WORK/evil.err' &&
     ! grep -q \$'\\x1b' '$WORK/evil.err'"

# The same for names from the command line: a config file whose name holds an ANSI escape, an
# --out folder whose name holds a newline. mtrun's and the ranks' lines show them escaped.
esc=$(printf 'con\033[31mfig.cfg')
out=$(printf 'run\nfake line')
cp "$WORK/base.cfg" "$WORK/$esc"
sed -i 's/^steps = .*/steps = 100000;/' "$WORK/$esc"
cd "$WORK"
"$MTRUN" -np 3 "$esc" --out "$out" >"$WORK/names.log" 2>&1 &
pid=$!
cd - >/dev/null
for i in $(seq 1 300); do grep -q '^step *1/' "$WORK/names.log" && break; sleep 0.05; done
kill -TERM "$pid"
wait "$pid"
expect "control bytes in the config's and --out's names are shown as \\xNN, never sent" bash -c \
    "grep -qF 'config con\x1b[31mfig.cfg' '$WORK/names.log' &&
     grep -qF -- '--resume run\x0afake line' '$WORK/names.log' &&
     ! grep -q \$'\x1b' '$WORK/names.log' && ! grep -q '^fake line' '$WORK/names.log'"

# A real stale temporary folder of ours (a crashed save) is still cleared and the save works.
mkdir -p "$WORK/r7/.step_000002.tmp"
echo "half a save" >"$WORK/r7/.step_000002.tmp/state.bin"
run_job r7 3 "$WORK/base.cfg" || show_log r7
expect "a stale temporary folder of ours is cleared and the job saves" \
    test -f "$WORK/r7/step_000004/state.bin"
finish
