#!/usr/bin/env python3
"""Qwen3.5-family parity with transformers (eager attention, the torch fallbacks of the Gated
DeltaNet's conv and chunked delta rule): one tiny random model per class, every layer kind in
it (layer_types linear_attention then full_attention), saved by save_pretrained with
output_router_logits true and router_aux_loss_coef 0.05 for the MoE ones:
Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3NextForCausalLM (fused in_proj_qkvz and
in_proj_ba, layer 1 in mlp_only_layers) and Qwen3_5ForConditionalGeneration (its language model
trained, its vision tower carried).

usage: hf_qwen35_parity.py BUILD_DIR [cpu|cuda|all]      (default: all)

As tests/hf_moe_parity.py does for the other families (its helpers: the same batches, our step as
a PyTorch loop, mtrun -np 3): step 1's and step 2's loss (and aux loss) within 1e-5 relative on
cpu (2e-2 cuda), the 20 AdamW steps within 2e-2 (5e-2 cuda); checks that the comparison can fail
(no decay in the delta rule, the conv's taps reversed, the output gate open: each moves
transformers' step-1 loss by far more than the tolerance); a one-step cpu run's export_dir loads
in transformers as the same class with no missing or unexpected tensor, its logits those of the
loop's weights after step 1 within 1e-3 of their scale.

Why the 20 steps and the logits after step 1 are held looser than the dense families' (1e-3 and
1e-5): the gate path's gradients (A_log, dt_bias, in_proj_a) are sums along the whole sequence
of decayed products, whose fp32 error against an fp64 run is 1e-5 to 6e-5 relative, for
transformers' own fp32 as for ours (ours within 3x of it). AdamW's first step moves each weight
by lr times the sign of its gradient, so where a gradient is near 0 the two sides step opposite
ways and part from there, as the MoE families' top-k near-ties do. The export's layout is held
bitwise by hf_qwen35_transformers (the same tensors, the same logits).

Exit 0 when nothing failed, 1 otherwise, 77 without torch/transformers or without the backend
(cuda: without a GPU; SKIP lines then).
"""
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_moe_parity as moe  # noqa: E402  (exits 77 without torch/transformers)
import mtparity  # noqa: E402
import torch  # noqa: E402
import transformers as tf  # noqa: E402
from tf_torch_only import torch_delta_rule  # noqa: E402

torch_delta_rule()

TYPES = ["linear_attention", "full_attention"]
TEXT = dict(intermediate_size=96, head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16,
            linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
            layer_types=TYPES, eos_token_id=2, pad_token_id=None, bos_token_id=None)
EXPERTS = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
               shared_expert_intermediate_size=48, **moe.MOE)
MOE_TEXT = {k: v for k, v in TEXT.items() if k != "intermediate_size"} | EXPERTS
VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=moe.DIM,
              num_position_embeddings=16, patch_size=4)
FAMILIES = [  # name, model class, config, MoE
    ("qwen3_5", tf.Qwen3_5ForCausalLM, lambda: tf.Qwen3_5TextConfig(**moe.COMMON, **TEXT), False),
    ("qwen3_5_moe", tf.Qwen3_5MoeForCausalLM,
     lambda: tf.Qwen3_5MoeTextConfig(**moe.COMMON, **MOE_TEXT), True),
    ("qwen3_next", tf.Qwen3NextForCausalLM,
     lambda: tf.Qwen3NextConfig(**moe.COMMON, **TEXT, **EXPERTS, mlp_only_layers=[1]), True),
    ("qwen3_5_vl", tf.Qwen3_5ForConditionalGeneration,
     lambda: tf.Qwen3_5Config(text_config=moe.COMMON | TEXT, vision_config=VISION,
                              tie_word_embeddings=False), False),
]


def make_model(model_cls, cfg):
    """hf_moe_parity's make_model for a config built here (a VLM's nests its text)."""
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(cfg).float()
    with torch.no_grad():  # weights that make every part matter, bf16-representable
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
            p.copy_(p.bfloat16().float())
    return model


