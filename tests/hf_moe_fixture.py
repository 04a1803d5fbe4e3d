#!/usr/bin/env python3
"""A tiny MoE Hugging Face folder (config.json + model.safetensors, F32 random values), standard
library only, for e2e_moe.sh and hf_moe_config.sh: hub tensor names of Mixtral, Qwen2-MoE
(shared expert, q/k/v biases, layer 0 in mlp_only_layers), Qwen3-MoE (q/k norms per head, no
head_dim: hidden / heads) or OLMoE (q/k norms over the whole projections).

usage: hf_moe_fixture.py DIR mixtral|qwen2_moe|qwen3_moe|olmoe [--drop NAME] [--shape NAME]
                         [--set KEY=JSON]... [--unset KEY]... [--correction 1]
--drop leaves tensor NAME out, --shape gives it one row too many, --correction adds each MoE
layer's mlp.gate.e_score_correction_bias [E] (DeepSeek's router), --set changes config.json
(a new key goes last), --unset leaves KEY out of it; --set and --unset apply in their order.
The tensors follow the config: Qwen2-MoE's shared expert is transformers' default of 5632 when
shared_expert_intermediate_size is absent; there are always 4 experts."""
import json
import os
import random
import struct
import sys

D, L, H, KV, HD, V, E, K, F = 32, 2, 4, 2, 8, 256, 4, 2, 16


def tensors(family, c):
    t = {"model.embed_tokens.weight": [V, D], "model.norm.weight": [D], "lm_head.weight": [V, D]}
    for l in range(L):
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": [D], p + "post_attention_layernorm.weight": [D],
                  p + "self_attn.q_proj.weight": [H * HD, D],
                  p + "self_attn.k_proj.weight": [KV * HD, D],
                  p + "self_attn.v_proj.weight": [KV * HD, D],
                  p + "self_attn.o_proj.weight": [D, H * HD]})
        if family == "qwen2_moe":
            for x, n in (("q", H), ("k", KV), ("v", KV)):
                t[p + f"self_attn.{x}_proj.bias"] = [n * HD]
        if family == "olmoe":
            t[p + "self_attn.q_norm.weight"] = [H * HD]
            t[p + "self_attn.k_norm.weight"] = [KV * HD]
        if family == "qwen3_moe":
            t[p + "self_attn.q_norm.weight"] = [HD]
            t[p + "self_attn.k_norm.weight"] = [HD]
        if family == "qwen2_moe" and l == 0:  # mlp_only_layers: a dense MLP
            for x, s in (("gate", [2 * F, D]), ("up", [2 * F, D]), ("down", [D, 2 * F])):
                t[p + f"mlp.{x}_proj.weight"] = s
            continue
        moe = "block_sparse_moe" if family == "mixtral" else "mlp"
        t[p + f"{moe}.gate.weight"] = [E, D]
        names = ("w1", "w3", "w2") if family == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        for e in range(E):
            for n, s in zip(names, ([F, D], [F, D], [D, F])):
                t[p + f"{moe}.experts.{e}.{n}.weight"] = s
        if family == "qwen2_moe":
            S = c.get("shared_expert_intermediate_size", 5632)  # transformers' default
            for x, s in (("gate", [S, D]), ("up", [S, D]), ("down", [D, S])):
                t[p + f"mlp.shared_expert.{x}_proj.weight"] = s
            t[p + "mlp.shared_expert_gate.weight"] = [1, D]
    return t


def config(family):
    c = {"hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H,
         "num_key_value_heads": KV, "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "hidden_act": "silu", "tie_word_embeddings": False, "num_experts_per_tok": K,
         "max_position_embeddings": 256, "output_router_logits": True,
         "router_aux_loss_coef": 0.01}
    if family == "mixtral":
        c.update(architectures=["MixtralForCausalLM"], model_type="mixtral", num_local_experts=E,
                 intermediate_size=F, router_jitter_noise=0.0, sliding_window=None)
    elif family == "qwen2_moe":
        c.update(architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", num_experts=E,
                 intermediate_size=2 * F, moe_intermediate_size=F, shared_expert_intermediate_size=F,
                 decoder_sparse_step=1, mlp_only_layers=[0], norm_topk_prob=False,
                 use_sliding_window=False, qkv_bias=True)
    elif family == "qwen3_moe":
        c.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=E,
                 intermediate_size=2 * F, moe_intermediate_size=F, decoder_sparse_step=1,
                 mlp_only_layers=[], norm_topk_prob=True, use_sliding_window=False)
    else:
        c.update(architectures=["OlmoeForCausalLM"], model_type="olmoe", num_experts=E,
                 intermediate_size=F, norm_topk_prob=False, clip_qkv=None, eos_token_id=2,
                 pad_token_id=1)
    return c


def main():
    args = sys.argv[1:]
    out, family = args[0], args[1]
    drop = shape = None
    correction = False
    c = config(family)
    i = 2
    while i < len(args):
        if args[i] == "--drop":
            drop = args[i + 1]
        elif args[i] == "--shape":
            shape = args[i + 1]
        elif args[i] == "--set":
            k, v = args[i + 1].split("=", 1)
            c[k] = json.loads(v)
        elif args[i] == "--unset":
            del c[args[i + 1]]
        elif args[i] == "--correction":
            correction = True
        i += 2
    t = tensors(family, c)
    for name in [n for n in t if correction and n.endswith("mlp.gate.weight")]:
        t[name.replace("weight", "e_score_correction_bias")] = [E]
    if drop:
        del t[drop]
    if shape:
        t[shape] = [t[shape][0] + 1] + t[shape][1:]
    os.makedirs(out, exist_ok=True)
    json.dump(c, open(os.path.join(out, "config.json"), "w"), indent=1)
    rng = random.Random(7)
    head, blob = {}, bytearray()
    for name in sorted(t):
        n = 1
        for s in t[name]:
            n *= s
        vals = [1.0 + 0.1 * rng.gauss(0, 1) if "norm" in name else 0.1 * rng.gauss(0, 1)
                for _ in range(n)]
        head[name] = {"dtype": "F32", "shape": t[name], "data_offsets": [len(blob), len(blob) + 4 * n]}
        blob += struct.pack(f"<{n}f", *vals)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)


if __name__ == "__main__":
    main()
