#!/usr/bin/env python3
"""A tiny DeepSeek-V3-family Hugging Face folder (config.json + model.safetensors) with the
standard library only, for hf_deepseek.sh: config.json as the hub's checkpoints write it, the
tensors named and shaped as transformers' save_pretrained writes them, random values.

usage: hf_deepseek_fixture.py DIR --family F [--fp8] [--mtp] [--set KEY=JSON]... [--unset KEY]...
                              [--shape NAME] [--drop NAME]
  --family   deepseek_v3 (DeepseekV3ForCausalLM, q_lora_rank 48), deepseek_v3_noq (q_lora_rank
             null: q_proj), glm4_moe (Glm4MoeForCausalLM: q/k/v biases, qk-norm, partial RoPE),
             glm4_moe_lite (Glm4MoeLiteForCausalLM)
  --fp8      the layers' projections as F8_E4M3 with a weight_scale_inv per 128 x 128 block
             (hidden_size 160: grids cut short), quantization_config fp8 [128, 128]
  --mtp      an MTP layer, model.layers.L.* (L = num_hidden_layers; FP8 with --fp8)
  --set/--unset  change config.json
  --shape NAME   tensor NAME gets one more entry in its first dimension
  --drop NAME    tensor NAME is left out
"""
import json
import os
import random
import struct
import sys

V, L, H, F, E, K, FE = 256, 3, 4, 96, 8, 2, 32
QR, KVR, NOPE, ROPE, VD, KV, HD = 48, 32, 16, 8, 24, 2, 24


def config(family, dim):
    c = {"vocab_size": V, "hidden_size": dim, "intermediate_size": F, "num_hidden_layers": L,
         "num_attention_heads": H, "num_key_value_heads": H, "hidden_act": "silu",
         "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
         "attention_bias": False, "attention_dropout": 0.0, "moe_intermediate_size": FE,
         "n_routed_experts": E, "num_experts_per_tok": K, "n_shared_experts": 1,
         "norm_topk_prob": True, "n_group": 2, "topk_group": 1, "routed_scaling_factor": 2.5,
         "bos_token_id": 0, "eos_token_id": 1, "rope_theta": 10000.0}
    mla = {"q_lora_rank": QR, "kv_lora_rank": KVR, "qk_nope_head_dim": NOPE,
           "qk_rope_head_dim": ROPE, "v_head_dim": VD}
    if family.startswith("deepseek_v3"):
        c.update(mla, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
                 first_k_dense_replace=1, scoring_func="sigmoid", topk_method="noaux_tc",
                 moe_layer_freq=1, rope_scaling={"type": "yarn", "factor": 40,
                                                 "original_max_position_embeddings": 64,
                                                 "beta_fast": 32, "beta_slow": 1,
                                                 "mscale": 1.0, "mscale_all_dim": 1.0})
        if family == "deepseek_v3_noq":
            c["q_lora_rank"] = None
    elif family == "glm4_moe":
        c.update(architectures=["Glm4MoeForCausalLM"], model_type="glm4_moe", head_dim=HD,
                 num_key_value_heads=KV, attention_bias=True, use_qk_norm=True,
                 partial_rotary_factor=0.5, first_k_dense_replace=1, rms_norm_eps=1e-5)
    else:
        c.update(mla, architectures=["Glm4MoeLiteForCausalLM"], model_type="glm4_moe_lite",
                 first_k_dense_replace=1, n_group=1, topk_group=1, routed_scaling_factor=1.8,
                 topk_method="noaux_tc", rms_norm_eps=1e-5)
    return c


def layer(family, p, dim, moe):
    t = {p + "input_layernorm.weight": [dim], p + "post_attention_layernorm.weight": [dim]}
    a = p + "self_attn."
    if family == "glm4_moe":
        t.update({a + "q_proj.weight": [H * HD, dim], a + "k_proj.weight": [KV * HD, dim],
                  a + "v_proj.weight": [KV * HD, dim], a + "o_proj.weight": [dim, H * HD],
                  a + "q_proj.bias": [H * HD], a + "k_proj.bias": [KV * HD],
                  a + "v_proj.bias": [KV * HD], a + "q_norm.weight": [HD],
                  a + "k_norm.weight": [HD]})
    else:
        if family == "deepseek_v3_noq":
            t[a + "q_proj.weight"] = [H * (NOPE + ROPE), dim]
        else:
            t.update({a + "q_a_proj.weight": [QR, dim], a + "q_a_layernorm.weight": [QR],
                      a + "q_b_proj.weight": [H * (NOPE + ROPE), QR]})
        t.update({a + "kv_a_proj_with_mqa.weight": [KVR + ROPE, dim],
                  a + "kv_a_layernorm.weight": [KVR],
                  a + "kv_b_proj.weight": [H * (NOPE + VD), KVR],
                  a + "o_proj.weight": [dim, H * VD]})
    m = p + "mlp."
    if not moe:
        return t | {m + "gate_proj.weight": [F, dim], m + "up_proj.weight": [F, dim],
                    m + "down_proj.weight": [dim, F]}
    t.update({m + "gate.weight": [E, dim], m + "gate.e_score_correction_bias": [E],
              m + "shared_experts.gate_proj.weight": [FE, dim],
              m + "shared_experts.up_proj.weight": [FE, dim],
              m + "shared_experts.down_proj.weight": [dim, FE]})
    for e in range(E):
        x = f"{m}experts.{e}."
        t.update({x + "gate_proj.weight": [FE, dim], x + "up_proj.weight": [FE, dim],
                  x + "down_proj.weight": [dim, FE]})
    return t


