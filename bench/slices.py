#!/usr/bin/env python3
"""A full-width model from two slices of it: the same layer shape, vocabulary and tokens per
step, with a few layers (A) and more (B). The difference of the two runs is what one layer
costs; the full model's step is the larger slice's plus that many times the layers it lacks.
Memory does not grow in a straight line (the gradient ring holds at most four groups, so a
2-layer slice's ring holds all of its groups and a longer model's no more than four; the
windows follow the largest group), so the full model's host and GPU bytes
are its plan plus what the slices measured over their own plans, that excess grown per layer
as it grew from A to B. Printed beside `mtrun --plan` of the full config with the slices'
settings.

usage: bench/slices.py MTRUN FULL_CONFIG OVERRIDES RUN_A RUN_B
  FULL_CONFIG: the whole model's config, or - for the slices and their per-layer difference
  alone (where the slices' layers are not the model's mean layer, e.g. DeepSeek-V3's dense
  first layers beside its MoE ones); OVERRIDES: the key=value settings that make the full
  config run as the slices do (a comma list); RUN_*: run folders of bench/run_bench.sh, with
  host-peak beside them (bytes)."""
import json
import os
import re
import statistics
import subprocess
import sys

from summarize import read_run  # bench/, beside this file


def run_facts(run):
    """Medians over the steady steps (all but the first two), the GPU bytes, the host peak,
    and per layer from the trace: GPU compute (forward, backward, redo) and AdamW per rank."""
    start, memory, steps = read_run(run)
    steady = steps[2:] or steps
    def med(k):  # CUDA runs measure busy and stall; CPU runs (tests of this script) do not
        xs = [r[k] for r in steady if k in r]
        return statistics.median(xs) if xs else float("nan")

    facts = {
        "layers": None,
        "steps": len(steps),
        "step_s": med("step_s"),
        "busy": med("compute_busy"),
        "opt_stall": med("opt_stall"),
        "opt_wait": statistics.median(r["opt_wait_s"] / r["step_s"] for r in steady),
        "h2d": med("h2d_GBps"),
        "gpu": memory.get("device_bytes", 0),
        "host": float(open(f"{run}.host-peak").read()),
        "tokens_per_s": med("tokens_per_s"),
        "tflops": med("tflops"),
    }
    facts.update(trace_facts(f"{run}/trace.json"))
    return facts


