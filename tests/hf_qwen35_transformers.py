#!/usr/bin/env python3
"""Qwen3.5, Qwen3.5-MoE and Qwen3-Next folders against transformers (skipped, exit 77, without
torch and transformers):

- a tiny Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3NextForCausalLM,
  Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration made and saved by
  transformers (every parameter drawn at random, norms and A_log included), with mtp.* tensors
  added as the hub's checkpoints hold them, is imported and exported by test_hf (many shards);
  transformers loads the export as the same class with the same config fields, every tensor
  bitwise the original's (the vision tower's too) and the same logits; the mtp.* tensors come
  back byte for byte;
- a bf16 export gives back transformers' tensors rounded to bf16, the vision tower's unchanged;
- the MoE classes' experts fused as the hub's Qwen3.5-MoE checkpoints store them
  (mlp.experts.gate_up_proj, down_proj) are read and exported fused, and load bitwise.

usage: hf_qwen35_transformers.py TEST_HF
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers as tf
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

from hf_tflib import FAILED, check, exported_tensors  # noqa: E402 (after the skip)
from hf_tflib import roundtrip as tf_roundtrip  # noqa: E402
from hf_tflib import same_state as tf_same_state  # noqa: E402
from tf_torch_only import torch_delta_rule  # noqa: E402

torch_delta_rule()

TEST_HF = sys.argv[1]


def roundtrip(src, out, dtype="float32"):
    tf_roundtrip(TEST_HF, src, out, dtype)


def same_state(a, b, rounded=False):
    return tf_same_state(a, b, rounded, kept=lambda k: k.startswith("model.visual."))
TEXT = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_conv_kernel_dim=4,
            linear_key_head_dim=16, linear_value_head_dim=8, linear_num_key_heads=2,
            linear_num_value_heads=4, eos_token_id=2,
            layer_types=["linear_attention", "full_attention", "linear_attention",
                         "full_attention"])
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
           shared_expert_intermediate_size=48)
# a VLM's mRoPE: its three position rows are one for text, so it is plain RoPE here
MROPE = {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25,
         "mrope_section": [1, 1, 0], "mrope_interleaved": True}
VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
              num_position_embeddings=16, patch_size=4)


def classes():
    moe_text = {k: v for k, v in TEXT.items() if k != "intermediate_size"} | MOE
    return [
        ("qwen3_5", tf.Qwen3_5ForCausalLM, tf.Qwen3_5TextConfig(**TEXT)),
        ("qwen3_5_moe", tf.Qwen3_5MoeForCausalLM, tf.Qwen3_5MoeTextConfig(**moe_text)),
        ("qwen3_next", tf.Qwen3NextForCausalLM,
         tf.Qwen3NextConfig(**(TEXT | MOE), mlp_only_layers=[2])),
        ("qwen3_5_vl", tf.Qwen3_5ForConditionalGeneration,
         tf.Qwen3_5Config(text_config=TEXT | {"rope_parameters": MROPE}, vision_config=VISION)),
        ("qwen3_5_moe_vl", tf.Qwen3_5MoeForConditionalGeneration,
         tf.Qwen3_5MoeConfig(text_config=moe_text, vision_config=VISION)),
    ]


def add_mtp(src):
    """The hub's checkpoints hold multi-token-prediction layers that transformers does not
    load: a file of mtp.* tensors (BF16 and F32) joins the folder's index."""
    g = torch.Generator().manual_seed(1)
    mtp = {"mtp.fc.weight": torch.randn(64, 128, generator=g).to(torch.bfloat16),
           "mtp.norm.weight": torch.randn(64, generator=g)}
    save_file(mtp, os.path.join(src, "mtp.safetensors"), metadata={"format": "pt"})
    index = os.path.join(src, "model.safetensors.index.json")
    if os.path.exists(index):
        ix = json.load(open(index))
    else:
        names = load_file(os.path.join(src, "model.safetensors")).keys()
        ix = {"metadata": {}, "weight_map": {n: "model.safetensors" for n in names}}
    ix["weight_map"].update({n: "mtp.safetensors" for n in mtp})
    json.dump(ix, open(index, "w"))
    return mtp


def fused_copy(model, src):
    """src with each MoE layer's experts fused, mlp.experts.gate_up_proj [E, 2f, d] and
    down_proj [E, d, f], as the hub's Qwen3.5-MoE checkpoints store them: the model's own
    state_dict, which is transformers 5's in-memory layout."""
    out = src + "_fused"
    os.makedirs(out)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    subprocess.run(["cp", os.path.join(src, "config.json"), out], check=True)
    return out


def made_by_transformers(work, name, cls, cfg):
    torch.manual_seed(0)
    model = cls(cfg).float()
    with torch.no_grad():  # zeros and ones hide a wrong norm or layout: draw everything
        for n, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.5 if p.dim() < 2 else 0.1))
    src = os.path.join(work, name)
    model.save_pretrained(src)
    return model, src


def text_config(cfg):
    return cfg.get_text_config() if hasattr(cfg, "text_config") else cfg


def one(work, name, cls, cfg):
    model, src = made_by_transformers(work, name, cls, cfg)
    mtp = add_mtp(src)
    out = src + ".out"
    roundtrip(src, out)
    back = cls.from_pretrained(out, dtype=torch.float32)
    check(type(back) is cls, f"{name}: the export loads as {cls.__name__}")
    diff = same_state(model, back)
    check(not diff, f"{name}: every tensor bitwise the original's {diff}")
    t = exported_tensors(out)
    check(all(k in t and t[k].dtype == v.dtype and torch.equal(t[k], v) for k, v in mtp.items()),
          f"{name}: mtp.* carried byte for byte")
    a, b = text_config(model.config), text_config(back.config)
    for key in ("layer_types", "rope_parameters", "linear_num_key_heads",
                "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                "linear_conv_kernel_dim", "head_dim", "num_experts", "num_experts_per_tok",
                "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob",
                "decoder_sparse_step", "mlp_only_layers", "eos_token_id"):
        if hasattr(a, key):
            check(getattr(a, key) == getattr(b, key),
                  f"{name}: config {key} {getattr(b, key)} (transformers' {getattr(a, key)})")
    ids = torch.tensor([[1, 5, 7, 9, 30, 2, 4, 6, 8, 10, 11, 12, 13, 14, 15, 16]])
    model.eval(), back.eval()
    with torch.no_grad():
        check(torch.equal(model(input_ids=ids).logits, back(input_ids=ids).logits),
              f"{name}: the same logits")
    roundtrip(src, src + ".bf16", "bfloat16")
    back = cls.from_pretrained(src + ".bf16", dtype=torch.float32)
    diff = same_state(model, back, rounded=True)
    check(not diff, f"{name}: bf16 export: transformers' tensors rounded to bf16 {diff}")
    if "moe" not in name:
        return
    fused = fused_copy(model, src)
    roundtrip(fused, fused + ".out")
    t = exported_tensors(fused + ".out")
    check(any(k.endswith("mlp.experts.gate_up_proj") for k in t),
          f"{name}: fused experts exported fused")
    back = cls.from_pretrained(fused + ".out", dtype=torch.float32)
    diff = same_state(model, back)
    check(not diff, f"{name}: fused experts: the export loads with every tensor bitwise {diff}")


def main():
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    work = tempfile.mkdtemp(prefix="mt-hf-qwen35-")
    for name, cls, cfg in classes():
        one(work, name, cls, cfg)
    subprocess.run(["rm", "-rf", work])
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
