#!/usr/bin/env python3
"""One line per bench run from its metrics.jsonl: medians over the steady-state steps (all
but the first two) of what issue 3 asks the bench to report.
usage: bench/summarize.py RUN_DIR [RUN_DIR...]"""
import json
import statistics
import sys


def read_run(run):
    """metrics.jsonl of a run folder: its start and memory events and its step lines."""
    start, memory, steps = {}, {}, []
    with open(f"{run}/metrics.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("event") == "start":
                start = r
            elif r.get("event") == "memory":
                memory = r
            elif "loss" in r:
                steps.append(r)
    return start, memory, steps


def summarize(run):
    start, memory, steps = read_run(run)
    if not steps:
        print(f"{run}: no steps")
        return
    steady = steps[2:] or steps
    med = lambda k: statistics.median(r[k] for r in steady) if all(k in r for r in steady) else float("nan")
    wait = statistics.median(r["opt_wait_s"] / r["step_s"] for r in steady)
    print(f"{run}: steps {len(steps)} (median of {len(steady)}) tokens/s {med('tokens_per_s'):.0f} "
          f"TFLOP/s {med('tflops'):.1f} step {med('step_s'):.3f} s compute_busy {med('compute_busy'):.3f} "
          f"opt_wait(host) {wait:.3f} opt_stall(gpu) {med('opt_stall'):.3f} h2d {med('h2d_GBps'):.1f} GB/s d2h {med('d2h_GBps'):.1f} GB/s "
          f"gpu_mem {memory.get('device_bytes', 0) / 2**30:.1f} GiB kept {memory.get('kept')}/{memory.get('passes')} "
          f"losses {steps[0]['loss']:.4f} -> {steps[-1]['loss']:.4f}")


if __name__ == "__main__":
    for run in sys.argv[1:]:
        summarize(run)