def trace_facts(path):
    """Per layer of the last traced step: GPU compute spans (fwd/bwd/redo of a layer) summed,
    and the slowest optimizer rank's AdamW of a layer (ranks update their shards together)."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    last = max(e["args"].get("step", 0) for e in events if e.get("ph") == "X")
    layer_compute, adamw = {}, {}
    for e in events:
        if e.get("ph") != "X" or e["args"].get("step") != last:
            continue
        track = names.get((e["pid"], e["tid"]), "")
        m = re.match(r"(fwd|bwd|redo|adamw) L(\d+)$", e["name"])
        if not m:
            continue
        kind, layer = m.group(1), int(m.group(2))
        if track == "compute" and kind != "adamw":
            layer_compute.setdefault(layer, {}).setdefault(kind, 0.0)
            layer_compute[layer][kind] += e["dur"] / 1e6
        elif track.startswith("optimizer") and kind == "adamw": # a span a run of pieces
            ranks = adamw.setdefault(layer, {})
            ranks[e["pid"]] = ranks.get(e["pid"], 0.0) + e["dur"] / 1e6
    fwd = [c.get("fwd", 0) for c in layer_compute.values()]
    bwd = [c.get("bwd", 0) + c.get("redo", 0) for c in layer_compute.values()]
    opt = [max(d.values()) for d in adamw.values()]
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    return {"layer_fwd_s": med(fwd), "layer_bwd_s": med(bwd), "layer_adamw_s": med(opt)}


def plan(mtrun, cfg, overrides):
    # the reference host: 1.5 TB (grad_dtype "auto" decides there), /dev/shm grown to fit
    env = dict(os.environ, MT_PLAN_MEM_LIMIT="1500000000000", MT_PLAN_SHM_LIMIT="100000000000000")
    out = subprocess.run([mtrun, "--plan", "--json", "-np", "5", "--gpu-mem", "141G", cfg] + overrides,
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"mtrun --plan {cfg}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def layers_of(cfg):
    m = re.search(r"\blayers\s*=\s*(\d+)", open(cfg).read())
    return int(m.group(1))


GIB = 2 ** 30


def print_slices(a, b, la, lb, sp, per):
    """Each slice beside its own plan, and what one more layer cost."""
    for n, f, q in ((la, a, sp[0]), (lb, b, sp[1])):
        print(f"  {n} layers: step {f['step_s']:.3f} s, {f['tflops']:.1f} TFLOP/s, busy {f['busy']:.1%}, "
              f"optimizer stall {f['opt_stall']:.1%} (host wait {f['opt_wait']:.1%}), H2D {f['h2d']:.1f} GB/s, "
              f"GPU {f['gpu'] / GIB:.2f} GiB, host peak {f['host'] / GIB:.2f} GiB; its plan: step "
              f"{q['estimate']['step_s']:.3f} s, GPU {q['gpu']['total'] / GIB:.2f} GiB, host {q['host'] / GIB:.2f} GiB")
    print(f"  per layer: {per['step_s']:.3f} s of the step, GPU {per['gpu'] / GIB:.3f} GiB, "
          f"host {per['host'] / GIB:.3f} GiB")
    print(f"  per layer at {lb} layers (trace): forward {b['layer_fwd_s'] * 1e3:.0f} ms, backward with "
          f"recompute {b['layer_bwd_s'] * 1e3:.0f} ms, AdamW (slowest rank) {b['layer_adamw_s'] * 1e3:.0f} ms")


def print_full(mtrun, full_cfg, overrides, a, b, la, lb, sp, per):
    """The whole model: the larger slice plus its missing layers, beside its own plan."""
    L = layers_of(full_cfg)
    d = lb - la
    full = {k: b[k] + (L - lb) * per[k] for k in per}
    p = plan(mtrun, full_cfg, overrides)
    planned = lambda q: {"host": q["host"], "gpu": q["gpu"]["total"]}
    pa, pb, pf = planned(sp[0]), planned(sp[1]), planned(p)
    layer_params = (sp[1]["params"] - sp[0]["params"]) / d  # the mean layer, any kind of layer
    for k in ("host", "gpu"):  # the plan's count, plus the slices' measured excess over theirs
        over = b[k] - pb[k]
        full[k] = pf[k] + over + (L - lb) * (over - (a[k] - pa[k])) / d
    est = p["estimate"]
    plan_gpu = p["gpu"]["total"]
    rows = [("step", full["step_s"], est["step_s"], "s"),
            ("host peak", full["host"], p["host"], "GiB"),
            ("GPU", full["gpu"], plan_gpu, "GiB")]
    print(f"  full model, extrapolated vs mtrun --plan ({' '.join(overrides) or 'as configured'}; "
          f"plan: forward {est['forward_phase_s']:.2f} s, backward {est['backward_phase_s']:.2f} s, "
          f"compute {est['compute_s']:.2f} s, PCIe {est['pcie_s']:.2f} s, optimizer {est['optimizer_s']:.2f} s):")
    for what, got, want, unit in rows:
        scale = GIB if unit == "GiB" else 1
        print(f"    {what:9s} {got / scale:10.2f} {unit} vs plan {want / scale:10.2f} {unit}: "
              f"{(got - want) / want:+.1%}")
    # Slack per layer at full width: what the compute leaves the PCIe copies and the optimizer.
    print(f"  slack per layer at {lb} layers: forward {b['layer_fwd_s'] * 1e3:.0f} ms vs AdamW "
          f"{b['layer_adamw_s'] * 1e3:.0f} ms ({(b['layer_fwd_s'] - b['layer_adamw_s']) * 1e3:+.0f}); "
          f"backward {b['layer_bwd_s'] * 1e3:.0f} ms vs AdamW ({(b['layer_bwd_s'] - b['layer_adamw_s']) * 1e3:+.0f}); "
          f"vs a layer's fp32 fetch at 55 GB/s {layer_params * 4 / 55e9 * 1e3:.0f} ms")
    print(f"  full model: {full['step_s']:.1f} s a step, "
          f"{p['estimate']['flops'] / full['step_s'] / 1e12:.0f} TFLOP/s executed, "
          f"busy {b['busy']:.1%} and optimizer stall {b['opt_stall']:.1%} at {lb} layers")


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    mtrun, full_cfg, overrides, run_a, run_b = sys.argv[1:]
    overrides = [o for o in overrides.split(",") if o]
    a, b = run_facts(run_a), run_facts(run_b)
    la = int(re.search(r"-(\d+)l$", run_a).group(1))
    lb = int(re.search(r"-(\d+)l$", run_b).group(1))
    per = {k: (b[k] - a[k]) / (lb - la) for k in ("step_s", "gpu", "host")}
    here = os.path.dirname(os.path.abspath(__file__))
    sp = [plan(mtrun, f"{here}/configs/{os.path.basename(run)[4:]}.cfg", []) for run in (run_a, run_b)]
    whole = f"{os.path.basename(full_cfg)}: {layers_of(full_cfg)} layers" if full_cfg != "-" else \
        os.path.basename(run_b)[4:].rsplit("-", 1)[0]
    print(f"== {whole}, from slices of {la} and {lb} layers "
          f"({a['steps']} and {b['steps']} steps, medians of the steady ones)")
    print_slices(a, b, la, lb, sp, per)
    if full_cfg != "-":
        print_full(mtrun, full_cfg, overrides, a, b, la, lb, sp, per)


if __name__ == "__main__":
    main()
