#!/usr/bin/env bash
# Segment checkpointing (boundary_every = k): only boundaries 0, k, 2k, ... stay through the
# step and the backward redoes each segment's forward, which gives the same bits. So the
# losses, the evaluation losses and the checkpoint are bitwise those of k = 1, with every
# layer recomputed, with some internals kept, or with boundaries 0, k, 2k, ... offloaded, or
# with attention outputs kept from the forward (keep_attention: the backward and the redo skip
# the attention kernel); and "auto" picks k > 1 from the device memory (MT_DEVICE_FREE_BYTES
# stands in for it) when all boundaries would not fit, and attention slots from what is left.
source "$(dirname "$0")/e2e_lib.sh" "$@"
backends=cpu
if have_gpu; then backends="cpu cuda"; fi
five_layers() { # five_layers BACKEND OUT K [more settings]
    small_config "$1" "$2"
    sed -i -e 's/layers   = 2;/layers   = 5;/' "$2"
    printf 'boundary_every = %s;\neval = { interval = 4; batches = 2; };\n' "$3" >>"$2"
}
for be in $backends; do
    for k in 1 2 3 5; do
        five_layers "$be" "$WORK/$be-$k.cfg" $k
        echo 'recompute = "always";' >>"$WORK/$be-$k.cfg"
        run_job "$be-$k" 3 "$WORK/$be-$k.cfg" --stop-at 8 || show_log "$be-$k"
    done
    # some layer x micro-batch passes kept (the last layers'), the rest recomputed
    five_layers "$be" "$WORK/$be-kept.cfg" 2
    MT_KEEP_MAX=3 run_job "$be-kept" 3 "$WORK/$be-kept.cfg" --stop-at 8 || show_log "$be-kept"
    # segments with the kept boundaries offloaded to host memory (5 layers: k = 2 leaves a
    # segment of one, k = 3 one of two)
    for k in 2 3; do
        five_layers "$be" "$WORK/$be-off$k.cfg" $k
        printf 'recompute = "always";\noffload_activations = "always";\n' >>"$WORK/$be-off$k.cfg"
        run_job "$be-off$k" 3 "$WORK/$be-off$k.cfg" --stop-at 8 || show_log "$be-off$k"
    done
    # attention outputs kept: 3 of 10 passes with k = 2 (the redone layers 0 and 2 first), every
    # pass with k = 1, and 4 with k = 3 offloaded
    for run in att2:2:3 att1:1:100 attoff3:3:4; do
        IFS=: read -r name k slots <<<"$run"
        five_layers "$be" "$WORK/$be-$name.cfg" "$k"
        printf 'recompute = "always";\nkeep_attention = %s;\n' "$slots" >>"$WORK/$be-$name.cfg"
        [ "$name" = attoff3 ] && echo 'offload_activations = "always";' >>"$WORK/$be-$name.cfg"
        run_job "$be-$name" 3 "$WORK/$be-$name.cfg" --stop-at 8 || show_log "$be-$name"
    done
    # attention slots beside passes kept whole (recompute "auto": from the second step on layers
    # 4, 3 and 2 are kept, and k = 2 redoes layer 2): a kept pass fills no slot, so its redo
    # must not read one (it would read the first step's output)
    five_layers "$be" "$WORK/$be-attkept.cfg" 2
    echo 'keep_attention = 100;' >>"$WORK/$be-attkept.cfg"
    MT_KEEP_MAX=6 run_job "$be-attkept" 3 "$WORK/$be-attkept.cfg" --stop-at 8 ||
        show_log "$be-attkept"
    expect "$be keep_attention = 3 says what it keeps" \
        grep -q 'keeping the attention output of 3 of 10 layer passes' "$WORK/$be-att2.log"
    expect "$be keep_attention = 100 keeps all 10 (5 layers x 2 micro-batches)" \
        grep -q 'keeping the attention output of 10 of 10 layer passes' "$WORK/$be-att1.log"
    expect "$be k=2 says what it keeps" grep -q 'keeping every 2nd layer boundary' \
        "$WORK/$be-2.log"
    expect "$be offloaded k=3 says what goes to the host" \
        grep -q 'offloading every 3rd layer boundary (2 of 6,' "$WORK/$be-off3.log"
    expect "$be ran 8 steps" test "$(losses "$WORK/$be-1" | wc -l)" -eq 8
    for run in 2 3 5 kept off2 off3 att2 att1 attoff3 attkept; do
        expect "$be $run: losses bitwise those of k=1" \
            cmp -s <(losses "$WORK/$be-1") <(losses "$WORK/$be-$run")
        expect "$be $run: eval losses bitwise those of k=1" \
            cmp -s <(grep -o '"eval_loss":[^,}]*' "$WORK/$be-1/metrics.jsonl") \
            <(grep -o '"eval_loss":[^,}]*' "$WORK/$be-$run/metrics.jsonl")
        expect "$be $run: checkpoint bitwise that of k=1" \
            cmp -s "$WORK/$be-1/step_000008/state.bin" "$WORK/$be-$run/step_000008/state.bin"
    done
