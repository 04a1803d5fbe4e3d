#!/bin/sh
# mtrun on bad input: each case must exit with code 2 before anything starts, print
# nothing on stdout and exactly one line on stderr, and that line must name the problem.
# usage: launcher_errors.sh MTRUN REPO_ROOT
set -u
MTRUN=$1
ROOT=$2
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1
TMP=$(pwd -P) # messages name resolved paths
failures=0

# A valid config with an absolute data path, so that the copies below are valid wherever
# they live; each case changes one thing with sed.
sed "s|\"\.\./data/|\"$ROOT/data/|" "$ROOT/configs/test-small.cfg" > good.cfg
line_of() { grep -n "$1" good.cfg | head -n 1 | cut -d: -f1; }
bad() { sed "$1" good.cfg > bad.cfg; }

# expect NAME REGEX MTRUN-ARGS...: run mtrun, check exit code, stdout, stderr.
expect() {
    name=$1 regex=$2
    shift 2
    "$MTRUN" "$@" > out.txt 2> err.txt
    rc=$?
    lines=$(wc -l < err.txt)
    msg=$(cat err.txt)
    if [ "$rc" -ne 2 ]; then
        echo "FAIL $name: exit code $rc, expected 2 (stderr: $msg)"
    elif [ -s out.txt ]; then
        echo "FAIL $name: printed on stdout: $(head -c 200 out.txt)"
    elif [ "$lines" -ne 1 ]; then
        echo "FAIL $name: $lines lines on stderr, expected 1:"
        sed 's/^/    /' err.txt
    elif ! printf '%s\n' "$msg" | grep -Eq -- "$regex"; then
        echo "FAIL $name: '$msg' does not match '$regex'"
    else
        echo "ok   $name: $msg"
        return 0
    fi
    failures=$((failures + 1))
}

# The valid one must pass, or every case below passes for the wrong reason.
if ! "$MTRUN" --dry-run -np 2 good.cfg > out.txt 2> err.txt; then
    echo "FAIL valid config rejected: $(cat err.txt)"
    exit 1
fi

n=$(line_of 'ffn_dim')
bad "${n}a\\  hidden_dim = 64;"
expect "unknown key in a group" "^mtrun: bad\.cfg:$((n + 1)): model\.hidden_dim: unknown key" -np 2 bad.cfg

n=$(line_of '^steps')
bad "${n}s/^steps/stepz/"
expect "unknown key, with a suggestion" "^mtrun: bad\.cfg:$n: stepz: unknown key \(did you mean steps\?\)$" -np 2 bad.cfg

n=$(line_of '^steps')
bad "${n}a\\lr = 1e-3;"
expect "known key in the wrong group" "^mtrun: bad\.cfg:$((n + 1)): lr: unknown key \(did you mean optimizer\.lr\?\)$" -np 2 bad.cfg

n=$(line_of 'layers')
bad "${n}s/= 2;/= \"2\";/"
expect "wrong type" "^mtrun: bad\.cfg:$n: model\.layers: expected an integer, got a string$" -np 2 bad.cfg

n=$(line_of 'layers')
bad "${n}s/= 2;/= 2.5;/"
expect "float for an integer" "^mtrun: bad\.cfg:$n: model\.layers: expected an integer, got a number$" -np 2 bad.cfg

n=$(line_of 'heads    =')
bad "${n}s/= 4;/= 0;/"
expect "out of range" "^mtrun: bad\.cfg:$n: model\.heads: 0 is out of range: must be in \[1, 1024\]$" -np 2 bad.cfg

n=$(line_of '^steps')
bad "${n}s/= 20;/= 3000000000;/"
expect "out of range, wider than an int" "^mtrun: bad\.cfg:$n: steps: 3000000000 is out of range: must be in \[1, 2147483647\]$" -np 2 bad.cfg

