#!/usr/bin/env python3
"""Mixture-of-Experts parity with transformers, one tiny random model per family: Qwen3 (dense,
qk-norm, head_dim != hidden / heads), Mixtral, Qwen2-MoE (shared expert, layer 0 in
mlp_only_layers, q/k/v biases), Qwen3-MoE (qk-norm, norm_topk_prob true) and OLMoE (qk-norm over
the whole projection, not renormalised).

usage: hf_moe_parity.py BUILD_DIR [cpu|cuda|all]      (default: all)

First, with no backend: our load-balancing loss (build/bin/moe_aux_check: the CPU kernels'
routing, counts, probability sums and moe_aux_loss) against transformers'
load_balancing_loss_func on random router logits of 3 layers pooled, within 1e-6 relative.

Then per family: save_pretrained into a temporary folder with output_router_logits true and
router_aux_loss_coef 0.05 (so the aux loss joins the loss and moves the training), and 20 AdamW
steps through mtrun -np 3 against a PyTorch loop that is our step (bf16-rounded compute weights,
fp32 masters, clip, AdamW, lr schedule: bench/hf_train_parity.py's), each micro-batch one
forward of transformers' model whose loss is CE / step tokens + coef * outputs.aux_loss /
micro_batches (our step's aux is the mean of the micro-batches' aux: step.c aux_weight).
metrics.jsonl's "loss" is the cross-entropy alone and "aux_loss" the step's aux; both are held
against the loop's. Tolerances: step 1 within 1e-5 relative on cpu (2e-2 cuda), the 20 steps
within 1e-3 (3e-2 cuda) for the dense Qwen3; steps 1 and 2 (the first update, the aux loss's
gradient in it) within 1e-5 for every family, the 20 within 2e-2 for MoE ones: a top-k choice on
a near tie flips on one bf16 ulp of a compute weight (the masters differ in their last bits),
and from there the curves part chaotically (qwen3_moe's from step 3). A check that the
comparison can fail: flipping norm_topk_prob moves transformers' step-1 loss by far more than
the tolerance. A one-step cpu run's export_dir loads in transformers as the same class with no
missing or unexpected tensor, and its logits equal those of the loop's weights after step 1
(within 3e-5 of their scale: 6e-6 with torch 2.11, 1.5e-5 with 2.15, whose fp32 kernels move the
loop's first AdamW step, which takes the sign of each gradient, where a gradient is near 0).

Exit 0 when nothing failed, 1 otherwise, 77 without torch/transformers or without the backend.
"""
import math
import os
import random
import subprocess
import sys
import tempfile

import mtparity

try:
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import (AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM, OlmoeConfig,
                              OlmoeForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3Config,
                              Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)
transformers.utils.logging.disable_progress_bar()

DIM, LAYERS, HEADS, KV, VOCAB = 64, 2, 4, 2, 256
SEQ, MICRO, MICROS, SEED, NTOK = 32, 2, 2, 1337, 4096
STEPS, WARMUP, LR, MIN_LR = 20, 5, 3e-3, 3e-4
BETA1, BETA2, EPS, WD, CLIP, COEF = 0.9, 0.95, 1e-8, 0.1, 1.0, 0.05
TOL1 = {"cpu": 1e-5, "cuda": 2e-2}
TOL = {"cpu": 1e-3, "cuda": 3e-2}
TOL_MOE = {"cpu": 2e-2, "cuda": 5e-2}
COMMON = dict(hidden_size=DIM, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
              num_key_value_heads=KV, vocab_size=VOCAB, max_position_embeddings=512,
              rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu", attention_dropout=0.0,
              tie_word_embeddings=False)
