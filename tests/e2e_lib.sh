# Shared by the end-to-end tests: run jobs through the real mtrun and read their metrics.
# Usage in a test: source e2e_lib.sh "$MTRUN" "$SRC"
set -u
MTRUN=$1
SRC=$2
WORK=$(mktemp -d /tmp/mt-e2e.XXXXXX)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
FAILED=0
PASSED=0

# A usable CUDA device is present (tests of the CUDA backend skip or narrow without one).
have_gpu() { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }

# Exits the test as skipped (77) without a GPU.
require_gpu() {
    if ! have_gpu; then
        echo "SKIPPED: no CUDA device"
        exit 77
    fi
}

# The backend of the tests of the job's life (stop, kill, watchdog): cpu, or MT_E2E_BACKEND=cuda
# to run the same checks on the GPU.
E2E_BACKEND=${MT_E2E_BACKEND:-cpu}

# small_config BACKEND OUT: configs/test-small.cfg on BACKEND, runnable from $WORK.
small_config() {
    sed -e "s/^backend = .*/backend = \"$1\";/" -e "s|\"\.\./data/|\"$SRC/data/|" \
        "$SRC/configs/test-small.cfg" >"$2"
}

# The job length of the tests that call quick_steps: STEPS steps, a checkpoint every HALF (where
# their stops, kills and full disks fall, just after it). Under MT_E2E_QUICK (the sanitizer build,
# a step ~50x slower) half as many: every job and every check still runs, on shorter jobs; the
# whole length is make test's.
if [ -n "${MT_E2E_QUICK:-}" ]; then
    STEPS=10 HALF=5
else
    STEPS=20 HALF=10
fi
# quick_steps CFG: CFG (a small_config) trains STEPS steps with a checkpoint every HALF.
quick_steps() {
    sed -i -e "s/^steps = 20;/steps = $STEPS;/" -e "s/^  interval = 10;/  interval = $HALF;/" "$1"
    grep -q "^steps = $STEPS;" "$1" && grep -q "^  interval = $HALF;" "$1"
}
# step_dir N: the folder of step N's checkpoint (step_000020)
step_dir() { printf 'step_%06d' "$1"; }
# half_is_latest RUN: $WORK/RUN's latest checkpoint is step HALF, and none of a later step was saved
half_is_latest() {
    [ "$(cat "$WORK/$1/LATEST")" = "$(step_dir "$HALF")" ] || return 1
    local d
    for d in "$WORK/$1"/step_*; do
        [ $((10#${d##*/step_})) -le "$HALF" ] || return 1
    done
}

# mla_config BACKEND OUT: test-small.cfg with DeepSeek's multi-head latent attention on BACKEND:
# a query rank, values of 16 (q and k 16 + 8), interleaved RoPE, YaRN with mscale_all_dim,
# packed documents (the lines of the text).
mla_config() {
    small_config "$1" "$2.tmp"
    sed -e 's/kv_heads = 2;/kv_heads = 4;/' -e '/ffn_dim *= *160;/a\
  mla_q_rank = 24; mla_kv_rank = 32; mla_nope_dim = 16; mla_rope_dim = 8; mla_v_dim = 16;\
  rope_interleave = true;\
  rope_scaling = { rope_type = "yarn"; factor = 4.0; original_max_position_embeddings = 8;\
                   mscale = 1.0; mscale_all_dim = 0.8; };' \
        -e '/^data = {/a\
  pack = "documents"; eot = 10;' "$2.tmp" >"$2"
}
# run_job NAME NP CONFIG [mtrun args...]: output in $WORK/NAME.log, run dir $WORK/NAME
run_job() {
    local name=$1 np=$2 cfg=$3
    shift 3
    "$MTRUN" -np "$np" "$cfg" --out "$WORK/$name" "$@" >"$WORK/$name.log" 2>&1
}

# The per-step training losses of a run dir, one per line, exactly as written (17 digits).
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1/metrics.jsonl"; }

expect() { # expect DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then
        echo "PASS: $what"
        PASSED=$((PASSED + 1))
    else
        echo "FAIL: $what"
        FAILED=$((FAILED + 1))
    fi
}

# refused_cfg NAME REGEX CONFIG ARGS...: `mtrun -np 2 CONFIG --dry-run ARGS` exits 2, prints
# nothing on stdout and one line on stderr matching REGEX (outputs in $WORK/NAME.out, .err).
refused_cfg() {
    local name=$1 regex=$2 cfg=$3 rc
    shift 3
    "$MTRUN" -np 2 "$cfg" --dry-run "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    rc=$?
    expect "$name: refused in one line: $(cat "$WORK/$name.err")" \
        bash -c "[ $rc -eq 2 ] && [ ! -s '$WORK/$name.out' ] && [ \$(wc -l <'$WORK/$name.err') -eq 1 ] &&
                 grep -Eq -- '$regex' '$WORK/$name.err'"
}
# refused_dry NAME REGEX ARGS...: refused_cfg on $WORK/base.cfg.
refused_dry() { refused_cfg "$1" "$2" "$WORK/base.cfg" "${@:3}"; }

show_log() { echo "---- $1.log"; tail -n 30 "$WORK/$1.log"; }

finish() {
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}

# Tests share the machine with other jobs (another test, a user's training run): they check only
# what their own job made, found by its job id (mtrun prints it) or its run folder in $WORK.
# job_id NAME: the id of the job whose output is $WORK/NAME.log.
job_id() { grep -o 'job [0-9a-f]\{32\}' "$WORK/$1.log" | head -n 1 | cut -d' ' -f2; }
# job_leftovers ID: what job ID left in /dev/shm (its folder and its regions), one per line.
job_leftovers() {
    [ -n "$1" ] || return 1
    local f
    for f in /dev/shm/mtc-"$1"*; do [ -e "$f" ] && echo "${f#/dev/shm/}"; done
    return 0
}
# no_leftovers NAME: the job of $WORK/NAME.log is known and left nothing in /dev/shm.
no_leftovers() {
    local id
    id=$(job_id "$1")
    [ -n "$id" ] && [ -z "$(job_leftovers "$id")" ]
}
# stop_holder PID: ends a lock holder started in the background (`flock FILE sleep N &`) and
# every process under it: its sleep would otherwise keep the test's output open, and ctest
# waiting, for the rest of its N s.
stop_holder() {
    kill_tree "$1"
    wait "$1" 2>/dev/null
    return 0
}
kill_tree() { # kill_tree PID: PID and its descendants, the deepest first
    local child
    for child in $(pgrep -P "$1"); do kill_tree "$child"; done
    kill "$1" 2>/dev/null
}
# ranks_of CONFIG: pids of live ranks started on CONFIG (a path in $WORK: this test's own).
ranks_of() { pgrep -f "[m]t-rank $1"; }
