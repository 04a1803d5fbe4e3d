#!/usr/bin/env python3
"""A tiny Qwen3.5-family Hugging Face folder (config.json + model.safetensors) with the standard
library only, for hf_qwen35.sh: config.json as transformers 5 saves each class, the tensors
named and shaped as its save_pretrained writes them, random values.

usage: hf_qwen35_fixture.py DIR --family F [--dtype f32|bf16] [--mtp] [--fused-experts]
                            [--nested] [--set KEY=JSON]...
                            [--unset KEY]... [--shape NAME] [--drop NAME]
  --family   qwen3_5 (Qwen3_5ForCausalLM), qwen3_5_moe (Qwen3_5MoeForCausalLM), qwen3_next
             (Qwen3NextForCausalLM: fused in_proj_qkvz and in_proj_ba), qwen3_5_vl
             (Qwen3_5ForConditionalGeneration: text_config, model.language_model.*, a vision
             tower model.visual.*)
  --mtp      mtp.* tensors (BF16 and F32), as the hub's checkpoints hold them
  --fused-experts  the MoE experts fused, mlp.experts.gate_up_proj [E, 2f, d] and down_proj
             [E, d, f], as the hub's Qwen3.5-MoE checkpoints store them
  --nested   a text class's tensors under model.language_model.*, as transformers saves
             Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM loaded from a VLM checkpoint
  --set/--unset  change config.json (text_config's keys for qwen3_5_vl; "top.KEY" the top level)
  --shape NAME   tensor NAME gets one more entry in its first dimension
  --drop NAME    tensor NAME is left out
"""
import json
import os
import random
import struct
import sys

D, L, H, KV, HD, V, F = 64, 4, 4, 2, 16, 256, 96
KH, VH, DK, DV, CONV = 2, 4, 16, 8, 4
E, K, FE, FS = 4, 2, 32, 48
TYPES = ["linear_attention", "full_attention", "linear_attention", "full_attention"]


