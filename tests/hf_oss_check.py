#!/usr/bin/env python3
"""Checks a gpt-oss export against the folder it came from, with the standard library only.

usage: hf_oss_check.py EXPORT SOURCE [--bf16]
  - EXPORT passes hf_check.py's structure checks (shards, index, dtypes, sizes);
  - its config.json is a GptOssForCausalLM without quantization_config, with SOURCE's
    rope_scaling, sliding_window (128 when no layer slides), layer_types (the config class's
    default spelled out),
    attention_bias, swiglu_limit, expert counts and pad_token_id (transformers' padding_idx);
  - every tensor equals SOURCE's under the hub's names and shapes (gate_up_proj [E, d, 2f],
    down_proj [E, f, d], ...): SOURCE's MXFP4 blocks and scales are dequantized here, as
    transformers' convert_moe_packed_tensors does (FP4 E2M1 code points times 2^(scale - 127),
    the low nibble first, then the last two dimensions swapped); with --bf16, rounded to bf16.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_check import check_structure, fail, load_folder, same, to_bf16  # noqa: E402

FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequantize(blocks, scales):
    """blocks [E, R, G, 16] and scales [E, R, G] -> values [E, G * 32, R] (transformers' layout)."""
    (E, R, G, _), raw = blocks[1], blocks[2]
    sc, K = scales[2], G * 32
    out = [0.0] * (E * K * R)
    for e in range(E):
        for r in range(R):
            for g in range(G):
                s = sc[(e * R + r) * G + g] - 127
                at = ((e * R + r) * G + g) * 16
                for j in range(16):
                    byte = raw[at + j]
                    for half, code in ((0, byte & 15), (1, byte >> 4)):
                        k = g * 32 + 2 * j + half
                        out[(e * K + k) * R + r] = FP4[code] * 2.0 ** s
    return [E, K, R], out


def source_tensors(src):
    raw = load_folder(src)
    want = {}
    for name, (dtype, shape, values) in raw.items():
        if name.endswith("_scales"):
            continue
        if name.endswith("_blocks"):
            base = name[:-len("_blocks")]
            want[base] = dequantize((dtype, shape, values), raw[base + "_scales"])
        else:
            want[name] = (shape, values)
    return want


def check_config(export, src):
    cg = json.load(open(os.path.join(export, "config.json")))
    cw = json.load(open(os.path.join(src, "config.json")))
    if cg["architectures"] != ["GptOssForCausalLM"] or cg["model_type"] != "gpt_oss":
        fail(f"config.json: {cg['architectures']} {cg['model_type']}")
    if "quantization_config" in cg:
        fail("config.json: an export of dequantized weights has a quantization_config")
    layers = cw.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention"
                                       for i in range(cw["num_hidden_layers"])]
    if cg.get("layer_types") != layers:
        fail(f"config.json: layer_types {cg.get('layer_types')}, the source's {layers}")
    # no layer slides: GptOssConfig's default window, which transformers' forward needs
    window = cw.get("sliding_window", 128) if "sliding_attention" in layers else 128
    if cg.get("sliding_window") != window:
        fail(f"config.json: sliding_window {cg.get('sliding_window')}, expected {window}")
    for key in ("rope_scaling", "attention_bias", "swiglu_limit",
                "num_local_experts", "num_experts_per_tok", "intermediate_size", "head_dim",
                "eos_token_id", "pad_token_id", "router_aux_loss_coef"):
        if cg.get(key) != cw.get(key):
            fail(f"config.json: {key} {cg.get(key)}, the source's {cw.get(key)}")


def main():
    export, src, bf16 = sys.argv[1], sys.argv[2], "--bf16" in sys.argv[3:]
    n_shards, n_tensors = check_structure(export, 1, bf16)
    check_config(export, src)
    want, got = source_tensors(src), load_folder(export)
    if set(want) != set(got):
        fail(f"tensor names differ: {sorted(set(want) ^ set(got))}")
    for name, (shape, values) in want.items():
        if got[name][1] != shape:
            fail(f"{name}: shape {got[name][1]} != {shape}")
        if bf16:
            values = [to_bf16(v) for v in values]
        bad = [i for i, (x, y) in enumerate(zip(values, got[name][2])) if not same(x, y)]
        if bad:
            fail(f"{name}: element {bad[0]}: {got[name][2][bad[0]]!r} != {values[bad[0]]!r}")
    print(f"ok: {n_tensors} tensors in {n_shards} shards, values exact")


if __name__ == "__main__":
    main()
