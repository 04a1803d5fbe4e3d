#!/usr/bin/env bash
# optimizer.clip = 0 makes the host's gradient slots a ring of 4 groups' (optimizer.grad_slots
# "auto"), each group updated as soon as its gradients land, through the real launcher and
# processes, on a 10-group model (8 layers) so that the ring wraps twice a step, in jobs of 20
# steps checkpointed every 10 (10 and 5 under MT_E2E_QUICK, e2e_lib.sh's quick_steps):
# - the losses and checkpoints are bitwise those of one slot per group (grad_slots "all"), for
#   -np 2, 3 and 5, device_groups 3, a stop and a resume with another -np, an optimizer rank
#   slow enough that the backward waits for slots (its trace shows the waits), and 2 nodes
#   (data parallel, Adam's moments split across them: each group's master parts are gathered
#   over the nodes as its gradients land, so every node must announce them in the backward's
#   order, which the optimizer ranks check, ending the job otherwise);
# - the state of the device-updated groups moves in pieces (a 1000-float piece here): saves,
#   resumes and exports stay bitwise;
# - the optimizer ranks update the landed groups by urgency, in pieces (700 floats here, so
#   that groups interleave), not whole in arrival order: the same bits, and with a slow rank
#   the trace shows the embedding, the last to land, updated before layer 0, as the next
#   forward needs them (MT_RING_ORDER=arrival: the other way round);
# - a non-finite gradient ends a ring job at that step, exit 3, with one line and nothing of it
#   saved: the previous checkpoint stays the latest;
# - "ring" with clipping on is refused in one line naming the field; the plan says which slots
#   and offers optimizer.clip = 0 when only the ring fits;
# - on a GPU, the CUDA backend's ring gives a slot per group's bits as well.
# usage: e2e_grad_ring.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"

small_config cpu "$WORK/base.cfg"
quick_steps "$WORK/base.cfg" || { echo "FAIL: steps of base.cfg"; exit 1; }
sed -i 's/layers   = 2;/layers   = 8;/' "$WORK/base.cfg"
# fp32 slots always: "auto" would take bf16 ones where a memory limit below asks for less
sed -i 's/^optimizer = {/optimizer = {\n  grad_dtype = "fp32";/' "$WORK/base.cfg"
sed 's/^optimizer = {/optimizer = {\n  clip = 0.0;/' "$WORK/base.cfg" >"$WORK/ring.cfg"
sed 's/^optimizer = {/optimizer = {\n  grad_slots = "all";/' "$WORK/ring.cfg" >"$WORK/all.cfg"
sed 's/^optimizer = {/optimizer = {\n  device_groups = 3;/' "$WORK/ring.cfg" >"$WORK/ring-dev3.cfg"
export MT_TEST_STATE_PIECE=1000 MT_TEST_RING_PIECE=700
ex() { echo "export_dir=$WORK/$1-export"; }

run_job all 3 "$WORK/all.cfg" "$(ex all)" || show_log all
run_job ring2 2 "$WORK/ring.cfg" "$(ex ring)" || show_log ring2
run_job ring5 5 "$WORK/ring.cfg" || show_log ring5
run_job dev3 3 "$WORK/ring-dev3.cfg" "$(ex ring-dev3)" --stop-at "$HALF" || show_log dev3
run_job dev3r 2 "$WORK/ring-dev3.cfg" --resume "$WORK/dev3" || show_log dev3r
# A slow optimizer rank: 100 ms more a group, more than a layer's backward even under the sanitizers
# on a loaded machine (about 40-70 ms a layer there), so that it is behind when the embedding
# lands. At 20 ms it kept up there and updated the embedding last, as it landed last.
slow_ms=100
MT_FAULT_SLOW_ADAMW_MS=$slow_ms run_job slow 3 "$WORK/ring.cfg" 'trace_steps=[3,4]' || show_log slow
MT_RING_ORDER=arrival MT_FAULT_SLOW_ADAMW_MS=$slow_ms run_job fifo 3 "$WORK/ring.cfg" \
    'trace_steps=[3,4]' || show_log fifo