done

# auto: 48 layers, and room on the "device" for 54 boundaries besides the streamed weights and
# gradients, of which the boundaries may take 3/4 (40): not all 49, so every 2nd is kept
# (24 + 2 slots). The figures come from the plan.
five_layers cpu "$WORK/auto.cfg" 0
sed -i -e 's/layers   = 5;/layers   = 48;/' "$WORK/auto.cfg"
read -r streamed one < <("$MTRUN" --plan --json -np 3 "$WORK/auto.cfg" | python3 -c '
import json, sys
b = json.load(sys.stdin)["compute_host"]
print(b["weights"] + b["grads"], b["activations"] // 49)')
export MT_DEVICE_FREE_BYTES=$((streamed + 54 * one))
run_job auto 3 "$WORK/auto.cfg" --stop-at 3 || show_log auto
expect "auto keeps every 2nd boundary when all do not fit" \
    grep -q 'keeping every 2nd layer boundary on the backend (25 of 49)' "$WORK/auto.log"
sed -i -e 's/boundary_every = 0;/boundary_every = 1;/' "$WORK/auto.cfg"
run_job auto-1 3 "$WORK/auto.cfg" --stop-at 3
expect "boundary_every = 1 does not fit there: offload_activations \"auto\" offloads" \
    grep -q "offloading the boundary activations" "$WORK/auto-1.log"
unset MT_DEVICE_FREE_BYTES
run_job all-1 3 "$WORK/auto.cfg" --stop-at 3 || show_log all-1
expect "auto: losses bitwise those of k=1" cmp -s <(losses "$WORK/all-1") <(losses "$WORK/auto")

# keep_attention auto: with every layer recomputed, what the boundaries leave (past the reserve
# of one boundary and 1 GiB) holds attention slots: room for 2 of 10 gives 2
five_layers cpu "$WORK/att-auto.cfg" 1
printf 'recompute = "always";\nkeep_attention = 1;\n' >>"$WORK/att-auto.cfg"
read -r streamed acts slot < <("$MTRUN" --plan --json -np 3 "$WORK/att-auto.cfg" | python3 -c '
import json, sys
b = json.load(sys.stdin)["compute_host"]
print(b["weights"] + b["grads"], b["activations"], b["attention"])')
sed -i -e 's/^keep_attention = 1;/keep_attention = -1;/' "$WORK/att-auto.cfg"
export MT_DEVICE_FREE_BYTES=$((streamed + acts + acts / 6 + (1 << 30) + 2 * slot + slot / 2))
run_job att-auto 3 "$WORK/att-auto.cfg" --stop-at 3 || show_log att-auto
unset MT_DEVICE_FREE_BYTES
expect "keep_attention auto keeps the attention slots that fit (2)" \
    grep -q 'keeping the attention output of 2 of 10 layer passes' "$WORK/att-auto.log"
expect "keep_attention auto: losses bitwise those of k=1" \
    cmp -s <(losses "$WORK/cpu-1" | head -n 3) <(losses "$WORK/att-auto")
finish