MOE = dict(output_router_logits=True, router_aux_loss_coef=COEF)
FAMILIES = [  # name, config class, model class, extra config
    ("qwen3", Qwen3Config, Qwen3ForCausalLM,
     dict(intermediate_size=96, head_dim=24, use_sliding_window=False)),
    ("mixtral", MixtralConfig, MixtralForCausalLM,
     dict(intermediate_size=48, num_local_experts=4, num_experts_per_tok=2, **MOE)),
    ("qwen2_moe", Qwen2MoeConfig, Qwen2MoeForCausalLM,
     dict(intermediate_size=96, moe_intermediate_size=32, shared_expert_intermediate_size=48,
          num_experts=6, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1,
          mlp_only_layers=[0], use_sliding_window=False, **MOE)),
    ("qwen3_moe", Qwen3MoeConfig, Qwen3MoeForCausalLM,
     dict(intermediate_size=96, moe_intermediate_size=32, num_experts=6, num_experts_per_tok=2,
          norm_topk_prob=True, head_dim=24, decoder_sparse_step=1, mlp_only_layers=[],
          use_sliding_window=False, **MOE)),
    ("olmoe", OlmoeConfig, OlmoeForCausalLM,
     dict(intermediate_size=32, num_experts=6, num_experts_per_tok=2, norm_topk_prob=False,
          # no pad token: transformers' Embedding(padding_idx) gives its row no gradient, ours
          # does (the pad token is not in real training text; here it would be)
          bos_token_id=None, eos_token_id=2, pad_token_id=None, **MOE)),
]
failures = 0


def report(status, msg):
    global failures
    failures += status == "FAIL"
    print(f"{status}: {msg}", flush=True)


def finish(ran):
    """The run's summary line and exit: 1 on a failure, 77 (skipped) when no backend ran."""
    print(f"{failures} failed" if failures else "all passed")
    if failures:
        sys.exit(1)
    if ran == 0:
        sys.exit(77)


def check_aux_formula(build):
    """moe_aux_loss against load_balancing_loss_func: 3 layers of 40 tokens, 8 experts, top 2."""
    exe = os.path.join(build, "bin", "moe_aux_check")
    g = torch.Generator().manual_seed(3)
    L, n, E, k = 3, 40, 8, 2
    logits = [(2.0 * torch.randn(n, E, generator=g)).float() for _ in range(L)]
    text = f"{L} {n} {E} {k}\n" + "\n".join(" ".join(repr(v) for v in t.flatten().tolist())
                                            for t in logits)
    out = subprocess.run([exe], input=text, capture_output=True, text=True, check=True)
    ours = float(out.stdout)
    theirs = float(load_balancing_loss_func(tuple(logits), E, k))
    rel = abs(ours - theirs) / abs(theirs)
    report("PASS" if rel < 1e-6 else "FAIL",
           f"aux loss: ours {ours:.9f}, load_balancing_loss_func {theirs:.9f}: relative {rel:.2e}")


def batch(tokens, step, micro):
    xs, ys = mtparity.batch(tokens, SEED, step, micro, MICRO, SEQ, len(tokens))
    return torch.tensor(xs), torch.tensor(ys)


def write_tokens(path, tokens):
    import struct
    head = b"MTCTOKS1" + struct.pack("<IIQ", 1, 2, len(tokens))
    with open(path, "wb") as f:
        f.write(head + bytes(256 - len(head)) + struct.pack(f"<{len(tokens)}H", *tokens))


def lr_at_step(s):  # runtime/model/schedule.c
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    progress = min((s - WARMUP) / (STEPS - WARMUP), 1.0)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1.0 + math.cos(math.pi * progress))


def make_model(cfg_cls, model_cls, extra):
    cfg = cfg_cls(**(COMMON | extra))  # extra may override COMMON
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(cfg).float()
    with torch.no_grad():  # weights that make routing and the norms matter, bf16-representable
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
            p.copy_(p.bfloat16().float())
    return model


def forward(model, x):
    moe = getattr(model.config, "output_router_logits", False)
    return model(input_ids=x, output_router_logits=True) if moe else model(input_ids=x)


@torch.no_grad()
def first_loss(model, tokens):
    """Step 1's mean cross-entropy, summed in double like ours."""
    total = 0.0
    for m in range(MICROS):
        x, y = batch(tokens, 0, m)
        logits = forward(model, x).logits.float()
        total += F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="sum").item()
    return total / (MICROS * MICRO * SEQ)