n=$(line_of 'lr =')
bad "${n}s/= 2e-3;/= 0;/"
expect "out of an open range" "^mtrun: bad\.cfg:$n: optimizer\.lr: 0 is out of range: must be in \(0, 10\]$" -np 2 bad.cfg

n=$(line_of '^steps')
bad "${n}s/= 20;/= ;/"
expect "syntax error" "^mtrun: bad\.cfg:$n: syntax error" -np 2 bad.cfg

n=$(line_of '^backend')
bad "${n}s/\"cpu\"/\"gpu\"/"
expect "not one of the choices" "^mtrun: bad\.cfg:$n: backend: \"gpu\" is not one of \"auto\", \"cpu\", \"cuda\"$" -np 2 bad.cfg

bad "/dim      =/d"
expect "missing required key" "^mtrun: bad\.cfg: model\.dim: missing \(required\)$" -np 2 bad.cfg

n=$(line_of 'dim      =')
bad "${n}s/= 64;/= 66;/"
expect "dim not divisible by heads" "^mtrun: bad\.cfg:$n: model\.dim: 66 is not divisible by model\.heads = 4 \(or set model\.head_dim\)$" -np 2 bad.cfg

n=$(line_of 'path =')
bad "${n}s|= .*|= \"no-such-file.txt\";|"
expect "missing data file" "^mtrun: bad\.cfg:$n: data\.path: cannot open $TMP/no-such-file\.txt: No such file or directory$" -np 2 bad.cfg

# model.rope_scaling (a group inside model) and model.qkv_bias
n=$(line_of 'ffn_dim')
RS='rope_type = "llama3"; factor = 8.0; low_freq_factor = 1.0; high_freq_factor = 4.0; original_max_position_embeddings = 64;'
bad "${n}a\\  rope_scaling = { factor = 8.0; };"
expect "rope factor without llama3 or yarn" "^mtrun: bad\.cfg:$((n + 1)): model\.rope_scaling\.factor: not used with model\.rope_scaling\.rope_type = \"none\"$" -np 2 bad.cfg
bad "${n}a\\  rope_scaling = { rope_type = \"yarn\"; factor = 8.0; original_max_position_embeddings = 64; low_freq_factor = 1.0; };"
expect "a llama3 number with yarn" "^mtrun: bad\.cfg:$((n + 1)): model\.rope_scaling\.low_freq_factor: not used with model\.rope_scaling\.rope_type = \"yarn\"$" -np 2 bad.cfg
bad "${n}a\\  rope_scaling = { rope_type = \"yarn\"; factor = 8.0; };"
expect "yarn without its original context" "^mtrun: bad\.cfg:$((n + 1)): model\.rope_scaling\.original_max_position_embeddings: missing \(rope_type \"yarn\" needs it\)$" -np 2 bad.cfg
bad "${n}a\\  rope_scaling = { rope_type = \"llama3\"; factor = 8.0; };"
expect "llama3 without its other numbers" "^mtrun: bad\.cfg:$((n + 1)): model\.rope_scaling\.low_freq_factor: missing \(rope_type \"llama3\" needs it\)$" -np 2 bad.cfg
bad "${n}a\\  rope_scaling = { $(echo "$RS" | sed 's/high_freq_factor = 4.0/high_freq_factor = 0.5/') };"
expect "llama3 with high <= low" "^mtrun: bad\.cfg:$((n + 1)): model\.rope_scaling\.high_freq_factor: 0\.5 must be greater than low_freq_factor = 1$" -np 2 bad.cfg
bad "${n}a\\  rope_scaling = { rope_type = \"longrope\"; };"
expect "unsupported rope type" "^mtrun: bad\.cfg:$((n + 1)): model\.rope_scaling\.rope_type: \"longrope\" is not one of \"none\", \"llama3\", \"yarn\"$" -np 2 bad.cfg
bad "${n}a\\  qkv_bias = true; rope_scaling = { $RS };"
if ! "$MTRUN" --dry-run -np 2 bad.cfg > out.txt 2> err.txt; then
    echo "FAIL qkv_bias and llama3 rope_scaling on the cpu backend rejected: $(cat err.txt)"
    failures=$((failures + 1))
