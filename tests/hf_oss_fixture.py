#!/usr/bin/env python3
"""A tiny gpt-oss Hugging Face folder (GptOssForCausalLM: config.json + model.safetensors), with
the standard library only, for hf_oss.sh: attention sinks, q/k/v/o biases, the router's bias, the
experts fused as the hub stores them (gate_up_proj [E, d, 2f] with gate and up interleaved,
down_proj [E, f, d] and their biases), YaRN rope_scaling, layer_types left to the config class's
default (sliding, full).

usage: hf_oss_fixture.py DIR [--dtype f32|bf16] [--mxfp4] [--set KEY=JSON]... [--unset KEY]...
                         [--shape NAME] [--drop NAME] [--scale255 NAME]
  --mxfp4      the experts' gate_up_proj and down_proj as MXFP4 blocks and scales (U8), as OpenAI
               ships them, with quantization_config {"quant_method": "mxfp4"}; scales 119-130
  --set/--unset  change config.json (in their order)
  --shape NAME   tensor NAME gets one more entry in its first dimension
  --drop NAME    tensor NAME is left out
  --scale255 NAME  one scale of the MXFP4 scales tensor NAME is 255 (E8M0's NaN)
"""
import json
import math
import os
import random
import struct
import sys

D, L, H, KV, HD, V, E, K, F = 64, 2, 4, 2, 16, 256, 4, 2, 32


def tensors(mxfp4):
    t = {"model.embed_tokens.weight": [V, D], "model.norm.weight": [D], "lm_head.weight": [V, D]}
    for l in range(L):
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": [D], p + "post_attention_layernorm.weight": [D],
                  p + "self_attn.sinks": [H], p + "mlp.router.weight": [E, D],
                  p + "mlp.router.bias": [E],
                  p + "mlp.experts.gate_up_proj_bias": [E, 2 * F],
                  p + "mlp.experts.down_proj_bias": [E, D]})
        for x, rows in (("q", H * HD), ("k", KV * HD), ("v", KV * HD)):
            t[p + f"self_attn.{x}_proj.weight"] = [rows, D]
            t[p + f"self_attn.{x}_proj.bias"] = [rows]
        t[p + "self_attn.o_proj.weight"] = [D, H * HD]
        t[p + "self_attn.o_proj.bias"] = [D]
        x = p + "mlp.experts."
        if mxfp4:  # untransposed rows: gate_up's 2f outputs of d inputs, down's d outputs of f
            t.update({x + "gate_up_proj_blocks": [E, 2 * F, D // 32, 16],
                      x + "gate_up_proj_scales": [E, 2 * F, D // 32],
                      x + "down_proj_blocks": [E, D, F // 32, 16],
                      x + "down_proj_scales": [E, D, F // 32]})
        else:
            t.update({x + "gate_up_proj": [E, D, 2 * F], x + "down_proj": [E, F, D]})
    return t


def config(mxfp4):
    c = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": D,
         "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
         "head_dim": HD, "intermediate_size": F, "num_local_experts": E,
         "num_experts_per_tok": K, "vocab_size": V, "rms_norm_eps": 1e-5,
         "rope_theta": 150000.0, "sliding_window": 8, "attention_bias": True,
         "swiglu_limit": 7.0, "tie_word_embeddings": False, "hidden_act": "silu",
         "max_position_embeddings": 256, "router_aux_loss_coef": 0.9,
         "output_router_logits": False, "eos_token_id": 2, "pad_token_id": 1,
         "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                          "truncate": False, "original_max_position_embeddings": 64}}
    if mxfp4:
        c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head"]}
    return c


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    f32 = struct.unpack(f"<{len(values)}I", struct.pack(f"<{len(values)}f", *values))
    return struct.pack(f"<{len(values)}H", *[b >> 16 for b in f32])  # BF16: truncate


def main():
    args = sys.argv[1:]
    out, dtype, mxfp4, shape, drop, scale255 = args[0], "F32", False, None, None, None
    c_edits, i = [], 1
    while i < len(args):
        a = args[i]
        if a == "--mxfp4":
            mxfp4, i = True, i + 1
            continue
        v = args[i + 1]
        if a == "--dtype":
            dtype = {"f32": "F32", "bf16": "BF16"}[v]
        elif a in ("--set", "--unset"):
            c_edits.append((a, v))
        elif a == "--shape":
            shape = v
        elif a == "--drop":
            drop = v
        elif a == "--scale255":
            scale255 = v
        i += 2
    c = config(mxfp4)
    for a, v in c_edits:
        if a == "--set":
            k, val = v.split("=", 1)
            c[k] = json.loads(val)
        else:
            del c[v]
    t = tensors(mxfp4)
    if drop:
        del t[drop]
    if shape:
        t[shape] = [t[shape][0] + 1] + t[shape][1:]
    os.makedirs(out, exist_ok=True)
    json.dump(c, open(os.path.join(out, "config.json"), "w"), indent=1)
    rng = random.Random(11)
    head, blob = {}, bytearray()
    for name in sorted(t):
        n = math.prod(t[name])
        if name.endswith("_blocks"):
            dt, raw = "U8", bytes(rng.randrange(256) for _ in range(n))
        elif name.endswith("_scales"):
            vals = [rng.randrange(119, 131) for _ in range(n)]
            if name == scale255:
                vals[n // 2] = 255
            dt, raw = "U8", bytes(vals)
        else:
            vals = [1.0 + 0.1 * rng.gauss(0, 1) if "norm" in name else 0.1 * rng.gauss(0, 1)
                    for _ in range(n)]
            dt, raw = dtype, encode(vals, dtype)
        head[name] = {"dtype": dt, "shape": t[name], "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)


if __name__ == "__main__":
    main()