# 2 virtual nodes, one micro-batch each, their optimizer ranks splitting Adam's moments
MT_TEST_NODES=2 run_job dp 6 "$WORK/ring.cfg" optimizer.shard_across_nodes=true || show_log dp

expect "the ring run's plan line says its slots are a ring" \
    grep -q 'fp32 gradient slots [0-9.]* [KMG]*i*B in a ring' "$WORK/ring2.log"
expect "the all-slots run's plan line does not" sh -c "! grep -q 'in a ring' '$WORK/all.log'"
last=$(step_dir "$STEPS")
half=$(step_dir "$HALF")
expect "$STEPS steps ran" test "$(losses "$WORK/all" | wc -l)" -eq "$STEPS"
same() { cmp -s <(losses "$WORK/$1") <(losses "$WORK/$2") &&
    cmp -s "$WORK/$1/$last/state.bin" "$WORK/$2/$last/state.bin"; }
expect "ring -np 2 = one slot per group -np 3: losses and checkpoint, bitwise" same ring2 all
expect "ring -np 5 = one slot per group, bitwise" same ring5 all
expect "ring with device_groups 3, stopped at $HALF (-np 3) and resumed (-np 2) = all, bitwise" \
    cmp -s <(losses "$WORK/dev3"; losses "$WORK/dev3r") <(losses "$WORK/all")
expect "the resumed run's step $STEPS checkpoint is the all-slots one's" \
    cmp -s "$WORK/dev3r/$last/state.bin" "$WORK/all/$last/state.bin"
expect "its step $HALF checkpoint too (device state taken back in pieces)" \
    cmp -s "$WORK/dev3/$half/state.bin" "$WORK/all/$half/state.bin"
expect "ring exports = all-slots exports" diff -r "$WORK/ring-export" "$WORK/all-export"
expect "device_groups 3 exports (master sent back in pieces) = all-slots exports" \
    diff -r "$WORK/ring-dev3-export" "$WORK/all-export"
expect "a slow optimizer rank: still bitwise" same slow all
expect "2 nodes with the moments split, ring = one node, a slot per group, bitwise" same dp all
expect "a slow optimizer rank: the backward waited for a slot (trace)" \
    grep -q '"name":"wait slot' "$WORK/slow/trace.json"
expect "in arrival order: still bitwise" same fifo all
# The group whose update each optimizer rank finished last in step 3, one line per rank. The
# slow rank is a few groups behind when the backward ends (it waited for slots): in arrival
# order the last is the embedding, the last to land; by urgency it is a layer that landed before
# it, which the next forward needs later. A failure shows the step's landings and updates.
last_updated() {
    python3 - "$1" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
last = {}
for e in events:
    if e.get("ph") == "X" and e["pid"] != 0 and e["args"].get("step") == 3 and e["name"].startswith("adamw "):
        end = e["ts"] + e["dur"]
        if e["pid"] not in last or end > last[e["pid"]][0]:
            last[e["pid"]] = (end, e["name"][6:])
for pid in sorted(last):
    print(last[pid][1])
PY
}
step_order() { # the step-3 d2h copies and AdamW updates by their ends, ms from the first
    python3 - "$1" <<'PY'
import json, sys
rows = [(e["ts"] + e["dur"], e["pid"], e["name"]) for e in json.load(open(sys.argv[1]))["traceEvents"]
        if e.get("ph") == "X" and e["args"].get("step") == 3 and e["name"].split()[0] in ("d2h", "adamw")]
t0 = min(r[0] for r in rows)
print(" ".join("%.0f:%d:%s" % ((t - t0) / 1000, p, n.replace(" ", "_")) for t, p, n in sorted(rows)))
PY
}
slow_last=$(last_updated "$WORK/slow/trace.json" | paste -sd, -)
fifo_last=$(last_updated "$WORK/fifo/trace.json" | paste -sd, -)
expect "by urgency: each rank's last update of the step is a layer, not the embedding ($slow_last)" \
    test -n "$slow_last" -a "$(echo "$slow_last" | tr , '\n' | grep -cx embed)" -eq 0
