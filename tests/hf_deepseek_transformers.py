#!/usr/bin/env python3
"""DeepSeek-V3, GLM-4.5 and GLM-4.7-Flash folders against transformers (skipped, exit 77,
without torch and transformers):

- a tiny DeepseekV3ForCausalLM with q_lora_rank set (YaRN with mscale and mscale_all_dim, 4
  groups of experts, 2 shared experts) and one with q_lora_rank null, a Glm4MoeForCausalLM
  (q/k/v biases, qk-norm, partial RoPE) and a Glm4MoeLiteForCausalLM (mlp_layer_types) made and
  saved by transformers, every parameter and the routers' e_score_correction_bias drawn at
  random, with an MTP layer (model.layers.L.*, L = num_hidden_layers) added as the hub's
  checkpoints hold it, is imported and exported by test_hf (many shards); transformers loads the
  export as the same class with the same config fields, every tensor bitwise the original's and
  the same logits; the MTP layer comes back byte for byte, num_nextn_predict_layers with it;
- a bf16 export gives back transformers' tensors rounded to bf16, but the routers' weight and
  e_score_correction_bias, which it keeps in fp32 (F32 in the export);
- the first DeepSeek-V3 quantized as the hub ships it (F8_E4M3 weights with one F32
  weight_scale_inv per 128 x 128 block, hidden_size 192 so that grids are cut short, an FP8 MTP
  layer, quantization_config fp8 [128, 128]): the export holds, bitwise, each code times its
  block's scale as one fp32 product (torch computes it here), the MTP layer's FP8 weight so too
  (no scales: the export has no quantization_config to read codes by) and its other tensors'
  bytes unchanged, and no quantization_config; transformers' own dequantization of the folder
  is compared where its block size agrees with 128 (reported, not failed, where it does not).

usage: hf_deepseek_transformers.py TEST_HF
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

TEST_HF = sys.argv[1]


def roundtrip(src, out, dtype="float32"):
    tf_roundtrip(TEST_HF, src, out, dtype)


def same_state(a, b, rounded=False):
    return tf_same_state(a, b, rounded, kept=lambda k: k.endswith(("mlp.gate.weight", "e_score_correction_bias")))
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=4, moe_intermediate_size=32,
              n_routed_experts=8, num_experts_per_tok=2, eos_token_id=2, bos_token_id=0,
              max_position_embeddings=256)
MLA = dict(kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=24)
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 1.0,
        "mscale_all_dim": 1.0, "original_max_position_embeddings": 64, "beta_fast": 32.0,
        "beta_slow": 1.0}


def classes():
    return [
        ("deepseek_v3", tf.DeepseekV3ForCausalLM, tf.DeepseekV3Config(
            **(COMMON | {"hidden_size": 192, "intermediate_size": 160}), **MLA, q_lora_rank=48,
            n_group=4, topk_group=2, n_shared_experts=2, first_k_dense_replace=1,
            routed_scaling_factor=2.5, rope_parameters=YARN)),
        ("deepseek_v3_noq", tf.DeepseekV3ForCausalLM, tf.DeepseekV3Config(
            **COMMON, **MLA, q_lora_rank=None, n_group=1, topk_group=1, n_shared_experts=1,
            first_k_dense_replace=2, routed_scaling_factor=1.5, rope_interleave=False)),
        ("glm4_moe", tf.Glm4MoeForCausalLM, tf.Glm4MoeConfig(
            **(COMMON | {"num_key_value_heads": 2}), head_dim=24, partial_rotary_factor=0.5,
            attention_bias=True, use_qk_norm=True, n_shared_experts=1, first_k_dense_replace=1,
            n_group=2, topk_group=1, routed_scaling_factor=1.5)),
        ("glm4_moe_lite", tf.Glm4MoeLiteForCausalLM, tf.Glm4MoeLiteConfig(
            **COMMON, **MLA, q_lora_rank=48, n_shared_experts=1, routed_scaling_factor=1.8,
            mlp_layer_types=["sparse", "dense", "sparse"])),
    ]


def made_by_transformers(work, name, cls, cfg):
    torch.manual_seed(0)
    model = cls(cfg).float()
    with torch.no_grad():  # zeros and ones hide a wrong norm or layout: draw everything
        for n, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.5 if p.dim() < 2 else 0.1))
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)
    src = os.path.join(work, name)
    model.save_pretrained(src)
    return model, src


def index_of(src):
    index = os.path.join(src, "model.safetensors.index.json")
    if os.path.exists(index):
        return json.load(open(index))
    names = load_file(os.path.join(src, "model.safetensors")).keys()
    return {"metadata": {}, "weight_map": {n: "model.safetensors" for n in names}}


def add_mtp(src, layers, dim, fp8=False):
    """An MTP layer as DeepSeek's and GLM's checkpoints hold it: model.layers.L.* past the last
    decoder layer (which transformers does not load), with num_nextn_predict_layers 1."""
    g = torch.Generator().manual_seed(1)
    p = f"model.layers.{layers}."
    mtp = {p + "eh_proj.weight": torch.randn(dim, 2 * dim, generator=g).to(torch.bfloat16),
           p + "enorm.weight": torch.randn(dim, generator=g),
           p + "shared_head.norm.weight": torch.randn(dim, generator=g).to(torch.bfloat16)}
    if fp8:
        w = torch.randn(160, dim, generator=g)
        mtp[p + "mlp.gate_proj.weight"] = w.to(torch.float8_e4m3fn)
        mtp[p + "mlp.gate_proj.weight_scale_inv"] = torch.rand(2, 2, generator=g)
    save_file(mtp, os.path.join(src, "mtp.safetensors"), metadata={"format": "pt"})
    ix = index_of(src)
    ix["weight_map"].update({n: "mtp.safetensors" for n in mtp})
    json.dump(ix, open(os.path.join(src, "model.safetensors.index.json"), "w"))
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["num_nextn_predict_layers"] = 1
    json.dump(cfg, open(os.path.join(src, "config.json"), "w"), indent=2)
    return mtp


def carried(t, mtp):
    return all(k in t and t[k].dtype == v.dtype and
               torch.equal(t[k].view(torch.uint8), v.view(torch.uint8)) for k, v in mtp.items())


KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "rope_interleave", "rope_parameters", "n_routed_experts", "num_experts_per_tok",
        "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace", "mlp_layer_types",
        "n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor", "attention_bias",
        "use_qk_norm", "head_dim", "partial_rotary_factor", "intermediate_size",
        "eos_token_id")


def one(work, name, cls, cfg):
    model, src = made_by_transformers(work, name, cls, cfg)
    mtp = add_mtp(src, cfg.num_hidden_layers, cfg.hidden_size)
    out = src + ".out"
    roundtrip(src, out)
    back = cls.from_pretrained(out, dtype=torch.float32)
    check(type(back) is cls, f"{name}: the export loads as {cls.__name__}")
    diff = same_state(model, back)
    check(not diff, f"{name}: every tensor bitwise the original's {diff}")
    check(carried(exported_tensors(out), mtp), f"{name}: the MTP layer carried byte for byte")
    exp_cfg = json.load(open(os.path.join(out, "config.json")))
    check(exp_cfg.get("num_nextn_predict_layers") == 1,
          f"{name}: num_nextn_predict_layers carried")
    for key in KEYS:
        if hasattr(model.config, key):
            a, b = getattr(model.config, key), getattr(back.config, key)
            if key == "rope_parameters":  # the same numbers, whatever their spelling
                a = {k: float(v) if isinstance(v, (int, float)) else v for k, v in a.items()}
                b = {k: float(v) if isinstance(v, (int, float)) else v for k, v in b.items()
                     if k in a}
            check(a == b, f"{name}: config {key} {b} (transformers' {a})")
    ids = torch.tensor([[1, 5, 7, 9, 30, 2, 4, 6, 8, 10, 11, 12, 13, 14, 15, 16]])
    model.eval(), back.eval()
    with torch.no_grad():
        check(torch.equal(model(input_ids=ids).logits, back(input_ids=ids).logits),
              f"{name}: the same logits")
    roundtrip(src, src + ".bf16", "bfloat16")
    back = cls.from_pretrained(src + ".bf16", dtype=torch.float32)
    diff = same_state(model, back, rounded=True)
    check(not diff, f"{name}: bf16 export: transformers' tensors rounded to bf16 {diff}")
    return model, src


def quantize(w):
    """DeepSeek's block quantization of a 2-D weight: per 128 x 128 block, scale = amax / 448,
    codes = w / scale in E4M3; returns the codes and the F32 scale grid."""
    rows, cols = w.shape
    gr, gc = -(-rows // 128), -(-cols // 128)
    s = torch.empty(gr, gc)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    for i in range(gr):
        for j in range(gc):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            s[i, j] = blk.abs().max().clamp(min=1e-12) / 448.0
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = (blk / s[i, j]).to(torch.float8_e4m3fn)
    return q, s


def dequantize(q, s):
    """Each code times its block's scale, one fp32 product (128-element blocks, cut short)."""
    rows, cols = q.shape
    grid = s.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
    return q.to(torch.float32) * grid


