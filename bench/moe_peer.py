#!/usr/bin/env python3
"""The MoE peer (../shared/anchors/moe_torch.py: PyTorch + transformers, everything on the GPU)
on the shapes it knows and on two it does not:
- olmoe: OLMoE-1B-7B's whole model (bench/configs/moe-olmoe.cfg: d2048, 16 heads of 128, 64
  experts of 1024, top 8, not renormalised, vocab 50,304, untied). The load-balancing loss's
  coefficient is moe_torch.py's 0.001 (the bench config has OLMoE's 0.01): it changes no FLOPs.
- qwen35_27b: Qwen3.5-27B's layers (configs/qwen3.5-27b.cfg: d5120, gated attention with 24 / 4
  heads of 256, Gated DeltaNet with 16 key and 48 value heads of 128, SwiGLU of 17408, vocab
  248,320, untied); moe_torch.py's qwen35 is transformers' Qwen3_5TextConfig defaults, a d4096
  model of 32 value heads.
- glm45air_hub: GLM-4.5-Air's layers as its config.json has them (configs/glm-4.5-air.cfg: d4096,
  96 query heads of 128 sharing 8 kv heads, biases on q, k and v, RoPE on half of each head,
  rope_theta 1e6); moe_torch.py's glm45air is transformers' Glm4MoeConfig defaults, which set no
  head_dim (so 4096 / 96 = 42 wide heads) and no biases. Its glm47flash needs nothing: the
  Glm4MoeLiteConfig defaults are GLM-4.7-Flash's shape (rope_theta apart, which moves no FLOPs).

The Qwen3.5 family's linear attention is flash-linear-attention's when the package imports
(transformers takes it then). FLA refuses its gated backward on Hopper with Triton 3.4 to 3.7.0
(its issue #640), and the GPU machine's Triton is 3.6: for those shapes this lifts the refusal as
bench/gdn_fla.py does (chunk_o.TRITON_ABOVE_3_7_1 = True), the kernels FLA runs on a newer Triton,
and says so. A timing does not read the gradients the issue is about.

usage: bench/moe_peer.py ANCHOR_DIR NAME [moe_torch.py's arguments]
ANCHOR_DIR holds moe_torch.py (.anchors/ on the GPU machine, a copy of ../shared/anchors/)."""
import sys

GATED_DELTANET = ("qwen35", "qwen35moe", "qwen3next", "qwen35_27b")


def lift_fla_hopper_refusal():
    try:
        import fla.ops.common.chunk_o as chunk_o
    except Exception as e:  # no FLA: transformers' torch fallback, which moe_torch.py names
        print(f"flash-linear-attention not imported ({type(e).__name__}): nothing to lift")
        return
    if not chunk_o.TRITON_ABOVE_3_7_1:
        chunk_o.TRITON_ABOVE_3_7_1 = True
        print("flash-linear-attention: its Hopper refusal of the gated backward lifted "
              "(chunk_o.TRITON_ABOVE_3_7_1 = True, as bench/gdn_fla.py)", flush=True)


if len(sys.argv) < 3:
    sys.exit(__doc__)
sys.path.insert(0, sys.argv[1])
import moe_torch  # noqa: E402  (the peer's own script: its loop, timing and printed line)

moe_torch.SHAPES.setdefault("olmoe", dict(
    cls="OlmoeConfig", hidden_size=2048, num_attention_heads=16, num_key_value_heads=16,
    intermediate_size=1024, num_experts=64, num_experts_per_tok=8, norm_topk_prob=False,
    vocab_size=50304, tie_word_embeddings=False))
moe_torch.SHAPES.setdefault("qwen35_27b", dict(
    cls="Qwen3_5TextConfig", hidden_size=5120, intermediate_size=17408, num_attention_heads=24,
    num_key_value_heads=4, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=48,
    linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
    vocab_size=248320, tie_word_embeddings=False))
moe_torch.SHAPES.setdefault("glm45air_hub", dict(
    cls="Glm4MoeConfig", head_dim=128, attention_bias=True, rope_theta=1e6))
if sys.argv[2] in GATED_DELTANET:
    lift_fla_hopper_refusal()
sys.argv = [sys.argv[0]] + sys.argv[2:]
moe_torch.main()