@torch.no_grad()
def sensitivity(name, model, tokens, loss):
    """The delta rule's decay, the conv's direction and the output gate must move the loss."""
    gdn = [m for m in model.modules() if hasattr(m, "A_log")]
    attn = [m for m in model.modules() if hasattr(m, "q_proj") and hasattr(m, "o_proj")]

    def moved(what, change):
        saved = {id(p): p.detach().clone() for m in gdn + attn for p in m.parameters()}
        change()
        other = moe.first_loss(model, tokens)
        for m in gdn + attn:
            for p in m.parameters():
                p.copy_(saved[id(p)])
        rel = abs(other - loss) / abs(loss)
        moe.report("PASS" if rel > 20 * moe.TOL1["cpu"] else "FAIL",
                   f"{name}: {what} moves transformers' loss by {rel:.2e} "
                   f"(> {20 * moe.TOL1['cpu']:g}: the comparison can fail)")

    moved("no decay (A_log -30)", lambda: [m.A_log.fill_(-30.0) for m in gdn])
    moved("the conv's taps reversed",
          lambda: [m.conv1d.weight.copy_(m.conv1d.weight.flip(-1)) for m in gdn])

    def open_gate():  # q_proj's gate rows (the second half of each head's) saturate sigmoid
        for m in attn:
            w = m.q_proj.weight.view(moe.HEADS, 2, -1, moe.DIM)
            w[:, 1].zero_()
    moved("the output gate fixed at 1/2", open_gate)


@torch.no_grad()
def check_export(name, model, export, tokens):
    back, info = type(model).from_pretrained(export, output_loading_info=True)
    back = back.float()
    back.config._attn_implementation = "eager"
    odd = [k for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)]
    x, _ = moe.batch(tokens, 0, 0)
    a, b = back(input_ids=x).logits.float(), model(input_ids=x).logits.float()
    err = float((a - b).abs().max() / b.abs().max())
    moe.report("PASS" if not odd and err < 1e-3 else "FAIL",
               f"{name}: transformers loads our export as {type(back).__name__}"
               f"{''.join(f' {k} {info[k]}' for k in odd)}; logits against the loop's weights "
               f"after step 1 {err:.2e} of their scale (< 1e-3)")


def compare(name, backend, ours, ref, is_moe):
    rel = [abs(a[0] - b[0]) / abs(b[0]) for a, b in zip(ours, ref)]
    rel_aux = [abs(a[1] - b[1]) / max(abs(b[1]), 1e-12) for a, b in zip(ours, ref)]
    if not is_moe:
        rel_aux = [0.0] * len(rel)
    for i in range(2):
        first = max(rel[i], rel_aux[i])
        moe.report("PASS" if first < moe.TOL1[backend] else "FAIL",
                   f"{name}/{backend} step {i + 1}: loss {ours[i][0]:.7f} vs {ref[i][0]:.7f} "
                   f"({rel[i]:.2e}), aux {ours[i][1]:.7f} vs {ref[i][1]:.7f} ({rel_aux[i]:.2e}) "
                   f"(< {moe.TOL1[backend]:g})")
    worst, tol = max(rel + rel_aux), moe.TOL_MOE[backend]  # the docstring says why, dense too
    moe.report("PASS" if worst < tol else "FAIL",
               f"{name}/{backend} {moe.STEPS} steps: loss {ours[0][0]:.4f} -> {ours[-1][0]:.4f} "
               f"(pytorch {ref[-1][0]:.4f}); max relative {worst:.2e} (< {tol:g})")


def main():
    build, backends = mtparity.parse_args(__doc__, torch.cuda.is_available())
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    rng = random.Random(5)
    tokens = [rng.randrange(moe.VOCAB) for _ in range(moe.NTOK)]
    ran = 0
    for name, model_cls, cfg, is_moe in FAMILIES:
        with tempfile.TemporaryDirectory(prefix=f"mt-{name}-parity-") as work:
            model = make_model(model_cls, cfg())
            model.save_pretrained(os.path.join(work, "model"))
            moe.write_tokens(os.path.join(work, "tokens.tok"), tokens)
            sensitivity(name, model, tokens, moe.first_loss(model, tokens))
            ref = None
            for backend in backends:
                ours, why = moe.our_curve(build, work, backend)
                if why:
                    print(f"SKIP: {name}/{backend}: {why}", flush=True)
                    continue
                ran += 1
                ref = ref or moe.torch_curve(model, tokens)
                compare(name, backend, ours, ref, is_moe)
                if backend == "cpu":
                    moe.our_curve(build, work, backend, 1)
                    check_export(name, model, os.path.join(work, "export-cpu"), tokens)
    moe.finish(ran)


if __name__ == "__main__":
    main()