def quantized(name):
    return (".layers." in name and name.endswith("_proj.weight") and
            not name.endswith("layernorm.weight"))


def fp8_folder(work, src, layers, dim):
    out = os.path.join(work, "deepseek_v3_fp8")
    os.makedirs(out)
    state, want = {}, {}
    for f in set(index_of(src)["weight_map"].values()):
        if f == "mtp.safetensors":
            continue
        for k, v in load_file(os.path.join(src, f)).items():
            if quantized(k) and v.dim() == 2:
                q, s = quantize(v.float())
                state[k], state[k + "_scale_inv"] = q, s
                want[k] = dequantize(q, s)
            else:
                state[k] = v
                want[k] = v.float()
    save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                  "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    mtp = add_mtp(out, layers, dim, fp8=True)
    return out, want, mtp


def fp8(work, model, src):
    cfg = model.config
    out, want, mtp = fp8_folder(work, src, cfg.num_hidden_layers, cfg.hidden_size)
    ragged = [k for k in want if quantized(k) and
              any(d > 128 and d % 128 for d in want[k].shape)]
    check(len(ragged) > 0, f"fp8: {len(ragged)} weights have grids cut short ({ragged[:2]})")
    roundtrip(out, out + ".out")
    t = exported_tensors(out + ".out")
    bad = [k for k, v in want.items() if k not in t or not torch.equal(t[k], v)]
    check(not bad, f"fp8: each code times its block's scale, bitwise ({bad[:3]})")
    codes = {k: v for k, v in mtp.items() if v.dtype == torch.float8_e4m3fn}
    plain = {k: v for k, v in mtp.items()
             if k not in codes and not k.endswith("_scale_inv")}
    check(carried(t, plain), "fp8: the MTP layer's other tensors carried unchanged")
    mtp_bad = [k for k, v in codes.items()
               if k not in t or k + "_scale_inv" in t or
               not torch.equal(t[k], dequantize(v, mtp[k + "_scale_inv"]))]
    check(codes and not mtp_bad, f"fp8: the MTP layer's F8_E4M3 weights dequantized as the "
          f"trained ones, without scales ({mtp_bad[:2]})")
    exp_cfg = json.load(open(os.path.join(out + ".out", "config.json")))
    check("quantization_config" not in exp_cfg, "fp8: the export has no quantization_config")
    try:
        # dequantize=True: with a GPU at hand transformers would otherwise keep the FP8 codes
        # (its FP8 linear layers) instead of the values it dequantizes to without one
        q = tf.FineGrainedFP8Config(weight_block_size=[128, 128], dequantize=True)
        hf = tf.DeepseekV3ForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                      quantization_config=q).state_dict()
    except Exception as e:  # noqa: BLE001  (transformers' own limits, reported)
        print(f"INFO fp8: transformers {tf.__version__} does not load the folder: {e}")
        return
    agree = [k for k in want if k in hf and all(d <= 128 or d % 128 == 0 for d in want[k].shape)]
    bad = [k for k in agree if not torch.equal(hf[k].float(), want[k])]
    check(not bad and agree, f"fp8: transformers' dequantization bitwise ours on {len(agree)} "
          f"tensors whose grids are whole ({bad[:3]})")
    off = [k for k in ragged if k in hf and not torch.equal(hf[k].float(), want[k])]
    print(f"INFO fp8: transformers {tf.__version__} differs on {len(off)} of {len(ragged)} "
          "weights whose grid is cut short (it derives the block from the grid)")


def main():
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    work = tempfile.mkdtemp(prefix="mt-hf-deepseek-")
    first = None
    for name, cls, cfg in classes():
        made = one(work, name, cls, cfg)
        first = first or made
    fp8(work, *first)
    subprocess.run(["rm", "-rf", work])
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
