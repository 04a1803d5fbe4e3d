#!/usr/bin/env python3
"""gpt-oss parity with transformers (GptOssForCausalLM, eager attention): a tiny random model
with everything gpt-oss adds on (attention sinks, around 2 so that they take a share of each
softmax, q and k 4 times the other weights so that positions matter, q/k/v/o biases, the router's bias and its
softmax over the top k, the experts' biases and clamped SwiGLU, YaRN, a window of 8 on the
sliding layers of its default layer_types, shorter than the sequence), saved by save_pretrained
with output_router_logits true and router_aux_loss_coef 0.05.

usage: hf_oss_parity.py BUILD_DIR [cpu|cuda|all]      (default: all)

As tests/hf_moe_parity.py does for the other MoE families (its helpers: the same batches, our
step as a PyTorch loop, mtrun -np 3): step 1's and step 2's loss and aux loss within 1e-5
relative on cpu (2e-2 cuda), the 20 AdamW steps within 2e-2 (5e-2 cuda); checks that the
comparison can fail (no sinks, a tight swiglu_limit, plain RoPE instead of YaRN each move
transformers' step-1 loss by far more than the tolerance); a one-step cpu run's export_dir loads
in transformers as GptOssForCausalLM with no missing or unexpected tensor, its logits those of
the loop's weights after step 1 within 3e-5 of their scale (hf_moe_parity.py says why).

Exit 0 when nothing failed, 1 otherwise, 77 without torch/transformers or without the backend
(the backends refuse gpt-oss until their templates compute it: SKIP lines then).
"""
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_moe_parity as moe  # noqa: E402  (exits 77 without torch/transformers)
import mtparity  # noqa: E402
import torch  # noqa: E402
from transformers import GptOssConfig, GptOssForCausalLM  # noqa: E402

YARN = {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "truncate": False, "original_max_position_embeddings": 128}
EXTRA = dict(intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, head_dim=16,
             sliding_window=8, attention_bias=True, swiglu_limit=7.0, rope_scaling=YARN,
             eos_token_id=2, pad_token_id=None, bos_token_id=None, **moe.MOE)


@torch.no_grad()
def sensitivity(model, tokens, loss):
    """Each of gpt-oss's own pieces must move the loss, or the comparison could not fail."""
    def moved(what, change, undo):
        change()
        other = moe.first_loss(model, tokens)
        undo()
        rel = abs(other - loss) / abs(loss)
        moe.report("PASS" if rel > 20 * moe.TOL1["cpu"] else "FAIL",
                   f"gpt_oss: {what} moves transformers' loss by {rel:.2e} "
                   f"(> {20 * moe.TOL1['cpu']:g}: the comparison can fail)")

    attn = [m for m in model.modules() if hasattr(m, "sinks")]
    saved = [m.sinks.detach().clone() for m in attn]
    moved("no sinks", lambda: [m.sinks.fill_(-1e30) for m in attn],
          lambda: [m.sinks.copy_(s) for m, s in zip(attn, saved)])
    experts = [m for m in model.modules() if hasattr(m, "limit")]
    moved("swiglu_limit 0.05", lambda: [setattr(m, "limit", 0.05) for m in experts],
          lambda: [setattr(m, "limit", 7.0) for m in experts])
    rope = model.model.rotary_emb
    inv, scale = rope.inv_freq.clone(), rope.attention_scaling
    plain = 1.0 / (rope.config.rope_parameters["rope_theta"] **
                   (torch.arange(0, 16, 2, dtype=torch.float) / 16))

    def to_plain():
        rope.inv_freq.copy_(plain)
        rope.attention_scaling = 1.0

    def back():
        rope.inv_freq.copy_(inv)
        rope.attention_scaling = scale
    moved("plain RoPE instead of YaRN", to_plain, back)


def main():
    build, backends = mtparity.parse_args(__doc__, torch.cuda.is_available())
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    rng = random.Random(5)
    tokens = [rng.randrange(moe.VOCAB) for _ in range(moe.NTOK)]
    ran = 0
    with tempfile.TemporaryDirectory(prefix="mt-oss-parity-") as work:
        model = moe.make_model(GptOssConfig, GptOssForCausalLM, EXTRA)
        with torch.no_grad():  # sharp attention (positions matter), sinks with a real share
            for m in model.modules():
                if hasattr(m, "sinks"):
                    m.sinks.copy_((2.0 + torch.randn_like(m.sinks)).bfloat16().float())
                    for proj in (m.q_proj, m.k_proj):
                        proj.weight.mul_(4.0)
        model.save_pretrained(os.path.join(work, "model"))
        moe.write_tokens(os.path.join(work, "tokens.tok"), tokens)
        sensitivity(model, tokens, moe.first_loss(model, tokens))
        ref = moe.torch_curve(model, tokens)
        for backend in backends:
            try:
                ours, why = moe.our_curve(build, work, backend)
            except RuntimeError as e:  # the backend's refusal, until its templates compute it
                if "templates yet" not in str(e):
                    raise
                ours, why = None, str(e).strip().splitlines()[-1]
            if why:
                print(f"SKIP: gpt_oss/{backend}: {why}", flush=True)
                continue
            ran += 1
            rel = [abs(a[0] - b[0]) / abs(b[0]) for a, b in zip(ours, ref)]
            rel_aux = [abs(a[1] - b[1]) / max(abs(b[1]), 1e-12) for a, b in zip(ours, ref)]
            for i in range(2):
                first = max(rel[i], rel_aux[i])
                moe.report("PASS" if first < moe.TOL1[backend] else "FAIL",
                           f"gpt_oss/{backend} step {i + 1}: loss {ours[i][0]:.7f} vs "
                           f"{ref[i][0]:.7f} ({rel[i]:.2e}), aux {ours[i][1]:.7f} vs "
                           f"{ref[i][1]:.7f} ({rel_aux[i]:.2e}) (< {moe.TOL1[backend]:g})")
            worst, tol = max(rel + rel_aux), moe.TOL_MOE[backend]
            moe.report("PASS" if worst < tol else "FAIL",
                       f"gpt_oss/{backend} {moe.STEPS} steps: loss {ours[0][0]:.4f} -> "
                       f"{ours[-1][0]:.4f} (pytorch {ref[-1][0]:.4f}); max relative "
                       f"{worst:.2e} (< {tol:g})")
            if backend == "cpu":
                moe.our_curve(build, work, backend, 1)
                moe.check_export("gpt_oss", model, os.path.join(work, "export-cpu"), tokens)
    moe.finish(ran)


if __name__ == "__main__":
    main()
