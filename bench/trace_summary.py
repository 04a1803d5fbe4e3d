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


def main(path):
    spans = load(path)
    steps = sorted((b, e, n) for n, b, e, _ in spans["host"] if n.startswith("step "))
    if not steps:
        sys.exit(f"{path}: no step span")
    t0, t1, step_name = steps[-1]
    print(f"{path}: {step_name}, {(t1 - t0) / 1e3:.1f} ms")
    optimizers = sorted(k for k in spans if k.startswith("optimizer"))
    for o in optimizers:
        d = [(e - b) / 1e3 for n, b, e, _ in spans[o] if n.startswith("adamw L")]
        if d:
            print(f"  {o}: adamw per layer median {statistics.median(d):.1f} ms, "
                  f"max {max(d):.1f} ms over {len(d)} spans")
    in_step = lambda s: [x for x in s if t0 <= x[1] < t1]
    fwd = sorted((b, n) for n, b, _, _ in in_step(spans["compute"]) if n.startswith("fwd L"))
    waits = collections.Counter()
    for n, b, e, _ in in_step(spans["host"]):
        if n.startswith("wait weights"):
            waits[n.removeprefix("wait weights ")] += e - b
    print("  layer  fwd start  opt ready   slack   host wait   (ms from the step's start)")
    worst = None
    for b, n in fwd:
        layer = n.removeprefix("fwd ")
        ready = [latest_before(spans[o], f"adamw {layer}", b) for o in optimizers]
        ready = [r for r in ready if r is not None]
        r = max(ready) if len(ready) == len(optimizers) and ready else None
        slack = (b - r) / 1e3 if r is not None else None
        if slack is not None and (worst is None or slack < worst[0]):
            worst = (slack, layer)
        rs = f"{(r - t0) / 1e3:9.1f}" if r is not None else "   (gpu)"
        ss = f"{slack:7.1f}" if slack is not None else "      -"
        print(f"  {layer:>5} {(b - t0) / 1e3:10.1f} {rs} {ss} {waits[layer] / 1e3:10.1f}")
    total = sum(waits.values()) / 1e3
    print(f"  host waited for weights {total:.1f} ms in this step ({100 * total * 1e3 / (t1 - t0):.1f}%)"
          + (f"; least slack {worst[0]:.1f} ms at {worst[1]}" if worst else ""))


if __name__ == "__main__":
    for p in sys.argv[1:] or sys.exit(__doc__):
        main(p)
