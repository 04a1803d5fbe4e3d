#!/usr/bin/env bash
# Issue 17: data parallel over nodes, on one host through virtual nodes (MT_TEST_NODES=N groups
# consecutive ranks into N nodes, each with its own shared memory and control plane, talking
# to the others only through MPI). A global batch is the same whatever the node count, and the
# sums run in one fixed tree, so N nodes give bitwise the losses, evaluation losses and
# checkpoint of one node; a job resumes on another node count; a rank killed on the second
# node ends the job at once, naming it.
source "$(dirname "$0")/e2e_lib.sh" "$@"

config() { # config OUT MICRO_BATCHES
    small_config cpu "$1"
    sed -i -e "s/^steps = .*/steps = 10;/" -e "s/micro_batches = .*/micro_batches = $2;/" "$1"
    echo 'eval = { interval = 5; batches = 3; };' >>"$1"
}
nodes_job() { # nodes_job NODES NAME NP CONFIG [mtrun args...]
    local n=$1
    shift
    MT_TEST_NODES=$n run_job "$@"
}
evals() { grep -o '"eval_loss":[^,}]*' "$1/metrics.jsonl"; }
same_run() { # same_run DESCRIPTION A B: losses, evaluation losses and the last checkpoint
    expect "$1: both ran 10 steps and 2 evaluations" test "$(losses "$WORK/$2" | wc -l)" -eq 10 \
        -a "$(losses "$WORK/$3" | wc -l)" -eq 10 -a "$(evals "$WORK/$3" | wc -l)" -eq 2
    expect "$1: losses bitwise" cmp -s <(losses "$WORK/$2") <(losses "$WORK/$3")
    expect "$1: evaluation losses bitwise" cmp -s <(evals "$WORK/$2") <(evals "$WORK/$3")
    expect "$1: checkpoint bitwise" \
        cmp -s "$WORK/$2/step_000010/state.bin" "$WORK/$3/step_000010/state.bin"
}

# 1 node x 2 micro-batches against 2 nodes x 1, each node 1 compute + 2 optimizer ranks
config "$WORK/m2.cfg" 2
run_job one2 3 "$WORK/m2.cfg" || show_log one2
nodes_job 2 two1 6 "$WORK/m2.cfg" || show_log two1
expect "2 nodes: the start line shows the placement" \
    grep -q 'mtrun: 2 nodes x (1 compute + 2 optimizer processes)' "$WORK/two1.log"
same_run "2 nodes x 1 micro-batch = 1 node x 2" one2 two1

# 3 nodes of 1 compute + 3 optimizer ranks (other, uneven shards) against 1 node of 1 + 2
config "$WORK/m3.cfg" 3
run_job one3 3 "$WORK/m3.cfg" || show_log one3
nodes_job 3 three1 12 "$WORK/m3.cfg" || show_log three1
same_run "3 nodes x (1 + 3 ranks) = 1 node x (1 + 2)" one3 three1

# 2 nodes x 2 micro-batches against 1 node x 4: the micro-batch sums within a node
config "$WORK/m4.cfg" 4
run_job one4 3 "$WORK/m4.cfg" || show_log one4
nodes_job 2 two2 6 "$WORK/m4.cfg" || show_log two2
same_run "2 nodes x 2 micro-batches = 1 node x 4" one4 two2

# bf16 gradient slots (the sum over nodes comes before the rounding), the first 2 groups
# updated on the compute rank, and an export written by the leader node
sed 's/^optimizer = {/optimizer = {\n  grad_dtype = "bf16";\n  device_groups = 2;/' \
    "$WORK/m4.cfg" >"$WORK/bf16.cfg"
sed "\$a export_dir = \"$WORK/export-one\";" "$WORK/bf16.cfg" >"$WORK/bf16-one.cfg"
sed "\$a export_dir = \"$WORK/export-two\";" "$WORK/bf16.cfg" >"$WORK/bf16-two.cfg"
run_job bf16-one 3 "$WORK/bf16-one.cfg" || show_log bf16-one
nodes_job 2 bf16-two 6 "$WORK/bf16-two.cfg" || show_log bf16-two
same_run "bf16 slots, device groups: 2 nodes = 1 node" bf16-one bf16-two
expect "bf16 slots, device groups: the exports are the same files" \
    diff -r "$WORK/export-one" "$WORK/export-two"

