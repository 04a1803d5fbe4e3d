#!/usr/bin/env python3
"""The MoE peer (../shared/anchors/moe_torch.py: PyTorch + transformers, everything on the GPU)
on the shapes it knows and on OLMoE-1B-7B's, which it does not: the whole model's shape
(bench/configs/moe-olmoe.cfg: d2048, 16 heads of 128, 64 experts of 1024, top 8, not
renormalised, vocab 50,304, untied). The load-balancing loss's coefficient is moe_torch.py's
0.001 (the bench config has OLMoE's 0.01): it changes no FLOPs.

usage: bench/moe_peer.py ANCHOR_DIR NAME [moe_torch.py's arguments]
ANCHOR_DIR holds moe_torch.py (.anchors/ on the GPU machine, a copy of ../shared/anchors/)."""
import sys

if len(sys.argv) < 3:
    sys.exit(__doc__)
sys.path.insert(0, sys.argv[1])
import moe_torch  # noqa: E402  (the peer's own script: its loop, timing and printed line)

moe_torch.SHAPES.setdefault("olmoe", dict(
    cls="OlmoeConfig", hidden_size=2048, num_attention_heads=16, num_key_value_heads=16,
    intermediate_size=1024, num_experts=64, num_experts_per_tok=8, norm_topk_prob=False,
    vocab_size=50304, tie_word_embeddings=False))
sys.argv = [sys.argv[0]] + sys.argv[2:]
moe_torch.main()