def is_moe(cfg, i):
    types = cfg.get("mlp_layer_types")
    return types[i] == "sparse" if types else i >= cfg.get("first_k_dense_replace", 1)


def tensors(family, cfg, dim, mtp):
    t = {"model.embed_tokens.weight": [V, dim], "model.norm.weight": [dim],
         "lm_head.weight": [V, dim]}
    for i in range(L):
        t.update(layer(family, f"model.layers.{i}.", dim, is_moe(cfg, i)))
    if mtp:  # DeepSeek's MTP layer: a decoder layer and its own norms and projection
        p = f"model.layers.{L}."
        t.update(layer(family, p, dim, True))
        t.update({p + "enorm.weight": [dim], p + "hnorm.weight": [dim],
                  p + "eh_proj.weight": [dim, 2 * dim], p + "shared_head.norm.weight": [dim]})
    return t


def quantized(name, shape):
    return len(shape) == 2 and name.endswith("proj.weight") and ".layers." in name


def write(out, cfg, shapes, fp8, scale_edits):
    rng = random.Random(7)
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0

    def add(name, dtype, shape, raw):
        nonlocal off
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)

    for name, shape in shapes.items():
        n = 1
        for s in shape:
            n *= s
        if fp8 and quantized(name, shape):  # any code but the two NaNs, 0x7f and 0xff
            add(name, "F8_E4M3", shape, bytes(rng.choice([c for c in range(256) if c & 0x7f != 0x7f])
                                              for _ in range(n)))
            grid = [-(-shape[0] // 128), -(-shape[1] // 128)]
            edit = scale_edits.get(name + "_scale_inv")
            if edit == "--shape":
                grid[0] += 1
            scales = [rng.uniform(1e-4, 1e-2) for _ in range(grid[0] * grid[1])]
            if edit != "--drop":
                add(name + "_scale_inv", "F32", grid, struct.pack(f"<{len(scales)}f", *scales))
        else:
            add(name, "F32", shape, struct.pack(f"<{n}f", *[rng.gauss(0, 0.5) for _ in range(n)]))
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def main():
    args = sys.argv[1:]
    out, family, fp8, mtp, edits, i = args[0], None, False, False, [], 1
    while i < len(args):
        if args[i] == "--family":
            family, i = args[i + 1], i + 2
        elif args[i] in ("--fp8", "--mtp"):
            fp8, mtp, i = fp8 or args[i] == "--fp8", mtp or args[i] == "--mtp", i + 1
        else:
            edits.append((args[i], args[i + 1]))
            i += 2
    dim = 160 if fp8 else 64
    cfg = config(family, dim)
    if fp8:
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                      "activation_scheme": "dynamic",
                                      "weight_block_size": [128, 128]}
    if mtp:
        cfg["num_nextn_predict_layers"] = 1
    for op, arg in edits:  # config.json's first: the tensors follow it
        if op == "--set":
            key, value = arg.split("=", 1)
            cfg[key] = json.loads(value)
        elif op == "--unset":
            cfg.pop(arg, None)
    shapes, scale_edits = tensors(family, cfg, dim, mtp), {}
    for op, arg in edits:
        if op in ("--set", "--unset"):
            continue
        if arg.endswith("_scale_inv"):  # written beside its weight
            scale_edits[arg] = op
        elif op == "--shape":
            shapes[arg] = [shapes[arg][0] + 1] + shapes[arg][1:]
        elif op == "--drop":
            del shapes[arg]
        else:
            sys.exit(f"unknown option {op}")
    write(out, cfg, shapes, fp8, scale_edits)


if __name__ == "__main__":
    main()