fi

bad "${n}a\\  eos_token_id = 256;"
expect "eos id past the vocabulary" "^mtrun: bad\.cfg:$((n + 1)): model\.eos_token_id: 256 is not below model\.vocab = 256$" -np 2 bad.cfg

n=$(line_of 'lr = ')
bad "${n}a\\  device_groups = 4;"
expect "device groups past the layers" "^mtrun: bad\.cfg:$((n + 1)): optimizer\.device_groups: 4 is more than the embedding and model\.layers = 2 layers$" -np 2 bad.cfg
bad "${n}a\\  device_groups = -2;"
expect "device groups below -1" "^mtrun: bad\.cfg:$((n + 1)): optimizer\.device_groups: " -np 2 bad.cfg

expect "missing config file" "^mtrun: no-such\.cfg: cannot open: No such file or directory$" -np 2 no-such.cfg
expect "missing config argument" "^mtrun: missing CONFIG" -np 2
expect "-np 1" "^mtrun: -np 1: need at least 2 processes \(1 compute \+ 1 optimizer\)$" -np 1 good.cfg
expect "-np not a number" "^mtrun: -np four: not a number" -np four good.cfg
# Far more ranks than a host has cores only bury it: refused before the plan, with the limit.
cores=$(nproc)
most=$((2 * cores > 8 ? 2 * cores : 8))
expect "-np 1000" "^mtrun: -np 1000: 1000 ranks on a host of [0-9]+ cores?, at most $most \(2 per core, or 8\)" -np 1000 good.cfg
expect "-np INT_MAX" "^mtrun: -np 2147483647: 2147483647 ranks on a host of [0-9]+ cores?, at most $most" -np 2147483647 good.cfg
expect "-np past INT_MAX" "^mtrun: -np 2147483648: not a number of processes" -np 2147483648 good.cfg
# A test's memory limit that is not a number is refused, not ignored.
MT_PLAN_MEM_LIMIT=garbage expect "MT_PLAN_MEM_LIMIT garbage" "^mtrun: MT_PLAN_MEM_LIMIT=garbage: not a number of bytes" -np 2 good.cfg
MT_PLAN_SHM_LIMIT=-5 expect "MT_PLAN_SHM_LIMIT negative" "^mtrun: MT_PLAN_SHM_LIMIT=-5: not a number of bytes" -np 2 good.cfg
expect "unknown option" "^mtrun: --frobnicate: unknown option" --frobnicate good.cfg
expect "missing hostfile" "^mtrun: no-such-hosts: cannot open: No such file or directory$" --hostfile no-such-hosts good.cfg

printf 'localhost slots=2\n# a comment\n\nnode1 slot=4   # typo\n' > hosts
expect "bad hostfile line" "^mtrun: hosts:4: expected 'host \[slots=N\]', got 'node1 slot=4'$" --hostfile hosts -np 2 good.cfg

# storage.dir on a pseudo-filesystem: refused outright, not as "0 B free" (which --force passed)
expect "storage.dir on proc" "^mtrun: storage.dir /proc: a proc pseudo-filesystem, not a disk" \
    -np 2 good.cfg storage.grads=true storage.dir=/proc
expect "storage.dir on sysfs, with --force" "^mtrun: storage.dir /sys/fs: a sysfs pseudo-filesystem, not a disk" \
    -np 2 --force good.cfg storage.grads=true storage.dir=/sys/fs
expect "--resume of a missing folder" "^mtrun: --resume no-such-run: No such file or directory$" --resume no-such-run good.cfg

if [ "$failures" -ne 0 ]; then
    echo "$failures case(s) failed"
    exit 1
fi
echo "all cases passed"