def torch_curve(model, tokens):
    """Our step in PyTorch: (CE, aux) per step; the model ends with the last compute weights."""
    params = list(model.parameters())
    master = [p.detach().clone().requires_grad_(True) for p in params]
    opt = torch.optim.AdamW(master, lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD,
                            foreach=False)
    n, curve, after_one = MICROS * MICRO * SEQ, [], None
    moe = getattr(model.config, "output_router_logits", False)
    for s in range(STEPS):
        with torch.no_grad():
            for p, m in zip(params, master):
                p.copy_(m.bfloat16().float())
        model.zero_grad(set_to_none=True)
        ce_sum = aux_sum = 0.0
        for micro in range(MICROS):
            x, y = batch(tokens, s, micro)
            out = forward(model, x)
            ce = F.cross_entropy(out.logits.float().reshape(-1, VOCAB), y.reshape(-1),
                                 reduction="sum")
            loss = ce / n
            if moe:
                loss = loss + COEF * out.aux_loss / MICROS
                aux_sum += out.aux_loss.item()
            ce_sum += ce.item()
            loss.backward()
        curve.append((ce_sum / n, aux_sum / MICROS))
        for p, m in zip(params, master):
            m.grad = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(m)
        torch.nn.utils.clip_grad_norm_(master, CLIP)
        for group in opt.param_groups:
            group["lr"] = lr_at_step(s)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if s == 0:
            after_one = [m.detach().clone() for m in master]
    with torch.no_grad():  # the masters after step 1, for the export's check
        for p, m in zip(params, after_one):
            p.copy_(m)
    return curve


def our_curve(build, work, backend, steps=STEPS):
    """mtrun -np 3: (loss, aux) per step; a one-step cpu run exports to export-cpu."""
    cfg = os.path.join(work, f"{backend}-{steps}.cfg")
    lr, warmup = (LR, WARMUP) if steps > 1 else (LR / WARMUP, 0)
    with open(cfg, "w") as f:
        if backend == "cpu" and steps == 1:
            f.write('export_dir = "export-cpu";\n')
        f.write('model_dir = "model";\n'
                'data = { path = "tokens.tok"; format = "tokens"; val_path = "tokens.tok"; };\n'
                f"batch = {{ micro_batch = {MICRO}; micro_batches = {MICROS}; seq_len = {SEQ}; }};\n"
                # one step: the warm-up's first lr, LR / WARMUP, as a constant
                f"optimizer = {{ lr = {lr!r}; min_lr = {MIN_LR!r}; warmup_steps = {warmup}; "
                f"beta1 = {BETA1!r}; beta2 = {BETA2!r}; eps = {EPS!r}; weight_decay = {WD!r}; "
                f"clip = {CLIP!r}; }};\n"
                f'steps = {steps};\nseed = {SEED};\nbackend = "{backend}";\n'
                "checkpoint = { interval = 0; };\n")
    records, why = mtparity.run_mtrun(build, cfg, os.path.join(work, f"run-{backend}-{steps}"))
    if records is None:
        return None, why
    by = {r["step"]: r for r in records if "loss" in r and "step" in r}
    return [(by[s]["loss"], by[s].get("aux_loss", 0.0)) for s in range(1, steps + 1)], None


@torch.no_grad()
def sensitivity(name, model, tokens, loss):
    """Renormalising where the family does not (or not where it does) must show."""
    routers = [m for m in model.modules() if hasattr(m, "norm_topk_prob")]
    if not routers:
        return
    for m in routers:
        m.norm_topk_prob = not m.norm_topk_prob
    other = first_loss(model, tokens)
    for m in routers:
        m.norm_topk_prob = not m.norm_topk_prob
    rel = abs(other - loss) / abs(loss)
    report("PASS" if rel > 20 * TOL1["cpu"] else "FAIL",
           f"{name}: norm_topk_prob flipped moves transformers' loss by {rel:.2e} "
           f"(> {20 * TOL1['cpu']:g}: the comparison can fail)")