case ",$slow_last," in
*,embed,* | ,,) step_order "$WORK/slow/trace.json"; grep "^trace:" "$WORK/slow.log" ;;
esac
expect "MT_RING_ORDER=arrival: the embedding on every rank ($fifo_last)" \
    test "$fifo_last" = embed,embed

# On a GPU: the ring and a slot per group give the same bits on the CUDA backend too, with the
# copies out waiting for ring slots, and with device-updated groups.
if have_gpu; then
    small_config cuda "$WORK/cuda.cfg"
    quick_steps "$WORK/cuda.cfg"
    sed -i -e 's/layers   = 2;/layers   = 8;/' \
        -e 's/^optimizer = {/optimizer = {\n  clip = 0.0;\n  grad_dtype = "bf16";/' "$WORK/cuda.cfg"
    sed 's/^optimizer = {/optimizer = {\n  grad_slots = "all";\n  device_groups = 0;/' "$WORK/cuda.cfg" \
        >"$WORK/cuda-all.cfg"
    sed 's/^optimizer = {/optimizer = {\n  device_groups = 3;/' "$WORK/cuda.cfg" >"$WORK/cuda-dev3.cfg"
    run_job call 3 "$WORK/cuda-all.cfg" || show_log call
    run_job cring 2 "$WORK/cuda-dev3.cfg" || show_log cring
    expect "cuda: the ring with device_groups 3 (-np 2) = a slot per group (-np 3), bitwise" same cring call
fi

# A NaN in the head's gradients two steps after the checkpoint of HALF: the ring cannot skip
# the step.
nan_step=$((HALF + 2))
MT_FAULT_NAN_GRAD_STEPS=$nan_step run_job nan 3 "$WORK/ring.cfg"
rc=$?
expect "a non-finite gradient ends the ring job with exit 3 (got $rc)" test "$rc" -eq 3
expect "one line says why and what to do" \
    test "$(grep -c "^mt-rank: stopped at step $nan_step: its gradient norm is not finite.*grad_slots = \"all\"" "$WORK/nan.log")" -eq 1
expect "nothing of step $nan_step was saved: step $HALF is the latest" half_is_latest nan
expect "metrics mark step $nan_step as the one that ended the job" \
    grep -q "\"step\":$nan_step,.*\"ended_job\":true" "$WORK/nan/metrics.jsonl"
expect "nothing of the NaN job is left in /dev/shm" no_leftovers nan

# Refusals and the plan.
"$MTRUN" --plan -np 3 "$WORK/base.cfg" optimizer.grad_slots=ring >"$WORK/refuse.log" 2>&1
expect "grad_slots = \"ring\" with clip 1 is refused, naming the field" \
    grep -q 'optimizer.grad_slots: "ring" updates each group as its gradients land, which needs optimizer.clip = 0' "$WORK/refuse.log"
plan_json() { "$MTRUN" --plan --json -np 3 "$@" | python3 -c 'import json, sys; p = json.load(sys.stdin); print(p["grad_ring"], p["total"]["grads"], p["other_slots_grads"], p["host"])'; }
read -r ring_depth ring_grads all_grads ring_host <<<"$(plan_json "$WORK/ring.cfg")"
read -r all_depth all_grads2 ring_grads2 all_host <<<"$(plan_json "$WORK/base.cfg")"
expect "the plan: a ring of 4 with clip 0, one slot per group with clip 1" \
    test "$ring_depth:$all_depth" = "4:0"
expect "the plan: the ring's bytes ($ring_grads) are less than a slot per group ($all_grads)" \
    test "$ring_grads" -lt "$all_grads" -a "$ring_grads" = "$ring_grads2" -a "$all_grads" = "$all_grads2"
limit=$(((ring_host + all_host) / 2))
MT_PLAN_MEM_LIMIT=$limit "$MTRUN" --plan -np 3 "$WORK/base.cfg" >"$WORK/fits.log" 2>&1
expect "a host that holds only the ring: the refusal offers optimizer.clip = 0" \
    grep -q 'it fits with optimizer.clip = 0: each group is then updated as soon as its gradients land' "$WORK/fits.log"
finish