# --gpus 2: the host's ranks split into 2 nodes, one per GPU (the CPU backend computes the same)
run_job gpus2 6 "$WORK/m4.cfg" --gpus 2 || show_log gpus2
same_run "--gpus 2 on one host = 1 node" one4 gpus2
"$MTRUN" --plan --gpus 2 -np 6 "$WORK/m4.cfg" >"$WORK/plan-gpus.log" 2>&1
expect "--plan --gpus 2: node 1 is GPU 1 of host 0" grep -q \
    'node 1 (host 0, GPU 1): ranks 3-5' "$WORK/plan-gpus.log"

# resume on another node count: 4 steps on one node, the rest on two
run_job half 3 "$WORK/m4.cfg" --stop-at 4 || show_log half
nodes_job 2 rest 6 "$WORK/m4.cfg" --resume "$WORK/half" --out "$WORK/half" || show_log rest
expect "1 node then 2: the checkpoint of step 10 is bitwise that of 1 node throughout" \
    cmp -s "$WORK/one4/step_000010/state.bin" "$WORK/half/step_000010/state.bin"
expect "1 node then 2: the losses of steps 5-10 are 1 node's" \
    cmp -s <(losses "$WORK/one4" | tail -n 6) <(losses "$WORK/half" | tail -n 6)

# optimizer.shard_across_nodes: each node keeps m and v of half of every shard and gathers the
# others' updated weights; the same bits, a smaller plan, and a save that resumes anywhere
sed 's/^optimizer = {/optimizer = {\n  shard_across_nodes = true;/' "$WORK/m4.cfg" >"$WORK/split.cfg"
sed 's/^optimizer = {/optimizer = {\n  device_groups = 2;/' "$WORK/split.cfg" >"$WORK/split-dev.cfg"
nodes_job 2 split 6 "$WORK/split.cfg" || show_log split
same_run "moments split over 2 nodes = 1 node" one4 split
nodes_job 2 split-dev 6 "$WORK/split-dev.cfg" || show_log split-dev
same_run "moments split, 2 groups on the compute rank = 1 node" one4 split-dev
nodes_job 2 split-half 6 "$WORK/split.cfg" --stop-at 4 || show_log split-half
run_job split-rest 3 "$WORK/m4.cfg" --resume "$WORK/split-half" --out "$WORK/split-half" ||
    show_log split-rest
expect "a split save resumed on 1 node ends bitwise where 1 node ends" \
    cmp -s "$WORK/one4/step_000010/state.bin" "$WORK/split-half/step_000010/state.bin"
plan_host() { MT_TEST_NODES=2 "$MTRUN" --plan --json -np 6 "$1" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["host"])'; }
whole=$(plan_host "$WORK/m4.cfg")
split=$(plan_host "$WORK/split.cfg")
expect "the plan of a split node is smaller ($split < $whole bytes)" test "$split" -lt "$whole"

# only the leader node writes: one metrics record per step
expect "2 nodes: one metrics line per step" \
    test "$(grep -c '"step":3,"loss"' "$WORK/two2/metrics.jsonl")" -eq 1

# Ctrl-C over 2 nodes: the nodes agree on the step to end after, and save it
# (steps enough that no machine finishes them before the signal lands: 400 once did on 16 cores)
sed 's/^steps = .*/steps = 1000000;/' "$WORK/m2.cfg" >"$WORK/long.cfg"
MT_TEST_NODES=2 "$MTRUN" -np 6 "$WORK/long.cfg" --out "$WORK/int" >"$WORK/int.log" 2>&1 &
pid=$!
for i in $(seq 1 300); do grep -q '^step *3/' "$WORK/int.log" && break; sleep 0.05; done
kill -INT "$pid"
# A job that does not stop on request would run for ever: after 60 s a second signal ends it
for i in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { echo "the job did not stop within 60 s: aborting it"; kill -INT "$pid"; }
wait "$pid"
rc=$?
stopped=$(sed -n 's/.*stopped on request after step \([0-9]*\),.*/\1/p' "$WORK/int.log")
expect "2 nodes: a SIGINT ends the job with exit code 130 (was $rc)" test "$rc" -eq 130
expect "2 nodes: after a step, with its checkpoint ($stopped)" \
    grep -qx "$(step_dir "${stopped:-0}")" "$WORK/int/LATEST" || show_log int

