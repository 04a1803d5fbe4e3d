#!/usr/bin/env python3
"""An export of a DeepSeek-V3-family folder checked against its source with the standard library
only: every trained source tensor is in the export under the same name and shape, its values the
source's decoded here (an F8_E4M3 weight: each code's value times its block's weight_scale_inv,
one product rounded to fp32 as torch rounds it; bf16 rounded as torch rounds with --bf16, but
the router's weight and correction bias, F32 as transformers keeps them); the
MTP layer (model.layers.L.*, L = num_hidden_layers) keeps its dtype and bytes, but for its
F8_E4M3 weights, which come dequantized as the trained ones (the export has no
quantization_config to read codes by); no weight_scale_inv is exported; config.json names the
source's class, has no quantization_config and keeps num_nextn_predict_layers and
first_k_dense_replace (GLM-4.7-Flash's class reads mlp_layer_types, vLLM this).

usage: hf_deepseek_check.py EXPORT SOURCE [--bf16]
"""
import json
import math
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_qwen35_check import folder, values  # noqa: E402  (safetensors read, F32/BF16 decoded)


def e4m3(code):
    e, m = (code >> 3) & 15, code & 7
    if e == 15 and m == 7:
        return math.nan
    v = (1 + m / 8) * 2.0 ** (e - 7) if e else m / 8 * 2.0 ** -6
    return -v if code & 0x80 else v


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]  # nearest even: one fp32 rounding


def dequantized(shape, raw, scale):
    rows, cols = shape
    grid = values("F32", scale[2])
    gc = -(-cols // 128)
    return [f32(e4m3(raw[r * cols + c]) * grid[(r // 128) * gc + c // 128])
            for r in range(rows) for c in range(cols)]  # the double product is exact


def bf16(v):
    b = struct.unpack("<I", struct.pack("<f", v))[0]
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]


def main():
    out_dir, src_dir = sys.argv[1], sys.argv[2]
    rounded = "--bf16" in sys.argv[3:]
    out, src = folder(out_dir), folder(src_dir)
    cfg, src_cfg = (json.load(open(os.path.join(d, "config.json"))) for d in (out_dir, src_dir))
    layers = src_cfg["num_hidden_layers"]
    problems, carried, checked = [], 0, 0
    for name, (dtype, shape, raw) in src.items():
        m = re.match(r"model\.layers\.(\d+)\.", name)
        mtp = m and int(m.group(1)) >= layers
        if name.endswith("_scale_inv"):
            if name in out:
                problems.append(f"{name}: an FP8 weight's scales exported")
            continue
        if mtp and dtype != "F8_E4M3":
            carried += 1
            if out.get(name) != (dtype, shape, raw):
                problems.append(f"{name}: not carried byte for byte")
            continue
        if name not in out or out[name][1] != shape:
            problems.append(f"{name}: missing or reshaped in the export")
            continue
        want = (dequantized(shape, raw, src[name + "_scale_inv"]) if dtype == "F8_E4M3"
                else values(dtype, raw))
        fp32 = name.endswith(("mlp.gate.weight", "e_score_correction_bias")) and not mtp
        if out[name][0] != ("F32" if fp32 or not rounded else "BF16"):
            problems.append(f"{name}: exported as {out[name][0]}")
        if rounded and fp32 and out[name][0] != "F32":
            problems.append(f"{name}: {out[name][0]}, but transformers keeps it in fp32")
        if rounded and not fp32:
            want = [bf16(v) for v in want]
        got = values(out[name][0], out[name][2])
        if struct.pack(f"<{len(got)}f", *got) != struct.pack(f"<{len(want)}f", *want):
            problems.append(f"{name}: values differ")
        checked += 1
    if cfg["architectures"] != src_cfg["architectures"]:
        problems.append(f"config.json: {cfg['architectures']}, not {src_cfg['architectures']}")
    if "quantization_config" in cfg:
        problems.append("config.json: quantization_config exported")
    if cfg.get("num_nextn_predict_layers") != src_cfg.get("num_nextn_predict_layers"):
        problems.append("config.json: num_nextn_predict_layers not kept")
    if "first_k_dense_replace" in src_cfg and \
            cfg.get("first_k_dense_replace") != src_cfg["first_k_dense_replace"]:
        problems.append("config.json: first_k_dense_replace not kept")  # vLLM counts by it
    if problems:
        print("; ".join(problems[:5]))
        sys.exit(1)
    print(f"{checked} tensors as the source's, {carried} carried byte for byte")


if __name__ == "__main__":
    main()