def text_config(family):
    c = {"vocab_size": V, "hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H,
         "num_key_value_heads": KV, "head_dim": HD, "hidden_act": "silu",
         "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
         "attention_bias": False, "attention_dropout": 0.0, "linear_conv_kernel_dim": CONV,
         "linear_key_head_dim": DK, "linear_value_head_dim": DV, "linear_num_key_heads": KH,
         "linear_num_value_heads": VH, "layer_types": TYPES, "eos_token_id": 2,
         "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                             "partial_rotary_factor": 0.25}}
    if family != "qwen3_5_moe":
        c["intermediate_size"] = F
    if family in ("qwen3_5_moe", "qwen3_next"):
        c.update({"num_experts": E, "num_experts_per_tok": K, "moe_intermediate_size": FE,
                  "shared_expert_intermediate_size": FS, "router_aux_loss_coef": 0.001,
                  "output_router_logits": False})
    if family == "qwen3_next":
        c.update({"norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [2]})
    model_type = {"qwen3_5": "qwen3_5_text", "qwen3_5_vl": "qwen3_5_text",
                  "qwen3_5_moe": "qwen3_5_moe_text", "qwen3_next": "qwen3_next"}[family]
    c["model_type"] = model_type
    return c


def config(family):
    arch = {"qwen3_5": "Qwen3_5ForCausalLM", "qwen3_5_moe": "Qwen3_5MoeForCausalLM",
            "qwen3_next": "Qwen3NextForCausalLM"}
    if family != "qwen3_5_vl":
        return dict(text_config(family), architectures=[arch[family]], dtype="float32")
    text = text_config(family)
    text["rope_parameters"].update({"mrope_section": [1, 1, 0], "mrope_interleaved": True})
    text["mtp_num_hidden_layers"] = 1
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "text_config": text, "tie_word_embeddings": False, "image_token_id": 248056,
            "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64,
                              "num_heads": 2, "out_hidden_size": D, "patch_size": 4,
                              "model_type": "qwen3_5_vision"}}


def tensors(family, mtp, fused, nested):
    pre = "model.language_model." if family == "qwen3_5_vl" or nested else "model."
    t = {pre + "embed_tokens.weight": [V, D], pre + "norm.weight": [D], "lm_head.weight": [V, D]}
    for l in range(L):
        p = f"{pre}layers.{l}."
        t.update({p + "input_layernorm.weight": [D], p + "post_attention_layernorm.weight": [D]})
        if TYPES[l] == "full_attention":
            a = p + "self_attn."
            t.update({a + "q_proj.weight": [2 * H * HD, D], a + "k_proj.weight": [KV * HD, D],
                      a + "v_proj.weight": [KV * HD, D], a + "o_proj.weight": [D, H * HD],
                      a + "q_norm.weight": [HD], a + "k_norm.weight": [HD]})
        else:
            a = p + "linear_attn."
            qkv = 2 * KH * DK + VH * DV
            t.update({a + "conv1d.weight": [qkv, 1, CONV], a + "dt_bias": [VH], a + "A_log": [VH],
                      a + "norm.weight": [DV], a + "out_proj.weight": [D, VH * DV]})
            if family == "qwen3_next":
                t.update({a + "in_proj_qkvz.weight": [qkv + VH * DV, D],
                          a + "in_proj_ba.weight": [2 * VH, D]})
            else:
                t.update({a + "in_proj_qkv.weight": [qkv, D], a + "in_proj_z.weight": [VH * DV, D],
                          a + "in_proj_b.weight": [VH, D], a + "in_proj_a.weight": [VH, D]})
        moe = family in ("qwen3_5_moe", "qwen3_next") and not (family == "qwen3_next" and l == 2)
        if moe:
            m = p + "mlp."
            t.update({m + "gate.weight": [E, D], m + "shared_expert_gate.weight": [1, D],
                      m + "shared_expert.gate_proj.weight": [FS, D],
                      m + "shared_expert.up_proj.weight": [FS, D],
                      m + "shared_expert.down_proj.weight": [D, FS]})
            if fused:  # as the hub's Qwen3.5-MoE checkpoints (transformers 5's layout)
                t.update({m + "experts.gate_up_proj": [E, 2 * FE, D],
                          m + "experts.down_proj": [E, D, FE]})
            for e in range(0 if fused else E):
                x = f"{m}experts.{e}."
                t.update({x + "gate_proj.weight": [FE, D], x + "up_proj.weight": [FE, D],
                          x + "down_proj.weight": [D, FE]})
        else:
            t.update({p + "mlp.gate_proj.weight": [F, D], p + "mlp.up_proj.weight": [F, D],
                      p + "mlp.down_proj.weight": [D, F]})
    if family == "qwen3_5_vl":
        t.update({"model.visual.patch_embed.proj.weight": [32, 3, 2, 4, 4],
                  "model.visual.merger.linear_fc2.bias": [D]})
    if mtp:
        t.update({"mtp.fc.weight": [D, 2 * D], "mtp.norm.weight": [D]})
    return t


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    f32 = struct.unpack(f"<{len(values)}I", struct.pack(f"<{len(values)}f", *values))
    return struct.pack(f"<{len(values)}H", *[b >> 16 for b in f32])  # BF16: truncate


def write(out, cfg, shapes, dtype):
    rng = random.Random(7)
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape in shapes.items():
        n = 1
        for s in shape:
            n *= s
        dt = "BF16" if name == "mtp.fc.weight" else dtype
        raw = encode([rng.gauss(0, 0.5) for _ in range(n)], dt)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def main():
    args = sys.argv[1:]
    out, family, dtype, mtp, fused, nested, edits, i = args[0], None, "F32", False, False, False, [], 1
    while i < len(args):
        a = args[i]
        if a == "--family":
            family, i = args[i + 1], i + 2
        elif a == "--dtype":
            dtype, i = {"f32": "F32", "bf16": "BF16"}[args[i + 1]], i + 2
        elif a == "--mtp":
            mtp, i = True, i + 1
        elif a == "--fused-experts":
            fused, i = True, i + 1
        elif a == "--nested":
            nested, i = True, i + 1
        else:
            edits.append((a, args[i + 1]))
            i += 2
    cfg, shapes = config(family), tensors(family, mtp, fused, nested)
    for op, arg in edits:
        top = cfg if family != "qwen3_5_vl" or arg.startswith("top.") else cfg["text_config"]
        arg = arg[4:] if arg.startswith("top.") else arg
        if op == "--set":
            key, value = arg.split("=", 1)
            top[key] = json.loads(value)
        elif op == "--unset":
            top.pop(arg, None)
        elif op == "--shape":
            shapes[arg] = [shapes[arg][0] + 1] + shapes[arg][1:]
        elif op == "--drop":
            del shapes[arg]
        else:
            sys.exit(f"unknown option {op}")
    write(out, cfg, shapes, dtype)


if __name__ == "__main__":
    main()
