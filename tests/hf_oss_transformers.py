#!/usr/bin/env python3
"""gpt-oss folders against transformers (skipped, exit 77, without torch and transformers):

- a tiny GptOssForCausalLM made and saved by transformers (its config.json as save_pretrained
  writes it: rope_parameters, layer_types; random biases and sinks) is imported and exported by
  test_hf; transformers loads the export as GptOssForCausalLM with the same config fields, every
  tensor bitwise the original's and the same logits; also with every layer full (no window) and
  a bf16 export (the original rounded to bf16);
- an MXFP4 folder (hf_oss_fixture.py --mxfp4, written without our C code): our export equals,
  bitwise, what transformers dequantizes when it loads the folder with
  Mxfp4Config(dequantize=True).

usage: hf_oss_transformers.py TEST_HF TESTS_DIR
"""
import os
import subprocess
import sys
import tempfile

try:
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM, Mxfp4Config
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

from hf_tflib import FAILED, check  # noqa: E402 (after the skip)
from hf_tflib import roundtrip as tf_roundtrip  # noqa: E402
from hf_tflib import same_state as tf_same_state  # noqa: E402

TEST_HF, T = sys.argv[1], sys.argv[2]


def roundtrip(src, out, dtype="float32"):
    tf_roundtrip(TEST_HF, src, out, dtype)


def same_state(a, b, rounded=False):
    return tf_same_state(a, b, rounded)


def made_by_transformers(work, name, **extra):
    torch.manual_seed(0)
    cfg = GptOssConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, intermediate_size=32,
                       num_local_experts=4, num_experts_per_tok=2, vocab_size=256,
                       sliding_window=8, max_position_embeddings=256, eos_token_id=2,
                       **extra)
    model = GptOssForCausalLM(cfg).float()
    with torch.no_grad():  # transformers initializes the biases to zero: make them count
        for n, p in model.named_parameters():
            if n.endswith("bias") or n.endswith("sinks"):
                p.normal_(0, 0.1)
    src = os.path.join(work, name)
    model.save_pretrained(src)
    return model, src


def native(work, name, **extra):
    model, src = made_by_transformers(work, name, **extra)
    out = src + ".out"
    roundtrip(src, out)
    back = GptOssForCausalLM.from_pretrained(out, dtype=torch.float32)
    diff = same_state(model, back)
    check(not diff, f"{name}: the export loads as GptOssForCausalLM, tensors bitwise {diff}")
    for key in ("layer_types", "sliding_window", "rope_parameters", "attention_bias",
                "swiglu_limit", "num_local_experts", "num_experts_per_tok", "head_dim"):
        if not hasattr(model.config, key):
            continue  # swiglu_limit: a config attribute from transformers 5.25 on (5.17 fixes 7)
        a, b = getattr(model.config, key), getattr(back.config, key)
        if key == "rope_parameters":
            a, b = dict(a), dict(b)
            a["rope_theta"], b["rope_theta"] = float(a["rope_theta"]), float(b["rope_theta"])
        if key == "sliding_window" and "sliding_attention" not in model.config.layer_types:
            continue  # no layer uses it: the export writes GptOssConfig's default, 128
        check(a == b, f"{name}: config {key} {b} (transformers' {a})")
    check(getattr(back.config, "quantization_config", None) is None,
          f"{name}: no quantization_config")
    ids = torch.tensor([[1, 5, 7, 9, 30, 2, 4, 6, 8, 10, 11, 12, 13, 14, 15, 16]])
    model.eval(), back.eval()
    with torch.no_grad():
        check(torch.equal(model(ids).logits, back(ids).logits), f"{name}: the same logits")
    return model, src


def main():
    work = tempfile.mkdtemp(prefix="mt-hf-oss-")
    model, src = native(work, "oss")
    native(work, "oss_full", layer_types=["full_attention", "full_attention"])
    roundtrip(src, src + ".bf16", "bfloat16")
    back = GptOssForCausalLM.from_pretrained(src + ".bf16", dtype=torch.float32)
    diff = same_state(model, back, rounded=True)
    check(not diff, f"bf16 export: transformers' tensors rounded to bf16 {diff}")
    q = os.path.join(work, "mxfp4")
    subprocess.run([sys.executable, os.path.join(T, "hf_oss_fixture.py"), q, "--mxfp4"],
                   check=True)
    roundtrip(q, q + ".out")
    ref = GptOssForCausalLM.from_pretrained(q, dtype=torch.float32,
                                            quantization_config=Mxfp4Config(dequantize=True))
    ours = GptOssForCausalLM.from_pretrained(q + ".out", dtype=torch.float32)
    diff = same_state(ref, ours)
    check(not diff, f"MXFP4: our export is transformers' dequantization bitwise {diff}")
    subprocess.run(["rm", "-rf", work])
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