# the plan shows the placement
MT_TEST_NODES=2 "$MTRUN" --plan -np 6 "$WORK/m4.cfg" >"$WORK/plan.log" 2>&1
expect "--plan: node 1 runs ranks 3-5 over micro-batches 2-3" grep -q \
    'node 1 (host 1, GPU 0): ranks 3-5: compute rank 3, optimizer ranks 4-5; micro-batches 2-3 of' \
    "$WORK/plan.log"

# over nodes the compute rank also holds a scratch for the sums: more host than one node with
# the same micro-batches per node
compute_host() { MT_TEST_NODES=$1 "$MTRUN" --plan --json -np "$2" "$3" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["ranks"][0]["compute"])'; }
sed 's/micro_batches = .*/micro_batches = 1;/' "$WORK/m2.cfg" >"$WORK/m1.cfg"
one_node=$(compute_host 1 3 "$WORK/m1.cfg")
two_nodes=$(compute_host 2 6 "$WORK/m2.cfg")
expect "the plan counts the compute rank's scratch for the sums ($two_nodes > $one_node)" \
    test "$two_nodes" -gt "$one_node"

# bad input: a batch that does not split
nodes_job 2 uneven 6 "$WORK/m3.cfg"
rc=$?
expect "3 micro-batches over 2 nodes: refused with exit code 2" test "$rc" -eq 2
expect "3 micro-batches over 2 nodes: the line names the field" \
    grep -q 'batch.micro_batches = 3 does not split evenly over 2 nodes' "$WORK/uneven.log"
nodes_job 2 odd 5 "$WORK/m2.cfg"
expect "5 ranks over 2 nodes: refused, saying why" \
    grep -q -- '-np 5 over 2 nodes: each node needs the same number of ranks' "$WORK/odd.log"

# The CUDA backend over 2 virtual nodes sharing this host's GPU: the sums over nodes run on
# the host, the micro-batches' on the GPU, so losses match one node's to rounding.
if have_gpu; then
    sed 's/^backend = .*/backend = "cuda";/' "$WORK/m2.cfg" >"$WORK/cuda.cfg"
    run_job cuda-one 3 "$WORK/cuda.cfg" || show_log cuda-one
    nodes_job 2 cuda-two 6 "$WORK/cuda.cfg" || show_log cuda-two
    expect "cuda, 2 nodes: 10 steps" test "$(losses "$WORK/cuda-two" | wc -l)" -eq 10
    expect "cuda, 2 nodes: losses within 1e-4 of one node's" python3 - "$WORK" <<'PY'
import json, sys
def losses(run):
    return [json.loads(l)["loss"] for l in open(f"{sys.argv[1]}/{run}/metrics.jsonl") if '"loss"' in l]
a, b = losses("cuda-one"), losses("cuda-two")
sys.exit(not (len(a) == len(b) == 10 and all(abs(x - y) <= 1e-4 * abs(x) for x, y in zip(a, b))))
PY
fi

# death: kill -9 of optimizer 0 on node 1 (world rank 4) at step 3
start=$(date +%s)
MT_FAULT_NODE=1 MT_FAULT_KILL_AT_STEP=3 nodes_job 2 killed 6 "$WORK/m2.cfg"
rc=$?
took=$(($(date +%s) - start))
expect "a rank killed on node 1 ends the job with its signal (rc $rc)" test "$rc" -eq 137
expect "the job ended within 60 s of its start (took $took s)" test "$took" -lt 60
expect "the line names the rank, its node and role" \
    grep -q 'mtrun: rank 4 (node 1, optimizer 0) on .* was killed by signal 9' "$WORK/killed.log"
expect "the killed job left no shared memory behind" no_leftovers killed
finish
