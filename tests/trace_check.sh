#!/usr/bin/env bash
# trace_steps = [2, 3] on test-small (2 layers) with -np 3: <run>/trace.json is a valid
# Chrome/Perfetto trace of exactly those steps, with the compute, h2d, d2h and host tracks of
# rank 0 and one track per optimizer rank, a span for every layer's forward, backward, fetch,
# offload and update in both steps, and no part files left behind; bench/trace_summary.py
# finds every layer's update finished before the forward that uses it.
source "$(dirname "$0")/e2e_lib.sh" "$@"
sed "s|\"\.\./data/|\"$SRC/data/|" "$SRC/configs/test-small.cfg" >"$WORK/trace.cfg"
echo 'trace_steps = [2, 3];' >>"$WORK/trace.cfg"
run_job traced 3 "$WORK/trace.cfg" || show_log traced
expect "the job says where the trace is" grep -q "trace of steps 2..3: .*/trace.json" \
    "$WORK/traced.log"
expect "no part or temporary files remain" \
    test -z "$(ls "$WORK/traced" | grep -E '\.part|\.tmp')"
expect "trace.json passes the checks below" python3 - "$WORK/traced/trace.json" 2 3 2 3 "$SRC/bench" <<'PY'
import json, sys
path, layers, world, first, last = sys.argv[1], *map(int, sys.argv[2:6])
steps = range(first, last + 1)
events = json.load(open(path))["traceEvents"]  # parses, and is the traceEvents format
bad = []
def check(ok, what):
    if not ok: bad.append(what)

names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
         if e["ph"] == "M" and e["name"] == "thread_name"}
tid = {names[k]: k for k in names if k[0] == 0}
for t in ("compute", "h2d", "d2h", "host"):
    check(t in tid, f"rank 0 has a {t} track")
opt = {k for k in names if k[0] != 0}
check(sorted(p for p, _ in opt) == list(range(1, world)), f"one track per optimizer rank: {opt}")
procs = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
check(procs == set(range(world)), f"every rank is named: {procs}")

spans = [e for e in events if e["ph"] == "X"]
check(all(e["ph"] in ("X", "M") for e in events), "only X and M events")
for e in spans:
    check(e["dur"] >= 0 and isinstance(e["ts"], (int, float)), f"bad times: {e}")
    check(e["args"]["step"] in steps, f"outside the traced steps: {e}")
    check((e["pid"], e["tid"]) in names, f"on an unnamed track: {e}")

def count(pid, track, name, step):
    return sum(1 for e in spans if e["pid"] == pid and e["tid"] == track
               and e["name"] == name and e["args"]["step"] == step)
groups = ["embed"] + [f"L{l}" for l in range(layers)] + ["head"]
for s in steps:
    for l in range(layers):
        for kind in ("fwd", "bwd"):
            check(count(0, tid["compute"][1], f"{kind} L{l}", s) == 1, f"one {kind} L{l} in step {s}")
        check(count(0, tid["h2d"][1], f"h2d L{l}", s) >= 1, f"h2d L{l} in step {s}")
    for n in ("embed", "head", "embed bwd"):
        check(count(0, tid["compute"][1], n, s) == 1, f"one {n} in step {s}")
    check(count(0, tid["h2d"][1], "h2d embed", s) == 1, f"h2d embed in step {s}")
    check(count(0, tid["host"][1], f"step {s}", s) == 1, f"a step {s} span")
    for g in groups:
        check(count(0, tid["d2h"][1], f"d2h {g}", s) == 1, f"one d2h {g} in step {s}")
        for pid, t in opt:
            check(count(pid, t, f"adamw {g}", s) == 1, f"rank {pid}: one adamw {g} in step {s}")
    for pid, t in opt:
        check(count(pid, t, "wait grads", s) == 1, f"rank {pid}: one wait grads in step {s}")

# Rank 0's spans of a step lie inside its step span (3 decimals each: allow rounding).
EPS = 0.005
step_span = {e["args"]["step"]: e for e in spans if e["pid"] == 0 and e["name"].startswith("step ")}
for e in spans:
    st = step_span.get(e["args"]["step"])
    if e["pid"] == 0 and st:
        check(e["ts"] >= st["ts"] - EPS and e["ts"] + e["dur"] <= st["ts"] + st["dur"] + EPS,
              f"{e['name']} of step {e['args']['step']} outside its step span")
# One clock for all processes: an update starts only after its gradients have landed.
d2h_end = {(e["name"][4:], e["args"]["step"]): e["ts"] + e["dur"] for e in spans
           if e["pid"] == 0 and e["tid"] == tid["d2h"][1]}
for e in spans:
    if e["pid"] != 0 and e["name"].startswith("adamw "):
        key = (e["name"][6:], e["args"]["step"])
        check(key in d2h_end and e["ts"] >= d2h_end[key] - EPS,
              f"rank {e['pid']}: {e['name']} of step {key[1]} starts before its d2h ends")
# bench/trace_summary.py reads this trace: in the last step every layer's forward started
# after every optimizer rank had finished the update it uses (the compute rank waits for
# their announcements), and no layer is missing.
sys.path.insert(0, sys.argv[6])
import trace_summary
tracks = trace_summary.load(path)
t0, t1, _ = trace_summary.last_step(tracks)
rows = trace_summary.layer_rows(tracks, t0, t1)
check([r["layer"] for r in rows] == [f"L{l}" for l in range(layers)], f"summary rows {rows}")
for r in rows:
    check(r["ready"] is not None and r["slack"] >= -EPS,
          f"{r['layer']} forward began before its update was published: {r}")
for b in bad[:20]: print("  ", b)
print(f"   {len(spans)} spans, {len(bad)} problems")
sys.exit(1 if bad else 0)
PY
finish
