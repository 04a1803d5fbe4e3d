#!/usr/bin/env bash
# Packed documents end to end (data.pack = "documents", data.eot), on the CPU backend, with the
# demo text's lines as documents (data.eot = 10, the newline):
# - the losses differ from the unpacked job's, and the step's targets drop by the newlines in
#   the windows (a newline's target, the next line's first byte, is not predicted);
# - -np 2 = -np 3, and stopped at 3 and resumed = uninterrupted, bitwise;
# - data.pack "documents" without data.eot, and data.eot past the vocab, are refused in one line.
# - with a GPU, the same on the CUDA backend: -np 2 = -np 3, bitwise.
# Agreement with transformers run on each document alone, with a mask too:
# hf_train_parity_packed_cpu.
# usage: data_pack.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
sed -i -e 's/^steps = .*/steps = 6;/' -e 's/interval = .*/interval = 3;/' "$WORK/base.cfg"
sed -e 's|^  path *=\(.*\)|  path =\1\n  pack = "documents";\n  eot  = 10;|' "$WORK/base.cfg" >"$WORK/packed.cfg"
grep -q 'pack = "documents"' "$WORK/packed.cfg" || { echo "FAIL: config edit"; exit 1; }
targets() { grep -o '"targets":[0-9]*' "$1/metrics.jsonl" | cut -d: -f2; }

run_job plain 3 "$WORK/base.cfg" || { show_log plain; expect "the unpacked job succeeds" false; }
run_job packed 3 "$WORK/packed.cfg" || { show_log packed; expect "the packed job succeeds" false; }
run_job packed2 2 "$WORK/packed.cfg" || { show_log packed2; expect "the packed job at -np 2 succeeds" false; }
run_job part 3 "$WORK/packed.cfg" --stop-at 3 || { show_log part; expect "the packed job to 3 succeeds" false; }
run_job part 2 "$WORK/packed.cfg" --resume "$WORK/part" || { show_log part; expect "its resume succeeds" false; }

expect "6 packed steps ran" test "$(losses "$WORK/packed" | wc -l)" -eq 6
expect "packed losses differ from unpacked ones" \
    test -z "$(comm -12 <(losses "$WORK/plain" | sort) <(losses "$WORK/packed" | sort))"
expect "packed: fewer targets a step than tokens ($(targets "$WORK/packed" | xargs) of 256)" \
    test -z "$(targets "$WORK/packed" | awk '$1 >= 256 || $1 < 128')"
expect "packed: -np 2 = -np 3, bitwise" diff <(losses "$WORK/packed") <(losses "$WORK/packed2")
expect "packed: stopped at 3 and resumed = uninterrupted, bitwise" \
    diff <(losses "$WORK/packed") <(losses "$WORK/part")

refused() { # NAME WANT OVERRIDES...: exit 2, one line containing WANT
    local name=$1 want=$2
    shift 2
    "$MTRUN" -np 3 "$WORK/base.cfg" --out "$WORK/$name" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    local rc=$?
    expect "$name: exit 2 (got $rc), one line with \"$want\" ($(head -c 300 "$WORK/$name.err"))" \
        test "$rc" -eq 2 -a "$(wc -l <"$WORK/$name.err")" -eq 1 -a -n "$(grep -F -- "$want" "$WORK/$name.err")"
}
refused noeot 'data.pack: "documents" needs data.eot' data.pack=documents
refused bigeot 'data.eot: 300 is not below model.vocab = 256' data.pack=documents data.eot=300
if nvidia-smi -L >/dev/null 2>&1; then
    run_job gpu 3 "$WORK/packed.cfg" backend=cuda || { show_log gpu; expect "the packed CUDA job succeeds" false; }
    run_job gpu2 2 "$WORK/packed.cfg" backend=cuda || { show_log gpu2; expect "the packed CUDA job at -np 2 succeeds" false; }
    expect "packed, CUDA: the same targets as the CPU's" diff <(targets "$WORK/packed") <(targets "$WORK/gpu")
    expect "packed, CUDA: -np 2 = -np 3, bitwise" diff <(losses "$WORK/gpu") <(losses "$WORK/gpu2")
fi
finish
