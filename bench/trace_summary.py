#!/usr/bin/env python3
"""Where the last traced step's forward waited on the optimizer ranks, from a trace.json.

For each layer of that step's forward it prints when the optimizer ranks finished the update
the layer needs (the latest "adamw Ln" end before the forward reached it), when its weights
were copied in, when the forward started it, and how long the host waited. Trace two steps
(trace_steps = [5, 6]) so that the updates the last step's forward uses are in the trace.
usage: bench/trace_summary.py RUN_DIR/trace.json"""
import collections
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    spans = collections.defaultdict(list)  # track name -> [(name, begin, end, step)]
    for e in events:
        if e.get("ph") == "X":
            track = names.get((e["pid"], e["tid"]), f"{e['pid']}/{e['tid']}")
            spans[track].append((e["name"], e["ts"], e["ts"] + e["dur"], e["args"].get("step")))
    return spans


def latest_before(spans, name, t):
    ends = [end for n, _, end, _ in spans if n == name and end <= t]
    return max(ends) if ends else None


def last_step(spans):
    """(begin, end, name) of the last traced step of rank 0."""
    steps = sorted((b, e, n) for n, b, e, _ in spans["host"] if n.startswith("step "))
    return steps[-1] if steps else None


def layer_rows(spans, t0, t1):
    """Per layer of the forward in [t0, t1): its start, when the last optimizer rank had
    finished the update it uses (None: the GPU updates it), the slack between the two, and
    how long the host blocked on its weights. Times in microseconds."""
    optimizers = sorted(k for k in spans if k.startswith("optimizer"))
    in_step = lambda s: [x for x in s if t0 <= x[1] < t1]
    waits = collections.Counter()
    for n, b, e, _ in in_step(spans["host"]):
        if n.startswith("wait weights"):
            waits[n.removeprefix("wait weights ")] += e - b
    rows = []
    for b, n in sorted((b, n) for n, b, _, _ in in_step(spans["compute"]) if n.startswith("fwd L")):
        layer = n.removeprefix("fwd ")
        ready = [latest_before(spans[o], f"adamw {layer}", b) for o in optimizers]
        r = max(ready) if optimizers and None not in ready else None
        rows.append({"layer": layer, "fwd": b, "ready": r, "slack": None if r is None else b - r,
                     "blocked": waits[layer]})
    return rows


def main(path):
    spans = load(path)
    step = last_step(spans)
    if not step:
        sys.exit(f"{path}: no step span")
    t0, t1, step_name = step
    print(f"{path}: {step_name}, {(t1 - t0) / 1e3:.1f} ms")
    for o in sorted(k for k in spans if k.startswith("optimizer")):
        per = collections.Counter()  # a layer's update is one span, or several where the ring
        for n, b, e, st in spans[o]:  # went by urgency and turned to other layers in between
            if n.startswith("adamw L"):
                per[(n, st)] += (e - b) / 1e3
        d = list(per.values())
        if d:
            print(f"  {o}: adamw per layer median {statistics.median(d):.1f} ms, "
                  f"max {max(d):.1f} ms over {len(d)} updates")
    # The host runs ahead of the GPU, so "host blocked" is not GPU idle time: the GPU stalls
    # only where the slack is gone (opt_stall in metrics.jsonl measures it).
    print("  layer  fwd start  opt ready   slack   host blocked   (ms from the step's start)")
    rows = layer_rows(spans, t0, t1)
    for r in rows:
        ready = f"{(r['ready'] - t0) / 1e3:9.1f}" if r["ready"] is not None else "    (gpu)"
        slack = f"{r['slack'] / 1e3:7.1f}" if r["slack"] is not None else "      -"
        print(f"  {r['layer']:>5} {(r['fwd'] - t0) / 1e3:10.1f} {ready} {slack} {r['blocked'] / 1e3:12.1f}")
    with_slack = [r for r in rows if r["slack"] is not None]
    worst = min(with_slack, key=lambda r: r["slack"]) if with_slack else None
    blocked = sum(r["blocked"] for r in rows) / 1e3
    print(f"  host blocked on weights {blocked:.1f} ms in this step"
          + (f"; least slack {worst['slack'] / 1e3:.1f} ms at {worst['layer']}" if worst else ""))


if __name__ == "__main__":
    for p in sys.argv[1:] or sys.exit(__doc__):
        main(p)