@torch.no_grad()
def check_export(name, model, export, tokens):
    back, info = AutoModelForCausalLM.from_pretrained(export, output_loading_info=True)
    back = back.float()
    back.config._attn_implementation = "eager"
    odd = [k for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)]
    x, _ = batch(tokens, 0, 0)
    a, b = back(input_ids=x).logits.float(), model(input_ids=x).logits.float()
    err = float((a - b).abs().max() / b.abs().max())
    ok = type(back) is type(model) and not odd and err < 3e-5
    if os.environ.get("MT_MOE_DEBUG"):  # the tensors furthest from the loop's
        theirs = dict(model.named_parameters())
        diffs = sorted(((float((p - theirs[n]).abs().max() / theirs[n].abs().max()), n)
                        for n, p in back.named_parameters()), reverse=True)
        print("\n".join(f"  {d:.2e} {n}" for d, n in diffs[:8]))
    report("PASS" if ok else "FAIL",
           f"{name}: transformers loads our export as {type(back).__name__}"
           f"{''.join(f' {k} {info[k]}' for k in odd)}; logits against the loop's weights after step 1 "
           f"{err:.2e} of their scale (< 3e-5)")


def main():
    build, backends = mtparity.parse_args(__doc__, torch.cuda.is_available())
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    check_aux_formula(build)
    rng = random.Random(5)
    tokens = [rng.randrange(VOCAB) for _ in range(NTOK)]
    ran = 0
    only = os.environ.get("MT_MOE_FAMILY")  # one family, when debugging
    for name, cfg_cls, model_cls, extra in FAMILIES:
        if only and name != only:
            continue
        with tempfile.TemporaryDirectory(prefix=f"mt-moe-{name}-") as work:
            model = make_model(cfg_cls, model_cls, extra)
            model.save_pretrained(os.path.join(work, "model"))
            write_tokens(os.path.join(work, "tokens.tok"), tokens)
            sensitivity(name, model, tokens, first_loss(model, tokens))
            ref = torch_curve(model, tokens)
            for backend in backends:
                ours, why = our_curve(build, work, backend)
                if why:
                    print(f"SKIP: {name}/{backend}: {why}", flush=True)
                    continue
                ran += 1
                rel = [abs(a[0] - b[0]) / abs(b[0]) for a, b in zip(ours, ref)]
                rel_aux = [abs(a[1] - b[1]) / max(abs(b[1]), 1e-12) for a, b in zip(ours, ref)]
                moe = name != "qwen3"
                # Steps 1 and 2 (the first update, the aux gradient in it) tightly; the rest
                # looser for MoE: a top-k choice on a near tie flips on one bf16 ulp of a compute
                # weight, after which the two curves part chaotically (qwen3_moe from step 3).
                tol = TOL[backend] if not moe else TOL_MOE[backend]
                if os.environ.get("MT_MOE_DEBUG"):
                    for i, (a, b) in enumerate(zip(ours, ref)):
                        print(f"  {i + 1:3d} {a[0]:.9f} {b[0]:.9f} {rel[i]:.2e}  aux {a[1]:.7f} "
                              f"{b[1]:.7f}")
                for i in range(2):
                    first = max(rel[i], rel_aux[i] if moe else 0)
                    report("PASS" if first < TOL1[backend] else "FAIL",
                           f"{name}/{backend} step {i + 1}: loss {ours[i][0]:.7f} vs "
                           f"{ref[i][0]:.7f} ({rel[i]:.2e}), aux {ours[i][1]:.7f} vs "
                           f"{ref[i][1]:.7f} ({rel_aux[i]:.2e}) (< {TOL1[backend]:g})")
                worst = max(rel + (rel_aux if moe else []))
                report("PASS" if worst < tol else "FAIL",
                       f"{name}/{backend} {STEPS} steps: loss {ours[0][0]:.4f} -> "
                       f"{ours[-1][0]:.4f} (pytorch {ref[-1][0]:.4f}), aux {ours[-1][1]:.4f} "
                       f"(pytorch {ref[-1][1]:.4f}); max relative {worst:.2e} (< {tol:g})")
                if backend == "cpu":
                    our_curve(build, work, backend, 1)
                    check_export(name, model, os.path.join(work, "export-cpu"), tokens)
    finish(ran)


if __name__ == "__main__":
    main()
